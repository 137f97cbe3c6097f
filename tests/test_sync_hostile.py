"""Hostile peers (issue 9, items 7-10 and 13): bounded memory, bounded time, forged origin
positions, numbers past 64 bits, credentials in peer URLs.

The hostile peer is a real process (`tests/hostile_peer.py` on a free loopback port) and so is
the `logstream sync` or `logstream serve` under test, whose peak RSS is measured by the kernel
(`wait4` rusage of that one child, or VmHWM of the hub) and printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from mempalace_logstream import LogStore, replication, sync
from tests import test_sync
from tests.conftest import run_cli
from tests.test_sync import load, note, synth_events
from tests.test_sync_http import TOKEN, get, running_hub

template, make = test_sync.template, test_sync.make  # the fixtures: migrated file copies

REPO = Path(__file__).resolve().parents[1]
RSS_LIMIT_MB = 300
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@contextlib.contextmanager
def hostile(mode: str, *args: str) -> Iterator[str]:
    """The fake peer process in `mode`; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "hostile_peer.py"), mode, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        line = _first_line(proc, 30)
        assert line.startswith("listening "), line
        yield line.split()[1]
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    assert box, "the process printed nothing"
    return box[0].decode().strip()


# Runs argv[2:] and writes its peak RSS (KiB) to argv[1]. The kernel's ru_maxrss of a child
# includes the high-water mark of the image it was forked from, so the measured process must
# be started by a small launcher, not by the (large) pytest process itself.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(proc.returncode % 256)
"""


def measured(*args: str, timeout: float = 120) -> tuple[int, str, str, float]:
    """Run `python -m mempalace_logstream *args`; (exit code, stdout, stderr, peak RSS in MB
    of that process alone, from its wait4 rusage)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        cmd = [
            sys.executable,
            "-c",
            _LAUNCHER,
            rss.name,
            sys.executable,
            "-m",
            "mempalace_logstream",
            *args,
        ]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
        peak_kib = int(Path(rss.name).read_text() or 0)
    return proc.returncode, out.decode(), err.decode(), peak_kib / 1024


def report_rss(capsys: pytest.CaptureFixture[str], what: str, mb: float) -> None:
    with capsys.disabled():
        print(f"\n[peak RSS] {what}: {mb:.0f} MB (limit {RSS_LIMIT_MB} MB)")


# ----------------------------------------------------------------------------- item 7: memory


@pytest.mark.slow
def test_one_500_mb_event_body_is_refused_at_the_cap_in_bounded_memory(tmp_path, capsys) -> None:
    db = str(tmp_path / "ours.sqlite3")
    with hostile("huge-event") as url:
        code, out, err, peak = measured("sync", "--db", db, "--peer", url, "--json")
    report_rss(capsys, "logstream sync <- one 500 MB event body", peak)
    assert code == 1, err
    [result] = json.loads(out)
    assert result["peer_name"] == url and url in result["error"]
    assert "/sync/ops" in result["error"] and "16,777,216 bytes" in result["error"]
    assert "max_response_bytes" in result["error"]
    assert peak < RSS_LIMIT_MB
    with LogStore.open(db) as store:
        assert store.stats()["events"] == 0


@pytest.mark.slow
def test_a_page_of_a_million_events_for_500_asked_is_refused(tmp_path, capsys) -> None:
    db = str(tmp_path / "ours.sqlite3")
    with hostile("long-page") as url:
        code, out, err, peak = measured("sync", "--db", db, "--peer", url, "--json")
    report_rss(capsys, "logstream sync <- a page of 1,000,000 events (500 asked)", peak)
    assert code == 1, err
    error = json.loads(out)[0]["error"]
    assert url in error and "cap is 16,777,216 bytes" in error
    assert peak < RSS_LIMIT_MB


@pytest.mark.slow
def test_a_page_longer_than_the_limit_but_under_the_cap_is_refused(tmp_path, capsys) -> None:
    db = str(tmp_path / "ours.sqlite3")
    with hostile("long-page", "--events", "600") as url:
        code, out, err, peak = measured("sync", "--db", db, "--peer", url, "--json")
    report_rss(capsys, "logstream sync <- a page of 600 events (500 asked)", peak)
    assert code == 1, err
    error = json.loads(out)[0]["error"]
    assert error.startswith(f"{url}: asked for at most 500 events of rep_")
    assert error.endswith("got 600; the page is refused")
    with LogStore.open(db) as store:
        assert store.stats()["events"] == 0  # nothing of the refused page is applied
    assert peak < RSS_LIMIT_MB


