"""The HTTP peer's socket deadlines on httpx's and httpcore's public seams (issue 21): a custom
transport over a connection pool whose network backend bounds every socket operation."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from mempalace_logstream.sync.limits import DeadlinePassed
from mempalace_logstream.sync.sockets import DeadlineTransport


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_request_after_the_deadline_opens_no_connection() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"
        with httpx.Client(transport=DeadlineTransport(lambda: 0.0)) as client:
            with pytest.raises(DeadlinePassed):
                client.get(url)


def test_httpcore_errors_become_httpx_errors() -> None:
    with httpx.Client(transport=DeadlineTransport(lambda: None), timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(f"http://127.0.0.1:{_closed_port()}/")


def test_a_trickling_answer_is_cut_at_the_deadline_not_at_the_read_timeout() -> None:
    """Each byte comes well within the read timeout; the deadline still ends the request."""
    stop = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100:
                if stop.wait(0.05):
                    return
                conn.sendall(bytes([byte]))

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    budget = {"left": 0.5}
    clock = threading.Timer(0.5, lambda: budget.update(left=0.0))
    clock.start()
    try:
        with httpx.Client(transport=DeadlineTransport(lambda: budget["left"]), timeout=5) as c:
            with pytest.raises(DeadlinePassed):
                c.get(f"http://127.0.0.1:{server.getsockname()[1]}/")
    finally:
        stop.set()
        clock.cancel()
        thread.join(5)
        server.close()
