"""`HttpPeer`: a hub reached over HTTP(S), ours or the reference, through its `/sync/*` routes.

Every response is streamed within the response cap and the round's deadline before it is
decoded; transport failures and error statuses become our errors through `http_errors`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mempalace_logstream import errors, http_errors, replication
from mempalace_logstream.http_errors import HttpStatusError
from mempalace_logstream.sync.limits import (
    ARTIFACT_BATCH,
    BYTES_PER_JSON_VALUE,
    HTTP_TIMEOUT_S,
    MAX_RESPONSE_BYTES,
    MIN_RESPONSE_BYTES,
    ROWS_BATCH,
    Deadline,
    DeadlinePassed,
    ResponseTooLargeError,
    check_deadline,
    chunks,
    json_values_bound,
    redact_url,
    url_secrets,
)
from mempalace_logstream.sync.protocol import Capabilities, PushRefused, RowsRefused
from mempalace_logstream.sync.vector import fingerprint


class HttpPeer:
    """A hub reached over HTTP(S) with an optional bearer token.

    Detects the reference hub on first use of a route it lacks (404/405): artifacts then come
    one request at a time and push is refused with a SyncError. Compact pages are used only
    when the hub's version vector advertised them (`rows_limit` is set by `version_vector()`),
    and dropped for the reference shape if the hub then refuses them.

    Every response is streamed and refused past `max_response_bytes` (ResponseTooLargeError,
    naming the peer and the cap) and past max_response_bytes / 64 JSON values, before it is
    decoded. `deadline` (set by `sync_one`) bounds every socket operation and the whole round.
    `url` and `name` never carry the URL's credentials; the requests do.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        name: str | None = None,
        timeout: float = HTTP_TIMEOUT_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        import httpx

        from mempalace_logstream.sync.sockets import DeadlineTransport

        target = url.rstrip("/")
        self.url = redact_url(target)
        self.name = name or self.url
        self._secrets = url_secrets(target)
        self.max_response_bytes = max(MIN_RESPONSE_BYTES, int(max_response_bytes))
        self.deadline: Deadline | None = None
        # Uncompressed bodies only: the cap then bounds what is decoded, not what is inflated.
        headers = {"Accept-Encoding": "identity"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Every socket operation bounded by the round's deadline (sync/sockets.py).
        transport = DeadlineTransport(self._left)
        self._client = httpx.Client(
            base_url=target, headers=headers, timeout=timeout, transport=transport
        )
        self.batched: bool | None = None  # None until the batch route was tried
        self.prefetch = True  # request the next ops page while applying this one
        self.rows_limit = 0  # compact page size the hub offers (0: reference pages only)
        self.page_ceiling: int | None = None  # lowered when a page is over the response cap
        self.page_limit_now: int | None = None  # a smaller page asked after one over the cap
        self.pushes: bool | None = None  # None until a push was tried
        self.probes: bool | None = None  # None until /sync/count was tried
        self.reference_only = False  # its version vector offered neither rows nor fingerprints

    @property
    def capabilities(self) -> Capabilities:
        """What the hub offered so far: compact pages and fingerprints once its version
        vector advertised them; push until it refused one (the reference is pull-only)."""
        return Capabilities(
            rows_limit=self.rows_limit,
            push=self.pushes is not False and not self.reference_only,
            fingerprints=self.probes is not False and not self.reference_only,
            counts=self.probes is not False and not self.reference_only,
            artifact_responses=True,
            prefetch=self.prefetch,
            paced_rows=True,
            reference_only=self.reference_only,
        )

    def _left(self) -> float | None:
        return None if self.deadline is None else self.deadline.left()

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _request(
        self, method: str, path: str, pause: Callable[[], Any] | None = None, **kw: Any
    ) -> Any:
        """The decoded JSON body of a request, read as a stream within the response cap and
        the round's deadline. With `pause`, the body is read only once `pause()` returns (the
        request is already on its way, so the hub works meanwhile)."""
        check_deadline(self, path)

        def unreachable(exc: Exception) -> str:
            check_deadline(self, path)  # the deadline, not the timeout it caused, is the error
            return self._scrub(f"{self.url}{path}: {type(exc).__name__}: {exc}")

        with http_errors.transport_errors(self.name, unreachable, also=(DeadlinePassed,)):
            resp = self._client.send(self._client.build_request(method, path, **kw), stream=True)
            try:
                if pause is not None:
                    pause()
                raw = self._read_capped(resp, path)
            finally:
                resp.close()
        if resp.status_code >= 400:
            where = f"{self.url}{path}"
            raise http_errors.status_error(resp.status_code, raw, where, self.name, self._scrub)
        return self._decode(raw, path)

    def _over_cap(self, path: str, what: str) -> ResponseTooLargeError:
        return ResponseTooLargeError(
            f"{self.name}: {path} response {what}; the cap is {self.max_response_bytes:,} "
            "bytes per response (max_response_bytes); refused",
            peer_id=self.name,
        )

    def _read_capped(self, resp: Any, path: str) -> bytearray:
        """The (content-decoded) body, refused as soon as it passes the cap."""
        cap = self.max_response_bytes
        encoding = resp.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):  # asked for identity: a compression bomb?
            message = (
                f"{self.name}: {path} response is {encoding}-compressed though an "
                "uncompressed one was asked for; refused"
            )
            raise errors.SyncError(message, peer_id=self.name)
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise self._over_cap(path, f"declares {int(declared):,} bytes")
        buf = bytearray()
        for chunk in resp.iter_bytes():
            buf += chunk
            if len(buf) > cap:
                raise self._over_cap(path, f"passed {cap:,} bytes")
            check_deadline(self, path)
        return buf

    def _decode(self, raw: bytearray, path: str) -> Any:
        cap = max(1, self.max_response_bytes // BYTES_PER_JSON_VALUE)
        if json_values_bound(raw) > cap:
            n = json_values_bound(raw, strings=False)
            if n > cap:
                what = (
                    f"holds about {n:,} JSON values (the value cap is {cap:,}, "
                    f"max_response_bytes / {BYTES_PER_JSON_VALUE})"
                )
                raise self._over_cap(path, what)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise errors.SyncError(
                f"{self.url}{path}: not JSON ({type(exc).__name__})", peer_id=self.name
            ) from exc

    def version_vector(self) -> dict[str, Any]:
        body: dict[str, Any] = self._request("GET", "/sync/version_vector")
        self.rows_limit = rows_offer(body)
        self.reference_only = not self.rows_limit and not (
            isinstance(body, dict) and "origin_fingerprints" in body
        )
        return body

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        body = self._request(
            "GET", "/sync/ops", params={"origin": origin, "after": after, "limit": limit}
        )
        evs = body.get("events") if isinstance(body, dict) else None
        if not isinstance(evs, list):
            raise errors.SyncError(f"{self.url}/sync/ops: no events list", peer_id=self.name)
        return evs

    def rows(
        self, origin: str, after: int, limit: int, pause: Callable[[], Any] | None = None
    ) -> list[Any]:
        """A compact page; raises RowsRefused when the hub has no such route or speaks
        another row format (the caller then falls back to `/sync/ops`). `pause`: as in
        `_request` (the sync pipeline's gate)."""
        params = {"origin": origin, "after": after, "limit": limit}
        try:
            body = self._request("GET", "/sync/ops_rows", pause, params=params)
        except HttpStatusError as exc:
            if exc.missing_route:
                raise RowsRefused(exc.message, peer_id=self.name) from exc
            raise
        if (
            not isinstance(body, dict)
            or body.get("columns") != list(replication.ROW_COLUMNS)
            or not isinstance(body.get("rows"), list)
        ):
            what = f"{self.url}/sync/ops_rows: not a {replication.ROWS_FORMAT} page"
            raise RowsRefused(what, peer_id=self.name)
        rows: list[Any] = body["rows"]
        return rows

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        return [a for got, _ in self.artifact_responses(ids) for a in got]

    def artifact_responses(self, ids: Sequence[str]) -> Iterator[tuple[list[Any], list[str]]]:
        """(artifacts, ids those responses answered) one response at a time, so the caller
        holds at most one response more than it decides to keep."""
        for chunk in chunks(list(ids), ARTIFACT_BATCH):
            if self.batched is not False:
                try:
                    yield from self._batches(chunk)
                    self.batched = True
                    continue
                except HttpStatusError as exc:
                    if not exc.missing_route or self.batched:
                        raise
                    self.batched = False  # the reference hub: one request per artifact
            for ident in chunk:
                one = self._one_artifact(ident)
                yield ([one] if one is not None else []), [ident]

    def _batches(self, ids: list[str]) -> Iterator[tuple[list[Any], list[str]]]:
        pending = ids
        while pending:
            got, more = self._batch_once(pending)
            yield got, [i for i in pending if i not in set(more)]
            if len(more) >= len(pending):  # no progress: the server refuses to send any
                return
            pending = more

    def _batch_once(self, ids: list[str]) -> tuple[list[Any], list[str]]:
        """One `POST /sync/artifacts` asking for at most half the response cap of content;
        a reply over the cap is asked again in halves (one artifact over it is an error)."""
        payload = {"ids": ids, "max_bytes": self.max_response_bytes // 2}
        try:
            body = self._request("POST", "/sync/artifacts", json=payload)
        except ResponseTooLargeError:
            if len(ids) == 1:
                raise
            got, more = self._batch_once(ids[: len(ids) // 2])
            return got, more + ids[len(ids) // 2 :]
        if not isinstance(body, dict):
            raise errors.SyncError(f"{self.url}/sync/artifacts: not an object", peer_id=self.name)
        asked = set(ids)
        more = [i for i in body.get("more") or [] if isinstance(i, str) and i in asked]
        return list(body.get("artifacts") or []), more

    def _one_artifact(self, ident: str) -> dict[str, Any] | None:
        try:
            body = self._request("GET", "/sync/artifact", params={"id": ident})
        except HttpStatusError as exc:
            if exc.status == 404:
                return None
            raise
        return body.get("artifact") if isinstance(body, dict) else None

    def push(
        self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]], sender: str
    ) -> dict[str, Any]:
        payload = {"replica_id": sender, "artifacts": list(artifacts), "events": list(events)}
        try:
            out = self._request("POST", "/sync/push", json=payload)
        except HttpStatusError as exc:
            if exc.missing_route:
                self.pushes = False
                raise PushRefused(
                    f"{self.url} does not accept pushes (a reference hub?); it can pull from us",
                    peer_id=self.name,
                ) from exc
            raise
        self.pushes = True
        return out if isinstance(out, dict) else {}

    def count(self, origin: str, upto: int) -> int:
        return self.fingerprint(origin, upto)[0]

    def fingerprint(self, origin: str, upto: int) -> replication.Fingerprint:
        """The peer's fingerprint of the positions of `origin` up to `upto` (`/sync/count`)."""
        try:
            body = self._request("GET", "/sync/count", params={"origin": origin, "upto": upto})
        except HttpStatusError as exc:
            if exc.missing_route:
                self.probes = False
                raise errors.SyncError(
                    f"{self.url} cannot be probed for holes (no /sync/count; a reference hub?)",
                    peer_id=self.name,
                ) from exc
            raise
        try:
            return fingerprint(body.get("fingerprint") if isinstance(body, dict) else None)
        except errors.ValidationError as exc:
            raise errors.SyncError(
                f"{self.url}/sync/count: {exc.message}", peer_id=self.name
            ) from exc

    def close(self) -> None:
        self._client.close()


def rows_offer(remote: Any) -> int:
    """The compact page size a `/sync/version_vector` body offers: its profile's
    `sync_rows` {format, max_limit}, capped at ROWS_BATCH; 0 when absent (the reference)."""
    profile = remote.get("profile") if isinstance(remote, dict) else None
    offer = profile.get("sync_rows") if isinstance(profile, dict) else None
    if not isinstance(offer, dict) or offer.get("format") != replication.ROWS_FORMAT:
        return 0
    limit = offer.get("max_limit")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return 0
    return min(limit, ROWS_BATCH)