@pytest.mark.slow
@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "content-length"])
def test_a_peer_that_keeps_serving_200_mb_pages(tmp_path, capsys, declared: bool) -> None:
    db = str(tmp_path / "ours.sqlite3")
    flags = ["--declare-length"] if declared else []
    with hostile("big-pages", *flags) as url:
        code, out, err, peak = measured(
            "sync",
            "--db",
            db,
            "--peer",
            url,
            "--json",
            "--max-response-bytes",
            str(8 * 1024 * 1024),
        )
    how = "declared length" if declared else "close-delimited"
    report_rss(capsys, f"logstream sync <- 200 MB pages, {how}, 8 MiB cap", peak)
    assert code == 1, err
    error = json.loads(out)[0]["error"]
    assert "/sync/ops_rows" in error and "the cap is 8,388,608 bytes" in error
    assert ("declares" in error) is declared
    assert peak < RSS_LIMIT_MB


def _vmhwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_a_hub_loop_with_the_200_mb_peer_in_peers_json_stays_bounded(
    make, tmp_path, capsys
) -> None:
    from tests.test_auth import read_line

    honest = make("honest")
    sent = note(honest, "from the honest peer")
    palace = tmp_path / "palace"
    palace.mkdir()
    env = {**ENV, "LOGSTREAM_TOKEN": "hub-token", "MEMPALACE_PALACE_PATH": str(palace)}
    with hostile("big-pages") as bad_url, running_hub(honest) as good_url:
        peers = [
            {"name": "hostile", "url": bad_url},
            {"name": "honest", "url": good_url, "token": TOKEN},
        ]
        (palace / "peers.json").write_text(json.dumps({"peers": peers}))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mempalace_logstream",
                "serve",
                "--port",
                "0",
                "--sync-interval",
                "0.2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            hub = read_line(proc, timeout=60).split()[4]
            deadline = time.monotonic() + 120
            while True:  # wait on the condition: three refused rounds with the hostile peer
                est = get(hub, "/sync/peers", token="hub-token").json()
                by = {p["name"]: p for p in est["peers"]}
                if by["hostile"]["rounds"] >= 3 and by["honest"]["total_pulled_events"] >= 1:
                    break
                assert time.monotonic() < deadline, est
                time.sleep(0.1)
            peak = _vmhwm_mb(proc.pid)
            got = get(hub, "/v1/events", token="hub-token").json()["events"]
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
    report_rss(capsys, "logstream serve, 3+ loop rounds with a 200 MB-page peer", peak)
    assert peak < RSS_LIMIT_MB
    assert (
        by["hostile"]["reachable"] is False and "cap is 16,777,216" in by["hostile"]["last_error"]
    )
    assert [e["id"] for e in got] == [sent.id]


class _Bomb(BaseHTTPRequestHandler):
    """Answers every request with a gzip body that inflates 1,000 times (a compression bomb)."""

    def do_GET(self) -> None:  # noqa: N802
        import gzip

        body = gzip.compress(b"[" + b"0," * (8 * 1024 * 1024) + b"0]")
        self.send_response(200)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


def test_a_compressed_answer_to_an_uncompressed_request_is_refused(make) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Bomb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = sync.http_round(make("b"), {"url": f"http://127.0.0.1:{server.server_port}"})
    finally:
        server.shutdown()
        server.server_close()
    assert "/sync/version_vector response is gzip-compressed" in result["error"]


# ----------------------------------------------------------------------------- item 8: time


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["trickle-headers", "trickle-body"])
def test_a_trickling_peer_ends_at_the_deadline_and_never_delays_the_others(
    make, tmp_path, mode: str
) -> None:
    honest = make("honest")
    note(honest, "from the honest peer")
    palace = tmp_path / "palace"
    palace.mkdir()
    db = str(tmp_path / "ours.sqlite3")
    with hostile(mode, "--every", "0.5") as slow_url, running_hub(honest) as good_url:
        peers = [
            {"name": "slow", "url": slow_url},
            {"name": "honest", "url": good_url, "token": TOKEN},
        ]
        (palace / "peers.json").write_text(json.dumps({"peers": peers}))
        started = time.monotonic()
        proc = run_cli("sync", "--db", db, "--palace", str(palace), "--deadline-s", "3", "--json")
        took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    slow, good = json.loads(proc.stdout)
    assert slow["peer_name"] == "slow"
    assert "the round passed its 3 s deadline (deadline_s)" in slow["error"]
    assert good["peer_name"] == "honest" and good["pulled_events"] == 1
    # One byte every 0.5 s never trips the 30 s read timeout: only the deadline ends it.
    assert took < 30, took
    with LogStore.open(db) as store:
        rows = {r["name"]: r for r in replication.estate_rows(store)}
    assert rows["honest"]["last_success_at"] < rows["slow"]["last_error_at"]


