"""The statements of the loop guards (store/guards.py, RFC 0007 "Loop guards"): a thread's
rows newest first, its newest raise and first writer, and a pair's messages to each other
in the pair window. Which types count is the caller's (values in).

The three reads of event rows share one shape (`_newest`): the `GUARD_COLS` of the events
matching some conditions, newest first, at most `limit`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

# The columns of a guard's event row, in this order.
GUARD_COLS = ("seq", "id", "type", "from_agent", "to_agent", "created_at", "metadata_json")


def _newest(*where: sa.ColumnElement[bool], limit: int) -> sa.Select[Any]:
    c = schema.events.c
    return (
        sa.select(*(c[name] for name in GUARD_COLS))
        .where(*where)
        .order_by(c.seq.desc())
        .limit(limit)
    )


@functools.lru_cache(maxsize=16)
def _kinds(kinds: tuple[str, ...]) -> dict[str, str]:
    """The parameters k0..k{n-1} of the left-out types (read, never changed, by callers)."""
    return {f"k{i}": kind for i, kind in enumerate(kinds)}


def thread_page(
    ex: Executor, thread: str, before: int, size: int, skipped: tuple[str, ...]
) -> list[Any]:
    """Up to `size` rows of the thread with seq < `before`, newest first, events of the
    `skipped` types left out."""
    k = len(skipped)

    def build() -> sa.Select[Any]:
        c = schema.events.c
        return _newest(
            c.correlation_id == sa.bindparam("v"),
            c.seq < sa.bindparam("before"),
            *(c.type != sa.bindparam(f"k{i}") for i in range(k)),  # not NOT IN: compiled once
            limit=size,
        )

    params = {"v": thread, "before": before, **_kinds(skipped)}
    return list(ex.rows(("guards.thread", size, k), build, params))


def newest_of_type(ex: Executor, thread: str, kind: str, writer: str) -> Any | None:
    """The newest row of type `kind` that `writer` wrote on the thread, or None."""

    def build() -> sa.Select[Any]:
        c = schema.events.c
        return _newest(
            c.correlation_id == sa.bindparam("v"),
            c.type == sa.bindparam("kind"),
            c.from_agent == sa.bindparam("r"),
            limit=1,
        )

    rows = ex.rows("guards.newest-of-type", build, {"v": thread, "kind": kind, "r": writer})
    return rows[0] if rows else None


def pair_rows(
    ex: Executor,
    a: str,
    b: str,
    cutoff: str,
    before: int,
    n: int,
    skipped: tuple[str, ...],
) -> list[Any]:
    """The newest `n` events `a` wrote to `b` and the newest `n` `b` wrote to `a`, written at or
    after `cutoff` (from the first event of the window: the `created_at` index) and before seq
    `before`, events of the `skipped` types left out; no rows when nothing was written in the
    window. One statement (a round trip on PostgreSQL), each way a walk of the writers'
    `(from_agent, seq)` index."""
    k = len(skipped)

    def build() -> sa.Select[Any]:
        c = schema.events.c
        floor = (
            sa.select(c.seq)
            .where(c.created_at >= sa.bindparam("cutoff"))
            .order_by(c.created_at)
            .limit(1)
            .scalar_subquery()
        )

        def way(writer: str, to: str) -> sa.Subquery:
            return _newest(
                c.from_agent == sa.bindparam(writer),
                c.to_agent == sa.bindparam(to),
                c.seq >= floor,
                c.seq < sa.bindparam("before"),
                *(c.type != sa.bindparam(f"k{i}") for i in range(k)),
                limit=n,
            ).subquery()

        first, second = way("a", "b"), way("b", "a")
        return sa.select(sa.union_all(sa.select(first), sa.select(second)).subquery())

    params = {"a": a, "b": b, "cutoff": cutoff, "before": before, **_kinds(skipped)}
    return list(ex.rows(("guards.pair", n, k), build, params))


def first_writer(ex: Executor, thread: str) -> str | None:
    """Who wrote the thread's first event."""

    def build() -> sa.Select[Any]:
        c = schema.events.c
        where = c.correlation_id == sa.bindparam("v")
        return sa.select(c.from_agent).where(where).order_by(c.seq).limit(1)

    rows = ex.rows("guards.first-writer", build, {"v": thread})
    return str(rows[0][0]) if rows else None
