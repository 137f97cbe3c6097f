"""`HubClient`: runs operations on a remote hub over its HTTP API (`--hub URL`).

POSTs `/v1/<op>` with the same parameter names as every other surface and maps the hub's
error bodies back to the domain exceptions of errors.py, so the CLI prints the same one-line
errors as it does locally. The HTTP boundary of the client side; must not import fastapi, mcp
or typer.

Every call has a deadline (S-6.1): `timeout` seconds for an ordinary call (default 30, the CLI
takes it from `LOGSTREAM_HUB_TIMEOUT`), and for `event_wait` the wait's own timeout plus that
much again as a margin. No single read waits longer than that limit and the answer's body is
cut off once it is passed, so a hub that accepts and never answers (or trickles its body)
fails with `PeerUnavailableError` naming the hub and the limit instead of hanging.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from mempalace_logstream import errors
from mempalace_logstream import validation as v

DEFAULT_TIMEOUT_S = 30.0
# The largest honest answer is a page of 500 events at the body and metadata limits (~160 MB);
# anything past this is a hub that lies, and reading on would only exhaust memory (S-8.10).
MAX_ANSWER_BYTES = 256 * 1024 * 1024
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

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        if not timeout > 0:
            raise errors.ValidationError(
                f"hub_timeout is {timeout}; it must be a positive number of seconds",
                field="hub_timeout",
            )
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.max_bytes = max_bytes
        v.token(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout)

    def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run `op` on the hub; raises the same domain errors as a local call."""
        body = {k: val for k, val in args.items() if val is not None}
        limit = self.deadline_s(op, body)
        deadline = time.monotonic() + limit
        try:
            with self._http.stream(
                "POST", f"/v1/{op}", json=body, timeout=httpx.Timeout(limit)
            ) as resp:
                raw = bytearray()
                for chunk in resp.iter_bytes():
                    raw += chunk
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("deadline passed mid-answer")
                    if len(raw) > self.max_bytes:
                        raise errors.PeerUnavailableError(
                            f"hub {self.url} answered {op} with more than {self.max_bytes} "
                            "bytes; refused (is it a logstream hub?)",
                            peer_id=self.url,
                        )
        except httpx.TimeoutException as exc:
            raise errors.PeerUnavailableError(
                f"hub {self.url} did not answer {op} within {limit:g} s; it may be overloaded "
                "or not a logstream hub (set LOGSTREAM_HUB_TIMEOUT to wait longer)",
                peer_id=self.url,
            ) from exc
        except httpx.HTTPError as exc:
            raise errors.PeerUnavailableError(
                f"cannot reach hub {self.url}: {exc or type(exc).__name__}", peer_id=self.url
            ) from exc
        if resp.status_code == 200:
            try:
                return dict(json.loads(raw))
            except (ValueError, TypeError) as exc:
                raise errors.PeerUnavailableError(
                    f"hub {self.url} answered {op} with something that is not a JSON object; "
                    "is it a logstream hub?",
                    peer_id=self.url,
                ) from exc
        raise _error_from(resp.status_code, bytes(raw), self.url)

    def deadline_s(self, op: str, body: dict[str, Any]) -> float:
        """Seconds the whole call may take: the client timeout, or for `event_wait` the wait's
        own timeout plus the client timeout as a margin."""
        if op != "event_wait":
            return self.timeout
        try:
            wait_s = v.timeout_ms(body.get("timeout_ms")) / 1000
        except errors.ValidationError:
            wait_s = 0.0  # the hub will refuse it; no need to wait long for that answer
        return wait_s + self.timeout

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_from(status: int, raw: bytes, url: str) -> errors.LogstreamError:
    try:
        payload = json.loads(raw)
        message = str(payload.get("error") or "")
        field = payload.get("field")
    except (ValueError, AttributeError):
        message, field = "", None
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
