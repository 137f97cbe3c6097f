"""Anti-entropy rounds between replicas (S-7.4, S-7.5) over a `Peer` Protocol.

`LocalPeer` wraps a `LogStore` (two local files); `HttpPeer` speaks the hub's `/sync/*` routes
(ours: compact 5,000-event pages, batched artifacts and push; the reference's: 500-event pages,
one artifact per request, pull only). A peer that offers `rows_limit > 0` and `rows()` serves
compact pages (`replication.ROW_COLUMNS`); our hub advertises them in its version vector's
`profile` (`sync_rows`), and anything else gets the reference shapes. Each page is validated,
its missing artifacts fetched, then artifacts and events are applied in one transaction.
Progress is only what is applied plus idempotent apply, so a round may crash anywhere and the
next one resumes.

A peer is not trusted with our memory or our time: every HTTP response is streamed and refused
past `max_response_bytes` (and past a matching number of JSON values), a page longer than the
limit asked is refused, and a round with one peer has a total deadline that also bounds every
socket read. Peers run concurrently (`sync_all`, the hub's `SyncLoop`), so a slow one delays
only itself. Where a pull resumes is checked against what the peer holds (`_pull_start`), so an
event with a forged, far-ahead origin position cannot stop later pulls. Peer URLs are shown,
logged and stored without their credentials (`redact_url`). Must not import fastapi, typer or
mcp.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mempalace_logstream import errors, replication
from mempalace_logstream import validation as v
from mempalace_logstream.store import LogStore

log = logging.getLogger(__name__)

BATCH = 500  # events per ops request (the reference's cap too)
ROWS_BATCH = replication.MAX_ROWS_LIMIT  # events per compact page (our hubs)
ARTIFACT_BATCH = 100  # ids per batched artifact request
APPLY_ARTIFACT_BYTES = 16 * 1024 * 1024  # artifact content held before it is applied alone
PUSH_MAX_BYTES = 8 * 1024 * 1024  # artifact bytes per push request
DEFAULT_INTERVAL_S = 15.0
HTTP_TIMEOUT_S = 30.0
DEFAULT_DEADLINE_S = 300.0  # a whole round with one peer
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # bytes read from one peer response (decoded)
MIN_RESPONSE_BYTES = 64 * 1024
BYTES_PER_JSON_VALUE = 64  # a response may hold max_response_bytes / 64 JSON values
ABANDON_GRACE_S = 30.0  # past its deadline, a round still running is reported and left

Progress = Callable[[dict[str, Any]], None]


class Peer(Protocol):
    """One remote replica as seen by a sync round. Every method may raise SyncError."""

    name: str
    url: str

    def version_vector(self) -> dict[str, Any]:
        """`{replica_id, version_vector}` as served at `/sync/version_vector` (our hubs add
        `origin_fingerprints`: of the positions accounted for up to each entry, see
        `replication.fingerprint_upto`)."""
        ...

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Events of `origin` with origin_seq > after, ascending, at most `limit`."""
        ...

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The artifacts (with content) among `ids` the peer holds; unknown ids are omitted."""
        ...

    def push(self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
             sender: str) -> dict[str, Any]:  # fmt: skip
        """Ask the peer to apply these (artifacts first); returns its apply report."""
        ...

    def count(self, origin: str, upto: int) -> int:
        """How many positions of `origin` <= upto the peer accounts for (hole probes). Our
        peers also offer `fingerprint(origin, upto)`, which hole searches prefer."""
        ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------- limits


class DeadlineExceededError(errors.SyncError):
    """A round with one peer ran past its total deadline (what it applied stays)."""


class ResponseTooLargeError(errors.SyncError):
    """A peer's response was over the byte (or JSON value) cap; it was not decoded."""


class Deadline:
    """The total time one round with a peer may take, on the monotonic clock; `cancel()`
    ends it at once (the hub is stopping)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds
        self.cancelled = False

    def left(self) -> float | None:
        """Seconds left (<= 0 once passed); None for no deadline."""
        if self.cancelled:
            return 0.0
        return None if self._end is None else self._end - time.monotonic()

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def cancel(self) -> None:
        self.cancelled = True


def check_deadline(peer: Any, doing: str = "") -> None:
    """Raise DeadlineExceededError if the round with `peer` is past its deadline."""
    deadline = getattr(peer, "deadline", None)
    if deadline is None or not deadline.passed():
        return
    where = f" ({doing})" if doing else ""
    if deadline.cancelled:
        message = f"{peer.name}: the round was stopped (the hub is shutting down){where}"
    else:
        message = (
            f"{peer.name}: the round passed its {deadline.seconds:g} s deadline "
            f"(deadline_s){where}; what it applied stays"
        )
    raise DeadlineExceededError(message, peer_id=peer.name)


class _DeadlinePassed(Exception):
    """Raised inside a socket operation started after the round's deadline."""


class _DeadlineStream:
    """An httpcore network stream whose every read, write and TLS handshake waits at most
    until the round's deadline: a peer that trickles bytes (even inside its headers) cannot
    keep a request alive past it. Duck-typed on httpcore's NetworkStream."""

    def __init__(self, inner: Any, left: Callable[[], float | None]) -> None:
        self._inner, self._left = inner, left

    def _timeout(self, timeout: float | None) -> float | None:
        left = self._left()
        if left is None:
            return timeout
        if left <= 0:
            raise _DeadlinePassed
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._timeout(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._timeout(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _DeadlineStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, self._timeout(timeout))
        return _DeadlineStream(inner, self._left)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """Wraps httpcore's network backend so that every connection it opens is a
    `_DeadlineStream` (duck-typed on httpcore's NetworkBackend)."""

    def __init__(self, inner: Any, left: Callable[[], float | None]) -> None:
        self._inner, self._left = inner, left

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        probe = _DeadlineStream(None, self._left)
        stream = self._inner.connect_tcp(
            host,
            port,
            timeout=probe._timeout(timeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self._left)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> Any:
        probe = _DeadlineStream(None, self._left)
        stream = self._inner.connect_unix_socket(
            path, timeout=probe._timeout(timeout), socket_options=socket_options
        )
        return _DeadlineStream(stream, self._left)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound_sockets(client: Any, left: Callable[[], float | None]) -> bool:
    """Put every connection pool of an httpx.Client behind `_DeadlineBackend` (httpx offers no
    public hook; a test fails loudly if its internals move). True if one was wrapped."""
    wrapped = False
    for transport in [client._transport, *client._mounts.values()]:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend, left)
            wrapped = True
    return wrapped


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values_bound(raw: bytes | bytearray, strings: bool = True) -> int:
    """An upper bound on the values and keys a JSON text decodes to: every one but the first
    follows a `[`, `{`, `,` or `:`. With `strings=False` the contents of strings are left
    out first (exact separators; slower, for when the quick bound is over a cap)."""
    if not strings:
        raw = _JSON_STRING.sub(b'""', raw)
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def redact_url(url: Any) -> str:
    """`url` without the `user:password@` of its authority: the form every peer URL is shown,
    logged and stored in (the request itself still uses the full URL)."""
    text = str(url)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*:)?//[^/?#]*@", r"\1//", text)


