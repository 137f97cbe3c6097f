"""The HTTP hub: `create_app(store, settings)` for FastAPI, the SSE feed and the request guard.

JSON routes under `/v1/` for every operation (S-6.3), `/healthz`, SSE at `/logstream/stream` and
`/v1/stream`, and optional extra ASGI mounts (the MCP endpoint, built by cli.py). The only
fastapi/sse_starlette importer; must not import typer or mcp.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import os
import re
import socket
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field, create_model
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempalace_logstream import aio, errors, operations, sync, sync_routes
from mempalace_logstream import validation as v
from mempalace_logstream.store import LogStore

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
STATUS: dict[type[errors.LogstreamError], int] = {
    errors.ValidationError: 422,
    errors.NotFoundError: 404,
    errors.ConflictError: 409,
    errors.StorageError: 503,
    errors.IntegrityError: 500,
    errors.SyncError: 502,
}


@dataclass(frozen=True, kw_only=True)
class HubSettings:
    """How the hub listens and guards itself (S-6.4). The token is never printed or logged."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    sse_max_clients: int = 256
    ping_interval_s: float = 15.0
    retry_ms: int = 3000
    resume_wait_s: float = 10.0
    max_request_bytes: int = 16 * 1024 * 1024
    allowed_hosts: tuple[str, ...] = ()
    # Where `peers.json` lives (the background sync loop and the `/sync/peers` estate).
    palace: str | None = None

    def __post_init__(self) -> None:
        check_token(self.token)

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


@dataclass(frozen=True)
class ExtraMount:
    """An ASGI app served at one exact path, with an optional lifespan (the MCP endpoint)."""

    path: str
    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None


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


# --------------------------------------------------------------------------- request guard


class HubGuard:
    """Raw ASGI guard (streaming-safe): Host/Origin pinning on loopback, bearer token, size."""

    def __init__(self, app: ASGIApp, settings: HubSettings) -> None:
        self.app = app
        self.settings = settings
        names = set(LOOPBACK_NAMES) | {settings.host.strip("[]").lower()}
        self.hosts = names | {h.strip("[]").lower() for h in settings.allowed_hosts}
        self.expected = settings.token.encode() if settings.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): val for k, val in scope["headers"]}
        refusal = self._refusal(scope["path"], headers)
        if refusal is not None:
            await _send_error(send, *refusal)
            return
        length = headers.get("content-length")
        limit = self.settings.max_request_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            await _send_error(send, 413, f"request body is {int(length)} bytes; the limit "
                              f"is {limit} bytes", "body")  # fmt: skip
            return
        if length is None and scope["method"] in ("POST", "PUT", "PATCH"):
            receive = await _buffered(receive, limit)
            if receive is None:
                await _send_error(send, 413, f"request body exceeds {limit} bytes", "body")
                return
        await self.app(scope, receive, send)

    def _refusal(self, path: str, headers: Mapping[str, bytes]) -> tuple[int, str, str] | None:
        if self.settings.is_loopback:
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


async def _send_error(
    send: Send, status: int, message: str, field: str | None, headers: dict[str, str] | None = None
) -> None:
    payload = json.dumps({"error": message, "field": field}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        raw.append((b"www-authenticate", b"Bearer"))
    raw += [(k.encode(), val.encode()) for k, val in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


# --------------------------------------------------------------------------- error model


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


def status_of(exc: errors.LogstreamError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.LogstreamError)
    return error_response(status_of(exc), exc.message, getattr(exc, "field", None))


async def _request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    op = request.url.path.rsplit("/", 1)[-1]
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        name = loc[0] if loc else None
        kind = err.get("type")
        if kind == "extra_forbidden" and name:
            return error_response(422, f"{name} is not a parameter of {op}", name)
        if kind == "missing" and name:
            return error_response(422, f"{name} is required", name)
        if kind == "json_invalid":
            return error_response(422, "request body is not valid JSON", "body")
        if name is None:
            return error_response(422, "request body must be a JSON object", "body")
        return error_response(422, f"{name}: {err.get('msg')}", name)
    return error_response(422, "invalid request", None)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (unknown path, wrong method) in the same error shape."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # FastAPI could not decode the body (not UTF-8, too deep)
        return error_response(
            422,
            "request body is not JSON this hub can read (not UTF-8, or nested too deeply)",
            "body",
        )
    return error_response(exc.status_code, str(exc.detail), None, dict(exc.headers or {}))


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"},
                                         "field": {"type": ["string", "null"]}},
        "required": ["error"]}}}}
    for code, text in (
        (400, "Bad stream or sync parameters"), (401, "Missing or wrong bearer token"),
        (403, "Host or Origin refused"),
        (404, "No such event, artifact or cursor"), (409, "Conflict (idempotency key)"),
        (413, "Request too large"), (422, "Invalid input; names the field"),
        (502, "Sync failed"), (503, "Storage failed or SSE client cap reached"),
    )
}  # fmt: skip


