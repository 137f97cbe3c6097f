"""The delivery ledger's statements (issue 20, RFC 0009): the `deliveries` table, one row per
event and recipient. Marks merge into it with the earliest time winning per column; both
dialects run the same portable statements (a row is made if missing, then each column moves
only earlier), inside the one flush transaction that holds the write lock.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.base import Executor
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


def _key() -> Any:
    return sa.and_(
        deliveries.c.event_id == sa.bindparam("event_id"),
        deliveries.c.recipient == sa.bindparam("recipient"),
    )


def _make_row() -> sa.Executable:
    """INSERT (event_id, recipient) unless the row exists (no dialect's upsert needed)."""
    held = sa.select(deliveries.c.event_id).where(_key())
    # Typed: PostgreSQL deduces one type per parameter, and a bare SELECT $1 has none.
    values = [sa.cast(sa.bindparam(name), sa.Text) for name in ("event_id", "recipient")]
    pick: Any = sa.select(*values).where(~sa.exists(held))
    return sa.insert(deliveries).from_select(["event_id", "recipient"], pick)


def _earlier(column: str) -> sa.Executable:
    """Set `column` (and the push's path with pushed_at) unless it holds an earlier time."""
    col = deliveries.c[column]
    values: dict[str, Any] = {column: sa.bindparam("at")}
    if column == "pushed_at":
        values["pushed_path"] = sa.bindparam("path")
    later = sa.or_(col.is_(None), col > sa.bindparam("at"))
    return sa.update(deliveries).where(_key(), later).values(**values)


def merge(ex: Executor, marks: list[Mark]) -> None:
    """Merge `marks` into the ledger (the caller holds a write transaction)."""
    for mark in marks:
        key = {"event_id": mark.event_id, "recipient": mark.recipient}
        ex.run("ledger.make-row", _make_row, key)
        for column in COLUMNS:
            at = getattr(mark, column)
            if at is None:
                continue
            params = {**key, "at": at}
            if column == "pushed_at":
                params["path"] = mark.pushed_path
            ex.run(("ledger.earlier", column), functools.partial(_earlier, column), params)


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
