"""The hub's `/sync/*` routes (S-7.6): the reference's three GET routes in its exact JSON shapes
(the version vector with our `origin_fingerprints` added), plus `POST /sync/artifacts` (batched
fetch, within the client's `max_bytes`), `POST /sync/push`, `GET /sync/count` (hole probes:
count and fingerprint of the positions up to `upto`), `GET /sync/peers` (estate) and
`GET /sync/ops_rows` (compact 5,000-event pages for our own client, advertised in the version
vector's profile as `sync_rows`; the reference client never sees or asks for it). Every integer
parameter must fit an origin position (signed 64-bit): a larger one is a 400 naming it, never
a 500.

Only translation happens here: validation and apply live in replication/ and sync/. Auth is
the hub's guard (http/guard.py). Errors keep the reference's shape `{"error": "..."}`. The
handlers are module-level; they find the store, the palace and the sync loop in `SyncContext`
on the app's state (`install`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from mempalace_logstream import errors, replication, sync
from mempalace_logstream.store import LogStore

ARTIFACTS_MAX_BYTES = 16 * 1024 * 1024  # content per /sync/artifacts reply (>= 1 artifact)
ROWS_OFFER = {
    "format": replication.ROWS_FORMAT,
    "route": "/sync/ops_rows",
    "max_limit": replication.MAX_ROWS_LIMIT,
}
_JSON = "application/json; charset=utf-8"


@dataclass(frozen=True)
class SyncContext:
    """What the sync routes serve: the store, where peers.json lives, the background loop."""

    store: LogStore
    palace: str | None = None
    loop: sync.SyncLoop | None = None


def install(
    app: FastAPI, store: LogStore, settings: Any = None, loop: sync.SyncLoop | None = None
) -> None:
    """Serve the sync routes on `app` for `store`. `settings.palace` locates peers.json for the
    estate; `loop` is the hub's background SyncLoop, if any (its interval and liveness appear
    in the estate)."""
    app.state.sync = SyncContext(store, getattr(settings, "palace", None), loop)
    app.include_router(router())


def router() -> APIRouter:
    """The `/sync/*` routes; the app's state must hold a `SyncContext` as `sync`."""
    r = APIRouter()
    r.get("/sync/version_vector")(version_vector)
    r.get("/sync/ops")(ops)
    r.get("/sync/ops_rows")(ops_rows)
    r.get("/sync/artifact")(artifact)
    r.post("/sync/artifacts")(artifacts_batch)
    r.post("/sync/push")(push)
    r.get("/sync/count")(count)
    r.get("/sync/peers")(peers)
    return r


def _ctx(request: Request) -> SyncContext:
    ctx: SyncContext = request.app.state.sync
    return ctx


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Response(body.encode("utf-8"), status, media_type=_JSON)


def _error(message: str, status: int, field: str | None = None) -> Response:
    return _json(
        {"error": message} if field is None else {"error": message, "field": field}, status
    )


def _profile() -> dict[str, Any]:
    # The reference's node profile shape; clients treat it as optional (the reference client
    # only relays it), so it stays minimal. `sync_rows` offers our client compact pages.
    return {
        "roles": ["logstream"],
        "accelerator": None,
        "drawers": None,
        "hardware": "mempalace-logstream",
        "advertised_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sync_rows": dict(ROWS_OFFER),
    }


def int_param(name: str, raw: str | None, default: int, *, reference: bool = True) -> int:
    """An integer query parameter that fits an origin position (signed 64-bit). On the
    reference's routes a non-integer keeps the reference's exact 400 text (its client and tests
    read it); otherwise the 400 names the parameter and what was sent or the limit."""
    if raw is None or raw == "":
        return default
    if len(raw) > 40:  # far past 19 digits: never hand int() a huge string
        raise errors.ValidationError(
            f"{name} is {len(raw)} characters; the limit is {replication.MAX_SEQ}", field=name
        )
    try:
        n = int(raw)
    except ValueError:
        message = (
            f"invalid literal for int() with base 10: {raw!r}"
            if reference
            else f"{name} must be an integer, got {raw[:50]!r}"
        )
        raise errors.ValidationError(message, field=name) from None
    return replication.seq_int(name, n)


def version_vector(request: Request) -> Response:
    """The reference's shape plus `origin_fingerprints` (our clients compare them with
    their own to see holes below equal tops; the reference client ignores them)."""
    store = _ctx(request).store
    profile = _profile()
    positions = replication.origin_positions(store)
    return _json(
        {
            "replica_id": store.replica_id,
            "version_vector": {o: top for o, (top, _) in positions.items()},
            "profile": profile,
            "profiles": {store.replica_id: profile},
            "origin_fingerprints": {o: list(fp) for o, (_, fp) in positions.items()},
        }
    )


