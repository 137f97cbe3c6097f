"""Presence at the hub (S-8.4): `POST /v1/presence_announce|presence_leave|presence_list` and
`GET /v1/presence`, on the app's `presence.Registry` (in memory, or the cache of the table the
hubs of a PostgreSQL log share: shared_presence.py; never the log); the list adds each agent's
active file leases from the hub's log. The rules and the
refusals are `operations.presence_call`'s, the same on every surface.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request

from mempalace_logstream import errors, operations, presence


def add_presence_routes(app: FastAPI, registry: presence.Registry) -> None:
    app.state.presence = registry
    for name, op in operations.PRESENCE.items():
        route = app.post(f"/v1/{name}", tags=["presence"], summary=op.summary, name=name)
        route(_endpoint(name))
    summary = operations.PRESENCE["presence_list"].summary
    app.get("/v1/presence", tags=["presence"], summary=summary)(get_presence)


def _endpoint(op: str) -> Any:
    async def endpoint(request: Request) -> dict[str, Any]:
        registry, store = request.app.state.presence, request.app.state.store
        return operations.presence_call(registry, op, await _body(request), store)

    endpoint.__name__ = f"post_{op}"
    return endpoint


async def get_presence(request: Request) -> dict[str, Any]:
    registry, store = request.app.state.presence, request.app.state.store
    return operations.presence_call(registry, "presence_list", {}, store)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise errors.ValidationError("the body is not valid JSON", field="body") from None
    if not isinstance(body, dict):
        raise errors.ValidationError("the body must be a JSON object", field="body")
    return body
