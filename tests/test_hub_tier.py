"""Several hubs on one log (issue 23): one hub per SQLite file, and on PostgreSQL one leader
of the background loops among the hubs, taken over by another when the leader dies.

Real `logstream serve` processes on a real SQLite file and a real PostgreSQL schema; the
peer of the sync rounds is a small HTTP server in this process that counts the rounds
reaching it (every request answers 503, so each round is one request and ends)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore
from mempalace_logstream.backends.leader import PgLeaderLock
from tests.hubproc import HubProcess, env_for, wait_for

INTERVAL_S = 1.0


class CountingPeer:
    """A peer that counts the requests of sync rounds and refuses them all (503)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        lock = threading.Lock()
        times = self.times

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                with lock:
                    times.append(time.monotonic())
                body = b'{"error": "busy"}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self, since: float = 0.0) -> int:
        return sum(1 for t in list(self.times) if t >= since)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def peer() -> Iterator[CountingPeer]:
    p = CountingPeer()
    yield p
    p.close()


def health(hub: HubProcess) -> dict[str, object]:
    out: dict[str, object] = httpx.get(f"{hub.url}/healthz", timeout=10).json()
    return out


def leaders(hubs: list[HubProcess]) -> list[HubProcess]:
    alive = [h for h in hubs if h.proc is not None and h.proc.poll() is None]
    return [h for h in alive if health(h)["sync_leader"]]


def kill(hub: HubProcess) -> None:
    """SIGKILL: no shutdown path runs, as when a host dies."""
    assert hub.proc is not None and hub.proc.stdout is not None
    hub.proc.send_signal(signal.SIGKILL)
    hub.proc.wait(30)
    hub.proc.stdout.close()


# --------------------------------------------------------------------------- SQLite


def test_a_second_hub_on_one_sqlite_file_is_refused_and_the_file_is_free_once_the_first_dies(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.sqlite3"
    LogStore.open(str(db)).close()
    first = HubProcess(db, tmp_path)
    first.start()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "mempalace_logstream", "serve", "--db", str(db), "--port", "0"],
            env=env_for(tmp_path),
            capture_output=True,
            timeout=60,
        )
        assert second.returncode != 0
        said = second.stderr.decode()
        assert "another hub already serves" in said and f"pid {first.proc.pid}" in said, said
        assert "PostgreSQL" in said, said
        assert first.proc.poll() is None and health(first)["ok"] is True
    finally:
        assert first.proc is not None
        kill(first)
    again = HubProcess(db, tmp_path)  # the kernel dropped the dead hub's lock
    again.start()
    try:
        assert health(again)["ok"] is True
    finally:
        again.stop()


@pytest.mark.parametrize("trusted", [True, False], ids=["balancer-trusted", "untrusted"])
def test_forwarded_allow_ips_decides_whose_address_a_login_lockout_counts(
    tmp_path: Path, trusted: bool
) -> None:
    """Behind a load balancer every client arrives from the balancer's address. With the
    balancer trusted (`--forwarded-allow-ips`, here the test's own 127.0.0.1), five wrong
    tokens lock out only the address X-Forwarded-For names; untrusted, the header is ignored
    and the lockout falls on the balancer's address, so every client behind it is locked out."""
    db = tmp_path / "log.sqlite3"
    LogStore.open(str(db)).close()
    allow = "127.0.0.1" if trusted else "192.0.2.1"
    extra = ("--host", "0.0.0.0", "--token", "s3cret", "--forwarded-allow-ips", allow)
    hub = HubProcess(db, tmp_path, extra=extra)
    hub.start()
    try:
        login = hub.url + "/dashboard/login"
        for _ in range(5):
            wrong = httpx.post(
                login, data={"token": "nope"}, headers={"X-Forwarded-For": "203.0.113.5"}
            )
            assert wrong.status_code == 401, wrong.text
        attacker = httpx.post(
            login, data={"token": "s3cret"}, headers={"X-Forwarded-For": "203.0.113.5"}
        )
        assert attacker.status_code == 429
        other = httpx.post(
            login,
            data={"token": "s3cret"},
            headers={"X-Forwarded-For": "203.0.113.9"},
            follow_redirects=False,
        )
        if trusted:
            assert other.status_code in (200, 303), other.text  # logged in
        else:
            assert other.status_code == 429
    finally:
        hub.stop()


