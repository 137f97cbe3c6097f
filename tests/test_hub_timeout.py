"""Issue 9, item 12: every `--hub` call has a deadline.

A socket server that accepts connections and never answers stands in for a stuck hub. Before the
fix `append`/`list --hub` hung for ever (only `wait` had a timeout); now each call fails after
`LOGSTREAM_HUB_TIMEOUT` seconds with a one-line error naming the hub and the limit, and `wait`
gets its own timeout plus that margin.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mempalace_logstream import errors
from mempalace_logstream.hub_client import HubClient
from tests.conftest import run_cli


class SilentServer:
    """Accepts every connection, reads what the client sends, never writes a byte."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)  # held open, never answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


APPEND = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")


@pytest.mark.parametrize(
    "args",
    [APPEND, ("list",), ("get", "evt_x"), ("stats",)],
    ids=["append", "list", "get", "stats"],
)
def test_hub_calls_time_out_against_a_hub_that_never_answers(silent, args) -> None:
    t0 = time.monotonic()
    proc = run_cli(*args, "--hub", silent.url, env={"LOGSTREAM_HUB_TIMEOUT": "0.5"}, timeout=30)
    took = time.monotonic() - t0
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert f"hub {silent.url} did not answer" in err and "within 0.5 s" in err, err
    assert "LOGSTREAM_HUB_TIMEOUT" in err
    assert silent.accepted >= 1
    assert took < 25  # the subprocess timeout is the hang detector; this is only a sanity bound


def test_wait_gets_its_own_timeout_plus_the_margin_and_rides_through_the_silence(silent) -> None:
    """A hub that does not answer is an outage (issue 19): each try gives up after the wait's
    own timeout plus the margin, the wait tries again, and --give-up-after ends it (exit 3)."""
    proc = run_cli(
        *("wait", "--timeout-ms", "300", "--hub", silent.url, "--give-up-after", "2"),
        env={"LOGSTREAM_HUB_TIMEOUT": "0.5"},
        timeout=30,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    lines = err.splitlines()
    assert len(lines) == 2 and f"hub {silent.url} is unreachable (no answer in time)" in lines[0], (
        err
    )
    assert "gave up on hub" in lines[1] and "--give-up-after 2" in lines[1], err
    assert silent.accepted >= 2  # tried again after the first try's deadline


def test_the_deadline_of_each_operation() -> None:
    client = HubClient("http://127.0.0.1:9", timeout=7)
    try:
        assert client.deadline_s("event_append", {}) == 7
        assert client.deadline_s("event_list", {"limit": 5}) == 7
        assert client.deadline_s("event_wait", {"timeout_ms": 120_000}) == 127
        assert client.deadline_s("event_wait", {}) == 60 + 7  # the wait's default is 60 s
        assert client.deadline_s("event_wait", {"timeout_ms": -1}) == 7  # refused by the hub
    finally:
        client.close()


def test_the_client_raises_peer_unavailable_naming_the_hub(silent) -> None:
    with HubClient(silent.url, timeout=0.3) as client:
        with pytest.raises(errors.PeerUnavailableError, match="did not answer event_list"):
            client.call("event_list", limit=1)


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_hub_timeout_is_refused_by_name(bad: str) -> None:
    proc = run_cli("list", "--hub", "http://127.0.0.1:9", env={"LOGSTREAM_HUB_TIMEOUT": bad})
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "LOGSTREAM_HUB_TIMEOUT" in err and "positive number of seconds" in err, err
    with pytest.raises(errors.ValidationError, match="hub_timeout"):
        HubClient("http://127.0.0.1:9", timeout=0)


class FloodServer:
    """Answers every request with 200 and a JSON body that never ends (a hub that lies)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.sent = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n")
            chunk = b'{"events": [' + b" " * (1 << 20)
            try:
                while self.sent < 64 << 20:
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                return  # the client hung up: what we want

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


def test_an_answer_past_the_byte_cap_is_refused_not_buffered() -> None:
    server = FloodServer()
    try:
        client = HubClient(server.url, timeout=30, max_bytes=4 << 20)
        with pytest.raises(errors.PeerUnavailableError, match="more than 4194304 bytes"):
            client.call("event_list")
        client.close()
    finally:
        server.close()
    assert server.sent < 64 << 20  # the client stopped reading long before the end


@pytest.mark.parametrize("token", [" ", "\t  "])
def test_a_blank_token_is_refused_before_any_request(silent: SilentServer, token: str) -> None:
    done = run_cli("list", "--hub", silent.url, "--token", token, timeout=30)
    assert done.returncode == 1
    assert done.stderr.decode().strip() == (
        "error: token is blank (only whitespace); pass a real token or leave it out"
    )
    assert silent.accepted == 0
