"""HTTP failures as our errors (errors.py): the one table shared by the hub client
(`hub_client.HubClient`) and the sync HTTP peer (`sync.http_peer.HttpPeer`).

Modelled on httpx's `_transports/default.py` exception map: transport failures (connect, read,
write, timeouts, protocol errors) become `PeerUnavailableError` in one context manager,
`transport_errors`; an error status becomes the domain error it stands for through one table,
`STATUS_ERRORS` (the inverse of the hub's exception-handler table). A hub's answer to an
operation raises that domain error (`error_from_answer`); a peer's answer during a sync round
stays a `SyncError` that remembers its status and the domain error it meant
(`HttpStatusError`). Must not import fastapi, mcp or typer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mempalace_logstream import errors

STATUS_ERRORS: dict[int, type[errors.LogstreamError]] = {
    400: errors.ValidationError,
    422: errors.ValidationError,
    404: errors.NotFoundError,
    409: errors.ConflictError,
    503: errors.StorageError,
    502: errors.SyncError,
}
MISSING_ROUTE = frozenset({404, 405})  # what a hub without a route (the reference) answers
_WITH_FIELD = (errors.ValidationError, errors.NotFoundError, errors.ConflictError)


class HttpStatusError(errors.SyncError):
    """A peer answered a sync request with an error status."""

    def __init__(self, status: int, message: str, *, peer_id: str | None = None) -> None:
        super().__init__(message, peer_id=peer_id)
        self.status = status
        self.meant = STATUS_ERRORS.get(status, errors.LogstreamError)

    @property
    def missing_route(self) -> bool:
        """The peer has no such route (a reference hub, or an older one of ours)."""
        return self.status in MISSING_ROUTE


@contextmanager
def transport_errors(
    peer_id: str,
    describe: Callable[[Exception], str],
    *,
    timeout: Callable[[Exception], str] | None = None,
    also: tuple[type[Exception], ...] = (),
) -> Iterator[None]:
    """Raise `PeerUnavailableError` (chained) for an httpx transport failure inside the block,
    worded by `timeout` for a timeout when given, else by `describe`; exception classes in
    `also` count as transport failures too. (httpx is imported here, on first use, so that
    importing this table stays cheap.)"""
    import httpx

    failures: tuple[type[Exception], ...] = (httpx.HTTPError, *also)
    try:
        yield
    except httpx.TimeoutException as exc:
        raise errors.PeerUnavailableError((timeout or describe)(exc), peer_id=peer_id) from exc
    except failures as exc:
        raise errors.PeerUnavailableError(describe(exc), peer_id=peer_id) from exc


def status_error(
    status: int, raw: bytes | bytearray, where: str, peer_id: str, scrub: Callable[[str], str]
) -> HttpStatusError:
    """A peer's error answer at `where` (its URL and path): the status and the first 300
    bytes of its body, passed through `scrub` (which hides URL credentials)."""
    text = bytes(raw[:300]).decode("utf-8", "replace")
    return HttpStatusError(status, f"{where}: HTTP {status}: {scrub(text)}", peer_id=peer_id)


def retry_after_s(value: str | None) -> int | None:
    """A `Retry-After` header in seconds (its delay form), or None."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def error_from_answer(
    status: int, raw: bytes, url: str, retry_after: str | None = None
) -> errors.LogstreamError:
    """The domain error a hub's error answer to an operation stands for, with the hub's own
    message (and field) when its body is our `{"error": ..., "field": ...}`. A 503 with a
    `Retry-After` (a cap, or a hub that stops) is a `BusyError`, one without it a
    `StorageError`; a refused token or request an `UnauthorizedError`."""
    try:
        payload = json.loads(raw)
        message = str(payload.get("error") or "")
        field = payload.get("field")
    except (ValueError, AttributeError):
        message, field = "", None
    if status == 401:
        refused = message or "unauthorized"
        return errors.UnauthorizedError(
            f"hub {url} refused the token: {refused}; pass --token or set LOGSTREAM_TOKEN"
        )
    if status == 403 and field:  # the core's refusal of a writer (not the hub's guard)
        return errors.ForbiddenError(message, field=field)
    if status == 403:
        return errors.UnauthorizedError(f"hub {url} refused the request: {message or 'forbidden'}")
    message = message or f"hub {url} answered HTTP {status}"
    delay = retry_after_s(retry_after)
    if status == 503 and delay is not None:
        return errors.BusyError(message, retry_after_s=delay)
    cls = STATUS_ERRORS.get(status, errors.LogstreamError)
    if issubclass(cls, _WITH_FIELD):
        return cls(message, field=field)
    return cls(message)
