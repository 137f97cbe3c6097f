"""The operation routes: `POST /v1/<op>` for every core operation (S-6.3), and the GET aliases
(`/v1/events`, `/v1/events/{id}`, `/v1/artifacts/{id}`, `/v1/tasks/{id}`, `/v1/version_vector`,
`/v1/stats`).

Every handler is a translation: arguments in, `aio.call` (a worker thread, or the notifier for
`event_wait`), plain data out. Domain errors become responses in the app's handler table.
The common `POST /v1/<op>` is answered by `PlainPosts`, which the guard runs (issue 25).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, TypeAdapter
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempalace_logstream import aio, deliveries, errors, operations, waits
from mempalace_logstream import validation as v
from mempalace_logstream.http.params import query_args, query_docs, request_model
from mempalace_logstream.http.responses import domain_error_response
from mempalace_logstream.store import LogStore

Endpoint = Callable[..., Awaitable[dict[str, Any]]]
# What FastAPI answers for an endpoint returning `dict[str, Any]`: pydantic's JSON of the dict.
_RESULT_JSON = TypeAdapter(dict[str, Any])


def add_op_routes(app: FastAPI) -> None:
    """`POST /v1/<op>` for every operation (FastAPI's handler: the request model, its errors,
    the OpenAPI document; the common request is answered before it, by `PlainPosts`), first in
    the router: a request is matched against the routes in order, and the operations are most
    of a hub's traffic (the pages and the dashboard's routes share no path with them; ~10 µs
    of CPU per request that reaches the router, issue 25)."""
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
        )
    routes[:] = routes[before:] + routes[:before]


class PlainPosts:
    """`POST /v1/<op>`'s short path for the common request, run by the guard (http/guard.py)
    once it has admitted the request, in place of the rest of the app: a JSON object body
    (`Content-Type: application/json`) naming only parameters of the operation, all required
    ones included, is answered here with the same arguments, status and bytes as FastAPI's
    handler would give, without Starlette's and FastAPI's layers (exception middleware, exit
    stacks, router, `Request`, the request model, dependencies: most of the hub's own CPU per
    append, issue 25). A domain error answers through the app's one error table
    (`responses.domain_error_response`). Anything else (no or another content type, an empty
    or invalid body, unknown or missing parameters, `event_wait`, which watches its client)
    goes to the app with the body read so far replayed, so every other answer is FastAPI's.
    """

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.routes: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {}
        for op, params in operations.params().items():
            if op == "event_wait":
                continue
            allowed = frozenset(params)
            required = frozenset(
                name
                for name, needed in params.items()
                if needed and name not in operations.WRITER_FIELDS
            )
            self.routes[f"/v1/{op}"] = (op, allowed, required)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Answer `scope` (a POST to one of `routes`) here, or hand it to `app`."""
        op, allowed, required = self.routes[scope["path"]]
        read: list[Message] = []
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        args = None
        if message["type"] == "http.request":
            body = b"".join(m.get("body", b"") for m in read)
            args = _plain_args(_header(scope, b"content-type"), body, allowed, required)
        if args is None:
            await app(scope, _replay(read, receive), send)
            return
        try:
            with deliveries.delivering(_delivery(scope)):
                result = await aio.call(self.store, op, args)
        except errors.LogstreamError as exc:
            await domain_error_response(exc)(scope, receive, send)
            return
        payload = _RESULT_JSON.dump_json(result)
        head = [(b"content-length", str(len(payload)).encode()), _JSON_TYPE]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": payload})


_JSON_TYPE = (b"content-type", b"application/json")


def _replay(read: list[Message], receive: Receive) -> Receive:
    """`receive` that gives the messages already read first, in order."""
    pending = list(read)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def _plain_args(
    content_type: str | None, body: bytes, allowed: frozenset[str], required: frozenset[str]
) -> dict[str, Any] | None:
    """The arguments of a plain JSON-object body, or None when FastAPI's handler should decide."""
    if content_type is None or content_type.partition(";")[0].strip().lower() != "application/json":
        return None
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
    with deliveries.delivering(_delivery(request.scope)):
        if op != "event_wait":
            return await aio.call(_store(request), op, args)
        answered, result = await waits.unless_gone(
            lambda: aio.call(_store(request), op, args), lambda: _disconnected(request)
        )
    if not answered or result is None:
        raise HTTPException(CLIENT_GONE, "the client went away before its wait ended")
    return result


def _delivery(scope: Scope) -> str | None:
    """The delivery path a read names (`X-Logstream-Delivery`); the dashboard's reads are an
    observer's (`deliveries.OBSERVER`): the operator looking is no agent reading."""
    if _header(scope, b"x-logstream-dashboard"):
        return deliveries.OBSERVER
    return deliveries.check_path(_header(scope, _DELIVERY_HEADER))


_DELIVERY_HEADER = deliveries.DELIVERY_HEADER.lower().encode("latin-1")


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of header `name` (lower case), read from the ASGI scope as Starlette's
    `Headers` does, without building one per request (three reads per append, issue 25)."""
    for key, value in scope["headers"]:
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
