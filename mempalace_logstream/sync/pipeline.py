"""Pages of one origin from a peer, validated and applied: the page fetch (compact rows or the
reference's ops, shrunk when over the response cap), the artifacts a page lacks, and for
remote peers a three-stage pipeline (fetch, validate, apply) paced by a `Gate`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from mempalace_logstream import errors, replication
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.limits import (
    APPLY_ARTIFACT_BYTES,
    ARTIFACT_BATCH,
    BATCH,
    ResponseTooLargeError,
    check_deadline,
    chunks,
)
from mempalace_logstream.sync.protocol import Peer, RowsRefused, capabilities_of


def apply_page(
    store: LogStore,
    peer: Peer,
    parsed: replication.ParsedEvents,
    origin: str | None,
    res: replication.ApplyResult,
    stats: dict[str, Any],
    gate: Gate | None = None,
    fetched: Fetched | None = None,
) -> int:
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
        on_bulk = gate.free if gate else None
        part = replication.apply_remote_batch(store, arts, parsed, peer.name, on_bulk=on_bulk)
    finally:
        if gate is not None:
            gate.free()
    stats["pulled_artifacts"] += part.applied_artifacts
    res.merge(part)
    return part.applied_events


def _artifact_batches(peer: Peer, ids: list[str]) -> Iterator[tuple[list[Any], list[str]]]:
    """(artifacts, the ids they answer) per response (a peer with `artifact_responses`) or
    per ARTIFACT_BATCH ids."""
    if capabilities_of(peer).artifact_responses:
        for got, answered in cast(Any, peer).artifact_responses(ids):
            yield got, answered
            check_deadline(peer, "fetching artifacts")
        return
    for chunk in chunks(ids, ARTIFACT_BATCH):
        check_deadline(peer, "fetching artifacts")
        yield peer.artifacts(chunk), chunk


def _artifact_id(raw: Any) -> str | None:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return ident if isinstance(ident, str) else None


def _content_size(raws: Sequence[Any]) -> int:
    texts = (a["content"] for a in raws if isinstance(a, dict))
    return sum(len(text) for text in texts if isinstance(text, str))


@dataclass
class Fetched:
    """Artifacts fetched ahead for a page (raw, as served) and the ids they were asked for."""

    items: list[Any]
    ids: set[str]


def _prefetch_artifacts(
    store: LogStore, peer: Peer, parsed: replication.ParsedEvents, origin: str, skip: set[str]
) -> Fetched:
    """The artifacts a page lacks, fetched by the pipeline within APPLY_ARTIFACT_BYTES
    (the applier fetches any rest). `skip`: ids the previous page's fetch covers (that page
    may not be committed yet; its artifacts are not asked for twice)."""
    missing = replication.missing_artifacts(store, parsed.artifact_ids(origin))
    need = [i for i in missing if i not in skip]
    out = Fetched([], set())
    size = 0
    for got, answered in _artifact_batches(peer, need):
        out.items += got
        out.ids.update(answered)
        size += _content_size(got)
        if size > APPLY_ARTIFACT_BYTES:
            break
    return out


class Gate:
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


def _fetch(
    peer: Peer, origin: str, after: int, pause: Callable[[], Any] | None = None
) -> tuple[list[Any], bool]:
    """One page after `after`: (items, True) as compact rows when the peer offers them, else
    (event objects, False) from `ops`. A peer that refuses rows is asked for ops from then on.
    `pause` (peers with `paced_rows`) delays reading the response until the applier is free.

    A page longer than the limit asked is refused (SyncError). A page over the response cap
    is asked again with a sixteenth of the limit, and the peer's pages stay at most half the
    refused limit from then on; one event over the cap is the peer's error."""
    while True:
        check_deadline(peer, f"pulling {origin}")
        limit = _page_limit(peer, capabilities_of(peer).rows_limit or BATCH)
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
    caps = capabilities_of(peer)
    if caps.rows_limit:
        rows = cast(Any, peer).rows
        try:
            if caps.paced_rows:
                return rows(origin, after, limit, pause), True, limit
            return rows(origin, after, limit), True, limit
        except RowsRefused:
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