# --------------------------------------------------------------------------- request models

_STR = {"type": "string"}
_FILTER = {"anyOf": [_STR, {"type": "array", "items": _STR}]}
PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    **{name: _FILTER for name in v.FILTER_FIELDS},
    "limit": {"type": "integer", "minimum": 1, "maximum": v.MAX_LIST_LIMIT},
    "timeout_ms": {"type": "integer", "minimum": 0, "maximum": v.MAX_WAIT_MS},
    "preview": {"type": "boolean"},
    "slim": {"type": "boolean"},
    "order": {"type": "string", "enum": list(v.ORDERS)},
    "metadata": {"anyOf": [{"type": "object"}, _STR]},
    "artifact_ids": {"type": "array", "items": _STR},
    "encoding": {"type": "string", "enum": list(v.ENCODINGS)},
}


def request_model(op: str, params: dict[str, bool]) -> type[Any]:
    """A permissive pydantic model: the schema documents types, the core validates values."""
    fields: dict[str, Any] = {}
    for name, required in params.items():
        schema = PARAM_SCHEMAS.get(name, _STR)
        annotated = Annotated[Any, Field(json_schema_extra=schema)]
        fields[name] = (annotated, ...) if required else (annotated, None)
    name = "".join(part.title() for part in op.split("_")) + "Request"
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


# --------------------------------------------------------------------------- app


