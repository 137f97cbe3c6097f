"""Backdating (issue 18 items 3 and 4, RFC 0008 "Threat model" and "Doctor"): an event signed
by a revoked key and stamped just before the revocation, first received after it, is held on
sync apply (`backdated`) and listed by doctor; an operator accepts it with a zero window. An
unsigned event under a name that signs reads `verified: false` (`unsigned_name_signs`), and
doctor flags the ones stamped before the name's key yet stored after it arrived.

The receiving replica is the `store` fixture (SQLite and PostgreSQL); the origin `a` and the
hostile `h` (which holds mallory's key) are SQLite files (tests/idsynckit.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, agents, config, doctor, errors, replication, sync
from mempalace_logstream.cli import shared
from mempalace_logstream.identity import keys
from mempalace_logstream.identity.key_events import key_add_metadata, key_revoke_metadata
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE
from mempalace_logstream.replication import verify
from tests.idsynckit import Team, held, note, replica, resign, rewrite

DAY_MS = 24 * 60 * 60 * 1000


def _pull(store: LogStore, source: LogStore) -> dict[str, Any]:
    return sync.sync_with_peer(store, sync.LocalPeer(source))


def _codes(result: dict[str, Any]) -> dict[str, str]:
    return {r["ident"]: r["reason"] for r in result["rejected"]}


def _stamp(hlc: str, shift_ms: int, replica_id: str) -> str:
    return f"{int(hlc[:13]) + shift_ms:013d}-000000-{replica_id}"


def _signed_at(h: LogStore, pair: keys.KeyPair, who: str, hlc: str, **values: Any) -> str:
    """An event the hostile replica holds, stamped `hlc`, under `who`, signed by `pair`."""
    base = note(h, "zed", f"by {who} at {hlc}")
    return resign(h, rewrite(h, base.id, from_agent=who, hlc=hlc, **values), pair).id


def _unsigned_at(h: LogStore, who: str, hlc: str) -> str:
    base = note(h, "zed", f"unsigned {who} at {hlc}")
    return rewrite(h, base.id, from_agent=who, hlc=hlc, sig=None, key_id=None).id


def _findings(report: doctor.Report, check: str) -> list[dict[str, Any]]:
    return [f for f in report.to_dict()["findings"] if f["check"] == check]


@pytest.fixture
def team(tmp_path: Path, store: LogStore) -> Iterator[tuple[LogStore, LogStore, LogStore, Team]]:
    """(a, h, store, team): store pins a's admin key and holds a's key events."""
    store.identity.keys_dir = tmp_path / "store-keys"
    store.identity.reload_keys()
    a, h = replica(tmp_path, "a"), replica(tmp_path, "h")
    built = Team.build(a, h, store)
    _pull(h, a)
    _pull(store, a)
    yield a, h, store, built
    a.close()
    h.close()


def _revoke_mallory(a: LogStore, *to: LogStore) -> str:
    revoked = agents.revoke(a, "mallory", reason="laptop stolen")
    for s in to:
        _pull(s, a)
    return a.event_get(revoked["event_id"]).hlc


# ----------------------------------------------------------------------------- item 3


def test_an_event_backdated_under_a_revoked_key_is_held_and_doctor_lists_it(team) -> None:
    a, h, store, crew = team
    honest = note(a, "mallory", "written while the key was valid, received in time")
    _pull(store, a)
    revoked_at = _revoke_mallory(a, store)
    # Mallory's key leaked: the thief stamps events just before the revocation it has seen.
    forged = _signed_at(h, crew.mallory, "mallory", _stamp(revoked_at, -1_000, h.replica_id))
    old = _signed_at(h, crew.mallory, "mallory", _stamp(revoked_at, -3 * DAY_MS, h.replica_id))
    result = _pull(store, h)
    assert _codes(result)[forged] == "backdated"
    assert "MEMPALACE_LOGSTREAM_BACKDATE_WINDOW_MS=0" in result["rejected"][0]["message"]
    ids = {e.id for e in held(store)}
    assert forged not in ids  # never stored as verified
    assert old in ids and store.event_get(old).verified is True  # outside the window
    assert honest.id in ids and store.event_get(honest.id).verified is True
    rows = [r for r in replication.list_rejections(store) if r["ident"] == forged]
    assert rows and rows[0]["retryable"] and rows[0]["reason"] == "backdated"
    assert replication.counts(store)["held_backdated"] == 1
    # Held, not dropped: each round judges it again and keeps holding it.
    for _ in range(replication.MAX_RETRIES + 1):
        assert _codes(_pull(store, h)).get(forged) == "backdated"
    assert replication.counts(store)["held_backdated"] == 1

    report = doctor.run(store)
    assert not report.healthy
    assert report.checks["backdating"] == {
        "window_ms": DAY_MS,
        "held": 1,
        "stored_within_window": 0,
        "stored_outside_window": 1,
    }
    found = _findings(report, "backdating")
    assert [f["ids"] for f in found] == [[forged], [old]]
    assert "held as backdating suspects" in found[0]["message"]
    assert "=0" in found[0]["message"]
    listed = verify.backdating_suspects(store)
    assert [(x.event_id, x.within_window) for x in listed] == [(old, False)]
    assert listed[0].key_agent == "mallory" and listed[0].gap_ms == 3 * DAY_MS


def test_work_signed_before_a_rotation_and_received_after_it_is_stored(team) -> None:
    """A rotation is routine, not a sign of a stolen key: an agent's offline work signed with
    the old key just before the rotation, synced afterwards, is stored verified, held by no
    one, and no doctor suspect."""
    a, h, store, crew = team
    rotated = agents.rotate(a, "mallory")
    _pull(store, a)
    rotated_at = a.event_get(rotated.event_id).hlc
    offline = _signed_at(h, crew.mallory, "mallory", _stamp(rotated_at, -1_000, h.replica_id))
    result = _pull(store, h)
    assert offline not in _codes(result)
    assert store.event_get(offline).verified is True
    assert replication.counts(store)["held_backdated"] == 0
    assert verify.backdating_suspects(store) == []
    assert doctor.run(store).checks["backdating"]["held"] == 0


def test_an_operator_accepts_a_held_suspect_with_a_zero_window(team) -> None:
    a, h, store, crew = team
    revoked_at = _revoke_mallory(a, store)
    offline = _signed_at(h, crew.mallory, "mallory", _stamp(revoked_at, -60_000, h.replica_id))
    assert _codes(_pull(store, h))[offline] == "backdated"
    store.backdate_window_ms = 0  # one round as `MEMPALACE_LOGSTREAM_BACKDATE_WINDOW_MS=0`
    assert offline not in _codes(_pull(store, h))
    assert store.event_get(offline).verified is True
    assert replication.counts(store)["held_backdated"] == 0
    store.backdate_window_ms = DAY_MS
    # Accepted, it is still a suspect doctor lists (stored after the revocation arrived).
    found = [(x.event_id, x.within_window) for x in verify.backdating_suspects(store)]
    assert found == [(offline, True)]
    assert _findings(doctor.run(store), "backdating")[0]["ids"] == [offline]


def test_a_backdated_key_event_is_held_and_so_are_the_events_of_its_key(team) -> None:
    """A leaked second admin key, revoked: a key_add it signs just before its revocation is
    held (not folded), so the key it adds stays unknown and that key's events are held too."""
    a, h, store, _crew = team
    ops = keys.KeyPair.generate()
    meta = key_add_metadata("ops", ops.public, role="admin")
    added = a.event_append(
        type=KEY_ADD, stream="identity", room="keys", from_agent="admin", metadata=meta
    )
    a.clock.observe(_stamp(added.hlc, 10_000, a.replica_id))  # ops serves for ten seconds
    revoke = key_revoke_metadata("ops", ops.key_id, "leaked")
    gone = a.event_append(
        type=KEY_REVOKE, stream="identity", room="keys", from_agent="admin", metadata=revoke
    )
    _pull(store, a)
    stamp = _stamp(gone.hlc, -2_000, h.replica_id)
    crony = keys.KeyPair.generate()
    key_add = _signed_at(
        h,
        ops,
        "admin",
        stamp,
        type=KEY_ADD,
        stream="identity",
        room="keys",
        metadata_json=json.dumps(key_add_metadata("crony", crony.public)),
    )
    by_crony = _signed_at(h, crony, "crony", _stamp(gone.hlc, -1_000, h.replica_id))
    codes = _codes(_pull(store, h))
    assert codes[key_add] == "backdated"
    assert codes[by_crony] == "unknown_key"
    assert not {key_add, by_crony} & {e.id for e in held(store)}
    assert "crony" not in {r.agent for r in agents.keyring(store).records()}


