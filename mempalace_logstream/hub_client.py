"""`HubClient`: runs operations on a remote hub over its HTTP API (`--hub URL`).

POSTs `/v1/<op>` with the same parameter names as every other surface and maps the hub's
error bodies back to the domain exceptions of errors.py, so the CLI prints the same one-line
errors as it does locally. The HTTP boundary of the client side; must not import fastapi, mcp
or typer.
"""

from __future__ import annotations

from typing import Any

import httpx

from mempalace_logstream import errors
from mempalace_logstream import validation as v

WAIT_SLACK_S = 30.0
_BY_STATUS: dict[int, type[errors.LogstreamError]] = {
    400: errors.ValidationError,
    422: errors.ValidationError,
    404: errors.NotFoundError,
    409: errors.ConflictError,
    503: errors.StorageError,
    502: errors.SyncError,
}


class HubClient:
    """A client with `.call(op, **args) -> dict`, like `operations.LocalClient`."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Run `op` on the hub; raises the same domain errors as a local call."""
        body = {k: val for k, val in args.items() if val is not None}
        try:
            resp = self._http.post(f"/v1/{op}", json=body, timeout=self._timeout(op, body))
        except httpx.HTTPError as exc:
            raise errors.PeerUnavailableError(
                f"cannot reach hub {self.url}: {exc or type(exc).__name__}", peer_id=self.url
            ) from exc
        if resp.status_code == 200:
            return dict(resp.json())
        raise _error_from(resp, self.url)

    def _timeout(self, op: str, body: dict[str, Any]) -> httpx.Timeout | None:
        if op != "event_wait":
            return None
        try:
            wait_s = v.timeout_ms(body.get("timeout_ms")) / 1000
        except errors.ValidationError:
            wait_s = 0.0  # the hub will refuse it; no need to wait long for that answer
        return httpx.Timeout(wait_s + WAIT_SLACK_S)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_from(resp: httpx.Response, url: str) -> errors.LogstreamError:
    try:
        payload = resp.json()
        message = str(payload.get("error") or "")
        field = payload.get("field")
    except (ValueError, AttributeError):
        message, field = "", None
    status = resp.status_code
    if status == 401:
        return errors.LogstreamError(f"hub {url} refused the token: {message or 'unauthorized'}; "
                                     "pass --token or set LOGSTREAM_TOKEN")  # fmt: skip
    if status == 403:
        return errors.LogstreamError(f"hub {url} refused the request: {message or 'forbidden'}")
    message = message or f"hub {url} answered HTTP {status}"
    cls = _BY_STATUS.get(status)
    if cls in (errors.ValidationError, errors.NotFoundError, errors.ConflictError):
        return cls(message, field=field)  # type: ignore[call-arg]
    if cls is errors.SyncError:
        return errors.SyncError(message)
    if cls is errors.StorageError:
        return errors.StorageError(message)
    return errors.LogstreamError(message)