@pytest.mark.slow
def test_the_hub_loop_keeps_serving_other_peers_while_one_trickles(make, tmp_path) -> None:
    honest, ours = make("honest"), make("ours")
    note(honest, "first")
    palace = tmp_path / "palace"
    palace.mkdir()
    with hostile("trickle-headers", "--every", "0.5") as slow_url, running_hub(honest) as url:
        peers = [{"name": "slow", "url": slow_url}, {"name": "honest", "url": url, "token": TOKEN}]
        (palace / "peers.json").write_text(json.dumps({"peers": peers}))
        loop = sync.SyncLoop(ours, palace, interval_s=0.05, deadline_s=60)
        loop.start()
        try:
            assert loop.wait_peer_rounds("honest", 1, 30)
            note(honest, "second")
            assert loop.wait_peer_rounds("honest", 3, 30)
            assert loop.peer_rounds.get("slow", 0) == 0  # its first round is still trickling
        finally:
            stopping = time.monotonic()
            loop.stop(timeout=10)
            stopped_in = time.monotonic() - stopping
    assert ours.stats()["events"] == 2
    assert stopped_in < 10  # stop() cancels the round in flight instead of waiting it out


def test_a_deadline_bounds_a_round_over_a_local_peer_too(make) -> None:
    a, b = make("a"), make("b")
    load(a, synth_events(30))

    class Slow(sync.LocalPeer):
        rows_limit = 5

        def rows(self, origin: str, after: int, limit: int) -> list[Any]:
            self.deadline.cancel() if after >= 10 else None  # time "runs out" at the 3rd page
            return super().rows(origin, after, limit)

    result = sync.sync_one(b, Slow(a), deadline_s=300)
    assert "stopped" in result["error"] and b.stats()["events"] == 15  # applied pages stay


# ----------------------------------------------------------------------------- item 9: forgery


@pytest.mark.slow
def test_a_forged_origin_position_does_not_stop_later_pulls_and_is_reported(make, tmp_path) -> None:
    p2 = make("p2")
    for i in range(3):
        note(p2, f"p2 {i}")
    db = str(tmp_path / "ours.sqlite3")
    with running_hub(p2) as p2_url:
        first = run_cli("sync", "--db", db, "--peer", p2_url, "--token", TOKEN, "--json")
        assert json.loads(first.stdout)[0]["pulled_events"] == 3
        with hostile("forge", "--forge-origin", p2.replica_id) as forger:
            forged = run_cli("sync", "--db", db, "--peer", forger, "--json")
        assert json.loads(forged.stdout)[0]["pulled_events"] == 1  # a valid event: accepted
        later = [note(p2, f"later {i}") for i in range(2)]
        proc = run_cli("sync", "--db", db, "--peer", p2_url, "--token", TOKEN, "--json")
        note(p2, "and one more")
        human = run_cli("sync", "--db", db, "--peer", p2_url, "--token", TOKEN)
    line = human.stdout.decode()
    assert human.returncode == 0 and "+1 events" in line and "2 SEQUENCE ANOMALIES" in line
    assert f"pulling {p2.replica_id} from {p2_url} resumes after 5" in line
    result = json.loads(proc.stdout)[0]
    assert result["pulled_events"] == 2, result
    resumed, anomaly = result["sequence_anomalies"]
    assert resumed["reason"] == "peer_top_not_held" and resumed["resume_after"] == 3
    assert anomaly["reason"] == "beyond_author_tip" and anomaly["origin_seq"] == 10**15
    assert anomaly["peer_top"] == later[-1].origin_seq
    peers = json.loads(run_cli("peers", "--db", db, "--json").stdout)
    assert peers["sync"]["sequence_anomalies"] == 1 and peers["sync"]["rejections"] == 0
    [row] = [r for r in peers["rejections"] if r["kind"] == "sequence"]
    assert row["origin_seq"] == 10**15 and row["reason"] == "beyond_author_tip"
    stats = json.loads(run_cli("stats", "--db", db, "--json").stdout)
    assert stats["estate"]["sequence_anomalies"] == 1


def _forged(origin: str, seq: int = 10**15) -> dict[str, Any]:
    ms = int(time.time() * 1000) - 1000
    return {
        "id": f"evt_20260101T000000_forged{seq:016x}",
        "origin_replica": origin,
        "origin_seq": seq,
        "hlc": f"{ms:013d}-000000-{origin}",
        "type": "note",
        "stream": "s",
        "room": "r",
        "from_agent": "mallory",
        "body": "forged",
        "created_at": "2026-01-01T00:00:00Z",
        "metadata": {},
        "artifact_ids": [],
    }