def create_app(
    store: LogStore,
    settings: HubSettings | None = None,
    mounts: tuple[ExtraMount, ...] = (),
    sync_loop: sync.SyncLoop | None = None,
) -> FastAPI:
    """The hub app. Store calls run in worker threads; waits and SSE sleep on the notifier.

    `sync_loop`, when given, runs its background rounds for the app's lifetime and is the
    source of the `/sync/peers` estate.
    """
    settings = settings or HubSettings()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for m in mounts:
                if m.lifespan is not None:
                    await stack.enter_async_context(m.lifespan())
            if sync_loop is not None:
                sync_loop.start()
                stack.push_async_callback(anyio.to_thread.run_sync, sync_loop.stop)
            yield

    app = FastAPI(
        title="mempalace-logstream hub",
        version=version(),
        lifespan=lifespan,
        responses=ERROR_RESPONSES,
        docs_url=None,  # served below from the package's own Swagger UI files, not a CDN
        redoc_url=None,
    )
    app.state.store = store
    app.state.settings = settings
    app.state.sse_clients = 0
    app.state.feed = aio.Feed(store)
    app.add_exception_handler(errors.LogstreamError, _domain_error)
    app.add_exception_handler(RequestValidationError, _request_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(HubGuard, settings=settings)

    @app.get("/healthz", tags=["hub"])
    async def healthz() -> dict[str, Any]:
        """Liveness; needs no token."""
        return {"ok": True, "replica_id": store.replica_id}

    _add_pages(app, store)
    _add_op_routes(app, store)
    _add_get_aliases(app, store)
    _add_sse_routes(app, store, settings)
    app.include_router(sync_routes.router(store, settings, sync_loop))
    for m in mounts:
        app.router.routes.append(Route(m.path, endpoint=m.app))
    return app


def version() -> str:
    import mempalace_logstream

    return mempalace_logstream.__version__


# --------------------------------------------------------------------------- pages

DOCS_ASSETS = "/docs-assets"


def _add_pages(app: FastAPI, store: LogStore) -> None:
    """`/`: what this hub is; `/docs`: Swagger UI from the package (works with no internet)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from starlette.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    @app.get("/", include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(home_page(store))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="mempalace-logstream hub: API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")


def home_page(store: LogStore) -> str:
    """A small page naming the hub, until the dashboard takes this path."""
    rows = (
        ("version", f"mempalace-logstream {version()}"),
        ("database", store.engine.url.render_as_string(hide_password=True)),
        ("replica", store.replica_id),
    )
    links = (
        ("/docs", "API documentation (OpenAPI)"),
        ("/v1/stream?since_event_id=tip", "live event stream (SSE)"),
        ("/v1/events?limit=20", "the newest events (JSON)"),
        ("/v1/stats", "counts and sizes (JSON)"),
        ("/mcp", "MCP endpoint (streamable HTTP, for agents' MCP clients)"),
        ("/healthz", "health check"),
    )
    facts = "".join(f"<tr><th>{k}</th><td><code>{html.escape(val)}</code></td></tr>"
                    for k, val in rows)  # fmt: skip
    items = "".join(f'<li><a href="{href}">{html.escape(href)}</a>: {text}</li>'
                    for href, text in links)  # fmt: skip
    return _HOME.format(facts=facts, items=items)


_HOME = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mempalace-logstream hub</title>
<style>
:root {{ color-scheme: light dark; font-family: system-ui, sans-serif; }}
body {{ max-width: 48rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }}
th {{ text-align: left; padding-right: 1rem; vertical-align: top; }}
code {{ overflow-wrap: anywhere; }}
</style></head>
<body>
<h1>mempalace-logstream hub</h1>
<p>A local-first coordination log for AI agents. This hub serves it over HTTP, SSE and MCP.</p>
<table>{facts}</table>
<h2>Endpoints</h2>
<ul>{items}</ul>
</body></html>
"""


def _add_op_routes(app: FastAPI, store: LogStore) -> None:
    for op, params in operations.params().items():
        model = request_model(op, params)
        app.post(
            f"/v1/{op}",
            name=op,
            tags=["mutating" if op in operations.MUTATING else "read"],
            summary=(operations.OPERATIONS[op].__doc__ or op.replace("_", " ")).strip(),
        )(_op_endpoint(store, op, model))


def _op_endpoint(store: LogStore, op: str, model: type[Any]) -> Any:
    async def endpoint(body: model = None) -> dict[str, Any]:  # type: ignore[valid-type]
        args = body.model_dump(exclude_unset=True) if body is not None else {}
        return await aio.call(store, op, args)

    endpoint.__name__ = f"post_{op}"
    # The model is built at runtime; give FastAPI the class itself, not the postponed string.
    endpoint.__annotations__["body"] = model
    return endpoint


def _query_args(request: Request, allowed: tuple[str, ...], multi: tuple[str, ...]) -> dict:
    """Query parameters as core arguments: repeatable filters become lists; unknown names fail."""
    args: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            raise errors.ValidationError(f"{name} is not a parameter of this endpoint", field=name)
        if not value.strip():
            # `to_agent=` is a mistake, never "no filter": it would stream everyone's mail.
            raise errors.ValidationError(
                f"{name} is empty; give a value or leave the parameter out", field=name
            )
        if name in multi:
            args.setdefault(name, []).append(value)
        elif name in args:
            raise errors.ValidationError(f"{name} may be given only once", field=name)
        else:
            args[name] = value
    return args


def _query_docs(names: tuple[str, ...]) -> dict[str, Any]:
    params = []
    for name in names:
        if name in v.FILTER_FIELDS:
            schema: dict[str, Any] = {"type": "array", "items": _STR}
        else:
            schema = PARAM_SCHEMAS.get(name, _STR)
        params.append({"name": name, "in": "query", "required": False, "schema": schema,
                       "style": "form", "explode": True})  # fmt: skip
    return {"parameters": params}


def _add_get_aliases(app: FastAPI, store: LogStore) -> None:
    reads = operations.READ_PARAMS

    @app.get("/v1/events", tags=["read"], openapi_extra=_query_docs(reads))
    async def list_events(request: Request) -> dict[str, Any]:
        """event_list with query parameters (repeat a filter for OR)."""
        args = _query_args(request, reads, v.FILTER_FIELDS)
        return await aio.call(store, "event_list", args)

    @app.get("/v1/events/{event_id}", tags=["read"])
    async def get_event(event_id: str) -> dict[str, Any]:
        """event_get."""
        return await aio.call(store, "event_get", {"event_id": event_id})

    @app.get("/v1/artifacts/{artifact_id}", tags=["read"])
    async def get_artifact(artifact_id: str) -> dict[str, Any]:
        """artifact_get: the exact content (base64 when binary) and its sha256."""
        return await aio.call(store, "artifact_get", {"artifact_id": artifact_id})

    @app.get("/v1/version_vector", tags=["read"])
    async def get_version_vector() -> dict[str, Any]:
        """This replica's id and version vector."""
        return await aio.call(store, "version_vector", {})

    @app.get("/v1/stats", tags=["read"])
    async def get_stats() -> dict[str, Any]:
        """Counts, sizes and the version vector."""
        return await aio.call(store, "stats", {})


# --------------------------------------------------------------------------- SSE

SSE_PARAMS = (*v.FILTER_FIELDS, "from_agent", "since_event_id", "preview", "slim")


class _SlotResponse(EventSourceResponse):
    """Releases its client slot however the stream ends (even before the body starts)."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _add_sse_routes(app: FastAPI, store: LogStore, settings: HubSettings) -> None:
    async def stream(request: Request) -> Any:
        """Live feed (S-6.3): `id:` event id, `event: logstream`, `data:` event JSON.

        Resumes after `Last-Event-ID` (a reconnecting EventSource) or else `since_event_id`;
        without either, tails from now. Errors answer 400 before the stream opens; at the
        client cap, 503 + Retry-After.
        """
        # The slot is taken before the first await: clients connecting at once cannot all
        # pass the check while each waits for its first read.
        if app.state.sse_clients >= settings.sse_max_clients:
            return error_response(
                503,
                f"the hub serves at most {settings.sse_max_clients} SSE clients; retry later "
                "or long-poll event_wait",
                None,
                {"Retry-After": "5"},
            )
        app.state.sse_clients += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                app.state.sse_clients -= 1

        try:
            req, first = await _open_stream(request, store, settings)
        except errors.LogstreamError as exc:
            release()
            return error_response(400, exc.message, getattr(exc, "field", None))
        except BaseException:
            release()
            raise
        frames = _frames(store, app.state.feed, req, first, settings)
        return _SlotResponse(
            frames,
            release=release,
            ping=settings.ping_interval_s,
            ping_message_factory=lambda: ServerSentEvent(comment="ping", sep="\n"),
            sep="\n",
            headers={"Cache-Control": "no-cache"},
        )

    docs = {**_query_docs(SSE_PARAMS), "responses": {"200": {
        "description": "text/event-stream", "content": {"text/event-stream": {}}}}}  # fmt: skip
    for path in ("/logstream/stream", "/v1/stream"):
        app.get(path, tags=["stream"], openapi_extra=docs, include_in_schema=path == "/v1/stream")(
            stream
        )


# Our ids and the reference's: a Last-Event-ID of this shape may be an event that has not
# synced to this hub yet, so the stream waits for it (bounded, S-5.2); any other unknown value
# can never arrive and is refused at once.
_EVENT_ID_SHAPE = re.compile(r"^evt_\d{8}T\d{6}_[0-9a-f]{12,}$")


def _last_event_id(request: Request) -> str | None:
    """The Last-Event-ID header, validated; None when absent or empty."""
    raw = request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return None
    return v.remote_id("Last-Event-ID", raw.strip())


async def _open_stream(request: Request, store: LogStore, settings: HubSettings) -> tuple:
    """Validate and run the first read before any header is sent (never a half-open stream).

    `Last-Event-ID` wins over `since_event_id`: a browser EventSource reconnects to the URL it
    was opened with (often `since_event_id=tip`) and says where it stopped in the header.
    """
    args = _query_args(request, SSE_PARAMS, v.FILTER_FIELDS)
    header = _last_event_id(request)
    if header is not None:
        args["since_event_id"] = header
    elif not args.get("since_event_id"):
        args["since_event_id"] = "tip"
    req = store.read_request(**args)
    catch_up = req.replace(limit=aio.FEED_BATCH, order="asc")
    try:
        first = await aio.run(store.read, catch_up)
    except errors.NotFoundError:
        if header is None:
            raise
        waited = _EVENT_ID_SHAPE.match(header) is not None
        if not waited or not await aio.wait_for_event(store, header, settings.resume_wait_s):
            after = f" (waited {settings.resume_wait_s:g} s for it to sync in)" if waited else ""
            raise errors.NotFoundError(
                f"Last-Event-ID {header!r} is not an event of this hub{after}; reconnect "
                "without it to tail from now",
                field="Last-Event-ID",
                ident=header,
            ) from None
        first = await aio.run(store.read, catch_up)
    return req, first


async def _frames(
    store: LogStore, feed: aio.Feed, req: Any, first: Any, settings: HubSettings
) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(comment="connected", retry=settings.retry_ms, sep="\n")
    for event in first.events:
        yield _frame(event, req)
    async for batch in aio.follow(store, feed, req, first.scanned_seq):
        for event in batch:
            yield _frame(event, req)


def _frame(event: Any, req: Any) -> ServerSentEvent:
    data = _frame_data(event, req.preview, req.slim)
    return ServerSentEvent(data=data, id=event.id, event="logstream", sep="\n")


# An event's `data:` JSON per (preview, slim), built once for all the subscribers one commit
# wakes: they share the Feed page's Event objects. Weak keys: an entry lives only while some
# subscriber still holds the event, so memory stays bounded by the pages in flight.
_FRAME_DATA: weakref.WeakKeyDictionary[Any, dict[tuple[bool, bool], str]] = (
    weakref.WeakKeyDictionary()
)


def _frame_data(event: Any, preview: bool, slim: bool) -> str:
    built = _FRAME_DATA.get(event)
    if built is None:
        built = _FRAME_DATA[event] = {}
    data = built.get((preview, slim))
    if data is None:
        data = built[(preview, slim)] = json.dumps(
            event.to_dict(preview=preview, slim=slim), ensure_ascii=False, separators=(",", ":")
        )
    return data


def settings_from_env(environ: Mapping[str, str] | None = None, **overrides: Any) -> HubSettings:
    """Hub settings from `MEMPALACE_LOGSTREAM_*` / `LOGSTREAM_TOKEN`, then explicit overrides."""
    env = os.environ if environ is None else environ
    p = "MEMPALACE_LOGSTREAM_"
    base: dict[str, Any] = {}
    if env.get("LOGSTREAM_TOKEN"):
        base["token"] = env["LOGSTREAM_TOKEN"]
    if env.get(p + "SSE_MAX_CLIENTS"):
        base["sse_max_clients"] = v.strict_int(p + "SSE_MAX_CLIENTS", env[p + "SSE_MAX_CLIENTS"])
    if env.get(p + "ALLOWED_HOSTS"):
        base["allowed_hosts"] = tuple(h for h in env[p + "ALLOWED_HOSTS"].split(",") if h)
    base.update({k: val for k, val in overrides.items() if val is not None})
    return HubSettings(**base)
