"""The hub's `/sync/*` routes (S-7.6): the reference's three GET routes in its exact JSON shapes
(the version vector with our `origin_fingerprints` added), plus `POST /sync/artifacts` (batched
fetch, within the client's `max_bytes`), `POST /sync/push`, `GET /sync/count` (hole probes:
count and fingerprint of the positions up to `upto`), `GET /sync/peers` (estate) and
`GET /sync/ops_rows` (compact 5,000-event pages for our own client, advertised in the version
vector's profile as `sync_rows`; the reference client never sees or asks for it). Every integer
parameter must fit an origin position (signed 64-bit): a larger one is a 400 naming it, never
a 500.

Only translation happens here: validation and apply live in replication.py / sync.py. Auth is
the hub's middleware (http_app.py). Errors keep the reference's shape `{"error": "..."}`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mempalace_logstream import errors, replication, sync
from mempalace_logstream.store import LogStore


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Response(body.encode("utf-8"), status, media_type="application/json; charset=utf-8")


def _error(message: str, status: int, field: str | None = None) -> Response:
    return _json({"error": message} if field is None else {"error": message, "field": field},
                 status)  # fmt: skip


ARTIFACTS_MAX_BYTES = 16 * 1024 * 1024  # content per /sync/artifacts reply (>= 1 artifact)
ROWS_OFFER = {"format": replication.ROWS_FORMAT, "route": "/sync/ops_rows",
              "max_limit": replication.MAX_ROWS_LIMIT}  # fmt: skip


def _profile() -> dict[str, Any]:
    # The reference's node profile shape; clients treat it as optional (the reference client
    # only relays it), so it stays minimal. `sync_rows` offers our client compact pages.
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"roles": ["logstream"], "accelerator": None, "drawers": None,
            "hardware": "mempalace-logstream", "advertised_at": stamp,
            "sync_rows": dict(ROWS_OFFER)}  # fmt: skip


def _int_param(name: str, raw: str | None, default: int, *, reference: bool = True) -> int:
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


def router(store: LogStore, settings: Any = None, loop: sync.SyncLoop | None = None) -> APIRouter:
    """Routes bound to `store`. `settings.palace` locates peers.json for the estate; `loop` is
    the hub's background SyncLoop, if any (its interval and liveness appear in the estate)."""
    r = APIRouter()
    palace = getattr(settings, "palace", None)

    @r.get("/sync/version_vector")
    def version_vector() -> Response:
        """The reference's shape plus `origin_fingerprints` (our clients compare them with
        their own to see holes below equal tops; the reference client ignores them)."""
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

    @r.get("/sync/ops")
    def ops(origin: str | None = None, after: str | None = None,
            limit: str | None = None) -> Response:  # fmt: skip
        try:
            if not origin or not origin.strip():
                return _error("origin must be a non-empty string", 400)
            n_after = _int_param("after", after, 0)
            n_limit = _int_param("limit", limit, replication.MAX_OPS_LIMIT)
            if n_after < 0:
                return _error("after_seq must be a non-negative integer", 400)
            if n_limit < 1:
                return _error("limit must be a positive integer", 400)
            return _json(replication.ops_page(store, origin, n_after, n_limit))
        except errors.ValidationError as exc:
            return _error(exc.message, 400)  # the reference's shape: the text names it

    @r.get("/sync/ops_rows")
    def ops_rows(origin: str | None = None, after: str | None = None,
                 limit: str | None = None) -> Response:  # fmt: skip
        """Compact page: `{origin, format, columns, rows, count}`, one positional row per
        event (`columns` order, metadata as JSON text), up to 5,000 events (~8 MB of text)."""
        try:
            if not origin or not origin.strip():
                return _error("origin must be a non-empty string", 400, "origin")
            n_after = _int_param("after", after, 0, reference=False)
            n_limit = _int_param("limit", limit, replication.MAX_ROWS_LIMIT, reference=False)
            clean, rows, count = replication.ops_rows_json(store, origin, n_after, n_limit)
        except errors.ValidationError as exc:
            return _error(exc.message, 400, exc.field)
        head = json.dumps({"origin": clean, "format": replication.ROWS_FORMAT,
                           "columns": list(replication.ROW_COLUMNS), "count": count},
                          ensure_ascii=False, separators=(",", ":"))  # fmt: skip
        body = b"".join((head[:-1].encode("utf-8"), b',"rows":', rows, b"}"))
        return Response(body, 200, media_type="application/json; charset=utf-8")

    @r.get("/sync/artifact")
    def artifact(id: str | None = None) -> Response:  # noqa: A002 - the reference's name
        if not id or not id.strip():
            return _error("artifact_id must be a non-empty string", 400)
        try:
            art = store.artifact_get(id)
        except errors.NotFoundError:
            return _error(f"artifact {id.strip()!r} not found", 404)
        except errors.ValidationError as exc:
            return _error(exc.message, 400)
        return _json({"artifact": art.to_dict()})

    @r.post("/sync/artifacts")
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
        from starlette.concurrency import run_in_threadpool

        try:
            found, missing, more = await run_in_threadpool(
                replication.get_artifacts, store, ids, min(budget, ARTIFACTS_MAX_BYTES)
            )
        except errors.ValidationError as exc:
            return _error(exc.message, 400)
        return _json({"artifacts": [a.to_dict() for a in found], "not_found": missing,
                      "more": more})  # fmt: skip

    @r.post("/sync/push")
    async def push(request: Request) -> Response:
        payload = await _body(request)
        if not isinstance(payload, dict):
            return _error("the body must be a JSON object {replica_id, artifacts, events}", 400)
        from starlette.concurrency import run_in_threadpool

        try:
            out = await run_in_threadpool(
                sync.apply_push, store, payload.get("artifacts", []), payload.get("events", []),
                payload.get("replica_id"),
            )  # fmt: skip
        except errors.ValidationError as exc:
            return _error(exc.message, 400)
        return _json(out)

    @r.get("/sync/count")
    def count(origin: str | None = None, upto: str | None = None) -> Response:
        try:
            if not origin or not origin.strip():
                return _error("origin must be a non-empty string", 400)
            bound = _int_param("upto", upto, 0)
            fp = replication.fingerprint_upto(store, origin, bound)
        except errors.ValidationError as exc:
            return _error(exc.message, 400, exc.field if exc.field == "upto" else None)
        body = {"origin": origin.strip(), "upto": bound, "count": fp[0], "fingerprint": list(fp)}
        return _json(body)

    @r.get("/sync/peers")
    def peers() -> Response:
        if loop is not None:
            return _json(loop.estate())
        return _json(sync.estate(store, palace))

    return r


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