def test_the_backdating_window_is_a_setting_and_a_store_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = "MEMPALACE_LOGSTREAM_BACKDATE_WINDOW_MS"
    assert config.Settings.from_env({}).backdate_window_ms == DAY_MS
    assert config.Settings.from_env({env: "0"}).backdate_window_ms == 0
    for bad in ("-1", "soon", str(config.MAX_BACKDATE_WINDOW_MS + 1)):
        with pytest.raises(errors.ValidationError) as exc:
            config.Settings.from_env({env: bad})
        assert exc.value.field == env and env in exc.value.message
    with pytest.raises(errors.ValidationError) as refused:
        LogStore.open(str(tmp_path / "x.sqlite3"), backdate_window_ms=-5)
    assert refused.value.field == "backdate_window_ms"
    monkeypatch.setenv(env, "1234")
    opened = shared.open_store(str(tmp_path / "log.sqlite3"), None, create=True)
    try:
        assert opened.backdate_window_ms == 1234
    finally:
        opened.close()


# ----------------------------------------------------------------------------- item 4


def test_unsigned_events_under_a_name_that_signs_read_false_and_doctor_flags_backdated(
    team,
) -> None:
    a, h, store, _crew = team
    history = note(a, "bob", "before bob had a key")
    bob = agents.add(a, "bob")
    signed = note(a, "bob", "signed")
    _pull(h, a)
    _pull(store, a)  # history arrives before bob's key: it is history here
    first_key = next(r for r in agents.keyring(store).records() if r.agent == "bob").added_hlc
    forged = _unsigned_at(h, "bob", _stamp(first_key, -5_000, h.replica_id))
    carol = note(h, "carol", "nobody gave carol a key")
    _pull(store, h)  # stamped before bob's key, arrives after it: stored, marked at read
    for ident in (forged, history.id):
        got = store.event_get(ident)
        assert got.verified is False and got.verified_reason == "unsigned_name_signs"
        assert got.to_dict()["verified_reason"] == "unsigned_name_signs"
    listed = {e.id: e.to_dict() for e in store.event_list(limit=500).events}
    assert listed[forged]["verified"] is False
    assert listed[forged]["verified_reason"] == "unsigned_name_signs"
    assert listed[signed.id]["verified"] is True and "verified_reason" not in listed[signed.id]
    assert listed[carol.id]["verified"] is None and "verified_reason" not in listed[carol.id]
    assert bob.key_id == store.event_get(signed.id).key_id

    report = doctor.run(store)
    sigs = report.checks["signatures"]
    assert sigs["unsigned_backdated"] == 1 and sigs["unsigned_name_signs"] == 2
    flagged = [f for f in _findings(report, "signatures") if "before its first key" in f["message"]]
    assert [f["ids"] for f in flagged] == [[forged]]
    under = {u.event_id: u for u in verify.unsigned_signing_names(store)}
    assert under[history.id].before_first_key and not under[history.id].stored_after_key
    assert under[forged].before_first_key and under[forged].stored_after_key
