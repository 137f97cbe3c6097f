"""Applying remote events and artifacts in one group-committed store transaction: fresh local
seqs under the write lock, duplicates and conflicts detected against what is held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mempalace_logstream import errors, hlc
from mempalace_logstream.backends.base import Executor
from mempalace_logstream.backends.queries import sync
from mempalace_logstream.models import Artifact, Event
from mempalace_logstream.replication import verify
from mempalace_logstream.replication.checks import ParsedEvents, parse_events, parse_remote_artifact
from mempalace_logstream.replication.reports import (
    artifact_conflict,
    conflict,
    deferred,
    record_rejections,
    reject_report,
    resolve,
)
from mempalace_logstream.replication.wire import ApplyResult
from mempalace_logstream.store import (
    LogStore,
    Transaction,
    blobs,
    events_from_rows,
    now_text,
)
from mempalace_logstream.store.projections import Refusal

_Item = tuple[Event, Any]  # an event and the raw item it was parsed from


def apply_remote_artifact(store: LogStore, raw: Any, peer: str = "") -> bool:
    """Apply one remote artifact: True if stored, False if already held (idempotent).

    Raises ValidationError (recorded in sync_rejections) for bad or tampered content and
    ConflictError when the id is held with a different sha256.
    """
    res = apply_remote_artifacts(store, [raw], peer)
    if res.rejected:
        first = res.rejected[0]
        cls = errors.ConflictError if first["reason"] == "conflict" else errors.ValidationError
        raise cls(first["message"], field=first.get("field"))
    return res.applied_artifacts == 1


def apply_remote_event(store: LogStore, raw: Any, peer: str = "") -> bool:
    """Apply one remote event verbatim: True if stored, False for a duplicate or our own echo.

    Raises ValidationError for an invalid event, NotFoundError when a referenced artifact is
    not held yet (deferred), ConflictError for a same-id/different-content event. Every refusal
    is also recorded (the sync_rejections and sync_conflicts tables) and in the round results.
    """
    res = apply_remote_events(store, [raw], peer)
    if res.conflicts:
        c = res.conflicts[0]
        raise errors.ConflictError(c["message"], field="id", ident=c["event_id"])
    # A redaction stored without effect (kind "redaction") was applied: not an error here.
    refused = [r for r in res.rejected if r["kind"] != "redaction"]
    if refused:
        r = refused[0]
        if r["reason"] == "missing_artifact":
            raise errors.NotFoundError(r["message"], field="artifact_ids", ident=r["ident"])
        raise errors.ValidationError(r["message"], field=r.get("field"))
    return res.applied_events == 1


def apply_remote_artifacts(store: LogStore, raws: Sequence[Any], peer: str = "") -> ApplyResult:
    """Validate and apply a batch of remote artifacts in one transaction; never raises for a
    bad item (it is rejected and recorded), only for storage failures."""
    return apply_remote_batch(store, raws, ParsedEvents([], []), peer)


def apply_remote_events(store: LogStore, raws: Sequence[Any], peer: str = "") -> ApplyResult:
    """Validate and apply a batch of remote events in one transaction, in origin_seq order.

    Each event is kept verbatim (id, created_at, hlc, origin stamps) with a fresh local seq.
    Duplicates are no-ops, our own echo is skipped, conflicts and refusals are recorded and
    reported; nothing else in the batch is lost because of them.
    """
    return apply_remote_batch(store, (), parse_events(store, raws, peer), peer)


def apply_remote_batch(
    store: LogStore,
    artifact_raws: Sequence[Any],
    parsed: ParsedEvents,
    peer: str = "",
    on_bulk: Callable[[], Any] | None = None,
) -> ApplyResult:
    """Artifacts (validated here, sha256 recomputed) then already-parsed events, in ONE
    transaction: a page of a pull costs one commit. Never raises for a bad item. `on_bulk`
    is called when the rest of the transaction is long SQLite work that releases the GIL
    (the events' index updates, then the commit)."""
    res = ApplyResult(own=parsed.own, rejected=list(parsed.rejected))
    good: list[Artifact] = []
    for raw in artifact_raws:
        try:
            good.append(parse_remote_artifact(store, raw))
        except errors.ValidationError as exc:
            res.rejected.append(reject_report("artifact", raw, exc, peer))
    if not (good or parsed.items or res.rejected):
        return res

    def work(tx: Transaction) -> None:
        ex = tx.ex
        art_ids = _apply_artifacts(tx, good, res, peer) if good else []
        if parsed.items:
            # The one write path: judged here, numbered, inserted and projected by the store
            # (tasks follow a peer's moves, never refuse them; a redaction that may not take
            # effect is stored, the log stands, and recorded).
            events = [e for e, _ in parsed.items]
            done = tx.append(events, Peer(store, ex, parsed.items, res, peer))
            res.rejected += [_redaction_refused(r, peer) for r in done.refused]
        record_rejections(store, ex, res.rejected)
        resolve(store, ex, "artifact", art_ids)
        resolve(store, ex, "event", res.applied_ids[len(art_ids) :])

    store.transaction(work, on_bulk)
    return res


def _apply_artifacts(
    tx: Transaction, good: list[Artifact], res: ApplyResult, peer: str
) -> list[str]:
    ex = tx.ex
    held = sync.held_artifact_shas(ex, [a.id for a in good])
    applied: list[str] = []
    for art in good:
        prior = held.get(art.id)
        if prior is not None:
            if prior == art.sha256:
                res.duplicates += 1
            else:
                res.rejected.append(artifact_conflict(art, prior, peer))
            continue
        blob = blobs.ensure(ex, art.sha256, art.size_bytes, art.content or b"")
        tx.write_artifact_row(art)  # the row a local put writes, with the next artifact seq
        # An unredacted copy refills a blob emptied here by redactions of other copies.
        blobs.refill_after(ex, blob, art.sha256, art.content or b"")
        held[art.id] = art.sha256
        res.applied_artifacts += 1
        applied.append(art.id)
    res.applied_ids += applied
    return applied


def _redaction_refused(refusal: Refusal, peer: str) -> dict[str, Any]:
    """The report of a peer's redaction that is stored but takes no effect here."""
    event = refusal.event
    return {
        "kind": "redaction",
        "ident": event.id,
        "origin_replica": event.origin_replica,
        "origin_seq": None,  # the event itself is stored: its position is accounted for
        "reason": refusal.code,
        "field": refusal.field,
        "message": f"redaction {event.id} takes no effect: {refusal.message}",
        "retryable": False,
        "peer": peer,
    }


class _Page:
    """What applying one page of events tracks: the held events and positions, the held
    artifacts' sha256, the verdicts, the rows to insert and the greatest adoptable HLC."""

    def __init__(self, store: LogStore, ex: Executor, items: list[_Item], peer: str) -> None:
        self.store, self.ex, self.peer = store, ex, peer
        self.by_id = _held_events(store, ex, [e.id for e, _ in items])
        self.by_pos = _held_positions(ex, items)
        self.arts = sync.held_artifact_shas(ex, [a for e, _ in items for a in e.artifact_ids])
        now_ms = store.clock.wall_clock.now_ms()
        self.now = now_text(now_ms)
        self.far = now_ms + hlc.MAX_FUTURE_DRIFT_MS
        self.newest: str | None = None  # the greatest adoptable stamp applied (one observe)
        self.newest_key = (-1, "")
        self._judge: verify.BatchJudge | None = None
        self._opened = False
        self._items = items

    def judge(self) -> verify.BatchJudge | None:
        """The page's judge, opened at the first event that may be stored (a page of
        duplicates never reads the keyring)."""
        if not self._opened:
            page = [e for e, _ in self._items]
            self._judge, self._opened = verify.BatchJudge.open(self.store, self.ex, page), True
        return self._judge

    def refusal(self, event: Event, raw: Any, res: ApplyResult) -> bool:
        """Record why `event` is not stored (duplicate, conflict, missing artifact, forged or
        held for its key); False when it may be stored."""
        prior = self.by_id.get(event.id)
        taken = self.by_pos.get((event.origin_replica, event.origin_seq))
        if prior is not None and prior.content_key() == event.content_key():
            res.duplicates += 1
            return True
        if prior is not None or taken is not None:
            # Two genuine versions are a conflict; a copy that does not verify is a forgery.
            if not self._forged(event, res):
                local = prior.id if prior is not None else str(taken)
                why = "different_content" if prior is not None else "origin_seq_taken"
                res.conflicts.append(
                    conflict(self.store, self.ex, event, raw, local, why, self.peer, self.now)
                )
            return True
        lacking = [a for a in event.artifact_ids if a not in self.arts]
        if lacking:
            res.rejected.append(deferred(event, lacking[0], self.peer))
            return True
        judge = self.judge()
        refused = judge.judge(event, self.arts) if judge is not None else None
        if refused is not None:
            res.rejected.append(refused.report(event, self.peer))
            return True
        return False

    def _forged(self, event: Event, res: ApplyResult) -> bool:
        """Whether a copy clashing with a held event is refused for good by its verdict
        (recorded as a rejection with the code, not as a conflict)."""
        if any(a not in self.arts for a in event.artifact_ids):
            return False
        judge = self.judge()
        refused = judge.judge(event, self.arts) if judge is not None else None
        if refused is None or refused.retryable:
            return False
        res.rejected.append(refused.report(event, self.peer))
        return True

    def admitted(self, stored: Event, res: ApplyResult) -> None:
        """Count `stored` in: later events of the page see it held; its stamp is noted."""
        self.by_id[stored.id] = stored
        self.by_pos[(stored.origin_replica, stored.origin_seq)] = stored.id
        # The HLC: a stamp more than 60 s ahead is kept on the event but never adopted;
        # observing the greatest of the others once is observing each (the clock takes max).
        stamp = stored.hlc
        wall = int(stamp[:13])
        if wall > self.far:
            _clock_anomaly(self.ex, stored, res, self.peer, self.now)
        elif (wall, stamp[14:20]) > self.newest_key:
            self.newest, self.newest_key = stamp, (wall, stamp[14:20])
        res.applied_events += 1
        res.applied_ids.append(stored.id)


class Peer:
    """A peer's page as an origin of the store's one write path (`Transaction.append`):
    judged here (duplicates, conflicts, missing artifacts, forgeries and held keys are
    recorded and left out), numbered, inserted and projected by the store."""

    name = "peer"
    keeps_seq = False

    def __init__(
        self, store: LogStore, ex: Executor, items: list[_Item], res: ApplyResult, peer: str
    ) -> None:
        self.store, self.ex, self.items, self.res, self.peer = store, ex, items, res, peer

    def admit(self, tx: Transaction, events: Sequence[Event]) -> list[Event]:
        page = _Page(self.store, self.ex, self.items, self.peer)
        out: list[Event] = []
        for event, (_, raw) in zip(events, self.items, strict=True):
            if not page.refusal(event, raw, self.res):
                page.admitted(event, self.res)
                out.append(event)
        if page.newest is not None:
            self.store.clock.observe(page.newest)
        return out

    def idempotency_key(self, event: Event) -> str | None:
        return None  # never replicated


def _clock_anomaly(ex: Executor, event: Event, res: ApplyResult, peer: str, now: str) -> None:
    """Report and record (once) an event stamped too far ahead to adopt its HLC."""
    res.clock_anomalies.append({"event_id": event.id, "hlc": event.hlc})
    row = {"event_id": event.id, "origin_replica": event.origin_replica, "hlc": event.hlc}
    sync.record_clock_anomaly(ex, {**row, "peer": peer, "observed_at": now})


def _held_events(store: LogStore, ex: Executor, ids: list[str]) -> dict[str, Event]:
    """The held events among `ids`, by id."""
    return {e.id: e for e in events_from_rows(sync.held_events(ex, store.event_select, ids))}


def _held_positions(ex: Executor, items: list[_Item]) -> dict[tuple[str, int], str]:
    """(origin, origin_seq) -> id of the held events at the batch's origin positions."""
    by_origin: dict[str, list[int]] = {}
    for e, _ in items:
        by_origin.setdefault(e.origin_replica, []).append(e.origin_seq)
    out: dict[tuple[str, int], str] = {}
    for origin, seqs in by_origin.items():
        for n_seq, ident in sync.held_positions(ex, origin, seqs):
            out[(origin, n_seq)] = ident
    return out
