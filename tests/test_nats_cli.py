"""The bridge's surfaces as real processes (issue 24): `logstream bridge nats` until SIGTERM,
`logstream serve --nats` (the hub bridges its log), and their one-line refusals."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.natsbridge import BridgeConfig, BridgeThread
from tests.conftest import run_cli
from tests.hubproc import HubProcess, env_for
from tests.natskit import SERVER, NatsServer, _accepting, free_port, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path):
    srv = NatsServer(tmp_path).start()
    yield srv
    srv.stop()


@pytest.fixture
def peer(tmp_path: Path, server: NatsServer):
    """Another log, bridged in this process."""
    store = LogStore.open(str(tmp_path / "peer.sqlite3"))
    thread = BridgeThread(store, BridgeConfig(url=server.url), lambda _line: None).start()
    yield store
    thread.stop()
    store.close()


def _has(store: LogStore, ident: str) -> bool:
    return any(e.id == ident for e in store.event_list(limit=500).events)


def test_bridge_nats_runs_until_sigterm(tmp_path: Path, server: NatsServer, peer: LogStore):
    db = tmp_path / "laptop.sqlite3"
    laptop = LogStore.open(str(db))
    mine = laptop.event_append(type="note", stream="s", room="r", from_agent="a", body="hi")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", "bridge", "nats"]
        + ["--db", str(db), "--nats", server.url],
        env=env_for(tmp_path),
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _has(peer, mine.id), 20, "the laptop's event at the peer")
        theirs = peer.event_append(type="note", stream="s", room="r", from_agent="b", body="yo")
        wait_for(lambda: _has(laptop, theirs.id), 10, "the peer's event on the laptop")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        laptop.close()
    assert proc.returncode == 0, err
    text = err.decode()
    assert f"nats bridge: {laptop.replica_id} on {server.url} stream LOGSTREAM" in text
    assert "nats bridge: stopped" in text


def test_serve_with_nats_bridges_the_hub(tmp_path: Path, server: NatsServer, peer: LogStore):
    hub = HubProcess(tmp_path / "hub.sqlite3", tmp_path, extra=("--nats", server.url))
    hub.start()
    try:
        resp = httpx.post(
            f"{hub.url}/v1/event_append",
            json={"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "x"},
        )
        assert resp.status_code == 200, resp.text
        ident = resp.json()["event"]["id"]
        wait_for(lambda: _has(peer, ident), 20, "the hub's event at the peer")
        theirs = peer.event_append(type="note", stream="s", room="r", from_agent="b", body="yo")

        def at_hub() -> bool:
            got = httpx.post(f"{hub.url}/v1/event_get", json={"event_id": theirs.id})
            return got.status_code == 200

        wait_for(at_hub, 10, "the peer's event at the hub")
    finally:
        hub.stop()


def test_the_bridge_commands_refuse_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([str(SERVER), "-a", "127.0.0.1", "-p", str(port)])  # no JetStream
    try:
        wait_for(lambda: _accepting(port), 10, "nats-server without JetStream")
        db = str(tmp_path / "a.sqlite3")
        url = f"nats://127.0.0.1:{port}"
        for args in (
            ["bridge", "nats", "--db", db, "--nats", url],
            ["serve", "--db", db, "--port", "0", "--nats", url],
        ):
            res = run_cli(*args, env=env_for(tmp_path))
            err = res.stderr.decode().strip().splitlines()
            assert res.returncode == 1 and err[-1].startswith("error: JetStream is not enabled"), (
                err
            )
        res = run_cli("bridge", "nats", "--db", db, "--nats", url, "--stream", "a.b")
        assert res.returncode == 1 and "--stream 'a.b' must be" in res.stderr.decode()
        res = run_cli("bridge", "nats", "--db", db, "--nats", f"nats://127.0.0.1:{free_port()}")
        assert res.returncode == 1 and "no NATS server answers at" in res.stderr.decode()
    finally:
        proc.terminate()
        proc.wait(10)
