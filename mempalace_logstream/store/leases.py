"""The lease projection (issue 22, RFC 0010): one row per `lease.acquire`, kept in the
transaction that appends the lease events, so a check never folds the log on read.

A local move is checked under the write lock (it sorts after everything this store holds, so
one step on the rows equals the fold) and refused by raising: of N concurrent overlapping
acquires exactly one commits. Events from a peer or an import are never refused: the
project's leases are folded again from its lease events in HLC order (`leases.fold`), so every
replica derives the same winner and lists the loser as lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, leases
from mempalace_logstream.backends.base import Executor
from mempalace_logstream.backends.queries import leases as sql
from mempalace_logstream.leases import check as lease_rule
from mempalace_logstream.leases import rules
from mempalace_logstream.models import Event
from mempalace_logstream.store.projections import Refusal

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction

_ERRORS: dict[str, type[errors.ConflictError | errors.ForbiddenError | errors.NotFoundError]] = {
    "conflict": errors.ConflictError,
    "forbidden": errors.ForbiddenError,
    "not_found": errors.NotFoundError,
}


def to_row(lease: leases.Lease, seq: int) -> dict[str, Any]:
    return {
        "lease_id": lease.lease_id,
        "project": lease.project,
        "agent": lease.agent,
        "paths_json": json.dumps(list(lease.paths), ensure_ascii=False),
        "exclusive": lease.exclusive,
        "reason": lease.reason,
        "task_id": lease.task_id,
        "fence": lease.fence,
        "acquired_hlc": lease.acquired_hlc,
        "ttl_ms": lease.ttl_ms,
        "expires_ms": lease.expires_ms,
        "released_hlc": lease.released_hlc,
        "released_by": lease.released_by,
        "lost_to": lease.lost_to,
        "lost_holder": lease.lost_holder,
        "updated_seq": seq,
    }


def from_row(row: Sequence[Any]) -> leases.Lease:
    return lease_rule.lease_of(dict(zip(sql.columns(), row, strict=True)))


def task_ends(ex: Executor) -> rules.TaskEnd:
    """task id -> the HLC of the move that completed or cancelled it (None while it runs),
    read from the task projection (which runs before this one in the same transaction)."""
    from mempalace_logstream.backends.queries import tasks as task_sql

    cache: dict[str, str | None] = {}

    def end(task_id: str) -> str | None:
        if task_id not in cache:
            cache[task_id] = lease_rule.ending_hlc(task_sql.doc(ex, task_id))
        return cache[task_id]

    return end


def move_of(event: Event) -> leases.Move | None:
    return leases.classify(
        event_id=event.id,
        type=event.type,
        stream=event.stream,
        agent=event.from_agent,
        stamp=event.hlc,
        meta=event.metadata,
    )


def raise_refused(refused: leases.Refused, ident: str) -> None:
    raise _ERRORS[refused.kind](refused.message, field=refused.field, ident=ident)


def on_local_event(tx: Transaction, event: Event, task_end: rules.TaskEnd) -> None:
    """Check a local lease move (inserted in `tx` already) and move the rows; raises the
    refusal (the transaction, or the item's savepoint, rolls back: nothing is written)."""
    move = move_of(event)
    if move is None:
        raise errors.ValidationError(
            f"a {event.type} event needs the metadata of a lease move (paths and ttl_ms for an "
            "acquire, lease_id for a renew or release); write it with the lease operations",
            field="metadata",
        )
    if move.kind == "acquire":
        held = [from_row(r) for r in sql.held(tx.ex, move.project, move.wall_ms)]
        found = rules.blockers(held, move, task_end)
        if found:
            raise_refused(rules.refusal_of_conflict(found), move.event_id)
        fence = sql.max_fence(tx.ex, move.project) + 1
        sql.insert(tx.ex, [to_row(rules.acquire((), move, fence, task_end), event.seq)])
        return
    row = sql.by_id(tx.ex, move.target)
    lease = from_row(row) if row is not None else None
    if lease is not None and lease.project != move.project:
        lease = None  # a move names the lease within its project only
    after = rules.move_on(lease, move, task_end)
    if isinstance(after, leases.Refused):
        raise_refused(after, move.target)
    assert isinstance(after, leases.Lease)
    sql.update(tx.ex, to_row(after, event.seq))


def refold(tx: Transaction, project: str | None, task_end: rules.TaskEnd) -> int:
    """The rows of `project` (None: every project) recomputed from the log's lease events
    alone, in HLC order; returns the number of leases."""
    by_project: dict[str, list[leases.Move]] = {}
    for ident, type_, stream, agent, stamp, meta_json in sql.lease_events(
        tx.ex, project, leases.TYPES
    ):
        meta = json.loads(meta_json) if meta_json else {}
        move = leases.classify(
            event_id=ident,
            type=type_,
            stream=stream,
            agent=agent,
            stamp=stamp,
            meta=meta if isinstance(meta, dict) else {},
        )
        if move is not None:
            by_project.setdefault(move.project, []).append(move)
    sql.clear(tx.ex, project)
    rows: list[dict[str, Any]] = []
    for moves in by_project.values():
        rows += [to_row(lease, 0) for lease in leases.fold(moves, task_end).values()]
    sql.insert(tx.ex, rows)
    return len(rows)


def apply(tx: Transaction, events: Sequence[Event], origin: str) -> list[Refusal]:
    """The lease projection's effect (store/lease_projection.py registers it): a local move is
    checked (refused by raising), a peer's or an imported one re-folds its project."""
    moves = [e for e in events if e.type in leases.TYPES]
    if not moves:
        return []
    task_end = task_ends(tx.ex)
    if origin == "local":
        for event in moves:
            on_local_event(tx, event, task_end)
    else:
        for project in sorted({e.stream for e in moves}):
            refold(tx, project, task_end)
    return []
