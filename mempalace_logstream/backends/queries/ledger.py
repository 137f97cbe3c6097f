"""The delivery ledger's statements (issue 20, RFC 0009): the `deliveries` table, one row per
event and recipient. Marks merge into it with the earliest time winning per column; both
dialects run the same portable upsert (a new row inserted, a held row's columns moved only
earlier), batched in the one flush transaction, under the write lock.
"""

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor
from mempalace_logstream.backends.queries import by_dialect

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

COLUMNS = ("pushed_at", "seen_at", "acked_at")
# A mark as `merge` takes it: these keys, each time None when not known.
ROW = ("event_id", "recipient", "pushed_at", "pushed_path", "seen_at", "acked_at")


class Mark(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """What is known of one (event, recipient) delivery: each time None when not known."""

    event_id: str
    recipient: str
    pushed_at: str | None = None
    pushed_path: str | None = None
    seen_at: str | None = None
    acked_at: str | None = None


def _later(column: str) -> str:
    """`column` := the incoming value when it is set and earlier than the held one."""
    return (
        f"CASE WHEN excluded.{column} IS NOT NULL AND (deliveries.{column} IS NULL"
        f" OR excluded.{column} < deliveries.{column}) THEN excluded.{column}"
        f" ELSE deliveries.{column} END"
    )


def _upsert() -> "sa.Executable":
    """Insert one mark, or move a held row's columns that get earlier (the push's path with
    its time). The same text on SQLite (3.24+) and PostgreSQL: `excluded` is the new row, and
    every SET expression reads the row as it was."""
    sets = [f"{c} = {_later(c)}" for c in COLUMNS]
    sets.append(
        "pushed_path = CASE WHEN excluded.pushed_at IS NOT NULL AND (deliveries.pushed_at IS"
        " NULL OR excluded.pushed_at < deliveries.pushed_at) THEN excluded.pushed_path"
        " ELSE deliveries.pushed_path END"
    )
    names = ", ".join(ROW)
    values = ", ".join(f":{n}" for n in ROW)
    return sa.text(
        f"INSERT INTO deliveries ({names}) VALUES ({values})"
        f" ON CONFLICT (event_id, recipient) DO UPDATE SET {', '.join(sets)}"
    )


# A JSON array of event ids as a one-column table `j(value)`, the outer loop of the join (on
# SQLite CROSS JOIN fixes the order: the planner would otherwise scan the reader's inbox).
_IDS = {
    "sqlite": "json_each(:ids) AS j CROSS",
    "postgresql": "jsonb_array_elements_text(CAST(:ids AS jsonb)) AS j(value)",
}


def _page(column: str) -> "sa.Executable":
    """Mark `column` (and the push's path with pushed_at) at :at for :agent on each event of
    the JSON array :ids that reaches :agent (addressed to it, or to '*' and not its own),
    unless it holds an earlier time. The events' routing is read by the database, in one
    statement per page: the flusher does no work per event."""
    cols = f"{column}, pushed_path" if column == "pushed_at" else column
    vals = ":at, :path" if column == "pushed_at" else ":at"
    sets = f"{column} = excluded.{column}"
    if column == "pushed_at":
        sets += ", pushed_path = excluded.pushed_path"
    texts = {
        dialect: (
            f"INSERT INTO deliveries (event_id, recipient, {cols})"
            f" SELECT e.id, :agent, {vals} FROM {ids} JOIN events AS e ON e.id = j.value"
            " WHERE e.to_agent = :agent OR (e.to_agent = '*' AND e.from_agent <> :agent)"
            f" ON CONFLICT (event_id, recipient) DO UPDATE SET {sets}"
            f" WHERE deliveries.{column} IS NULL OR excluded.{column} < deliveries.{column}"
        )
        for dialect, ids in _IDS.items()
    }
    executable: sa.Executable = by_dialect()(texts)
    return executable


def mark_page(
    ex: Executor, column: str, agent: str, at: str, path: str | None, ids_json: str
) -> None:
    """`column` (pushed_at or seen_at) of `agent` at `at` on the events of a page (a JSON
    array of ids) that reach it, each moved only earlier (a held earlier time stays)."""
    params: dict[str, str | None] = {"agent": agent, "at": at, "ids": ids_json}
    if column == "pushed_at":
        params["path"] = path
    ex.run(("ledger.page", column), functools.partial(_page, column), params)


def merge(ex: Executor, rows: list[dict[str, Any]]) -> None:
    """Merge marks (`ROW` dicts, one per key) into the ledger, the earliest time winning per
    column, in one batch of upserts."""
    if rows:
        ex.run_many("ledger.upsert", _upsert, rows)


def _of_event() -> "sa.Executable":
    return (
        sa.select(
            schema.deliveries.c.event_id,
            schema.deliveries.c.recipient,
            schema.deliveries.c.pushed_at,
            schema.deliveries.c.pushed_path,
            schema.deliveries.c.seen_at,
            schema.deliveries.c.acked_at,
        )
        .where(schema.deliveries.c.event_id == sa.bindparam("event_id"))
        .order_by(schema.deliveries.c.recipient)
    )


def of_event(ex: Executor, event_id: str) -> list[Mark]:
    """The ledger's rows of `event_id`, by recipient."""
    rows = ex.rows("ledger.of-event", _of_event, {"event_id": event_id})
    return [Mark(*row) for row in rows]


def _last_seen() -> "sa.Executable":
    """Per recipient: the latest push and the latest read or ack recorded (any event)."""
    c = schema.deliveries.c
    return sa.select(
        c.recipient,
        sa.func.max(c.pushed_at),
        sa.func.max(sa.func.coalesce(c.acked_at, c.seen_at)),
    ).group_by(c.recipient)


def last_marks(ex: Executor) -> list[tuple[str, str | None, str | None]]:
    """(recipient, latest push, latest read or ack) per recipient the ledger knows."""
    rows = ex.rows("ledger.last-marks", _last_seen, {})
    return [(str(r[0]), r[1], r[2]) for r in rows]