def test_a_forged_position_that_spread_to_a_hub_does_not_stop_its_spokes(make) -> None:
    p2, hub, spoke = make("p2"), make("hub"), make("spoke")
    note(p2, "one")
    for s in (hub, spoke):
        sync.sync_with_peer(s, sync.LocalPeer(p2))
        replication.apply_remote_events(s, [_forged(p2.replica_id)], "mallory")
    later = note(p2, "two")
    assert sync.sync_with_peer(hub, sync.LocalPeer(p2))["pulled_events"] == 1
    # Both hold p2 up to 10^15: equal tops, but the hub accounts for one more position.
    result = sync.sync_with_peer(spoke, sync.LocalPeer(hub))
    assert result["pulled_events"] == 1 and spoke.event_get(later.id).body == "two"
    [hole] = result["sequence_anomalies"]
    assert (hole["reason"], hole["resume_after"]) == ("hole", later.origin_seq - 1)


def test_forgeries_that_even_out_the_counts_do_not_hide_an_honest_event(make) -> None:
    """Found by the state machine: the spoke holds a forged position the hub lacks, the hub an
    honest one the spoke lacks; equal tops, equal counts, different sets. Fingerprints of the
    positions (not counts) tell them apart, and the search skips the spoke's own extra."""
    p2, hub, spoke = make("p2"), make("hub"), make("spoke")
    note(p2, "one")
    for s in (hub, spoke):
        sync.sync_with_peer(s, sync.LocalPeer(p2))
        replication.apply_remote_events(s, [_forged(p2.replica_id)], "mallory")
    replication.apply_remote_events(spoke, [_forged(p2.replica_id, 10**12)], "mallory")
    later = note(p2, "two")
    sync.sync_with_peer(hub, sync.LocalPeer(p2))
    assert replication.count_upto(hub, p2.replica_id, 10**15) == 3
    assert replication.count_upto(spoke, p2.replica_id, 10**15) == 3
    result = sync.sync_with_peer(spoke, sync.LocalPeer(hub), push=True)
    assert result["pulled_events"] == 1 and spoke.event_get(later.id).body == "two"
    assert result["pushed_events"] == 1  # and the hub gets the spoke's extra
    [hole] = result["sequence_anomalies"]
    assert (hole["reason"], hole["resume_after"]) == ("hole", later.origin_seq - 1)


def test_the_author_pushes_past_a_forged_position_on_the_hub(make) -> None:
    p2, hub = make("p2"), make("hub")
    note(p2, "one")
    sync.sync_with_peer(p2, sync.LocalPeer(hub), push=True)
    replication.apply_remote_events(hub, [_forged(p2.replica_id)], "mallory")
    later = note(p2, "two")
    result = sync.sync_with_peer(p2, sync.LocalPeer(hub), push=True)
    assert result["pushed_events"] == 1 and hub.event_get(later.id).body == "two"
    assert result["sequence_anomalies"][0]["reason"] == "peer_beyond_our_tip"


def test_a_forgery_is_never_pushed_back_to_the_author_it_claims(make) -> None:
    p2, hub = make("p2"), make("hub")
    note(p2, "one")
    replication.apply_remote_events(hub, [_forged(p2.replica_id)], "mallory")

    class Pushes(sync.LocalPeer):
        sent: list[Any] = []

        def push(self, artifacts: Any, events: Any, sender: str) -> dict[str, Any]:
            self.sent += events
            return super().push(artifacts, events, sender)

    author = Pushes(p2)
    for _ in range(2):
        sync.sync_with_peer(hub, author, push=True)
    assert [e["origin_replica"] for e in author.sent] == []


def test_a_forged_position_above_a_lagging_peer_resumes_at_its_top(make) -> None:
    """No counts needed: a reference-shaped peer whose top we do not hold is pulled from."""
    from tests.test_sync import NoCounts

    p2, lag, ours = make("p2"), make("lag"), make("ours")
    note(p2, "one")
    sync.sync_with_peer(ours, sync.LocalPeer(p2))
    replication.apply_remote_events(ours, [_forged(p2.replica_id)], "mallory")
    note(p2, "two")
    sync.sync_with_peer(lag, sync.LocalPeer(p2))
    result = sync.sync_with_peer(ours, NoCounts(lag))
    assert result["pulled_events"] == 1
    assert result["sequence_anomalies"][0]["reason"] == "peer_top_not_held"


