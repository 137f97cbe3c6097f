"""The `logstream_meta` rows: local settings and marks of this database (its replica id, the
task fold's version, the pins, the ended dashboard sessions), never replicated; and the schema
revision Alembic records. `value` and `schema_revision` read through a `sa.Connection` (a
read outside the store's snapshots: opening a store, the hubs' leader lock); the others take
the `Executor` of a write transaction or a read snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor, binds, in_lists

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

_ESCAPE = "/"  # LIKE's escape character for a literal prefix (what `autoescape` uses)


def _get() -> sa.Select[tuple[str]]:
    return sa.select(schema.meta.c.value).where(schema.meta.c.key == sa.bindparam("key"))


def value(conn: sa.Connection, key: str) -> str | None:
    """`get` on a SQLAlchemy connection: the value of the meta row `key`, None if none."""
    got = conn.execute(_get(), {"key": key}).scalar()
    return None if got is None else str(got)


def get(ex: Executor, key: str) -> str | None:
    """The value of the meta row `key` as `ex` sees it, None if there is none."""
    rows = ex.rows("meta.get", _get, {"key": key})
    return None if not rows or rows[0][0] is None else str(rows[0][0])


def insert(ex: Executor, key: str, val: str) -> None:
    """Add the meta row `key` (it must not exist)."""
    ex.insert("meta.insert", "logstream_meta", [{"key": key, "value": val}])


def _with_prefix() -> sa.Select[tuple[str, str]]:
    pattern: sa.BindParameter[str] = sa.bindparam("pattern")
    return sa.select(schema.meta.c.key, schema.meta.c.value).where(
        schema.meta.c.key.like(pattern, escape=_ESCAPE)
    )


def with_prefix(ex: Executor, prefix: str) -> list[tuple[str, str]]:
    """(key, value) of every meta row whose key starts with `prefix` (taken literally)."""
    literal = "".join(_ESCAPE + ch if ch in "%_" + _ESCAPE else ch for ch in prefix)
    rows = ex.rows("meta.with-prefix", _with_prefix, {"pattern": literal + "%"})
    return [(str(k), str(val)) for k, val in rows]


def delete(ex: Executor, keys: Sequence[str]) -> None:
    """Remove the meta rows `keys`."""
    for n, params in in_lists(list(keys)):

        def build(n: int = n) -> sa.Delete:
            return sa.delete(schema.meta).where(schema.meta.c.key.in_(binds(n)))

        ex.run(("meta.delete", n), build, params)


def schema_revision(conn: sa.Connection) -> str | None:
    """The schema revision the database is at (Alembic's `alembic_version`), None if none."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    got = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return None if got is None else str(got)
