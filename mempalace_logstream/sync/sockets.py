"""Socket-level deadlines for the HTTP peer: every connect, read, write and TLS handshake of its
connections waits at most until the round's deadline (`DeadlineTransport`).

Built on the libraries' public extension points: an httpx transport (`httpx.BaseTransport`) over
an httpcore connection pool whose network backend (`httpcore.NetworkBackend`) opens
deadline-bounded streams; httpcore's errors become httpx's through one table, as httpx's own
transport does. The peer connects directly (no proxy from the environment). Imported by the
HTTP peer when it is made, so that importing `sync` loads no HTTP client.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from mempalace_logstream.sync.limits import DeadlinePassed

Left = Callable[[], float | None]  # seconds until the round's deadline; None: no deadline


def bounded(left: Left, timeout: float | None) -> float | None:
    """The timeout of one socket operation: `timeout`, cut to what is left of the round."""
    remaining = left()
    if remaining is None:
        return timeout
    if remaining <= 0:
        raise DeadlinePassed
    return remaining if timeout is None else min(timeout, remaining)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every read, write and TLS handshake waits at most until the
    round's deadline: a peer that trickles bytes (even inside its headers) cannot keep a
    request alive past it."""

    def __init__(self, inner: httpcore.NetworkStream, left: Left) -> None:
        self.inner, self.left = inner, left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, bounded(self.left, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, bounded(self.left, timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self.inner.start_tls(ssl_context, server_hostname, bounded(self.left, timeout))
        return DeadlineStream(inner, self.left)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, every connection it opens a `DeadlineStream`."""

    def __init__(self, left: Left, inner: httpcore.NetworkBackend | None = None) -> None:
        self.left = left
        self.inner = inner if inner is not None else httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(
            host,
            port,
            timeout=bounded(self.left, timeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return DeadlineStream(stream, self.left)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_unix_socket(
            path, timeout=bounded(self.left, timeout), socket_options=socket_options
        )
        return DeadlineStream(stream, self.left)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


# httpcore's errors as httpx's, the most specific first (the table of httpx's own transport).
ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def httpx_errors() -> Iterator[None]:
    """Raise httpcore's errors inside the block as the matching httpx error (chained)."""
    try:
        yield
    except Exception as exc:
        for source, target in ERRORS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class ResponseBody(httpx.SyncByteStream):
    """A response's body from the pool, its errors translated as it is read."""

    def __init__(self, inner: Iterable[bytes]) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        with httpx_errors():
            yield from self.inner

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport whose connections are bounded by the round's deadline (`left`)."""

    def __init__(self, left: Left) -> None:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self.pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=DeadlineBackend(left),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with httpx_errors():
            resp = self.pool.handle_request(core)
        assert isinstance(resp.stream, Iterable)
        return httpx.Response(
            status_code=resp.status,
            headers=resp.headers,
            stream=ResponseBody(resp.stream),
            extensions=resp.extensions,
        )

    def close(self) -> None:
        self.pool.close()