def _url_secrets(url: str) -> list[str]:
    """The credential parts of a URL (user:password, password), longest first, for scrubbing
    them from error texts that a library may have built from the full URL."""
    m = re.match(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//([^/?#]*)@", url)
    if not m or not m.group(1):
        return []
    userinfo = m.group(1)
    parts = [userinfo, userinfo.partition(":")[2]]
    return sorted({p for p in parts if len(p) >= 3}, key=len, reverse=True)


# ----------------------------------------------------------------------------- peers


class LocalPeer:
    """A peer that is another LogStore in this process (`logstream sync --peer-db PATH`)."""

    rows_limit = ROWS_BATCH
    deadline: Deadline | None = None

    def __init__(self, store: LogStore, name: str | None = None) -> None:
        self.store = store
        self.url = str(store.engine.url.render_as_string(hide_password=True))
        self.name = name or self.url

    def version_vector(self) -> dict[str, Any]:
        positions = replication.origin_positions(self.store)
        return {
            "replica_id": self.store.replica_id,
            "version_vector": {o: top for o, (top, _) in positions.items()},
            "origin_fingerprints": {o: list(fp) for o, (_, fp) in positions.items()},
        }

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        return replication.ops_page(self.store, origin, after, limit)["events"]

    def rows(self, origin: str, after: int, limit: int) -> list[Any]:
        """A compact page (`replication.ROW_COLUMNS` rows)."""
        return replication.ops_rows(self.store, origin, after, limit)["rows"]

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        found, _, more = replication.get_artifacts(self.store, ids)
        out = [a.to_dict() for a in found]
        if more:
            out += self.artifacts(more)
        return out

    def push(self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
             sender: str) -> dict[str, Any]:  # fmt: skip
        return apply_push(self.store, artifacts, events, sender)

    def count(self, origin: str, upto: int) -> int:
        return replication.count_upto(self.store, origin, upto)

    def fingerprint(self, origin: str, upto: int) -> replication.Fingerprint:
        return replication.fingerprint_upto(self.store, origin, upto)

    def close(self) -> None:
        return None


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

        target = url.rstrip("/")
        self.url = redact_url(target)
        self.name = name or self.url
        self._secrets = _url_secrets(target)
        self.max_response_bytes = max(MIN_RESPONSE_BYTES, int(max_response_bytes))
        self.deadline: Deadline | None = None
        # Uncompressed bodies only: the cap then bounds what is decoded, not what is inflated.
        headers = {"Accept-Encoding": "identity"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(base_url=target, headers=headers, timeout=timeout)
        _bound_sockets(self._client, self._left)
        self.batched: bool | None = None  # None until the batch route was tried
        self.prefetch = True  # request the next ops page while applying this one
        self.rows_limit = 0  # compact page size the hub offers (0: reference pages only)
        self.page_ceiling: int | None = None  # lowered when a page is over the response cap

    def _left(self) -> float | None:
        return None if self.deadline is None else self.deadline.left()

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _request(self, method: str, path: str, pause: Callable[[], Any] | None = None,
                 **kw: Any) -> Any:  # fmt: skip
        """The decoded JSON body of a request, read as a stream within the response cap and
        the round's deadline. With `pause`, the body is read only once `pause()` returns (the
        request is already on its way, so the hub works meanwhile)."""
        import httpx

        check_deadline(self, path)
        try:
            resp = self._client.send(self._client.build_request(method, path, **kw), stream=True)
            try:
                if pause is not None:
                    pause()
                raw = self._read_capped(resp, path)
            finally:
                resp.close()
        except (httpx.HTTPError, _DeadlinePassed) as exc:
            check_deadline(self, path)  # the deadline, not the timeout it caused, is the error
            raise errors.PeerUnavailableError(
                self._scrub(f"{self.url}{path}: {type(exc).__name__}: {exc}"), peer_id=self.name
            ) from exc
        if resp.status_code >= 400:
            text = raw[:300].decode("utf-8", "replace")
            raise _HttpStatus(
                resp.status_code,
                f"{self.url}{path}: HTTP {resp.status_code}: {self._scrub(text)}",
                peer_id=self.name,
            )
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
        body = self._request("GET", "/sync/version_vector")
        self.rows_limit = rows_offer(body)
        return body

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        body = self._request(
            "GET", "/sync/ops", params={"origin": origin, "after": after, "limit": limit}
        )
        evs = body.get("events") if isinstance(body, dict) else None
        if not isinstance(evs, list):
            raise errors.SyncError(f"{self.url}/sync/ops: no events list", peer_id=self.name)
        return evs

    def rows(self, origin: str, after: int, limit: int,
             pause: Callable[[], Any] | None = None) -> list[Any]:  # fmt: skip
        """A compact page; raises _RowsRefused when the hub has no such route or speaks
        another row format (the caller then falls back to `/sync/ops`). `pause`: as in
        `_request` (the sync pipeline's gate)."""
        params = {"origin": origin, "after": after, "limit": limit}
        try:
            body = self._request("GET", "/sync/ops_rows", pause, params=params)
        except _HttpStatus as exc:
            if exc.status in (404, 405):
                raise _RowsRefused(exc.message, peer_id=self.name) from exc
            raise
        if (
            not isinstance(body, dict)
            or body.get("columns") != list(replication.ROW_COLUMNS)
            or not isinstance(body.get("rows"), list)
        ):
            raise _RowsRefused(f"{self.url}/sync/ops_rows: not a {replication.ROWS_FORMAT} page",
                               peer_id=self.name)  # fmt: skip
        return body["rows"]

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        return [a for got, _ in self.artifact_responses(ids) for a in got]

    def artifact_responses(self, ids: Sequence[str]) -> Iterator[tuple[list[Any], list[str]]]:
        """(artifacts, ids those responses answered) one response at a time, so the caller
        holds at most one response more than it decides to keep."""
        for chunk in _chunks(list(ids), ARTIFACT_BATCH):
            if self.batched is not False:
                try:
                    yield from self._batches(chunk)
                    self.batched = True
                    continue
                except _HttpStatus as exc:
                    if exc.status not in (404, 405) or self.batched:
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
        except _HttpStatus as exc:
            if exc.status == 404:
                return None
            raise
        return body.get("artifact") if isinstance(body, dict) else None

    def push(self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
             sender: str) -> dict[str, Any]:  # fmt: skip
        payload = {"replica_id": sender, "artifacts": list(artifacts), "events": list(events)}
        try:
            out = self._request("POST", "/sync/push", json=payload)
        except _HttpStatus as exc:
            if exc.status in (404, 405):
                raise _PushRefused(
                    f"{self.url} does not accept pushes (a reference hub?); it can pull from us",
                    peer_id=self.name,
                ) from exc
            raise
        return out if isinstance(out, dict) else {}

    def count(self, origin: str, upto: int) -> int:
        return self.fingerprint(origin, upto)[0]

    def fingerprint(self, origin: str, upto: int) -> replication.Fingerprint:
        """The peer's fingerprint of the positions of `origin` up to `upto` (`/sync/count`)."""
        try:
            body = self._request("GET", "/sync/count", params={"origin": origin, "upto": upto})
        except _HttpStatus as exc:
            if exc.status in (404, 405):
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


class _PushRefused(errors.SyncError):
    """The peer has no push route (the reference hub is pull-only)."""


class _RowsRefused(errors.SyncError):
    """The peer serves no compact pages after all: use the reference's `/sync/ops`."""


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


class _HttpStatus(errors.SyncError):
    def __init__(self, status: int, message: str, *, peer_id: str | None = None) -> None:
        super().__init__(message, peer_id=peer_id)
        self.status = status


# ----------------------------------------------------------------------------- push (receiver)


def apply_push(store: LogStore, artifacts: Any, events: Any, sender: Any) -> dict[str, Any]:
    """Apply a pushed batch (artifacts first), fully validated; the receiver side of --push."""
    if not isinstance(artifacts, list) or not isinstance(events, list):
        raise errors.ValidationError("artifacts and events must be lists", field="events")
    if len(events) > BATCH:
        raise v.fail("events", f"has {len(events)} items; the limit is {BATCH}", BATCH)
    peer = f"push:{sender}" if isinstance(sender, str) and sender else "push"
    res = replication.apply_remote_artifacts(store, artifacts, peer)
    res.merge(replication.apply_remote_events(store, events, peer))
    return res.to_dict()


# ----------------------------------------------------------------------------- one round


def sync_with_peer(
    store: LogStore, peer: Peer, push: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """One anti-entropy round: pull every origin the peer holds events of that we lack
    (artifacts before the events that use them), then with `push` send what the peer lacks.

    Memory is bounded by three pages, each within the response cap. Raises SyncError (also
    DeadlineExceededError, ResponseTooLargeError, PeerUnavailableError) if the peer fails;
    refused items do not raise, they are reported in the result, and so are origin positions
    that do not add up (`sequence_anomalies`, see `_pull_start`).
    """
    mine = replication.origin_positions(store)  # before the peer's vector: see _author_check
    remote = peer.version_vector()
    peer_replica, rvv, rfps = _parse_vector(remote, peer)
    res = replication.ApplyResult()
    stats: dict[str, Any] = {
        "peer_name": peer.name, "peer_url": peer.url, "peer_replica": peer_replica,
        "pulled_events": 0, "pulled_artifacts": 0, "pushed_events": 0, "pushed_artifacts": 0,
        "per_origin": {}, "remote_version_vector": rvv,
    }  # fmt: skip
    anomalies: list[dict[str, Any]] = []
    plan = _plan_pulls(store, peer, peer_replica, mine, rvv, rfps, anomalies)
    total = sum(rvv[o] - after for o, after in plan.items())
    for origin in sorted(plan):
        top = rvv[origin]
        n = _pull_origin(store, peer, origin, plan[origin], top, res, stats, progress, total)
        # Pulling up to the peer's top cannot fill a hole below where we started: the peer's
        # fingerprint can (one more pass at most, so a round always ends). Deferred events
        # are left to their own retries (`replication.pull_after`).
        again = None
        if replication.pull_after(store, origin, top) >= top:
            again = _hole_start(store, peer, origin, top, top, None, rfps, anomalies)
        if again is not None:
            n += _pull_origin(store, peer, origin, again, top, res, stats, progress, total)
        if n:
            stats["per_origin"][origin] = n
    if push:
        try:
            _push(store, peer, peer_replica, rvv, rfps, res, stats, progress, anomalies)
        except _PushRefused as exc:  # a pull-only (reference) hub: the pull half still counts
            stats["push_error"] = exc.message
    stats["pulled_events"] = res.applied_events
    stats.update(
        duplicates=res.duplicates, own_echo=res.own, conflicts=res.conflicts[:100],
        conflict_count=len(res.conflicts), rejected=res.rejected[:100],
        rejected_count=len(res.rejected), clock_anomalies=len(res.clock_anomalies),
        sequence_anomalies=anomalies[:100], sequence_anomaly_count=len(anomalies),
    )  # fmt: skip
    return stats


Fingerprints = Mapping[str, replication.Fingerprint]


def _parse_vector(remote: Any, peer: Peer) -> tuple[str, dict[str, int], Fingerprints | None]:
    """(replica id, vector, origin_fingerprints or None) of a `/sync/version_vector` body;
    every number must fit an origin position. Raises SyncError naming what is wrong."""
    try:
        if not isinstance(remote, dict) or not isinstance(remote.get("version_vector"), dict):
            raise v.fail("version_vector", "must be a JSON object")
        rid = v.replica_id(remote.get("replica_id"))
        rvv = _position_map(remote["version_vector"], "version_vector")
        raw = remote.get("origin_fingerprints")
        rfps = None
        if raw is not None:
            if not isinstance(raw, dict):
                raise v.fail("origin_fingerprints", "must be a JSON object")
            rfps = {
                v.replica_id(o, "origin_fingerprints key"): fingerprint(fp, "origin_fingerprints")
                for o, fp in raw.items()
            }
    except errors.ValidationError as exc:
        raise errors.SyncError(
            f"{peer.url}: bad version vector: {exc.message}", peer_id=peer.name
        ) from exc
    return rid, rvv, rfps


def _position_map(raw: Any, field: str) -> dict[str, int]:
    out = {}
    for origin, n in raw.items():
        key = v.replica_id(origin, f"{field} key")
        value = replication.seq_int(f"{field} value", n)
        if value < 0:
            raise v.fail(f"{field} value", f"is {value}; it must be a non-negative integer")
        out[key] = value
    return out


def fingerprint(raw: Any, field: str = "fingerprint") -> replication.Fingerprint:
    """A wire fingerprint [count, sum mod FP_P1, sum of squares mod FP_P2]; raises
    ValidationError naming `field`."""
    ok = (
        isinstance(raw, list)
        and len(raw) == 3
        and all(type(x) is int for x in raw)
        and 0 <= raw[0] <= replication.MAX_SEQ
        and 0 <= raw[1] < replication.FP_P1
        and 0 <= raw[2] < replication.FP_P2
    )
    if not ok:
        raise v.fail(field, "must hold [count, sum, sum of squares] of origin positions")
    return raw[0], raw[1], raw[2]


def _plan_pulls(
    store: LogStore,
    peer: Peer,
    peer_replica: str,
    mine: Mapping[str, tuple[int, replication.Fingerprint]],
    rvv: Mapping[str, int],
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> dict[str, int]:
    """{origin: the origin_seq to pull after} for every origin the peer has something of
    that we lack; deferred events pin their origin lower (see `replication.pull_after`)."""
    plan = {}
    for origin, top in rvv.items():
        if origin == store.replica_id:
            continue
        held_top, fp = mine.get(origin, (0, replication.NO_POSITIONS))
        after = _pull_start(store, peer, origin, top, held_top, fp, rfps, anomalies)
        if origin == peer_replica and held_top > top:
            anomalies += _author_check(store, peer, origin, top, held_top)
        floor = replication.pull_after(store, origin, top)
        if floor < top:
            after = floor if after is None else min(after, floor)
        if after is not None and after < top:
            plan[origin] = after
    return plan


def _pull_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    held_top: int,
    fp: replication.Fingerprint,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Where to pull `origin` from the peer whose vector entry is `top`, or None.

    Our own vector entry is only trusted up to what the peer holds: when we hold events of
    `origin` above `top` (an event with a forged, far-ahead origin_seq, or a peer behind us),
    the pull resumes after the highest position we hold at or below `top`. When that is `top`
    itself and the peer sends the fingerprint of the positions it accounts for up to `top`
    (`origin_fingerprints`, our hubs), a different fingerprint on our side means a hole: the
    first position it holds that we lack is searched with `/sync/count` probes and the pull
    resumes just before it. So a jump never moves where pulls resume past what the peer can
    show us, and every such case is reported.
    """
    if held_top < top:
        return held_top  # the usual case: the peer is ahead
    held = held_top if held_top == top else replication.highest_held(store, origin, top)
    if held < top:
        anomalies.append(_anomaly(origin, "peer_top_not_held", peer, top, held_top, held))
        return held
    ours = fp if held_top == top else None
    return _hole_start(store, peer, origin, top, held_top, ours, rfps, anomalies)


def _hole_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    held_top: int,
    ours: replication.Fingerprint | None,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Just before the first position of `origin` up to the peer's `top` that the peer
    accounts for and we do not, or None (`ours`: our fingerprint up to `top`, if known)."""
    theirs = None if rfps is None else rfps.get(origin)
    if theirs is None:
        return None
    if ours is None:
        ours = replication.fingerprint_upto(store, origin, top)
    if ours == theirs:
        return None
    first = _first_gap(store, peer, origin, top, "peer", (ours, theirs))
    if first is None:
        return None
    anomalies.append(_anomaly(origin, "hole", peer, top, held_top, first - 1, ours, theirs))
    return first - 1


def _anomaly(
    origin: str,
    reason: str,
    peer: Peer,
    peer_top: int,
    local_top: int,
    resume_after: int,
    ours: replication.Fingerprint | None = None,
    theirs: replication.Fingerprint | None = None,
) -> dict[str, Any]:
    if reason == "hole":
        what = (
            f"our positions of {origin} up to {peer_top} differ from the peer's (we account "
            f"for {ours[0] if ours else 0}, it for {theirs[0] if theirs else 0}): the first it "
            f"holds that we lack is {resume_after + 1}"
        )
    else:
        what = (
            f"we hold events of {origin} up to origin_seq {local_top} but not the peer's "
            f"top {peer_top}"
        )
    return {
        "origin": origin,
        "reason": reason,
        "peer": peer.name,
        "peer_top": peer_top,
        "local_top": local_top,
        "resume_after": resume_after,
        "message": f"{what}; pulling {origin} from {peer.name} resumes after {resume_after}",
    }


def _author_check(
    store: LogStore, peer: Peer, origin: str, top: int, held_top: int
) -> list[dict[str, Any]]:
    """The peer IS `origin` and says its own tip is `top`, yet we held events of it above `top`
    before we asked (so they are not events it wrote since): they claim positions their author
    never wrote. They stay (the log is append-only); each is recorded as a `sequence` anomaly
    (sync_rejections, counted in `stats`/`peers`) and reported in the round."""
    reports = []
    for ident, seq in replication.held_above(store, origin, top):
        if seq > held_top:
            break
        message = (
            f"event {ident} claims origin {origin} at origin_seq {seq}, but {origin} itself "
            f"(peer {peer.name}) says its last origin_seq is {top}: a forged or mistaken "
            "position; the event is kept, and pulls of it resume at what its peers hold"
        )
        reports.append(
            {
                "kind": "sequence",
                "ident": ident,
                "origin_replica": origin,
                "origin_seq": seq,
                "peer": peer.name,
                "reason": "beyond_author_tip",
                "retryable": False,
                "message": message,
            }
        )
    replication.record_sequence_anomalies(store, reports)
    return [
        {
            "origin": origin,
            "reason": "beyond_author_tip",
            "peer": peer.name,
            "peer_top": top,
            "local_top": held_top,
            "event_id": r["ident"],
            "origin_seq": r["origin_seq"],
            "message": r["message"],
        }
        for r in reports
    ]


MAX_GAP_STEPS = 64  # positions only the other side holds, passed over in one search


class _Prefixes:
    """Prefix fingerprints of one origin on both sides, fetched as needed and cached for one
    search (ours from the store, theirs with `peer.fingerprint` probes)."""

    def __init__(self, store: LogStore, peer: Peer, origin: str) -> None:
        self.store, self.peer, self.origin = store, peer, origin
        self.ours: dict[int, replication.Fingerprint] = {0: replication.NO_POSITIONS}
        self.theirs: dict[int, replication.Fingerprint] = {0: replication.NO_POSITIONS}

    def at(self, u: int) -> tuple[replication.Fingerprint, replication.Fingerprint]:
        if u not in self.theirs:
            check_deadline(self.peer, f"probing {self.origin} for holes")
            self.ours[u] = replication.fingerprint_upto(self.store, self.origin, u)
            self.theirs[u] = _peer_fingerprint(self.peer, self.origin, u)
        return self.ours[u], self.theirs[u]

    def between(self, a: int, b: int) -> tuple[replication.Fingerprint, replication.Fingerprint]:
        """Both sides' fingerprints of the positions in (a, b]."""
        (oa, ta), (ob, tb) = self.at(a), self.at(b)
        return replication.fp_between(oa, ob), replication.fp_between(ta, tb)


def _peer_fingerprint(peer: Peer, origin: str, upto: int) -> replication.Fingerprint:
    probe = getattr(peer, "fingerprint", None)
    if probe is None:  # a peer that can only count: a count is a weak fingerprint
        return peer.count(origin, upto), 0, 0
    return probe(origin, upto)


def _first_gap(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    holder: str,
    known: tuple[Any, Any] | None = None,
) -> int | None:
    """The lowest position of `origin` up to `top` that `holder` ("peer" or "ours") accounts
    for and the other side does not, or None. Bisects on range fingerprints (O(log top)
    probes); a differing position held by the other side only is passed over and the search
    goes on above it (at most MAX_GAP_STEPS times)."""
    if getattr(peer, "fingerprint", None) is None and getattr(peer, "count", None) is None:
        return None  # a peer that cannot be probed
    fps = _Prefixes(store, peer, origin)
    if known is not None:
        fps.ours[top], fps.theirs[top] = known
    lo = 0
    for _ in range(MAX_GAP_STEPS):
        ours, theirs = fps.between(lo, top)
        if ours == theirs:
            return None
        a, b = lo, top  # (lo, a] agree, (lo, b] differ: position b is held by one side only
        while b - a > 1:
            mid = (a + b) // 2
            ours, theirs = fps.between(lo, mid)
            if ours == theirs:
                a = mid
            else:
                b = mid
        ours, theirs = fps.between(b - 1, b)
        if (theirs if holder == "peer" else ours)[0] > (ours if holder == "peer" else theirs)[0]:
            return b
        lo = b
    return None


def _pull_origin(store: LogStore, peer: Peer, origin: str, after: int, top: int,
                 res: replication.ApplyResult, stats: dict[str, Any],
                 progress: Progress | None, total: int) -> int:  # fmt: skip
    pulled = 0
    gate = _Gate()
    for parsed, nxt, fetched in _pages(store, peer, origin, after, top, gate):
        # Events of another origin are applied too (validated, idempotent) but only the
        # artifacts of the origin asked for are fetched.
        pulled += _apply_page(store, peer, parsed, origin, res, stats, gate, fetched)
        if progress is not None:
            progress({"origin": origin, "pulled": res.applied_events, "total": total,
                      "after": nxt, "top": top})  # fmt: skip
    return pulled


def _apply_page(store: LogStore, peer: Peer, parsed: replication.ParsedEvents,
                origin: str | None, res: replication.ApplyResult, stats: dict[str, Any],
                gate: _Gate | None = None, fetched: _Fetched | None = None) -> int:  # fmt: skip
    """Fetch the artifacts a validated page's events lack (of `origin`'s events; all when
    None), then apply artifacts and events in one transaction. Artifact content beyond
    APPLY_ARTIFACT_BYTES is applied on its own first, so memory stays bounded. `fetched`:
    artifacts the pipeline already fetched for this page (those still missing are used)."""
    need = replication.missing_artifacts(store, parsed.artifact_ids(origin))
    arts: list[Any] = []
    held = 0
    if fetched is not None:
        wanted = set(need)
        arts = [a for a in fetched.items if not _artifact_id(a) or _artifact_id(a) in wanted]
        held = _content_size(arts)
        need = [i for i in need if i not in fetched.ids]
    for got, _ in _artifact_batches(peer, need):
        arts += got
        held += _content_size(got)
        if held > APPLY_ARTIFACT_BYTES:
            part = replication.apply_remote_artifacts(store, arts, peer.name)
            stats["pulled_artifacts"] += part.applied_artifacts
            res.merge(part)
            arts, held = [], 0
    try:
        part = replication.apply_remote_batch(store, arts, parsed, peer.name,
                                              on_bulk=gate.free if gate else None)  # fmt: skip
    finally:
        if gate is not None:
            gate.free()
    stats["pulled_artifacts"] += part.applied_artifacts
    res.merge(part)
    return part.applied_events


def _artifact_batches(peer: Peer, ids: list[str]) -> Iterator[tuple[list[Any], list[str]]]:
    """(artifacts, the ids they answer) per response (HttpPeer) or per ARTIFACT_BATCH ids."""
    batches = getattr(peer, "artifact_responses", None)
    if batches is not None:
        for got, answered in batches(ids):
            yield got, answered
            check_deadline(peer, "fetching artifacts")
        return
    for chunk in _chunks(ids, ARTIFACT_BATCH):
        check_deadline(peer, "fetching artifacts")
        yield peer.artifacts(chunk), chunk


def _artifact_id(raw: Any) -> str | None:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return ident if isinstance(ident, str) else None


def _content_size(raws: Sequence[Any]) -> int:
    return sum(len(a["content"]) for a in raws
               if isinstance(a, dict) and isinstance(a.get("content"), str))  # fmt: skip


@dataclass
class _Fetched:
    """Artifacts fetched ahead for a page (raw, as served) and the ids they were asked for."""

    items: list[Any]
    ids: set[str]


def _prefetch_artifacts(store: LogStore, peer: Peer, parsed: replication.ParsedEvents,
                        origin: str, skip: set[str]) -> _Fetched:  # fmt: skip
    """The artifacts a page lacks, fetched by the pipeline within APPLY_ARTIFACT_BYTES
    (the applier fetches any rest). `skip`: ids the previous page's fetch covers (that page
    may not be committed yet; its artifacts are not asked for twice)."""
    need = [i for i in replication.missing_artifacts(store, parsed.artifact_ids(origin))
            if i not in skip]  # fmt: skip
    out = _Fetched([], set())
    size = 0
    for got, answered in _artifact_batches(peer, need):
        out.items += got
        out.ids.update(answered)
        size += _content_size(got)
        if size > APPLY_ARTIFACT_BYTES:
            break
    return out


class _Gate:
    """Keeps the prefetch thread's validation off the GIL while the applying thread needs it.

    Both are CPU-bound Python; left alone they interleave at every one of the apply's short
    SQLite steps (each releases the GIL) and take turns in 5 ms slices, which serializes them
    and then some. Instead the applier marks itself `busy` from the moment it takes a page,
    and `free` when the rest is SQLite work that holds no GIL (the page's index updates, the
    commit) or when it waits for the next page; the validator pauses while it is busy.
    """

    def __init__(self) -> None:
        self._free = threading.Event()
        self._free.set()

    def busy(self) -> None:
        self._free.clear()

    def free(self) -> None:
        self._free.set()

    def wait(self) -> None:
        self._free.wait()


def _fetch(peer: Peer, origin: str, after: int,
           pause: Callable[[], Any] | None = None) -> tuple[list[Any], bool]:  # fmt: skip
    """One page after `after`: (items, True) as compact rows when the peer offers them, else
    (event objects, False) from `ops`. A peer that refuses rows is asked for ops from then on.
    `pause` (HttpPeer only) delays reading the response until the applier is free.

    A page longer than the limit asked is refused (SyncError). A page over the response cap
    is asked again with a sixteenth of the limit, and the peer's pages stay at most half the
    refused limit from then on; one event over the cap is the peer's error."""
    while True:
        check_deadline(peer, f"pulling {origin}")
        limit = _page_limit(peer, getattr(peer, "rows_limit", 0) or BATCH)
        try:
            got, rows, limit = _fetch_once(peer, origin, after, limit, pause)
        except ResponseTooLargeError:
            if limit <= 1:
                raise
            peer.page_ceiling = max(1, limit // 2)  # type: ignore[attr-defined]
            peer.page_limit_now = max(1, limit // 16)  # type: ignore[attr-defined]
            continue
        if len(got) > limit:
            raise errors.SyncError(
                f"{peer.name}: asked for at most {limit} events of {origin} after {after}, "
                f"got {len(got):,}; the page is refused",
                peer_id=peer.name,
            )
        if getattr(peer, "page_limit_now", None):
            peer.page_limit_now = limit * 2  # type: ignore[attr-defined]
        kind = list if rows else dict
        return [r for r in got if isinstance(r, kind)], rows


def _page_limit(peer: Peer, full: int) -> int:
    """The page size to ask for: `full`, unless a page over the response cap lowered it."""
    now = getattr(peer, "page_limit_now", None) or full
    ceiling = getattr(peer, "page_ceiling", None) or full
    return max(1, min(full, now, ceiling))


def _fetch_once(
    peer: Peer, origin: str, after: int, limit: int, pause: Callable[[], Any] | None
) -> tuple[list[Any], bool, int]:
    """(items, as rows?, the limit asked) of one request."""
    if getattr(peer, "rows_limit", 0):
        try:
            if isinstance(peer, HttpPeer):
                return peer.rows(origin, after, limit, pause), True, limit
            return peer.rows(origin, after, limit), True, limit  # type: ignore[attr-defined]
        except _RowsRefused:
            peer.rows_limit = 0  # type: ignore[attr-defined]
            limit = min(limit, BATCH)
    return peer.ops(origin, after, limit), False, limit


_OSEQ_AT = replication.ROW_COLUMNS.index("origin_seq")
_ORIGIN_AT = replication.ROW_COLUMNS.index("origin_replica")


def _page_top(batch: list[Any], rows: bool, origin: str, after: int) -> int:
    """The highest origin_seq of `origin` in a page (`after` if none): where the next starts."""
    if rows:
        pairs = ((r[_ORIGIN_AT], r[_OSEQ_AT]) for r in batch if len(r) > _OSEQ_AT)
    else:
        pairs = ((e.get("origin_replica"), e.get("origin_seq")) for e in batch)
    seqs = [n for o, n in pairs if o == origin and type(n) is int]
    return max(seqs, default=after)


def _pages(store: LogStore, peer: Peer, origin: str, after: int, top: int,
           gate: _Gate | None = None,
           ) -> Iterator[tuple[replication.ParsedEvents, int, _Fetched | None]]:  # fmt: skip
    """(validated page, its highest origin_seq, artifacts fetched ahead) until `top`.

    A peer with `prefetch = True` (HTTP) runs a three-stage pipeline: while the caller applies
    page k, page k+1 is validated (and its missing artifacts fetched) in one thread, paced by
    `gate` (see _Gate), and page k+2 is requested in another, as soon as page k+1 said where
    it ends, so the peer prepares it meanwhile. At most three pages are held.
    """
    gate = gate or _Gate()
    if not getattr(peer, "prefetch", False):
        while after < top:
            batch, rows = _fetch(peer, origin, after)
            nxt = _page_top(batch, rows, origin, after)
            if not batch:
                return  # the peer promised more than it served; the next round retries
            yield replication.parse_events(store, batch, peer.name, rows=rows), nxt, None
            if nxt <= after:
                return  # a peer that does not advance must not loop us forever
            after = nxt
        return
    from concurrent.futures import Future, ThreadPoolExecutor

    fetcher = ThreadPoolExecutor(1, thread_name_prefix="logstream-sync-fetch")
    checker = ThreadPoolExecutor(1, thread_name_prefix="logstream-sync-check")
    paused_gc = _pause_gc()
    pages = 0
    covered: set[str] = set()  # artifact ids fetched for the page before (checker thread)

    def stage(fetched: Future[tuple[list[Any], bool]], start: int) -> _Staged:
        nonlocal covered
        batch, rows = fetched.result()
        nxt = _page_top(batch, rows, origin, start)
        ahead = None
        if batch and start < nxt < top:  # ask for the page after this one right away
            ahead = fetcher.submit(_fetch, peer, origin, nxt, gate.wait)
        parsed = replication.parse_events(store, batch, peer.name, rows=rows, pause=gate.wait)
        arts = _prefetch_artifacts(store, peer, parsed, origin, covered)
        covered = arts.ids
        return parsed, nxt, len(batch), ahead, arts

    try:
        pending = checker.submit(stage, fetcher.submit(_fetch, peer, origin, after, gate.wait),
                                 after)  # fmt: skip
        while after < top:
            gate.free()  # never wait on the validator while it waits on us
            parsed, nxt, served, ahead, arts = pending.result()
            gate.busy()
            if not served:
                return  # the peer promised more than it served; the next round retries
            if ahead is not None:
                pending = checker.submit(stage, ahead, nxt)
            yield parsed, nxt, arts  # applied even if stale: it is validated and idempotent
            if nxt <= after or ahead is None:
                return  # done, or a peer that does not advance must not loop us forever
            after = nxt
            pages += 1
            if paused_gc and pages % GC_EVERY_PAGES == 0:
                # A long pull (or one run by the hub's loop, where the whole server shares the
                # collector) still sweeps cyclic garbage now and then, not only at the end.
                gc.collect(0)
    finally:
        gate.free()
        checker.shutdown(wait=True, cancel_futures=True)
        fetcher.shutdown(wait=True, cancel_futures=True)
        if paused_gc:
            gc.enable()


GC_EVERY_PAGES = 20  # with the collector paused, a young-generation sweep every ~100k events


def _pause_gc() -> bool:
    """Pause the cyclic garbage collector for a pipelined pull; True if it was running.

    Each page allocates ~100k containers, so the collector ran full passes over the pages in
    flight (a third of the page decoding time). The pages hold no reference cycles: they
    are freed by reference counting as before, so memory stays bounded by the pages held;
    only cyclic garbage made meanwhile waits for the end of the pull.
    """
    if not gc.isenabled():
        return False
    gc.disable()
    return True


_Staged = tuple[replication.ParsedEvents, int, int, Any, _Fetched]


def find_holes(store: LogStore, peer: Peer,
               rvv: Mapping[str, int] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Holes the version vector cannot see: for each origin both sides know, compare the
    fingerprints of the positions each accounts for up to the lower top; where they differ,
    search (O(log n) probes) the first position the peer holds and we lack (side "local") and
    the first we hold and the peer lacks (side "peer"). A round already does the first where
    the tops are equal; this probes every origin."""
    if rvv is None:
        rvv = _parse_vector(peer.version_vector(), peer)[1]
    local = store.version_vector()
    holes = []
    for origin in sorted(set(local) & set(rvv)):
        top = min(local[origin], rvv[origin])
        fps = (
            replication.fingerprint_upto(store, origin, top),
            _peer_fingerprint(peer, origin, top),
        )
        if fps[0] == fps[1]:
            continue
        for side, holder in (("local", "peer"), ("peer", "ours")):
            first = _first_gap(store, peer, origin, top, holder, fps)
            if first is not None:
                holes.append(
                    {
                        "origin": origin,
                        "first_missing_origin_seq": first,
                        "upto": top,
                        "local_count": fps[0][0],
                        "peer_count": fps[1][0],
                        "side": side,
                    }
                )
    return holes


def repair_holes(store: LogStore, peer: Peer, progress: Progress | None = None) -> dict[str, Any]:
    """Find holes against `peer` and re-pull each affected origin from its first hole
    (idempotent: events already held are skipped). Returns {holes, pulled_events, ...}."""
    rvv = _parse_vector(peer.version_vector(), peer)[1]
    holes = find_holes(store, peer, rvv)
    res = replication.ApplyResult()
    stats: dict[str, Any] = {"pulled_artifacts": 0}
    for hole in holes:
        if hole["side"] != "local":
            continue
        origin, start = hole["origin"], hole["first_missing_origin_seq"]
        for parsed, _nxt, fetched in _pages(store, peer, origin, start - 1, hole["upto"]):
            # Artifacts of every origin's events (the pipeline fetched the origin's ahead).
            _apply_page(store, peer, parsed, None, res, stats, None, fetched)
    return {"holes": holes, "pulled_events": res.applied_events, **stats,
            "rejected_count": len(res.rejected), "conflict_count": len(res.conflicts)}  # fmt: skip


def _push(
    store: LogStore,
    peer: Peer,
    peer_replica: str,
    rvv: Mapping[str, int],
    rfps: Fingerprints | None,
    res: replication.ApplyResult,
    stats: dict[str, Any],
    progress: Progress | None,
    anomalies: list[dict[str, Any]],
) -> None:
    local = replication.origin_positions(store)
    for origin in sorted(local):
        if origin == peer_replica:
            continue  # its own events: an author keeps only what it wrote (and drops the rest)
        top, fp = local[origin]
        after = _push_start(store, peer, origin, top, fp, rvv.get(origin, 0), rfps, anomalies)
        while after is not None and after < top:
            check_deadline(peer, f"pushing {origin}")
            evs = replication.list_ops(store, origin, after, BATCH)
            if not evs:
                break
            ids = sorted({a for e in evs for a in e.artifact_ids})
            for arts in _artifact_chunks(store, ids):
                report = peer.push(arts, [], store.replica_id)
                stats["pushed_artifacts"] += _report_int(report, "applied_artifacts")
            report = peer.push([], [e.to_dict() for e in evs], store.replica_id)
            stats["pushed_events"] += _report_int(report, "applied_events")
            stats["push_conflicts"] = stats.get("push_conflicts", 0) + _report_int(
                report, "conflict_count"
            )
            stats["push_rejected"] = stats.get("push_rejected", 0) + _report_int(
                report, "rejected_count"
            )
            after = evs[-1].origin_seq
            if progress is not None:
                progress(
                    {"origin": origin, "pushed": stats["pushed_events"], "after": after, "top": top}
                )


def _push_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    fp: replication.Fingerprint,
    peer_top: int,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Where to push `origin` from (the mirror of `_pull_start`), or None: after the peer's
    entry when it is behind us, or before the first position we hold and it lacks when the
    fingerprints up to the lower of the two tops differ. A peer at or past our top is probed
    at our top, so a forged far-ahead event on the peer never stops our pushes."""
    theirs = None if rfps is None else rfps.get(origin)
    if peer_top < top:
        if theirs is None or theirs == replication.fingerprint_upto(store, origin, peer_top):
            return peer_top
        first = _first_gap(store, peer, origin, peer_top, "ours")
        return peer_top if first is None else first - 1
    if origin == store.replica_id and peer_top > top:
        anomalies.append(
            {
                "origin": origin,
                "reason": "peer_beyond_our_tip",
                "peer": peer.name,
                "peer_top": peer_top,
                "local_top": top,
                "message": f"{peer.name} holds events of ours ({origin}) up to origin_seq "
                f"{peer_top}, past our own last origin_seq {top}: forged or mistaken positions; "
                "our pushes to it are probed below them",
            }
        )
    if rfps is None:
        return None  # a peer without fingerprints (the reference) cannot be probed
    at_top = theirs if peer_top == top else _peer_fingerprint(peer, origin, top)
    if at_top == fp:
        return None
    first = _first_gap(store, peer, origin, top, "ours", (fp, at_top))
    return None if first is None else first - 1


def _report_int(report: Any, key: str) -> int:
    n = report.get(key) if isinstance(report, dict) else None
    return n if type(n) is int and 0 <= n <= replication.MAX_SEQ else 0


def _artifact_chunks(store: LogStore, ids: list[str]) -> Iterator[list[dict[str, Any]]]:
    for chunk in _chunks(ids, ARTIFACT_BATCH):
        pending = list(chunk)
        while pending:
            found, _, more = replication.get_artifacts(store, pending, PUSH_MAX_BYTES)
            if found:
                yield [a.to_dict() for a in found]
            if len(more) >= len(pending):
                break
            pending = more


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


# ----------------------------------------------------------------------------- all peers


def peers_file(palace: str | Path) -> Path:
    return Path(palace).expanduser() / "peers.json"


def load_peers(palace: str | Path) -> list[dict[str, Any]]:
    """`<palace>/peers.json` → [{name, url, token}]; a missing file means no peers. `url` keeps
    any credentials (for the requests); a default `name` is the URL without them.

    Raises ValidationError for a malformed file or a peer without a url.
    """
    path = peers_file(palace)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise errors.ValidationError(f"{path}: not valid JSON ({exc})", field="peers") from exc
    items = raw.get("peers") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise errors.ValidationError(f'{path}: expected {{"peers": [...]}}', field="peers")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item["url"]:
            raise errors.ValidationError(f"{path}: peers[{i}] has no url", field="peers")
        token = item.get("token")
        out.append({
            "name": str(item.get("name") or redact_url(item["url"].rstrip("/"))),
            "url": item["url"],
            "token": token if isinstance(token, str) and token else None,
        })  # fmt: skip
    return out


def sync_one(
    store: LogStore,
    peer: Peer,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
) -> dict[str, Any]:
    """A round with one peer that never raises for a peer failure: the error is reported in
    the result (`error`) and recorded in the estate, so other peers still run. With `repair`,
    holes are then probed and re-pulled (`repair` / `repair_error` in the result). The round
    (repair included) ends at `deadline_s` seconds with that as its error; None: no deadline."""
    deadline = Deadline(deadline_s)
    peer.deadline = deadline  # type: ignore[attr-defined]  # read by HttpPeer's sockets
    try:
        result = sync_with_peer(store, peer, push=push, progress=progress)
        if repair:
            try:
                result["repair"] = repair_holes(store, peer, progress)
            except DeadlineExceededError:
                raise
            except errors.SyncError as exc:
                result["repair_error"] = exc.message
    except (errors.SyncError, errors.ValidationError, errors.NotFoundError) as exc:
        error = exc.message
        _safe_estate(store, peer, None, error)
        return {"peer_name": peer.name, "peer_url": peer.url, "error": error}
    _safe_estate(store, peer, result, None)
    return result


def _safe_estate(store: LogStore, peer: Peer, result: dict[str, Any] | None,
                 error: str | None) -> None:  # fmt: skip
    try:
        replication.record_estate(store, peer.name, redact_url(peer.url), result, error)
    except errors.StorageError as exc:  # the estate is advisory; the round itself stands
        log.warning("could not record sync estate for %s: %s", peer.name, exc)


def http_round(
    store: LogStore,
    spec: Mapping[str, Any],
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    started: Callable[[Peer], Any] | None = None,
) -> dict[str, Any]:
    """`sync_one` with the HttpPeer of a peers.json entry {name, url, token}; `started` is
    given the peer once it exists (so a stopping hub can cancel its deadline)."""
    peer = HttpPeer(
        spec["url"], spec.get("token"), name=spec.get("name"), max_response_bytes=max_response_bytes
    )
    try:
        if started is not None:
            started(peer)
        return sync_one(store, peer, push, progress, repair, deadline_s)
    finally:
        peer.close()


def sync_all(
    store: LogStore,
    palace: str | Path,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> list[dict[str, Any]]:
    """One round with every peer of `<palace>/peers.json` (read now, so edits take effect on
    the next round), all peers at once, each in its own thread within its own deadline: a
    slow peer delays only itself. Per-peer errors are reported in the list (in peers.json
    order), never raised."""
    specs = load_peers(palace)
    results: list[dict[str, Any] | None] = [None] * len(specs)
    peers: list[Peer | None] = [None] * len(specs)

    def run(i: int) -> None:
        def started(peer: Peer) -> None:
            peers[i] = peer

        results[i] = http_round(
            store, specs[i], push, progress, repair, deadline_s, max_response_bytes, started
        )

    threads = [
        threading.Thread(target=run, args=(i,), name=f"logstream-sync-{i}", daemon=True)
        for i in range(len(specs))
    ]
    for t in threads:
        t.start()
    end = None if deadline_s is None else time.monotonic() + deadline_s + ABANDON_GRACE_S
    for i, t in enumerate(threads):
        t.join(None if end is None else max(0.0, end - time.monotonic()))
        if results[i] is None:  # still running past its deadline: report it and leave it
            deadline = getattr(peers[i], "deadline", None)
            if deadline is not None:
                deadline.cancel()
            results[i] = {
                "peer_name": specs[i]["name"],
                "peer_url": redact_url(specs[i]["url"]),
                "error": f"the round did not end within {deadline_s:g} s + "
                f"{ABANDON_GRACE_S:g} s; abandoned",
            }
    return [r for r in results if r is not None]


def estate(store: LogStore, palace: str | Path | None = None,
           interval_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The `/sync/peers` payload: self, configured peers with their last round, origins known
    only through others (`unnamed_origins`), and outstanding conflicts/rejections/sequence
    anomalies. No tokens, and URLs without their credentials."""
    rows = {r["name"]: r for r in replication.estate_rows(store)}
    configured: list[dict[str, Any]] = []
    config_error = None
    if palace is not None:
        try:
            configured = load_peers(palace)
        except errors.ValidationError as exc:
            config_error = exc.message
    peers = []
    names = [p["name"] for p in configured] or list(rows)
    for name in names:
        row = rows.get(name, {})
        url = next((p["url"] for p in configured if p["name"] == name), row.get("url"))
        peers.append({
            "name": name, "url": None if url is None else redact_url(url),
            "replica_id": row.get("replica_id"),
            "reachable": row.get("reachable"), "last_success_at": row.get("last_success_at"),
            "last_error": row.get("last_error"), "last_error_at": row.get("last_error_at"),
            "last_pulled_events": row.get("last_pulled_events", 0),
            "last_pulled_artifacts": row.get("last_pulled_artifacts", 0),
            "last_pushed_events": row.get("last_pushed_events", 0),
            "total_pulled_events": row.get("total_pulled_events", 0),
            "rounds": row.get("rounds", 0),
            "remote_version_vector": row.get("remote_version_vector", {}),
        })  # fmt: skip
    vv = store.version_vector()
    named = {store.replica_id} | {p["replica_id"] for p in peers if p["replica_id"]}
    out: dict[str, Any] = {
        "self": {"replica_id": store.replica_id, "name": None, "version_vector": vv},
        "peers": peers,
        "unnamed_origins": sorted(o for o in vv if o not in named),
        "sync_interval_s": interval_s,
        "sync": replication.counts(store),
        "estate_source": {"in_process": False, "published_at": None, "writer_alive": None},
    }
    if config_error:
        out["config_error"] = config_error
    return out


# ----------------------------------------------------------------------------- hub loop

INTERVAL_ENV = ("MEMPALACE_LOGSTREAM_SYNC_INTERVAL", "MEMPALACE_SYNC_INTERVAL")


def interval_from_env(environ: Mapping[str, str]) -> float:
    """The hub loop period in seconds: `MEMPALACE_LOGSTREAM_SYNC_INTERVAL`, else the
    reference's `MEMPALACE_SYNC_INTERVAL`, else 15; 0 or less disables the loop."""
    for key in INTERVAL_ENV:
        raw = (environ.get(key) or "").strip()
        if raw:
            try:
                return max(0.0, float(raw))
            except ValueError:
                raise errors.ValidationError(
                    f"{key}={raw!r} must be a number of seconds (0 disables)", field=key
                ) from None
    return DEFAULT_INTERVAL_S


class _Worker:
    """One peer's thread in the hub loop: a round, then `interval` seconds, until retired."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.key = (spec["name"], spec["url"], spec["token"])
        self.retired = threading.Event()
        self.peer: Any = None
        self.thread: threading.Thread | None = None

    def retire(self) -> None:
        self.retired.set()
        if self.peer is not None and getattr(self.peer, "deadline", None) is not None:
            self.peer.deadline.cancel()


class SyncLoop:
    """Background rounds with every peer of `<palace>/peers.json`, every `interval_s` seconds.

    Each peer has its own thread (a round, then `interval_s`), so a slow or hostile peer
    delays only itself; each round ends at `deadline_s` and reads at most
    `max_response_bytes` per response. A supervisor thread re-reads peers.json every
    `interval_s` and starts, replaces or retires peer threads (a malformed file is logged
    once per change). `start()` is a no-op when interval_s <= 0; `stop()` cancels the
    rounds in flight and joins.
    """

    def __init__(
        self,
        store: LogStore,
        palace: str | Path,
        interval_s: float = DEFAULT_INTERVAL_S,
        push: bool = False,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.store = store
        self.palace = Path(palace).expanduser()
        self.interval_s = float(interval_s)
        self.push = push
        self.deadline_s = deadline_s
        self.max_response_bytes = max_response_bytes
        self.rounds = 0  # supervisor passes over peers.json
        self.peer_rounds: dict[str, int] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.last_error: str | None = None
        self.round_done = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: dict[str, _Worker] = {}

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    @property
    def last_results(self) -> list[dict[str, Any]]:
        """The latest result of each configured peer, in peers.json order."""
        with self.round_done:
            return [self.results[n] for n in self._workers if n in self.results]

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="logstream-sync", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        workers = list(self._workers.values())
        for w in workers:
            w.retire()
        end = time.monotonic() + timeout
        for t in [self._thread, *(w.thread for w in workers)]:
            if t is not None:
                t.join(max(0.0, end - time.monotonic()))
        self._thread = None
        self._workers = {}

    def supervise(self) -> None:
        """One pass over peers.json: a thread for each new or changed peer, none for a removed
        one (its round in flight is cancelled)."""
        try:
            specs, error = load_peers(self.palace), None
        except errors.LogstreamError as exc:
            specs, error = None, exc.message
        if error != self.last_error and error is not None:
            log.warning("sync loop: %s", error)
        self.last_error = error
        if specs is not None:
            wanted = {s["name"]: s for s in specs}
            for name, w in list(self._workers.items()):
                if name not in wanted or w.key != _Worker(wanted[name]).key:
                    w.retire()
                    del self._workers[name]
            for name, spec in wanted.items():
                if name not in self._workers and not self._stop.is_set():
                    self._workers[name] = self._spawn(spec)
        with self.round_done:
            self.rounds += 1
            self.round_done.notify_all()

    def _spawn(self, spec: dict[str, Any]) -> _Worker:
        w = _Worker(spec)
        w.thread = threading.Thread(
            target=self._work, args=(w,), daemon=True, name=f"logstream-sync-{spec['name']}"[:60]
        )
        w.thread.start()
        return w

    def _work(self, w: _Worker) -> None:
        name = w.spec["name"]
        while not (self._stop.is_set() or w.retired.is_set()):
            try:
                result = http_round(
                    self.store,
                    w.spec,
                    self.push,
                    None,
                    False,
                    self.deadline_s,
                    self.max_response_bytes,
                    lambda p: setattr(w, "peer", p),
                )
            except Exception:  # the outermost edge of a daemon thread: keep the loop alive
                log.exception("sync loop round with %s failed", name)
                result = {"peer_name": name, "error": "internal error (see the hub log)"}
            with self.round_done:
                if not w.retired.is_set():
                    self.results[name] = result
                self.peer_rounds[name] = self.peer_rounds.get(name, 0) + 1
                self.round_done.notify_all()
            w.retired.wait(self.interval_s)

    def wait_rounds(self, n: int, timeout: float) -> bool:
        """Block until the supervisor has read peers.json at least `n` times."""
        return self._wait(lambda: self.rounds >= n, timeout)

    def wait_peer_rounds(self, name: str, n: int, timeout: float) -> bool:
        """Block until the peer `name` has finished at least `n` rounds (tests, status)."""
        return self._wait(lambda: self.peer_rounds.get(name, 0) >= n, timeout)

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.round_done:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.round_done.wait(left)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.supervise()
            except Exception:  # the outermost edge of a daemon thread: keep the loop alive
                log.exception("sync loop supervision failed")
            self._stop.wait(self.interval_s)

    def estate(self) -> dict[str, Any]:
        out = estate(self.store, self.palace, self.interval_s if self.enabled else 0)
        out["estate_source"] = {"in_process": True, "published_at": None,
                                "writer_alive": self._thread is not None}  # fmt: skip
        return out
