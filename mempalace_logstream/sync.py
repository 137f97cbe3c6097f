"""Anti-entropy rounds between replicas (S-7.4, S-7.5) over a `Peer` Protocol.

`LocalPeer` wraps a `LogStore` (two local files); `HttpPeer` speaks the hub's `/sync/*` routes
(ours: compact 5,000-event pages, batched artifacts and push; the reference's: 500-event pages,
one artifact per request, pull only). A peer that offers `rows_limit > 0` and `rows()` serves
compact pages (`replication.ROW_COLUMNS`); our hub advertises them in its version vector's
`profile` (`sync_rows`), and anything else gets the reference shapes. Each page is validated,
its missing artifacts fetched, then artifacts and events are applied in one transaction.
Progress is only the version vector plus idempotent apply, so a round may crash anywhere and
the next one resumes. Must not import fastapi, typer or mcp.
"""

from __future__ import annotations

import gc
import json
import logging
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
APPLY_ARTIFACT_BYTES = 32 * 1024 * 1024  # artifact content held before it is applied alone
PUSH_MAX_BYTES = 8 * 1024 * 1024  # artifact bytes per push request
DEFAULT_INTERVAL_S = 15.0
HTTP_TIMEOUT_S = 30.0

Progress = Callable[[dict[str, Any]], None]


class Peer(Protocol):
    """One remote replica as seen by a sync round. Every method may raise SyncError."""

    name: str
    url: str

    def version_vector(self) -> dict[str, Any]:
        """`{replica_id, version_vector}` as served at `/sync/version_vector`."""
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
        """How many events of `origin` with origin_seq <= upto the peer holds (hole probes)."""
        ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------- peers


class LocalPeer:
    """A peer that is another LogStore in this process (`logstream sync --peer-db PATH`)."""

    rows_limit = ROWS_BATCH

    def __init__(self, store: LogStore, name: str | None = None) -> None:
        self.store = store
        self.url = str(store.engine.url.render_as_string(hide_password=True))
        self.name = name or self.url

    def version_vector(self) -> dict[str, Any]:
        return {"replica_id": self.store.replica_id, "version_vector": self.store.version_vector()}

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

    def close(self) -> None:
        return None