def ops(
    request: Request, origin: str | None = None, after: str | None = None, limit: str | None = None
) -> Response:
    try:
        if not origin or not origin.strip():
            return _error("origin must be a non-empty string", 400)
        n_after = int_param("after", after, 0)
        n_limit = int_param("limit", limit, replication.MAX_OPS_LIMIT)
        if n_after < 0:
            return _error("after_seq must be a non-negative integer", 400)
        if n_limit < 1:
            return _error("limit must be a positive integer", 400)
        return _json(replication.ops_page(_ctx(request).store, origin, n_after, n_limit))
    except errors.ValidationError as exc:
        return _error(exc.message, 400)  # the reference's shape: the text names it


def ops_rows(
    request: Request, origin: str | None = None, after: str | None = None, limit: str | None = None
) -> Response:
    """Compact page: `{origin, format, columns, rows, count}`, one positional row per
    event (`columns` order, metadata as JSON text), up to 5,000 events (~8 MB of text)."""
    try:
        if not origin or not origin.strip():
            return _error("origin must be a non-empty string", 400, "origin")
        n_after = int_param("after", after, 0, reference=False)
        n_limit = int_param("limit", limit, replication.MAX_ROWS_LIMIT, reference=False)
        store = _ctx(request).store
        clean, rows, count = replication.ops_rows_json(store, origin, n_after, n_limit)
    except errors.ValidationError as exc:
        return _error(exc.message, 400, exc.field)
    columns = list(replication.ROW_COLUMNS)
    head = {"origin": clean, "format": replication.ROWS_FORMAT, "columns": columns, "count": count}
    text = json.dumps(head, ensure_ascii=False, separators=(",", ":"))
    body = b"".join((text[:-1].encode("utf-8"), b',"rows":', rows, b"}"))
    return Response(body, 200, media_type=_JSON)


def artifact(request: Request, id: str | None = None) -> Response:  # noqa: A002 - the reference's name
    if not id or not id.strip():
        return _error("artifact_id must be a non-empty string", 400)
    try:
        art = _ctx(request).store.artifact_get(id)
    except errors.NotFoundError:
        return _error(f"artifact {id.strip()!r} not found", 404)
    except errors.ValidationError as exc:
        return _error(exc.message, 400)
    return _json({"artifact": art.to_dict()})


async def artifacts_batch(request: Request) -> Response:
    payload = await _body(request)
    ids = payload.get("ids") if isinstance(payload, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return _error("ids must be a list of artifact ids", 400)
    if len(ids) > sync.ARTIFACT_BATCH * 5:
        return _error(f"ids has {len(ids)} items; the limit is {sync.ARTIFACT_BATCH * 5}", 400)
    budget = payload.get("max_bytes", ARTIFACTS_MAX_BYTES)
    if type(budget) is not int or budget < 1:
        return _error("max_bytes must be a positive integer", 400, "max_bytes")
    store = _ctx(request).store
    try:
        found, missing, more = await run_in_threadpool(
            replication.get_artifacts, store, ids, min(budget, ARTIFACTS_MAX_BYTES)
        )
    except errors.ValidationError as exc:
        return _error(exc.message, 400)
    return _json({"artifacts": [a.to_dict() for a in found], "not_found": missing, "more": more})


async def push(request: Request) -> Response:
    payload = await _body(request)
    if not isinstance(payload, dict):
        return _error("the body must be a JSON object {replica_id, artifacts, events}", 400)
    artifacts, events = payload.get("artifacts", []), payload.get("events", [])
    store = _ctx(request).store
    try:
        out = await run_in_threadpool(
            sync.apply_push, store, artifacts, events, payload.get("replica_id")
        )
    except errors.ValidationError as exc:
        return _error(exc.message, 400)
    return _json(out)


def count(request: Request, origin: str | None = None, upto: str | None = None) -> Response:
    try:
        if not origin or not origin.strip():
            return _error("origin must be a non-empty string", 400)
        bound = int_param("upto", upto, 0)
        fp = replication.fingerprint_upto(_ctx(request).store, origin, bound)
    except errors.ValidationError as exc:
        return _error(exc.message, 400, exc.field if exc.field == "upto" else None)
    body = {"origin": origin.strip(), "upto": bound, "count": fp[0], "fingerprint": list(fp)}
    return _json(body)


def peers(request: Request) -> Response:
    ctx = _ctx(request)
    if ctx.loop is not None:
        return _json(ctx.loop.estate())
    return _json(sync.estate(ctx.store, ctx.palace))


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
