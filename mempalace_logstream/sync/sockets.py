"""Socket-level deadlines for the HTTP peer: every read, write and TLS handshake of an
`httpx.Client`'s connections waits at most until the round's deadline (`bound_sockets`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DeadlinePassed(Exception):
    """Raised inside a socket operation started after the round's deadline."""


class _DeadlineStream:
    """An httpcore network stream whose every read, write and TLS handshake waits at most
    until the round's deadline: a peer that trickles bytes (even inside its headers) cannot
    keep a request alive past it. Duck-typed on httpcore's NetworkStream."""

    def __init__(self, inner: Any, left: Callable[[], float | None]) -> None:
        self._inner, self._left = inner, left

    def _timeout(self, timeout: float | None) -> float | None:
        left = self._left()
        if left is None:
            return timeout
        if left <= 0:
            raise DeadlinePassed
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._inner.read(max_bytes, self._timeout(timeout))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._timeout(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, self._timeout(timeout))
        return _DeadlineStream(inner, self._left)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """Wraps httpcore's network backend so that every connection it opens is a
    `_DeadlineStream` (duck-typed on httpcore's NetworkBackend)."""

    def __init__(self, inner: Any, left: Callable[[], float | None]) -> None:
        self._inner, self._left = inner, left

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        probe = _DeadlineStream(None, self._left)
        stream = self._inner.connect_tcp(
            host,
            port,
            timeout=probe._timeout(timeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self._left)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> Any:
        probe = _DeadlineStream(None, self._left)
        stream = self._inner.connect_unix_socket(
            path, timeout=probe._timeout(timeout), socket_options=socket_options
        )
        return _DeadlineStream(stream, self._left)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bound_sockets(client: Any, left: Callable[[], float | None]) -> bool:
    """Put every connection pool of an httpx.Client behind `_DeadlineBackend` (httpx offers no
    public hook; a test fails loudly if its internals move). True if one was wrapped."""
    wrapped = False
    for transport in [client._transport, *client._mounts.values()]:
        pool: Any = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend, left)
            wrapped = True
    return wrapped
