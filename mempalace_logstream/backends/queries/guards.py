"""The statements of the loop guards (store/guards.py, RFC 0007 "Loop guards"): a thread's
rows newest first, its newest raise and first writer, and the count of a pair's newest messages
to each other in the pair window. Which types count is the caller's (values in).

The two reads of a thread's rows share one shape (`_newest`): the `GUARD_COLS` of the events
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
GUARD_COLS = ("seq", "id", "type", "from_agent", "metadata_json")


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


def pair_count(
    ex: Executor,
    a: str,
    b: str,
    cutoff: str,
    before: int,
    n: int,
    skipped: tuple[str, ...],
    moves: tuple[str, ...],
) -> tuple[bool, int, int | None]:
    """The pair budget of `a` writing to `b` (`_pair_counted`): (whether it is used up, how
    many events it counted, the oldest one's seq). One row, counted by the database."""
    key = ("guards.pair", n, skipped, moves)
    params = _pair_params(a, b, cutoff, before, skipped)
    row = ex.rows(key, lambda: _pair_counted(n, skipped, moves), params)[0]
    return bool(row[0]), int(row[1]), row[2]


def pair_check(
    ex: Executor,
    a: str,
    b: str,
    cutoff: str,
    before: int,
    n: int,
    skipped: tuple[str, ...],
    moves: tuple[str, ...],
) -> bool:
    """`pair_count` sent as a check with the transaction's COMMIT (`Executor.check`): it
    divides by zero when the budget is used up. False when the executor cannot send one (the
    caller reads `pair_count`)."""

    def build() -> sa.Select[Any]:
        # Only a pair where `b` wrote to `a` in the window can be used up: the count runs
        # when a probe of that way finds a row (PostgreSQL evaluates the CASE's subqueries
        # when it reaches them). One agent writing to another that has not answered, the
        # common case, costs one index probe instead of a walk of its newest `n` rows.
        counted = _pair_counted(n, skipped, moves).subquery("counted")
        refused = sa.select(counted.c.refused).scalar_subquery()
        answered = sa.exists(_way("b", "a", len(skipped)))
        one: sa.ColumnElement[int] = sa.literal_column("1")
        used_up = sa.case((answered, refused), else_=sa.literal_column("0"))
        # An integer division: by zero when refused.
        return sa.select(one.op("/")(sa.sql.elements.Grouping(one - used_up)))

    key = ("guards.pair-check", n, skipped, moves)
    return ex.check(key, build, _pair_params(a, b, cutoff, before, skipped))


def _pair_params(a: str, b: str, cutoff: str, before: int, skipped: tuple[str, ...]) -> Any:
    return {"a": a, "b": b, "cutoff": cutoff, "before": before, **_kinds(skipped)}


def _pair_counted(n: int, skipped: tuple[str, ...], moves: tuple[str, ...]) -> sa.Select[Any]:
    """The newest `n` events between `a` and `b` (`a` to `b` or `b` to `a`), written at or
    after `cutoff` (from the first event of the window: the `created_at` index) and before seq
    `before`, events of the `skipped` types left out; each way one range of the pair index
    (`ix_events_pair`: from_agent, to_agent, seq) over the window only. The limits are
    literals (`n` is part of the statement's key): with them and the index, PostgreSQL's
    generic plan is the custom one, so the prepared statement is planned once per
    connection instead of on every append (~0.25 ms on a 50,000-event log). One row:
    `refused` (1 when there are `n` of them, none of the `moves` types, a task move between
    them restarting the count, and `b` wrote one of them: an exchange needs both, and one
    agent writing to another that never answers is no loop; else 0), `found` (how many) and
    `oldest` (the oldest one's seq). The move types are constants of the code, written into
    the statement."""
    k = len(skipped)
    one: sa.ColumnElement[int] = sa.literal_column("1")
    zero: sa.ColumnElement[int] = sa.literal_column("0")
    limit: sa.ColumnElement[int] = sa.literal_column(str(int(n)))

    def way(writer: str, to: str) -> sa.Subquery:
        return _way(writer, to, k).order_by(schema.events.c.seq.desc()).limit(limit).subquery()

    both = sa.union_all(sa.select(way("a", "b")), sa.select(way("b", "a"))).subquery()
    newest = (
        sa.select(both.c.seq, both.c.type, both.c.from_agent)
        .order_by(both.c.seq.desc())
        .limit(limit)
        .subquery()
    )
    is_move = newest.c.type.in_([_text_literal(kind) for kind in moves])
    answered = newest.c.from_agent == sa.bindparam("b")
    used_up = sa.and_(
        sa.func.count() >= limit,
        sa.func.max(sa.case((is_move, one), else_=zero)) == zero,
        sa.func.max(sa.case((answered, one), else_=zero)) == one,
    )
    return sa.select(
        sa.case((used_up, one), else_=zero).label("refused"),
        sa.func.count().label("found"),
        sa.func.min(newest.c.seq).label("oldest"),
    )


def _way(writer: str, to: str, k: int) -> sa.Select[Any]:
    """The events `writer` wrote to `to` in the pair window (seq from the first event at or
    after `cutoff`, below `before`), the `k` skipped types left out: (seq, type, from_agent)."""
    c = schema.events.c
    floor = (
        sa.select(c.seq)
        .where(c.created_at >= sa.bindparam("cutoff"))
        .order_by(c.created_at)
        .limit(sa.literal_column("1"))
        .scalar_subquery()
    )
    return sa.select(c.seq, c.type, c.from_agent).where(
        c.from_agent == sa.bindparam(writer),
        c.to_agent == sa.bindparam(to),
        # The pair index's predicate word for word (both databases then see that the index
        # serves the walk); no pair has "*" on either side.
        sa.text(schema.PAIR_WHERE),
        c.seq >= floor,
        c.seq < sa.bindparam("before"),
        *(c.type != sa.bindparam(f"k{i}") for i in range(k)),
    )


def _text_literal(value: str) -> sa.ColumnElement[Any]:
    """`value`, a constant of the code (an event type), as an SQL string literal: the statement
    is compiled once per set of values, and a read sent with the queued writes (PostgreSQL)
    inlines no parameter for it. Only plain names: no quote, backslash or `%` to escape."""
    if not _PLAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not written into SQL as a literal")
    return sa.literal_column(f"'{value}'")


_PLAIN = lazy.pattern(r"[A-Za-z0-9_.:-]+")


def event_id_at(ex: Executor, seq: int) -> str:
    """The id of the event at `seq` (held)."""

    def build() -> sa.Select[Any]:
        c = schema.events.c
        return sa.select(c.id).where(c.seq == sa.bindparam("seq"))

    return str(ex.rows("guards.id-at", build, {"seq": seq})[0][0])


def first_writer(ex: Executor, thread: str) -> str | None:
    """Who wrote the thread's first event."""

    def build() -> sa.Select[Any]:
        c = schema.events.c
        where = c.correlation_id == sa.bindparam("v")
        return sa.select(c.from_agent).where(where).order_by(c.seq).limit(1)

    rows = ex.rows("guards.first-writer", build, {"v": thread})
    return str(rows[0][0]) if rows else None
