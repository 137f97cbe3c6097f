"""The hub app: `create_app(store, settings)` wires the guard, the error handler table and the
routes (operations, pages, SSE, sync) onto one FastAPI app, plus optional extra ASGI mounts
(the MCP endpoint, built by the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from mempalace_logstream import aio, deliveries, doctor, errors, shared_presence, sync, waits
from mempalace_logstream.http import (
    dashboard_routes,
    ops,
    pages,
    presence_routes,
    sse,
    sync_routes,
)
from mempalace_logstream.http.guard import HubGuard
from mempalace_logstream.http.responses import (
    ERROR_RESPONSES,
    domain_error_response,
    error_response,
)
from mempalace_logstream.http.settings import ExtraMount, HubSettings, version
from mempalace_logstream.presence import Registry
from mempalace_logstream.reminders import ReminderLoop
from mempalace_logstream.store import LogStore


def create_app(
    store: LogStore,
    settings: HubSettings | None = None,
    mounts: tuple[ExtraMount, ...] = (),
    sync_loop: sync.SyncLoop | None = None,
    presence: Registry | None = None,
    reminders: ReminderLoop | None = None,
) -> FastAPI:
    """The hub app. Store calls run in worker threads; waits and SSE sleep on the notifier.

    `sync_loop`, when given, runs its background rounds for the app's lifetime and is the
    source of the `/sync/peers` estate. `presence` is the hub's presence table (shared with
    its MCP endpoint); when not given, `shared_presence.registry_for(store)` (shared by every
    hub on a PostgreSQL log, in memory on SQLite). `reminders`, when given, runs the reminders
    for unclaimed tasks for the app's lifetime (issue 20).
    """
    settings = settings or HubSettings()
    presence = presence or shared_presence.registry_for(store)
    app = FastAPI(
        title="mempalace-logstream hub",
        version=version(),
        lifespan=_lifespan(mounts, (sync_loop, reminders), presence),
        responses=ERROR_RESPONSES,
        docs_url=None,  # served by pages.py from the package's own Swagger UI files, not a CDN
        redoc_url=None,
        **fastapi_options(),
    )
    app.state.store = store
    app.state.settings = settings
    # The delivery ledger (issue 20): reads, pushes and acks through this hub are recorded.
    deliveries.enable(store, registry=presence, window_s=settings.wakeable_window_s)
    app.state.feed = aio.Feed(store)
    # The cap of blocked event_waits is the store's: the MCP endpoint at /mcp shares it.
    waits.of(store).max_waits = settings.wait_max_clients
    waits.of(store).resume()  # a hub started again on the same store serves waits again
    app.state.stopping = False  # set by `stop_serving`: SSE streams end, waits answer 503
    app.state.mounts = mounts
    app.state.integrity = None  # the integrity check run at startup (`/healthz` shows it)
    app.state.sync_loop = sync_loop  # `/healthz` says whether this hub leads its rounds
    for exc_class, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(exc_class, handler)
    app.get("/healthz", tags=["hub"])(healthz)
    pages.add_pages(app)
    dashboard_routes.add_dashboard(app)  # also its sessions, which the guard checks
    app.add_middleware(
        HubGuard,
        settings=settings,
        store=store,
        sessions=app.state.sessions,
        posts=ops.PlainPosts(store),
    )
    ops.add_op_routes(app)
    ops.add_get_aliases(app)
    presence_routes.add_presence_routes(app, presence)
    sse.add_sse_routes(app)
    sync_routes.install(app, store, settings, sync_loop)
    for m in mounts:
        app.router.routes.append(Route(m.path, endpoint=m.app))
    return app


# FastAPI's native OpenTelemetry (FastAPI >= 0.142) is off unless the environment asks for
# OpenTelemetry: while it is on, every request asks the three global providers whether one was
# set since (~10 µs of a hub's CPU per request, issue 25), for telemetry nobody configured.
TELEMETRY_OFF = {"tracing": False, "metrics": False, "logs": False}


def fastapi_options(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """`FastAPI(...)`'s telemetry option: `TELEMETRY_OFF`, unless a variable of the
    environment starts with `OTEL_` or `FASTAPI_OTEL_` (an exporter, `opentelemetry-instrument`,
    FastAPI's own auto-configuration) or this FastAPI has no native telemetry: then nothing
    (FastAPI's defaults)."""
    if any(name.startswith(("OTEL_", "FASTAPI_OTEL_")) for name in environ):
        return {}
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": TELEMETRY_OFF}


def _lifespan(
    mounts: tuple[ExtraMount, ...],
    loops: tuple[sync.SyncLoop | ReminderLoop | None, ...],
    presence: Registry,
) -> Any:
    """The mounts' lifespans, the background loops (sync rounds, reminders) and the presence
    sweeper (expiries reach SSE subscribers without anyone listing), for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            # Last out: the ledger's queued marks are written before the store closes.
            stack.push_async_callback(anyio.to_thread.run_sync, _close_ledger, _app)
            # A shared presence table is read, and followed, before the hub serves.
            await anyio.to_thread.run_sync(shared_presence.start, presence)
            stack.push_async_callback(anyio.to_thread.run_sync, shared_presence.stop, presence)
            sweeper = asyncio.ensure_future(aio.sweep_presence(presence))
            stack.push_async_callback(_cancel, sweeper)
            # The database's own integrity check, once per start, in the background (about a
            # minute on a 1 GB file): `/healthz` is not green once it failed.
            _start_integrity_check(_app)
            for m in mounts:
                if m.lifespan is not None:
                    await stack.enter_async_context(m.lifespan())
            for loop in loops:
                if loop is not None:
                    loop.start()
                    stack.push_async_callback(_stop_in_thread, loop)
            yield

    return lifespan


@dataclass(frozen=True)
class Stopped:
    """What `stop_serving` ended: the blocked waits it answered and the SSE streams open."""

    waits: int
    streams: int


def stop_serving(app: FastAPI) -> Stopped:
    """The hub stops (before its server closes connections): every blocked `event_wait`, over
    HTTP or at /mcp, answers 503 `{"error": "hub is stopping", "field": null}` with
    Retry-After (an error result over MCP), and so does any wait begun from now on; every SSE
    stream ends with a clean end of stream. Idempotent; call it on the app's event loop."""
    store: LogStore = app.state.store
    answered = waits.of(store).stop()
    app.state.stopping = True
    store.notifier.bump()  # wake every SSE follower: it sees `stopping` and ends
    return Stopped(waits=answered, streams=app.state.sse_clients)


async def drain_mounts(app: FastAPI, timeout_s: float) -> None:
    """Until every mount with a `drain` (the MCP endpoint: its calls in flight) has sent its
    answers, at most `timeout_s` seconds in all."""
    drains = [m.drain for m in app.state.mounts if m.drain is not None]
    if drains:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                for drain in drains:
                    await drain()


def _close_ledger(app: FastAPI) -> None:
    deliveries.disable(app.state.store)


async def _cancel(task: asyncio.Future[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _start_integrity_check(app: FastAPI) -> None:
    def work() -> None:
        app.state.integrity = doctor.integrity_only(app.state.store)

    app.state.integrity_thread = threading.Thread(
        target=work, name="logstream-integrity", daemon=True
    )
    app.state.integrity_thread.start()


async def _stop_in_thread(loop: sync.SyncLoop | ReminderLoop) -> None:
    await anyio.to_thread.run_sync(loop.stop)


async def healthz(request: Request) -> Any:
    """Liveness and the startup integrity check; needs no token. 503 when the check failed."""
    store: LogStore = request.app.state.store
    report: doctor.Report | None = request.app.state.integrity
    if report is not None and not report.healthy:
        problems = report.checks["integrity"]["problems"]
        body = {"ok": False, "replica_id": store.replica_id, "integrity": problems}
        return JSONResponse(body, status_code=503)
    thread = getattr(request.app.state, "integrity_thread", None)
    checked = "ok" if report is not None else "checking" if thread else "unchecked"
    loop: sync.SyncLoop | None = request.app.state.sync_loop
    leads = loop is not None and loop.enabled and loop.leading
    body = {"ok": True, "replica_id": store.replica_id, "integrity": checked, "sync_leader": leads}
    # A mount built once the hub serves (/mcp: `mcp_server/late.py`) says how far it got.
    for m in request.app.state.mounts:
        state = getattr(m.app, "state", None)
        if isinstance(state, str):
            body[m.path.strip("/")] = state
    return body


# --------------------------------------------------------------------------- error handlers


async def domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.LogstreamError)
    return domain_error_response(exc)


async def request_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's body validation errors, named the way the core names its own."""
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


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (unknown path, wrong method) in the same error shape."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # FastAPI could not decode the body (not UTF-8, too deep)
        return error_response(
            422,
            "request body is not JSON this hub can read (not UTF-8, or nested too deeply)",
            "body",
        )
    return error_response(exc.status_code, str(exc.detail), None, dict(exc.headers or {}))


# Each surface maps domain errors exactly once, at its edge (STYLE §3).
EXCEPTION_HANDLERS: dict[type[Exception], Any] = {
    errors.LogstreamError: domain_error,
    RequestValidationError: request_error,
    StarletteHTTPException: http_error,
}
