"""The delivery ledger's statements (issue 20, RFC 0009): the `deliveries` table, one row per
event and recipient. Marks merge into it with the earliest time winning per column; both
dialects run the same portable statements (the rows held looked up, the new ones inserted in
bulk, a held row's columns moved only earlier), in the one flush transaction, under the write
lock.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.base import Executor, binds, in_lists
from mempalace_logstream.schema import deliveries

COLUMNS = ("pushed_at", "seen_at", "acked_at")


@dataclass(frozen=True)
class Mark:
    """What is known of one (event, recipient) delivery: each time None when not known."""

    event_id: str
    recipient: str
    pushed_at: str | None = None
    pushed_path: str | None = None
    seen_at: str | None = None
    acked_at: str | None = None


def _held(n: int) -> sa.Executable:
    """The (event_id, recipient) rows held for n event ids."""
    c = deliveries.c
    return sa.select(c.event_id, c.recipient).where(c.event_id.in_(binds(n)))


def held(ex: Executor, event_ids: list[str]) -> set[tuple[str, str]]:
    """The (event_id, recipient) keys the ledger holds among `event_ids`."""
    out: set[tuple[str, str]] = set()
    for n, params in in_lists(sorted(set(event_ids))):
        rows = ex.rows(("ledger.held", n), functools.partial(_held, n), params)
        out.update((str(r[0]), str(r[1])) for r in rows)
    return out


def _earlier(column: str) -> sa.Executable:
    """Set `column` (and the push's path with pushed_at) unless it holds an earlier time."""
    col = deliveries.c[column]
    values: dict[str, Any] = {column: sa.bindparam("at")}
    if column == "pushed_at":
        values["pushed_path"] = sa.bindparam("path")
    later = sa.or_(col.is_(None), col > sa.bindparam("at"))
    key = sa.and_(
        deliveries.c.event_id == sa.bindparam("event_id"),
        deliveries.c.recipient == sa.bindparam("recipient"),
    )
    return sa.update(deliveries).where(key, later).values(**values)


def merge(ex: Executor, marks: list[Mark]) -> None:
    """Merge `marks` (one per key) into the ledger, the earliest time winning per column; the
    caller holds a write transaction (nobody else adds rows meanwhile). New rows go in one
    bulk insert; a row held already moves only its columns that get earlier."""
    known = held(ex, [m.event_id for m in marks])
    new = [m for m in marks if (m.event_id, m.recipient) not in known]
    if new:
        ex.insert("ledger.insert", deliveries, [_row(m) for m in new])
    for mark in marks:
        if (mark.event_id, mark.recipient) not in known:
            continue
        key = {"event_id": mark.event_id, "recipient": mark.recipient}
        for column in COLUMNS:
            at = getattr(mark, column)
            if at is None:
                continue
            params = {**key, "at": at}
            if column == "pushed_at":
                params["path"] = mark.pushed_path
            ex.run(("ledger.earlier", column), functools.partial(_earlier, column), params)


def _row(m: Mark) -> dict[str, Any]:
    return {
        "event_id": m.event_id,
        "recipient": m.recipient,
        "pushed_at": m.pushed_at,
        "pushed_path": m.pushed_path,
        "seen_at": m.seen_at,
        "acked_at": m.acked_at,
    }


def _of_event() -> sa.Executable:
    return (
        sa.select(
            deliveries.c.event_id,
            deliveries.c.recipient,
            deliveries.c.pushed_at,
            deliveries.c.pushed_path,
            deliveries.c.seen_at,
            deliveries.c.acked_at,
        )
        .where(deliveries.c.event_id == sa.bindparam("event_id"))
        .order_by(deliveries.c.recipient)
    )


def of_event(ex: Executor, event_id: str) -> list[Mark]:
    """The ledger's rows of `event_id`, by recipient."""
    rows = ex.rows("ledger.of-event", _of_event, {"event_id": event_id})
    return [Mark(*row) for row in rows]


def _last_seen() -> sa.Executable:
    """Per recipient: the latest push and the latest read or ack recorded (any event)."""
    c = deliveries.c
    return sa.select(
        c.recipient,
        sa.func.max(c.pushed_at),
        sa.func.max(sa.func.coalesce(c.acked_at, c.seen_at)),
    ).group_by(c.recipient)


def last_marks(ex: Executor) -> list[tuple[str, str | None, str | None]]:
    """(recipient, latest push, latest read or ack) per recipient the ledger knows."""
    rows = ex.rows("ledger.last-marks", _last_seen, {})
    return [(str(r[0]), r[1], r[2]) for r in rows]
