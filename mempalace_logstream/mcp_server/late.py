"""The hub's /mcp endpoint, built once the hub serves: the SDK is imported in a worker thread.

Importing the `mcp` SDK and building the server is a third of `logstream serve`'s start (its
pydantic models, about 550 modules), and the rest of the hub needs none of it. So the hub starts
serving at once and builds the endpoint (`endpoint.http_endpoint`) in a worker thread right
after; a request at /mcp that comes first waits for it (its client sees a slower first answer,
never an error). A build that fails answers every /mcp request 500 with what failed, and the
rest of the hub goes on serving. Nothing here imports the SDK.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.to_thread

from mempalace_logstream.presence import Registry
from mempalace_logstream.store import LogStore

_log = logging.getLogger("mempalace_logstream.mcp_server")

Built = tuple[Any, Callable[[], AbstractAsyncContextManager[Any]]]


class LateEndpoint:
    """ASGI app for /mcp that forwards to the endpoint `build()` returns, once built; `lifespan`
    builds it (in a worker thread) and runs its lifespan until the hub stops."""

    def __init__(self, build: Callable[[], Built]) -> None:
        self._build = build
        self.inner: Any = None  # the built endpoint (`endpoint._Endpoint`)
        self.failure: BaseException | None = None
        self._ready: anyio.Event | None = None
        self._stop: anyio.Event | None = None

    def _events(self) -> tuple[anyio.Event, anyio.Event]:
        if self._ready is None or self._stop is None:  # made in the event loop, on first use
            self._ready, self._stop = anyio.Event(), anyio.Event()
        return self._ready, self._stop

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        _ready, stop = self._events()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._serve)
            try:
                yield
            finally:
                stop.set()  # the built endpoint's lifespan ends (its sessions closed)

    async def _serve(self) -> None:
        ready, stop = self._events()
        try:
            app, lifespan = await anyio.to_thread.run_sync(self._build)
            async with lifespan():
                self.inner = app
                ready.set()
                await stop.wait()
        except Exception as exc:  # an SDK that cannot load or start: /mcp says so, the hub
            # serves on (raised here, it would end the task group the hub's lifespan runs in)
            what = "could not start" if self.inner is None else "failed"
            if self.inner is None:
                self.failure = exc
            _log.error("the MCP endpoint %s: %s: %s", what, type(exc).__name__, exc)
        finally:
            ready.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        ready, _stop = self._events()
        await ready.wait()
        if self.inner is None:
            await _unavailable(send, self.failure)
            return
        await self.inner(scope, receive, send)

    @property
    def state(self) -> str:
        """`starting` until built, then `ready`, or `failed` (what `/healthz` says of /mcp)."""
        if self.inner is not None:
            return "ready"
        return "failed" if self.failure is not None else "starting"

    async def drain(self) -> None:
        """Returns once no call is in flight at the built endpoint (at once if none was built)."""
        if self.inner is not None:
            await self.inner.drain()


async def _unavailable(send: Any, failure: BaseException | None) -> None:
    why = f"{type(failure).__name__}: {failure}" if failure is not None else "the hub stopped"
    body = json.dumps({"error": f"the MCP endpoint could not start ({why})", "field": None})
    data = body.encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def late_http_endpoint(
    store: LogStore, *, read_only: bool = False, presence: Registry | None = None
) -> tuple[LateEndpoint, Callable[[], AbstractAsyncContextManager[Any]]]:
    """(ASGI app, lifespan) as `endpoint.http_endpoint` gives them, with the SDK imported and
    the server built in a worker thread once the lifespan starts. The app's `drain()` is the
    built endpoint's."""

    def build() -> Built:
        from mempalace_logstream.mcp_server.endpoint import http_endpoint

        return http_endpoint(store, read_only=read_only, presence=presence)

    app = LateEndpoint(build)
    return app, app.lifespan