# ----------------------------------------------------------------------------- item 10: numbers


@pytest.mark.slow
def test_numbers_past_64_bits_are_400s_naming_the_parameter(make) -> None:
    a = make("a")
    big = str(2**63)
    cases = [
        ("/sync/ops", {"origin": "x", "after": big}, "after"),
        ("/sync/ops_rows", {"origin": "x", "after": big}, "after"),
        ("/sync/ops_rows", {"origin": "x", "after": "1e26"}, "after"),
        ("/sync/ops_rows", {"origin": "x", "limit": big}, "limit"),
        ("/sync/count", {"origin": "x", "upto": big}, "upto"),
        ("/sync/count", {"origin": "x", "upto": "9" * 5000}, "upto"),
    ]
    with running_hub(a) as url:
        for path, params, name in cases:
            resp = get(url, path, **params)
            assert resp.status_code == 400, (path, params, resp.text)
            assert resp.json()["error"].startswith(name), resp.json()
        wire = _forged("rep_" + "e" * 32, 2**63)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for seq in (2**63, 1e26, 10**30):
            push = {"replica_id": "x", "artifacts": [], "events": [{**wire, "origin_seq": seq}]}
            out = httpx.post(url + "/sync/push", json=push, headers=auth)
            assert out.status_code == 200, out.text
            [refused] = out.json()["rejected"]
            assert refused["field"] == "origin_seq" and "9223372036854775807" in refused["message"]
        assert replication.counts(a)["rejections"] == 1  # one id, refused three times


def test_sync_limits_must_be_sane_and_the_refusal_names_the_option(tmp_path) -> None:
    db = str(tmp_path / "x.sqlite3")
    for args, text in [
        (("--deadline-s", "0"), b"--deadline-s must be a positive number of seconds, got 0.0"),
        (("--max-response-bytes", "1000"), b"--max-response-bytes is 1000; it must be at least"),
    ]:
        proc = run_cli("sync", "--db", db, "--peer", "http://127.0.0.1:9", *args)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
    proc = run_cli("serve", "--db", db, "--sync-deadline-s", "-1")
    assert proc.returncode == 2 and b"--sync-deadline-s must be a positive" in proc.stderr
    assert not Path(db).exists()


def test_a_version_vector_past_64_bits_is_the_peers_error(make) -> None:
    b = make("b")

    class Huge(sync.LocalPeer):
        def version_vector(self) -> dict[str, Any]:
            return {
                "replica_id": self.store.replica_id,
                "version_vector": {self.store.replica_id: 2**70},
            }

    result = sync.sync_one(b, Huge(make("a")))
    assert "bad version vector" in result["error"] and "version_vector value" in result["error"]


# ----------------------------------------------------------------------------- item 13: URLs


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        _Recorder.seen.append(self.headers.get("Authorization", ""))
        body = b'{"error": "nope"}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


def test_credentials_in_a_peer_url_are_used_but_never_shown_or_stored(tmp_path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    secret = "S3CRET-pw-123"
    db = str(tmp_path / "ours.sqlite3")
    palace = tmp_path / "palace"
    palace.mkdir()
    try:
        direct = run_cli("sync", "--db", db, "--peer", f"http://mallory:{secret}@127.0.0.1:{port}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        peers = [
            {"url": f"http://u:{secret}@127.0.0.1:{port}/"},
            {"name": "dead", "url": f"https://u:{secret}@127.0.0.1:{dead}"},
        ]
        (palace / "peers.json").write_text(json.dumps({"peers": peers}))
        listed = run_cli("sync", "--db", db, "--palace", str(palace), "--json")
        shown = run_cli("peers", "--db", db, "--palace", str(palace), "--json")
        table = run_cli("peers", "--db", db, "--palace", str(palace))
    finally:
        server.shutdown()
        server.server_close()
    import base64

    assert f"Basic {base64.b64encode(f'mallory:{secret}'.encode()).decode()}" in _Recorder.seen
    for proc in (direct, listed, shown, table):
        text = (proc.stdout + proc.stderr).decode()
        assert secret not in text and "mallory" not in text, text
    assert direct.returncode == 1 and f"http://127.0.0.1:{port}" in direct.stdout.decode()
    names = [p["name"] for p in json.loads(shown.stdout)["peers"]]
    assert names == [f"http://127.0.0.1:{port}", "dead"]
    with LogStore.open(db) as store:
        stored = json.dumps(replication.estate_rows(store))
    assert secret not in stored and f"http://127.0.0.1:{port}" in stored