# --------------------------------------------------------------------------- PostgreSQL


@pytest.mark.pg
def test_exactly_one_lock_leads_and_another_takes_over_when_its_connection_dies(
    pg_url: str,
) -> None:
    LogStore.open(pg_url).close()
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    locks = [PgLeaderLock(engine, f"hub-{i}") for i in range(3)]
    try:
        held = [lock.hold() for lock in locks]
        assert held == [True, False, False]
        assert [lock.holder() for lock in locks] == ["hub-0"] * 3
        assert locks[0].hold() and not locks[1].hold()  # held again, still the only one
        with engine.connect() as conn:  # an operator (or a dead host) ends the leader's session
            pid = locks[0]._conn.info.backend_pid  # noqa: SLF001 - the test kills that session
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        wait_for(lambda: locks[0].holder() is None, 30, "the lock to be freed")
        assert locks[1].hold() and not locks[2].hold()
        assert not locks[0].hold()  # the old leader finds its session gone and follows
        assert locks[2].holder() == "hub-1"
        locks[1].release()
        assert locks[1].holder() is None
        assert locks[2].hold() and locks[0].holder() == "hub-2"
    finally:
        for lock in locks:
            lock.release()
        engine.dispose()


@pytest.mark.pg
def test_three_hubs_one_leader_runs_the_rounds_and_another_leads_within_two_rounds(
    pg_url: str, tmp_path: Path, peer: CountingPeer
) -> None:
    db = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    LogStore.open(db).close()
    hubs = []
    for i in range(3):
        home = tmp_path / f"h{i}"
        palace = home / "palace"
        palace.mkdir(parents=True)
        (palace / "peers.json").write_text(json.dumps({"peers": [{"name": "p", "url": peer.url}]}))
        args = ("--palace", str(palace), "--sync-interval", str(INTERVAL_S))
        hubs.append(HubProcess(db, home, extra=args))  # type: ignore[arg-type]
    try:
        for hub in hubs:
            hub.start()
        wait_for(lambda: len(leaders(hubs)) == 1, 30, "one leader")
        (leader,) = leaders(hubs)
        # One hub runs the rounds: over 6 intervals, about 6 requests reach the peer, not 18.
        wait_for(lambda: peer.count() >= 2, 30, "rounds to reach the peer")
        start = time.monotonic()
        wait_for(lambda: time.monotonic() - start >= 6 * INTERVAL_S, 30, "six intervals")
        seen = peer.count(since=start)
        assert 1 <= seen <= 6 + 3, seen
        assert len(leaders(hubs)) == 1 and leaders(hubs)[0] is leader
        # The leader dies; another hub leads, and its rounds reach the peer, within two rounds.
        assert leader.proc is not None
        kill(leader)
        killed = time.monotonic()
        rest = [h for h in hubs if h is not leader]
        wait_for(lambda: peer.count(since=killed + 0.05) >= 1, 30, "a round from a new leader")
        gap = min(t for t in peer.times if t >= killed + 0.05) - killed
        assert gap <= 2 * INTERVAL_S + 1.5, f"no round for {gap:.2f} s after the leader died"
        wait_for(lambda: len(leaders(rest)) == 1, 30, "one new leader")
        (new,) = leaders(rest)
        estate = httpx.get(f"{new.url}/sync/peers", timeout=10).json()
        assert estate["sync_leader"]["this_hub"] is True
        assert estate["sync_leader"]["hub"].endswith(f":{new.port} pid {new.proc.pid}")
        other = next(h for h in rest if h is not new)
        theirs = httpx.get(f"{other.url}/sync/peers", timeout=10).json()["sync_leader"]
        assert theirs == {"hub": estate["sync_leader"]["hub"], "this_hub": False}
    finally:
        for hub in hubs:
            if hub.proc is not None and hub.proc.poll() is None:
                hub.stop()
