"""The statements of the lease projection (issue 22, RFC 0010): its rows (store/leases.py)
and the lease events of a project a re-fold reads. The lease event types come in as values."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")


@functools.cache  # read once per row: the table does not change
def columns() -> tuple[str, ...]:
    """The lease row's columns, in the table's order."""
    return tuple(c.name for c in schema.leases.c)


def insert(ex: Executor, rows: list[dict[str, Any]]) -> None:
    if rows:
        ex.insert("leases.insert", "leases", rows)


def update(ex: Executor, row: dict[str, Any]) -> None:
    """Every column of the row `row["lease_id"]` set to `row`'s values."""
    params = {f"new_{k}": val for k, val in row.items() if k != "lease_id"}
    ex.run("leases.update", _update, {"id": row["lease_id"], **params})


def _update() -> sa.Update:
    t = schema.leases.c
    values: dict[str, Any] = {c: sa.bindparam(f"new_{c}") for c in columns() if c != "lease_id"}
    return schema.leases.update().where(t.lease_id == sa.bindparam("id")).values(**values)


def by_id(ex: Executor, lease_id: str) -> Sequence[Any] | None:
    rows = ex.rows("leases.by-id", _by_id, {"id": lease_id})
    return rows[0] if rows else None


def _by_id() -> sa.Select[Any]:
    return sa.select(schema.leases).where(schema.leases.c.lease_id == sa.bindparam("id"))


def held(ex: Executor, project: str | None, wall_ms: int) -> Sequence[Any]:
    """The rows of `project` (None: every project) neither lost nor released whose expiry is
    after `wall_ms` (a task's end is the caller's to judge), oldest first."""

    def build() -> sa.Select[Any]:
        t = schema.leases.c
        query = sa.select(schema.leases).where(
            t.expires_ms > sa.bindparam("wall"), t.lost_to.is_(None), t.released_hlc.is_(None)
        )
        if project is not None:
            query = query.where(t.project == sa.bindparam("project"))
        return query.order_by(t.acquired_hlc, t.lease_id)

    key = ("leases.held", project is not None)
    return ex.rows(key, build, {"wall": wall_ms, "project": project})


def lost_of(ex: Executor, agent: str, wall_ms: int) -> Sequence[Any]:
    """The rows of `agent` that lost a race and whose expiry is after `wall_ms`."""

    def build() -> sa.Select[Any]:
        t = schema.leases.c
        return (
            sa.select(schema.leases)
            .where(
                t.agent == sa.bindparam("agent"),
                t.lost_to.is_not(None),
                t.expires_ms > sa.bindparam("wall"),
            )
            .order_by(t.acquired_hlc, t.lease_id)
        )

    return ex.rows("leases.lost-of", build, {"agent": agent, "wall": wall_ms})


def listing(
    ex: Executor, *, agent: str | None, project: str | None, after_ms: int | None, limit: int
) -> Sequence[Any]:
    """Rows, newest first, of `agent` and `project` when given; with `after_ms`, only the rows
    neither lost nor released whose expiry is after it."""
    shape = (agent is not None, project is not None, after_ms is not None)

    def build() -> sa.Select[Any]:
        t = schema.leases.c
        query = sa.select(schema.leases)
        if shape[0]:
            query = query.where(t.agent == sa.bindparam("agent"))
        if shape[1]:
            query = query.where(t.project == sa.bindparam("project"))
        if shape[2]:
            query = query.where(
                t.expires_ms > sa.bindparam("wall"), t.lost_to.is_(None), t.released_hlc.is_(None)
            )
        return query.order_by(t.acquired_hlc.desc(), t.lease_id.desc()).limit(sa.bindparam("n"))

    params = {"agent": agent, "project": project, "wall": after_ms, "n": limit}
    return ex.rows(("leases.list", *shape), build, params)


def max_fence(ex: Executor, project: str) -> int:
    def build() -> sa.Select[Any]:
        t = schema.leases.c
        return sa.select(sa.func.max(t.fence)).where(t.project == sa.bindparam("project"))

    value = ex.rows("leases.max-fence", build, {"project": project})[0][0]
    return int(value or 0)


def clear(ex: Executor, project: str | None) -> None:
    """Delete the rows of `project` (None: every row): a re-fold or a rebuild."""

    def build() -> sa.Delete:
        if project is None:
            return schema.leases.delete()
        return schema.leases.delete().where(schema.leases.c.project == sa.bindparam("project"))

    ex.run(("leases.clear", project is None), build, {"project": project})


def lease_events(ex: Executor, project: str | None, types: Sequence[str]) -> Sequence[Any]:
    """(id, type, stream, from_agent, hlc, metadata_json) of the events of `project` (None:
    every project) whose type is one of `types`, in HLC order."""
    n = len(types)

    def build() -> sa.Select[Any]:
        e = schema.events.c
        of_type = sa.or_(*(e.type == sa.bindparam(f"t{i}") for i in range(n)))
        query = sa.select(e.id, e.type, e.stream, e.from_agent, e.hlc, e.metadata_json)
        if project is not None:
            query = query.where(e.stream == sa.bindparam("project"))
        return query.where(of_type).order_by(e.hlc, e.id)

    params = {"project": project, **{f"t{i}": t for i, t in enumerate(types)}}
    return ex.rows(("leases.events", project is None, n), build, params)
