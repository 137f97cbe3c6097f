"""How the hub listens and guards itself: `HubSettings`, extra ASGI mounts, the listening socket.

No web framework here: the CLI reads these before it decides to import FastAPI.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp

from mempalace_logstream import validation as v

MAX_WAKEABLE_WINDOW_S = 7 * 24 * 3600
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


@dataclass(frozen=True, kw_only=True)
class HubSettings:
    """How the hub listens and guards itself (S-6.4). The token is never printed or logged."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    sse_max_clients: int = 256
    # event_wait calls blocked at once (HTTP and the MCP endpoint together); past it, 503.
    wait_max_clients: int = 512
    # Presence frames one SSE client may have pending (the latest per agent; past it the
    # oldest agents' frames are dropped): a slow reader costs bounded memory.
    sse_presence_backlog: int = 1_000
    ping_interval_s: float = 15.0
    retry_ms: int = 3000
    resume_wait_s: float = 10.0
    max_request_bytes: int = 16 * 1024 * 1024
    allowed_hosts: tuple[str, ...] = ()
    # How recently an agent must have reacted to a push to be `wakeable: yes` (issue 20).
    wakeable_window_s: int = 1_800
    # Where `peers.json` lives (the background sync loop and the `/sync/peers` estate).
    palace: str | None = None

    def __post_init__(self) -> None:
        check_token(self.token)
        if not 1 <= self.wakeable_window_s <= MAX_WAKEABLE_WINDOW_S:
            raise v.fail(
                "wakeable_window_s",
                f"is {self.wakeable_window_s}; it must be between 1 and "
                f"{MAX_WAKEABLE_WINDOW_S} seconds",
                MAX_WAKEABLE_WINDOW_S,
            )

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


@dataclass(frozen=True)
class ExtraMount:
    """An ASGI app served at one exact path, with an optional lifespan (the MCP endpoint), and
    an optional `drain`: awaited when the hub stops, it returns once the answers in flight
    (the waits the stop answered) were sent, before the hub ends the remaining streams."""

    path: str
    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    drain: Callable[[], Awaitable[None]] | None = None


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for uvicorn (`port` 0 = any free port); raises OSError.

    Made with IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when
    the listening socket says it is TCP, and without it every keep-alive request waits ~40 ms
    on Nagle + delayed ACK (found by bench/bench_hub.py). Listening already here means a
    client that connects as soon as `serve` prints its URL is queued, not refused.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def check_token(token: str | None) -> str | None:
    """The hub's token, refused when blank (see `validation.token`)."""
    return v.token(token)


def is_loopback_host(host: str) -> bool:
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def version() -> str:
    import mempalace_logstream

    return mempalace_logstream.__version__
