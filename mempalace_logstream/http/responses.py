"""The hub's error shape `{"error", "field"}` as a response, and the status of each domain error.

One table maps the error tree to HTTP statuses (STYLE §3); the guard, the SSE route and the
exception handlers all answer through `error_response` / `send_error`.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import Send

from mempalace_logstream import errors

STATUS: dict[type[errors.LogstreamError], int] = {
    errors.ValidationError: 422,
    errors.NotFoundError: 404,
    errors.ForbiddenError: 403,
    errors.ConflictError: 409,
    errors.BusyError: 503,
    errors.StorageError: 503,
    errors.IntegrityError: 500,
    errors.SyncError: 502,
}


def status_of(exc: errors.LogstreamError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


def domain_error_response(exc: errors.LogstreamError) -> JSONResponse:
    headers = None
    if isinstance(exc, errors.BusyError):
        headers = {"Retry-After": str(exc.retry_after_s)}
    return error_response(status_of(exc), exc.message, getattr(exc, "field", None), headers)


async def send_error(
    send: Send, status: int, message: str, field: str | None, headers: dict[str, str] | None = None
) -> None:
    """The error shape straight onto a raw ASGI `send` (the guard answers before any app)."""
    payload = json.dumps({"error": message, "field": field}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        raw.append((b"www-authenticate", b"Bearer"))
    raw += [(k.encode(), val.encode()) for k, val in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _error_doc(text: str) -> dict[str, Any]:
    nullable = {"type": ["string", "null"]}
    schema = {
        "type": "object",
        "properties": {"error": {"type": "string"}, "field": nullable},
        "required": ["error"],
    }
    return {"description": text, "content": {"application/json": {"schema": schema}}}


# The error statuses in the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: _error_doc(text)
    for code, text in (
        (400, "Bad stream or sync parameters"),
        (401, "Missing or wrong bearer token"),
        (403, "Host or Origin refused, or this writer may not make the move (names the field)"),
        (404, "No such event, artifact, task or cursor"),
        (409, "Conflict (idempotency key; a task's state or holder refuses the move)"),
        (413, "Request too large"),
        (422, "Invalid input; names the field"),
        (502, "Sync failed"),
        (503, "Storage failed, or the SSE client or open-wait cap reached (Retry-After)"),
    )
}
