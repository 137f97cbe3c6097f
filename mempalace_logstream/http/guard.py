"""The request guard: raw ASGI middleware (streaming-safe) in front of every route.

On a loopback hub, the Host header must name this hub and an Origin must be a loopback origin
(DNS rebinding); with a token, every path but `/healthz` needs `Authorization: Bearer <token>`;
a body over `max_request_bytes` is refused with 413 before it is read, or while it is read when
it has no Content-Length.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempalace_logstream.http.responses import send_error
from mempalace_logstream.http.settings import LOOPBACK_NAMES, HubSettings, is_loopback_host

_BODY_METHODS = ("POST", "PUT", "PATCH")


class HubGuard:
    """Raw ASGI guard (streaming-safe): Host/Origin pinning on loopback, bearer token, size."""

    def __init__(self, app: ASGIApp, settings: HubSettings) -> None:
        self.app = app
        self.settings = settings
        names = set(LOOPBACK_NAMES) | {settings.host.strip("[]").lower()}
        self.hosts = names | {h.strip("[]").lower() for h in settings.allowed_hosts}
        self.expected = settings.token.encode() if settings.token else None
        self.loopback = settings.is_loopback
        self.limit = settings.max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): val for k, val in scope["headers"]}
        refusal = self._refusal(scope["path"], headers)
        if refusal is not None:
            await send_error(send, *refusal)
            return
        length = headers.get("content-length")
        limit = self.limit
        if length is not None and length.isdigit() and int(length) > limit:
            message = f"request body is {int(length)} bytes; the limit is {limit} bytes"
            await send_error(send, 413, message, "body")
            return
        if length is None and scope["method"] in _BODY_METHODS:
            buffered = await _buffered(receive, limit)
            if buffered is None:
                await send_error(send, 413, f"request body exceeds {limit} bytes", "body")
                return
            receive = buffered
        await self.app(scope, receive, send)

    def _refusal(self, path: str, headers: Mapping[str, bytes]) -> tuple[int, str, str] | None:
        if self.loopback:
            host = _hostname(headers.get("host", b"").decode("latin-1"))
            if host not in self.hosts:
                return 403, "Host header is not allowed on a loopback hub (DNS rebinding)", "Host"
            origin = headers.get("origin")
            if origin is not None and not _is_loopback_origin(origin.decode("latin-1")):
                return 403, "Origin is not a loopback origin", "Origin"
        if self.expected is None or path == "/healthz":
            return None
        if not hmac.compare_digest(_bearer(headers.get("authorization", b"")), self.expected):
            return 401, "missing or wrong bearer token (Authorization: Bearer <token>)", "token"
        return None


def _bearer(header: bytes) -> bytes:
    """The credentials of `Authorization: Bearer <token>`; the scheme is case-insensitive
    (RFC 9110 §11.1), so `bearer` and `BEARER` work. Anything else gives b""."""
    scheme, _, credentials = header.strip().partition(b" ")
    return credentials.strip() if scheme.lower() == b"bearer" else b""


def _hostname(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_loopback_origin(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and is_loopback_host(parts.hostname or "")


async def _buffered(receive: Receive, limit: int) -> Receive | None:
    """Read a body without Content-Length up to `limit`; None when it is larger."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
