"""The operation routes: `POST /v1/<op>` for every core operation (S-6.3), and the GET aliases
(`/v1/events`, `/v1/events/{id}`, `/v1/artifacts/{id}`, `/v1/tasks/{id}`, `/v1/version_vector`,
`/v1/stats`).

Every handler is a translation: arguments in, `aio.call` (a worker thread, or the notifier for
`event_wait`), plain data out. Domain errors become responses in the app's handler table.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from mempalace_logstream import aio, deliveries, operations, waits
from mempalace_logstream import validation as v
from mempalace_logstream.http.params import query_args, query_docs, request_model
from mempalace_logstream.store import LogStore

Endpoint = Callable[..., Awaitable[dict[str, Any]]]
Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# What FastAPI answers for an endpoint returning `dict[str, Any]`: pydantic's JSON of the dict.
_RESULT_JSON = TypeAdapter(dict[str, Any])


def add_op_routes(app: FastAPI) -> None:
    """`POST /v1/<op>` for every operation, first in the router: a request is matched against
    the routes in order, and the operations are most of a hub's traffic (the pages and the
    dashboard's routes share no path with them; ~10 µs of CPU per append, issue 25)."""
    routes = app.router.routes
    before = len(routes)
    for name, op in operations.OPERATIONS.items():
        app.router.add_api_route(
            f"/v1/{name}",
            op_endpoint(name, request_model(name, op)),
            methods=["POST"],
            name=name,
            tags=["mutating" if op.mutating else "read"],
            summary=op.summary,
            description=op.description,
            route_class_override=OpRoute,
        )
    routes[:] = routes[before:] + routes[:before]


class OpRoute(APIRoute):
    """A `POST /v1/<op>` route with a short path for the common request: a JSON object body
    (`Content-Type: application/json`) naming only parameters of the operation, all required
    ones included. It gets the same arguments and answers the same bytes as FastAPI's handler
    would, without building the request model or solving dependencies (most of the hub's CPU
    per append). Anything else (no or another content type, an empty or invalid body, unknown
    or missing parameters) goes to FastAPI's handler, so every error is FastAPI's own.
    """

    def get_route_handler(self) -> Handler:
        full = super().get_route_handler()
        op = self.name
        params = operations.params()[op]
        allowed = frozenset(params)
        required = frozenset(
            name
            for name, needed in params.items()
            if needed and name not in operations.WRITER_FIELDS
        )

        async def handler(request: Request) -> Response:
            args = await _plain_args(request, allowed, required)
            if args is None:
                return await full(request)
            result = await _call(request, op, args)
            return Response(_RESULT_JSON.dump_json(result), media_type="application/json")

        return handler


async def _plain_args(
    request: Request, allowed: frozenset[str], required: frozenset[str]
) -> dict[str, Any] | None:
    """The arguments of a plain JSON-object body, or None when FastAPI's handler should decide."""
    content_type = _header(request, b"content-type")
    if content_type is None or content_type.partition(";")[0].strip().lower() != "application/json":
        return None
    body = await request.body()
    if not body:
        return None
    try:
        args = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if type(args) is not dict or not allowed.issuperset(args) or not required.issubset(args):
        return None
    return args


def op_endpoint(op: str, model: type[BaseModel]) -> Endpoint:
    """The handler of `POST /v1/<op>`: the body validated by `model`, then the core call."""

    async def endpoint(request: Request, body: Any = None) -> dict[str, Any]:
        args = body.model_dump(exclude_unset=True) if body is not None else {}
        return await _call(request, op, args)

    endpoint.__name__ = f"post_{op}"
    # The model is built at runtime; give FastAPI the class itself, not the postponed string.
    endpoint.__annotations__["body"] = model
    endpoint.__annotations__["request"] = Request
    return endpoint


# What a wait answers a client that is gone (nginx's "client closed request"; nobody reads it).
CLIENT_GONE = 499


async def _call(request: Request, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """`aio.call`; an `event_wait` is cancelled as soon as its client disconnects, so an
    abandoned wait holds no slot and costs no read (issue 18). A read sent with the header
    `X-Logstream-Delivery: <path>` pushes what it returns to its agent (the delivery ledger)."""
    with deliveries.delivering(_delivery(request)):
        if op != "event_wait":
            return await aio.call(_store(request), op, args)
        answered, result = await waits.unless_gone(
            lambda: aio.call(_store(request), op, args), lambda: _disconnected(request)
        )
    if not answered or result is None:
        raise HTTPException(CLIENT_GONE, "the client went away before its wait ended")
    return result


def _delivery(request: Request) -> str | None:
    """The delivery path a read names (`X-Logstream-Delivery`); the dashboard's reads are an
    observer's (`deliveries.OBSERVER`): the operator looking is no agent reading."""
    if _header(request, b"x-logstream-dashboard"):
        return deliveries.OBSERVER
    return deliveries.check_path(_header(request, _DELIVERY_HEADER))


_DELIVERY_HEADER = deliveries.DELIVERY_HEADER.lower().encode("latin-1")


def _header(request: Request, name: bytes) -> str | None:
    """The first value of header `name` (lower case), read from the ASGI scope as Starlette's
    `Headers` does, without building one per request (three reads per append, issue 25)."""
    for key, value in request.scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed its connection (the body was read already: the
    next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _store(request: Request) -> LogStore:
    store: LogStore = request.app.state.store
    return store


def add_get_aliases(app: FastAPI) -> None:
    reads = operations.READ_PARAMS
    app.get("/v1/events", tags=["read"], openapi_extra=query_docs(reads))(list_events)
    app.get("/v1/events/{event_id}", tags=["read"])(get_event)
    app.get("/v1/artifacts/{artifact_id}", tags=["read"])(get_artifact)
    app.get("/v1/tasks/{task_id}", tags=["read"])(get_task)
    app.get("/v1/version_vector", tags=["read"])(get_version_vector)
    app.get("/v1/stats", tags=["read"])(get_stats)


async def list_events(request: Request) -> dict[str, Any]:
    """event_list with query parameters (repeat a filter for OR)."""
    args = query_args(request, operations.READ_PARAMS, v.FILTER_FIELDS)
    return await _call(request, "event_list", args)


async def get_event(event_id: str, request: Request) -> dict[str, Any]:
    """event_get."""
    return await _call(request, "event_get", {"event_id": event_id})


async def get_artifact(artifact_id: str, request: Request) -> dict[str, Any]:
    """artifact_get: the exact content (base64 when binary) and its sha256."""
    return await aio.call(_store(request), "artifact_get", {"artifact_id": artifact_id})


async def get_task(task_id: str, request: Request) -> dict[str, Any]:
    """task_status: a task's derived state, children, events and artifacts."""
    return await aio.call(_store(request), "task_status", {"task_id": task_id})


async def get_version_vector(request: Request) -> dict[str, Any]:
    """This replica's id and version vector."""
    return await aio.call(_store(request), "version_vector", {})


async def get_stats(request: Request) -> dict[str, Any]:
    """Counts, sizes and the version vector."""
    return await aio.call(_store(request), "stats", {})
