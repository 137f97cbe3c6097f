"""One socket write per response (http/one_write.py, issue 25): a live hub's connections run
`OneWriteProtocol`, a keep-alive client's first `recv` holds a whole answer (status line,
headers and body arrive together), answers to several requests on one connection stay in
order, and a `Connection: close` answer is written in full before the hub closes. Also the
hub's FastAPI telemetry switch (http/app.py), the other per-request cost cut in issue 25."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from mempalace_logstream.http import app as app_module
from mempalace_logstream.http.one_write import OneWriteProtocol
from tests.hubkit import LiveHub, live_hub

EVENT = {"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "x" * 100}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with live_hub(tmp_path_factory.mktemp("hub")) as h:
        yield h


def _request(hub: LiveHub, close: bool = False) -> bytes:
    body = json.dumps(EVENT).encode()
    host = hub.url.removeprefix("http://")
    head = (
        f"POST /v1/event_append HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + body


def _connect(hub: LiveHub) -> socket.socket:
    host, port = hub.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _complete(data: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(head, body, what follows) when `data` starts with a whole answer, else None."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return (head, rest[:length], rest[length:]) if len(rest) >= length else None


def test_an_answer_arrives_in_one_piece(hub: LiveHub) -> None:
    with _connect(hub) as sock:
        for _ in range(20):
            sock.sendall(_request(hub))
            got = _complete(sock.recv(1 << 20))
            assert got is not None, "the first recv held only part of the answer"
            head, body, more = got
            assert not more
            assert head.startswith(b"HTTP/1.1 200 ")
            assert json.loads(body)["event"]["body"] == EVENT["body"]
        protocols = list(hub.server.server_state.connections)
        assert protocols and all(isinstance(p, OneWriteProtocol) for p in protocols)


def test_pipelined_answers_stay_in_order(hub: LiveHub) -> None:
    with _connect(hub) as sock:
        sock.sendall(_request(hub) * 3)
        data, seqs = b"", []
        while len(seqs) < 3:
            chunk = sock.recv(1 << 20)
            assert chunk, "the hub closed the connection"
            data += chunk
            while (got := _complete(data)) is not None:
                _head, body, data = got
                seqs.append(json.loads(body)["event"]["seq"])
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


def test_connection_close_writes_the_whole_answer_first(hub: LiveHub) -> None:
    with _connect(hub) as sock:
        sock.sendall(_request(hub, close=True))
        data = b""
        while chunk := sock.recv(1 << 20):
            data += chunk
    got = _complete(data)
    assert got is not None and got[0].startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in got[0].lower()


def test_fastapi_telemetry_is_off_unless_the_environment_asks() -> None:
    """FastAPI's native OpenTelemetry costs every request a look at the global providers; the
    hub turns it off unless an `OTEL_*` (or `FASTAPI_OTEL_*`) variable asks for it."""
    off = app_module.fastapi_options({"PATH": "/bin", "LOGSTREAM_TOKEN": "t"})
    assert off == {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "FASTAPI_OTEL_AUTO_CONFIGURE"):
        assert app_module.fastapi_options({name: "x"}) == {}
