"""Identity benchmark (issue 12): what signing and verifying an event costs, per event.

    python bench/bench_identity.py [--quick | --smoke] [--samples N] [--events N] [--no-store]

Times, one call at a time after a warm-up, on a realistic event (a 600-byte body, six metadata
keys, one artifact): the canonical encoding alone (RFC 8785 JCS of the signed fields), signing
(encoding + Ed25519 sign), verifying (encoding + Ed25519 verify) and the full verdict (keyring
lookup, revocation check, verify). Prints p50/p95 in microseconds and events per second of one
core. Then, in the same run, on real SQLite files (durability=normal): an append signed by
alice's key next to an unsigned append in a log with no agents, and a sync apply (LocalPeer,
compact pages, the median of three) of a log of alice's signed events (each verified) next to
one of unsigned events (no agent signs: the verdicts are skipped), and the same unsigned log
with the identity check bypassed (what the skip itself costs). Per event µs and the ratio.
Never a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from mempalace_logstream import LogStore, agents, sync
from mempalace_logstream.identity import signing
from mempalace_logstream.identity.keyring import KEY_ADD, Keyring, SignedEvent
from mempalace_logstream.identity.keys import KeyPair
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event
from mempalace_logstream.replication import verify

REP = "rep_" + "ab" * 16


def _event(n: int, *, type: str = "patch.ready", metadata: dict[str, Any] | None = None) -> Event:
    artifacts = ("art_20261202T000000_0001",) if metadata is None else ()
    return Event(
        id=f"evt_20261202T000000_{n:020x}",
        seq=n,
        origin_replica=REP,
        origin_seq=n,
        hlc=f"{1764633600000 + n:013d}-000000-{REP}",
        type=type,
        stream="project/logstream",
        room="delegation",
        topic="identity",
        from_agent="alice",
        to_agent="bob",
        correlation_id="task_identity_core_1a2b3c",
        branch="identity",
        base_commit="823a08e",
        status="ready",
        artifact_ids=artifacts,
        body="Result of the identity slice.\n" + "x" * 570,
        created_at="2026-12-02T00:00:00.000Z",
        metadata_json=json.dumps(
            metadata
            or {
                "ack_of": None,
                "progress": 75.5,
                "files": ["a.py", "b.py"],
                "warnings": [],
                "lease_ms": 900000,
                "note": "café",
            }
        ),
    )


def _timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    micros = [s * 1e6 for s in common.time_calls(fn, n, warmup=max(20, n // 20))]
    return common.summarize(micros)


def measure(samples: int) -> list[tuple[str, dict[str, float]]]:
    admin, alice = KeyPair.generate(), KeyPair.generate()
    add_meta = {
        "agent": "alice",
        "key_id": alice.key_id,
        "public_key": alice.public.to_text(),
        "role": "agent",
        "replaces": None,
    }
    root_meta = {**add_meta, "agent": "admin", "key_id": admin.key_id, "role": "admin"}
    root_meta["public_key"] = admin.public.to_text()
    key_events = []
    for n, (signer, meta) in enumerate([(admin, root_meta), (admin, add_meta)], start=1):
        ev = _event(n, type=KEY_ADD, metadata=meta)
        key_events.append(
            SignedEvent(event=ev, sig=signing.sign_event(signer, ev), key_id=signer.key_id)
        )
    keyring = Keyring.build(key_events, [admin.key_id])
    event = _event(100)
    shas = {"art_20261202T000000_0001": hashlib.sha256(b"patch").hexdigest()}
    fields, body = signing.event_fields(event), signing.body_sha256(event.body)
    sig = signing.sign(alice, fields, body, shas)
    assert verdict(event, sig, alice.key_id, keyring, artifact_sha256s=shas).verified is True
    message = signing.signing_payload(fields, body, shas)
    raw_sig = alice.sign(message)
    return [
        ("Ed25519 sign alone", _timed(lambda: alice.sign(message), samples)),
        ("Ed25519 verify alone", _timed(lambda: alice.public.verify(raw_sig, message), samples)),
        (
            "canonical encoding",
            _timed(lambda: signing.signing_payload(fields, body, shas), samples),
        ),
        (
            "sign (encode + Ed25519)",
            _timed(lambda: signing.sign(alice, fields, body, shas), samples),
        ),
        (
            "verify (encode + Ed25519)",
            _timed(lambda: signing.verify(alice.public, sig, fields, body, shas), samples),
        ),
        (
            "verdict (fields, hash, keyring, verify)",
            _timed(
                lambda: verdict(event, sig, alice.key_id, keyring, artifact_sha256s=shas), samples
            ),
        ),
    ]


def _open(root: Path, name: str) -> LogStore:
    (root / name).mkdir()
    return LogStore.open(str(root / name / "log.sqlite3"), durability="normal")


def _append_per_event(store: LogStore, who: str, n: int) -> float:
    """µs per append, one at a time (each its own transaction)."""
    body = "Result of the identity slice.\n" + "x" * 570
    t0 = time.perf_counter()
    for i in range(n):
        store.event_append(
            type="note", stream="s", room="r", from_agent=who, body=body, metadata={"i": i}
        )
    return (time.perf_counter() - t0) * 1e6 / n


def _sync_per_event(root: Path, source: LogStore, name: str, admin: str | None) -> float:
    """µs per event of one full pull of `source` into a fresh replica."""
    dst = _open(root, name)
    try:
        if admin is not None:
            agents.trust(dst, admin)
        t0 = time.perf_counter()
        result = sync.sync_with_peer(dst, sync.LocalPeer(source))
        took = time.perf_counter() - t0
        assert result["rejected_count"] == 0, result["rejected"][:3]
        pulled: int = result["pulled_events"]
        return took * 1e6 / max(1, pulled)
    finally:
        dst.close()


def measure_store(n: int) -> list[tuple[str, float, float]]:
    """(what, µs per event without identity, µs per event with it)."""
    with common.temp_dir("bench-identity-") as root:
        return _measure_store(root, n)


def _measure_store(root: Path, n: int) -> list[tuple[str, float, float]]:
    plain, signed = _open(root, "plain"), _open(root, "signed")
    admin = agents.ensure_admin(signed)
    agents.add(signed, "alice")
    try:
        _append_per_event(plain, "bob", 50)  # warm-up (statement caches)
        _append_per_event(signed, "alice", 50)
        a_plain = a_signed = 0.0
        for _ in range(3):  # interleaved thirds: drift of a busy machine hits both
            a_plain += _append_per_event(plain, "bob", n // 3) / 3
            a_signed += _append_per_event(signed, "alice", n // 3) / 3
        syncs: dict[str, list[float]] = {"plain": [], "signed": [], "bypass": []}
        no_judge = classmethod(lambda cls, *a: None)  # every page unjudged: the check bypassed
        for r in range(3):  # interleaved, the median of three fresh replicas each
            syncs["plain"].append(_sync_per_event(root, plain, f"plain{r}", None))
            syncs["signed"].append(_sync_per_event(root, signed, f"signed{r}", admin))
            with mock.patch.object(verify.BatchJudge, "open", no_judge):
                syncs["bypass"].append(_sync_per_event(root, plain, f"bypass{r}", None))
        s_plain, s_signed, s_bypass = (sorted(v)[1] for v in syncs.values())
    finally:
        plain.close()
        signed.close()
    return [
        ("append (unsigned vs signed)", a_plain, a_signed),
        ("sync apply (unsigned log vs signed, verified)", s_plain, s_signed),
        ("sync apply, unsigned log (check bypassed vs skip)", s_bypass, s_plain),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/bench_identity.py", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few samples")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="timed calls per measure")
    p.add_argument("--events", type=int, default=None, help="appends / synced events per log")
    p.add_argument("--no-store", action="store_true", help="the pure CPU figures only")
    args = p.parse_args(argv)
    samples = args.samples or (30 if args.smoke else 300 if args.quick else 5000)
    n_events = args.events or (60 if args.smoke else 600 if args.quick else 3000)
    print(common.machine_line())
    t0 = time.perf_counter()
    rows = measure(samples)
    common.print_table(
        f"identity: cost per event, {samples} calls each (µs)",
        ["what", "p50 µs", "p95 µs", "events/s (1 core, p50)"],
        [
            (what, f"{s['p50']:.1f}", f"{s['p95']:.1f}", common.fmt_num(1e6 / s["p50"]))
            for what, s in rows
        ],
    )
    for what, s in rows:
        print(f"[measure] identity: {what} p50 = {s['p50']:.1f} µs")
    if not args.no_store:
        store_rows = measure_store(n_events)
        common.print_table(
            f"identity in the store: {n_events} events per log, SQLite durability=normal",
            ["what", "without µs/event", "with µs/event", "added µs", "ratio"],
            [
                (what, f"{a:.1f}", f"{b:.1f}", f"{b - a:+.1f}", f"{b / a:.2f}")
                for what, a, b in store_rows
            ],
        )
        for what, a, b in store_rows:
            print(f"[measure] identity: {what}: {a:.1f} -> {b:.1f} µs/event ({b / a:.2f}x)")
    print(f"(took {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