def pull_pages(
    store: LogStore, peer: Peer, origin: str, after: int, top: int, gate: Gate | None = None
) -> Iterator[tuple[replication.ParsedEvents, int, Fetched | None]]:
    """(validated page, its highest origin_seq, artifacts fetched ahead) until `top`.

    A peer with the `prefetch` capability (HTTP) runs a three-stage pipeline: while the caller
    applies page k, page k+1 is validated (and its missing artifacts fetched) in one thread,
    paced by `gate` (see Gate), and page k+2 is requested in another, as soon as page k+1 said
    where it ends, so the peer prepares it meanwhile. At most three pages are held.
    """
    if not capabilities_of(peer).prefetch:
        yield from _serial_pages(store, peer, origin, after, top)
    else:
        yield from _Pipeline(store, peer, origin, top, gate or Gate()).pages(after)


def _serial_pages(
    store: LogStore, peer: Peer, origin: str, after: int, top: int
) -> Iterator[tuple[replication.ParsedEvents, int, Fetched | None]]:
    while after < top:
        batch, rows = _fetch(peer, origin, after)
        nxt = _page_top(batch, rows, origin, after)
        if not batch:
            return  # the peer promised more than it served; the next round retries
        yield replication.parse_events(store, batch, peer.name, rows=rows), nxt, None
        if nxt <= after:
            return  # a peer that does not advance must not loop us forever
        after = nxt


class _Pipeline:
    """The fetch and check threads of one pipelined pull (see `pull_pages`)."""

    def __init__(self, store: LogStore, peer: Peer, origin: str, top: int, gate: Gate) -> None:
        self.store, self.peer, self.origin, self.top, self.gate = store, peer, origin, top, gate
        self.fetcher = ThreadPoolExecutor(1, thread_name_prefix="logstream-sync-fetch")
        self.checker = ThreadPoolExecutor(1, thread_name_prefix="logstream-sync-check")
        self.covered: set[str] = set()  # artifact ids fetched for the page before (checker)

    def fetch(self, after: int) -> Future[tuple[list[Any], bool]]:
        return self.fetcher.submit(_fetch, self.peer, self.origin, after, self.gate.wait)

    def stage(self, fetched: Future[tuple[list[Any], bool]], start: int) -> _Staged:
        """Runs on the checker thread: asks for the next page, then validates this one."""
        batch, rows = fetched.result()
        nxt = _page_top(batch, rows, self.origin, start)
        ahead = None
        if batch and start < nxt < self.top:  # ask for the page after this one right away
            ahead = self.fetch(nxt)
        name, wait = self.peer.name, self.gate.wait
        parsed = replication.parse_events(self.store, batch, name, rows=rows, pause=wait)
        arts = _prefetch_artifacts(self.store, self.peer, parsed, self.origin, self.covered)
        self.covered = arts.ids
        return parsed, nxt, len(batch), ahead, arts

    def pages(self, after: int) -> Iterator[tuple[replication.ParsedEvents, int, Fetched | None]]:
        gate, paused_gc, count = self.gate, _pause_gc(), 0
        try:
            pending = self.checker.submit(self.stage, self.fetch(after), after)
            while after < self.top:
                gate.free()  # never wait on the validator while it waits on us
                parsed, nxt, served, ahead, arts = pending.result()
                gate.busy()
                if not served:
                    return  # the peer promised more than it served; the next round retries
                if ahead is not None:
                    pending = self.checker.submit(self.stage, ahead, nxt)
                yield parsed, nxt, arts  # applied even if stale: validated and idempotent
                if nxt <= after or ahead is None:
                    return  # done, or a peer that does not advance must not loop us forever
                after, count = nxt, count + 1
                if paused_gc and count % GC_EVERY_PAGES == 0:
                    # A long pull (or one run by the hub's loop, where the whole server shares
                    # the collector) still sweeps cyclic garbage now and then, not only at the end.
                    gc.collect(0)
        finally:
            gate.free()
            self.checker.shutdown(wait=True, cancel_futures=True)
            self.fetcher.shutdown(wait=True, cancel_futures=True)
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


_Staged = tuple[replication.ParsedEvents, int, int, Any, Fetched]
