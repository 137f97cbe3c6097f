"""The hub's /mcp endpoint: streamable HTTP on the SDK's session manager, behind the hub's guard.

It lists the coordination tools (`toolsets.DEFAULT`, with presence); a client that wants others
says so in its URL, `/mcp?tools=all` (or a comma list), on every request of its session.
"""

from __future__ import annotations

import contextlib
import json
import logging
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from mcp.server.transport_security import TransportSecuritySettings

from mempalace_logstream import errors
from mempalace_logstream.mcp_server import toolsets
from mempalace_logstream.mcp_server.server import (
    GONE_SCOPE_KEY,
    TOOLS_SCOPE_KEY,
    LogstreamMCP,
    build_server,
)
from mempalace_logstream.presence import Registry
from mempalace_logstream.store import LogStore

_log = logging.getLogger("mempalace_logstream.mcp_server")

_NO_SDK_LIMIT = 1 << 62  # bytes; the SDK wants a positive number
SESSION_IDLE_S = 6 * 3600.0
MAX_SESSIONS = 1000


class _Endpoint:
    """ASGI endpoint (a class, so Starlette routes it as an app) for streamable HTTP."""

    def __init__(self, server: LogstreamMCP) -> None:
        # Builds the session manager; its app is not mounted (the hub routes here instead).
        server.protocol.streamable_http_app(
            # The hub's guard checks Host/Origin and the token.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            # The hub's guard owns the body limit (--max-request-bytes); 2.x would add 4 MiB,
            # too small for a 4 MiB artifact in its JSON envelope.
            max_request_body_size=_NO_SDK_LIMIT,
            # Bounded memory against clients that never say goodbye (S-8.10): a session idle
            # for 6 h is reaped (a spec-following client re-initializes on its 404), and at
            # most 1,000 live at once. 2.x's 30 min would end an agent's session over lunch.
            session_idle_timeout=SESSION_IDLE_S,
            max_sessions=MAX_SESSIONS,
        )
        self.manager = server.protocol.session_manager
        self._calls = 0  # POSTs in flight (a tool call's answer streams back on its POST)
        self._idle: anyio.Event | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Bad JSON, nested past any depth included, is the SDK's JSON-RPC parse error (400).
        try:
            _choose_tools(scope)
        except errors.ValidationError as exc:
            await _refuse(send, exc)
            return
        exchange = _Exchange(scope, receive, send)
        if scope.get("method") != "POST":  # a GET stream never ends by itself
            await self.manager.handle_request(scope, exchange.receive, exchange.send)
            return
        self._calls += 1
        try:
            await self.manager.handle_request(scope, exchange.receive, exchange.send)
        finally:
            self._calls -= 1
            if self._calls == 0 and self._idle is not None:
                self._idle.set()

    async def drain(self) -> None:
        """Returns once no POST is in flight: every answer (those of the waits a stopping hub
        answered included) was sent. The hub bounds how long it waits for this."""
        while self._calls:
            self._idle = anyio.Event()
            await self._idle.wait()


def _choose_tools(scope: Any) -> None:
    """The tools this request lists and may call, from `?tools=` (none given: the server's)."""
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if "tools" in query:
        scope[TOOLS_SCOPE_KEY] = toolsets.resolve(",".join(query["tools"]), option="tools")


async def _refuse(send: Any, exc: errors.ValidationError) -> None:
    """A 400 with the hub's error body, {error, field}."""
    body = json.dumps({"error": exc.message, "field": exc.field}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Exchange:
    """One request at /mcp; a client that leaves before its answer is complete (gives up on a
    call, closes its GET stream, exits) is normal: one debug line, whatever the SDK does.

    The request's scope carries an event (`GONE_SCOPE_KEY`) set when its client disconnects:
    a tool call of that request (an `event_wait`) is cancelled then, since its answer can no
    longer be delivered (no event store: the SDK cannot resume a request's stream)."""

    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.what = f"{scope.get('method')} {scope.get('path')}"
        self._receive, self._send = receive, send
        self.answered = self.gone = False
        self.left = anyio.Event()
        scope[GONE_SCOPE_KEY] = self.left

    async def receive(self) -> Any:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.left.set()
            if not (self.answered or self.gone):
                self.gone = True
                _log.debug("MCP client went away (%s, before its answer was complete)", self.what)
        return message

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True
        await self._send(message)


def http_endpoint(
    store: LogStore, *, read_only: bool = False, presence: Registry | None = None
) -> tuple[Any, Callable[[], AbstractAsyncContextManager[Any]]]:
    """(ASGI app, lifespan) for streamable HTTP; the hub mounts it at /mcp. The app's
    `drain()` returns once no call is in flight (the hub awaits it when it stops).

    The hub's own guard checks Host/Origin, the token and the body size, so the SDK's checks
    are off here.
    """
    quiet_disconnects()
    server = build_server(store, read_only=read_only, presence=presence)
    endpoint = _Endpoint(server)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with endpoint.manager.run(), anyio.create_task_group() as tg:
            tg.start_soon(server.subscriptions.run)
            yield
            tg.cancel_scope.cancel()

    return endpoint, lifespan


# SDK 1.x logged a client that closed its session or its GET stream as an error with a full
# traceback (about 45 lines per disconnect). 2.x catches those itself, but its transport still
# logs any other exception in its stream tasks with a traceback ("Error in SSE writer", "SSE
# response error", "Error in message router", "Session ... crashed"): a safety net for when
# one of these is a client that went away.
_DISCONNECTS = ("ClosedResourceError", "BrokenResourceError", "EndOfStream", "ClientDisconnect")
_SDK_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")


class _QuietDisconnects(logging.Filter):
    """Turns the SDK's tracebacks for a client that went away into one debug line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _is_disconnect(exc):
            return True
        _log.debug("MCP client went away (%s: %s)", record.getMessage(), type(exc).__name__)
        return False


def _is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e) for e in exc.exceptions)
    return type(exc).__name__ in _DISCONNECTS


def quiet_disconnects() -> None:
    """Install the filter on the SDK's HTTP transport loggers (once per process)."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietDisconnects) for f in logger.filters):
            logger.addFilter(_QuietDisconnects())
