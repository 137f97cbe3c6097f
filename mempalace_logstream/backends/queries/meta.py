"""The `logstream_meta` rows: local settings and marks of this database (its replica id, the
task fold's version, the pins, the ended dashboard sessions), never replicated; and the schema
revision Alembic records. Each function takes a `sa.Connection`."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from mempalace_logstream.schema import meta


def value(conn: sa.Connection, key: str) -> str | None:
    """The value of the meta row `key`, None if there is none."""
    got = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).scalar()
    return None if got is None else str(got)


def insert(conn: sa.Connection, key: str, val: str) -> None:
    """Add the meta row `key` (it must not exist)."""
    conn.execute(sa.insert(meta).values(key=key, value=val))


def with_prefix(conn: sa.Connection, prefix: str) -> list[tuple[str, str]]:
    """(key, value) of every meta row whose key starts with `prefix` (taken literally)."""
    q = sa.select(meta.c.key, meta.c.value).where(meta.c.key.startswith(prefix, autoescape=True))
    return [(str(k), str(val)) for k, val in conn.execute(q).all()]


def delete(conn: sa.Connection, keys: Sequence[str]) -> None:
    """Remove the meta rows `keys`."""
    conn.execute(sa.delete(meta).where(meta.c.key.in_(list(keys))))


def schema_revision(conn: sa.Connection) -> str | None:
    """The schema revision the database is at (Alembic's `alembic_version`), None if none."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    got = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return None if got is None else str(got)
