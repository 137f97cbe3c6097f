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

from mempalace_logstream import errors, http_errors
from mempalace_logstream import validation as v

DEFAULT_TIMEOUT_S = 30.0
# The largest honest answer is a page of 500 events at the body and metadata limits (~160 MB);
# anything past this is a hub that lies, and reading on would only exhaust memory (S-8.10).
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class HubClient:
    """A client with `.call(op, **args) -> dict`, like `operations.LocalClient`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = MAX_ANSWER_BYTES,
        delivery: str | None = None,
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
        if delivery:  # this client's reads push to its agent (the hub's delivery ledger)
            headers["X-Logstream-Delivery"] = delivery
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout)

    def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        """Run `op` on the hub; raises the same domain errors as a local call."""
        body = {k: val for k, val in args.items() if val is not None}
        limit = self.deadline_s(op, body)
        with http_errors.transport_errors(
            self.url, self._unreachable, timeout=lambda _exc: self._too_slow(op, limit)
        ):
            status, raw, retry_after = self._post(op, body, limit)
        if status == 200:
            try:
                return dict(json.loads(raw))
            except (ValueError, TypeError) as exc:
                raise errors.PeerUnavailableError(
                    f"hub {self.url} answered {op} with something that is not a JSON object; "
                    "is it a logstream hub?",
                    peer_id=self.url,
                ) from exc
        raise http_errors.error_from_answer(status, bytes(raw), self.url, retry_after)

    def _post(
        self, op: str, body: dict[str, Any], limit: float
    ) -> tuple[int, bytearray, str | None]:
        """(status, body, Retry-After) of one call, read within `limit` seconds and
        `max_bytes`."""
        deadline = time.monotonic() + limit
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
        return resp.status_code, raw, resp.headers.get("retry-after")

    def _unreachable(self, exc: Exception) -> str:
        return f"cannot reach hub {self.url}: {exc or type(exc).__name__}"

    def _too_slow(self, op: str, limit: float) -> str:
        return (
            f"hub {self.url} did not answer {op} within {limit:g} s; it may be overloaded "
            "or not a logstream hub (set LOGSTREAM_HUB_TIMEOUT to wait longer)"
        )

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