class HttpPeer:
    """A hub reached over HTTP(S) with an optional bearer token.

    Detects the reference hub on first use of a route it lacks (404/405): artifacts then come
    one request at a time and push is refused with a SyncError. Compact pages are used only
    when the hub's version vector advertised them (`rows_limit` is set by `version_vector()`),
    and dropped for the reference shape if the hub then refuses them.
    """

    def __init__(self, url: str, token: str | None = None, *, name: str | None = None,
                 timeout: float = HTTP_TIMEOUT_S) -> None:  # fmt: skip
        import httpx

        self.url = url.rstrip("/")
        self.name = name or self.url
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self.batched: bool | None = None  # None until the batch route was tried
        self.prefetch = True  # request the next ops page while applying this one
        self.rows_limit = 0  # compact page size the hub offers (0: reference pages only)

    def _request(self, method: str, path: str, pause: Callable[[], Any] | None = None,
                 **kw: Any) -> Any:  # fmt: skip
        """The JSON body of a request; with `pause`, the body is read and decoded only once
        `pause()` returns (the request is already on its way, so the hub works meanwhile)."""
        import httpx

        try:
            if pause is None:
                resp = self._client.request(method, path, **kw)
            else:
                resp = self._client.send(self._client.build_request(method, path, **kw),
                                         stream=True)  # fmt: skip
                try:
                    pause()
                    resp.read()
                finally:
                    resp.close()
        except httpx.HTTPError as exc:
            raise errors.PeerUnavailableError(
                f"{self.url}{path}: {type(exc).__name__}: {exc}", peer_id=self.name
            ) from exc
        if resp.status_code >= 400:
            raise _HttpStatus(resp.status_code, f"{self.url}{path}: HTTP {resp.status_code}: "
                              f"{resp.text[:300]}", peer_id=self.name)  # fmt: skip
        try:
            return resp.json()
        except ValueError as exc:
            raise errors.SyncError(f"{self.url}{path}: not JSON", peer_id=self.name) from exc

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
        if not ids:
            return []
        if self.batched is not False:
            try:
                out = self._batch_artifacts(list(ids))
                self.batched = True
                return out
            except _HttpStatus as exc:
                if exc.status not in (404, 405) or self.batched:
                    raise
                self.batched = False  # the reference hub: one request per artifact
        return [a for a in (self._one_artifact(i) for i in ids) if a is not None]

    def _batch_artifacts(self, ids: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while ids:
            body = self._request("POST", "/sync/artifacts", json={"ids": ids})
            out += list(body.get("artifacts") or [])
            more = list(body.get("more") or [])
            if len(more) >= len(ids):  # no progress: the server refuses to send any
                break
            ids = more
        return out

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
            return self._request("POST", "/sync/push", json=payload)
        except _HttpStatus as exc:
            if exc.status in (404, 405):
                raise _PushRefused(
                    f"{self.url} does not accept pushes (a reference hub?); it can pull from us",
                    peer_id=self.name,
                ) from exc
            raise

    def count(self, origin: str, upto: int) -> int:
        try:
            body = self._request("GET", "/sync/count", params={"origin": origin, "upto": upto})
        except _HttpStatus as exc:
            if exc.status in (404, 405):
                raise errors.SyncError(
                    f"{self.url} cannot be probed for holes (no /sync/count; a reference hub?)",
                    peer_id=self.name,
                ) from exc
            raise
        return int(body["count"])

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
    """One anti-entropy round: pull every origin the peer is ahead on (artifacts before the
    events that use them), then with `push` send what the peer lacks.

    Memory is bounded by three pages. Raises SyncError/PeerUnavailableError if the peer fails;
    refused items do not raise, they are reported in the result.
    """
    remote = peer.version_vector()
    peer_replica, rvv = _parse_vector(remote, peer)
    res = replication.ApplyResult()
    stats: dict[str, Any] = {
        "peer_name": peer.name, "peer_url": peer.url, "peer_replica": peer_replica,
        "pulled_events": 0, "pulled_artifacts": 0, "pushed_events": 0, "pushed_artifacts": 0,
        "per_origin": {}, "remote_version_vector": rvv,
    }  # fmt: skip
    local = store.version_vector()
    todo = {
        o: top for o, top in rvv.items() if o != store.replica_id and top > local.get(o, 0)
    } | _deferred_origins(store, rvv)
    total = sum(max(0, top - local.get(o, 0)) for o, top in todo.items())
    for origin in sorted(todo):
        n = _pull_origin(store, peer, origin, rvv[origin], res, stats, progress, total)
        if n:
            stats["per_origin"][origin] = n
    if push:
        try:
            _push(store, peer, rvv, res, stats, progress)
        except _PushRefused as exc:  # a pull-only (reference) hub: the pull half still counts
            stats["push_error"] = exc.message
    stats["pulled_events"] = res.applied_events
    stats.update(
        duplicates=res.duplicates, own_echo=res.own, conflicts=res.conflicts[:100],
        conflict_count=len(res.conflicts), rejected=res.rejected[:100],
        rejected_count=len(res.rejected), clock_anomalies=len(res.clock_anomalies),
    )  # fmt: skip
    return stats


def _parse_vector(remote: Any, peer: Peer) -> tuple[str, dict[str, int]]:
    try:
        if not isinstance(remote, dict) or not isinstance(remote.get("version_vector"), dict):
            raise v.fail("version_vector", "must be a JSON object")
        rid = v.replica_id(remote.get("replica_id"))
        rvv = {
            v.replica_id(o, "version_vector key"): v.strict_int("version_vector value", n)
            for o, n in remote["version_vector"].items()
        }
    except errors.ValidationError as exc:
        raise errors.SyncError(f"{peer.url}: bad version vector: {exc.message}") from exc
    return rid, rvv


def _deferred_origins(store: LogStore, rvv: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for origin, top in rvv.items():
        if origin != store.replica_id and replication.pull_after(store, origin, top) < top:
            out[origin] = top
    return out


def _pull_origin(store: LogStore, peer: Peer, origin: str, top: int,
                 res: replication.ApplyResult, stats: dict[str, Any],
                 progress: Progress | None, total: int) -> int:  # fmt: skip
    after = replication.pull_after(store, origin, replication.origin_top(store, origin))
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
    for chunk in _chunks(need, ARTIFACT_BATCH):
        got = peer.artifacts(chunk)
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
    for chunk in _chunks(need, ARTIFACT_BATCH):
        got = peer.artifacts(chunk)
        out.items += got
        out.ids.update(chunk)
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
    `pause` (HttpPeer only) delays reading the response until the applier is free."""
    limit = getattr(peer, "rows_limit", 0)
    if limit:
        try:
            if isinstance(peer, HttpPeer):
                got = peer.rows(origin, after, limit, pause)
            else:
                got = peer.rows(origin, after, limit)  # type: ignore[attr-defined]
            return [r for r in got if isinstance(r, list)], True
        except _RowsRefused:
            peer.rows_limit = 0  # type: ignore[attr-defined]
    return [e for e in peer.ops(origin, after, BATCH) if isinstance(e, dict)], False


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
    """Holes the version vector cannot see: for each origin both sides know, compare how many
    events each holds up to the lower top; where we hold fewer, bisect (O(log n) probes) to
    the first missing origin_seq. Where the peer holds fewer, report it as the peer's hole."""
    if rvv is None:
        rvv = _parse_vector(peer.version_vector(), peer)[1]
    local = store.version_vector()
    holes = []
    for origin in sorted(set(local) & set(rvv)):
        top = min(local[origin], rvv[origin])
        mine, theirs = replication.count_upto(store, origin, top), peer.count(origin, top)
        if mine == theirs:
            continue
        lo, hi = 0, top  # counts agree at lo (0 = nothing), differ at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if replication.count_upto(store, origin, mid) == peer.count(origin, mid):
                lo = mid
            else:
                hi = mid
        holes.append({"origin": origin, "first_missing_origin_seq": hi, "upto": top,
                      "local_count": mine, "peer_count": theirs,
                      "side": "local" if mine < theirs else "peer"})  # fmt: skip
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


def _push(store: LogStore, peer: Peer, rvv: Mapping[str, int], res: replication.ApplyResult,
          stats: dict[str, Any], progress: Progress | None) -> None:  # fmt: skip
    local = store.version_vector()
    for origin in sorted(local):
        after = rvv.get(origin, 0)
        while after < local[origin]:
            evs = replication.list_ops(store, origin, after, BATCH)
            if not evs:
                break
            ids = sorted({a for e in evs for a in e.artifact_ids})
            for arts in _artifact_chunks(store, ids):
                report = peer.push(arts, [], store.replica_id)
                stats["pushed_artifacts"] += int(report.get("applied_artifacts", 0))
            report = peer.push([], [e.to_dict() for e in evs], store.replica_id)
            stats["pushed_events"] += int(report.get("applied_events", 0))
            stats["push_conflicts"] = stats.get("push_conflicts", 0) + int(
                report.get("conflict_count", 0)
            )
            stats["push_rejected"] = stats.get("push_rejected", 0) + int(
                report.get("rejected_count", 0)
            )
            after = evs[-1].origin_seq
            if progress is not None:
                progress({"origin": origin, "pushed": stats["pushed_events"], "after": after,
                          "top": local[origin]})  # fmt: skip


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
    """`<palace>/peers.json` → [{name, url, token}]; a missing file means no peers.

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
            "name": str(item.get("name") or item["url"]), "url": item["url"],
            "token": token if isinstance(token, str) and token else None,
        })  # fmt: skip
    return out


def sync_one(
    store: LogStore,
    peer: Peer,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
) -> dict[str, Any]:
    """A round with one peer that never raises for a peer failure: the error is reported in
    the result (`error`) and recorded in the estate, so other peers still run. With `repair`,
    holes are then probed and re-pulled (`repair` / `repair_error` in the result)."""
    try:
        result = sync_with_peer(store, peer, push=push, progress=progress)
        if repair:
            try:
                result["repair"] = repair_holes(store, peer, progress)
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
        replication.record_estate(store, peer.name, peer.url, result, error)
    except errors.StorageError as exc:  # the estate is advisory; the round itself stands
        log.warning("could not record sync estate for %s: %s", peer.name, exc)


def sync_all(
    store: LogStore,
    palace: str | Path,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
) -> list[dict[str, Any]]:
    """One round with every peer of `<palace>/peers.json` (read now, so edits take effect on
    the next round). Per-peer errors are reported in the list, never raised."""
    results = []
    for spec in load_peers(palace):
        peer = HttpPeer(spec["url"], spec["token"], name=spec["name"])
        try:
            results.append(sync_one(store, peer, push=push, progress=progress, repair=repair))
        finally:
            peer.close()
    return results


def estate(store: LogStore, palace: str | Path | None = None,
           interval_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The `/sync/peers` payload: self, configured peers with their last round, origins known
    only through others (`unnamed_origins`), and outstanding conflicts/rejections. No tokens."""
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
            "name": name, "url": url, "replica_id": row.get("replica_id"),
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


class SyncLoop:
    """Background rounds with every peer of `<palace>/peers.json` every `interval_s` seconds.

    `start()` spawns a daemon thread (a no-op when interval_s <= 0); `stop()` wakes it and
    joins. peers.json is re-read every round; a malformed file is logged once per change.
    """

    def __init__(self, store: LogStore, palace: str | Path, interval_s: float = DEFAULT_INTERVAL_S,
                 push: bool = False) -> None:  # fmt: skip
        self.store = store
        self.palace = Path(palace).expanduser()
        self.interval_s = float(interval_s)
        self.push = push
        self.rounds = 0
        self.last_results: list[dict[str, Any]] = []
        self.last_error: str | None = None
        self.round_done = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="logstream-sync", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run_once(self) -> list[dict[str, Any]]:
        try:
            results = sync_all(self.store, self.palace, push=self.push)
            error = None
        except errors.LogstreamError as exc:
            results, error = [], exc.message
        if error != self.last_error and error is not None:
            log.warning("sync loop: %s", error)
        self.last_error = error
        with self.round_done:
            self.last_results = results
            self.rounds += 1
            self.round_done.notify_all()
        return results

    def wait_rounds(self, n: int, timeout: float) -> bool:
        """Block until at least `n` rounds have completed (tests, status pages)."""
        deadline = time.monotonic() + timeout
        with self.round_done:
            while self.rounds < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.round_done.wait(left)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the outermost edge of a daemon thread: keep the loop alive
                log.exception("sync loop round failed")
            self._stop.wait(self.interval_s)

    def estate(self) -> dict[str, Any]:
        out = estate(self.store, self.palace, self.interval_s if self.enabled else 0)
        out["estate_source"] = {"in_process": True, "published_at": None,
                                "writer_alive": self._thread is not None}  # fmt: skip
        return out
