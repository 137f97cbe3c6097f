"""The importer's statements (`logstream import`): the source's rows read in seq pages on the
driver cursor, the prefix rule's reads, blobs, and the artifact rows written verbatim.

`table` is `schema.events` or `schema.artifacts`: both are numbered by `seq`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.base import Executor
from mempalace_logstream.schema import (
    artifact_blobs,
    artifact_redactions,
    event_artifacts,
    events,
)


def top_seq(conn: sa.Connection, table: sa.Table) -> int:
    """The highest seq of `table` (0 when empty)."""
    return int(conn.execute(sa.select(sa.func.max(table.c.seq))).scalar() or 0)


def count_upto(conn: sa.Connection, table: sa.Table, upto: int) -> int:
    """How many rows of `table` have seq <= upto."""
    q = sa.select(sa.func.count()).select_from(table).where(table.c.seq <= upto)
    return int(conn.execute(q).scalar() or 0)


def seq_ids(
    conn: sa.Connection, table: sa.Table, lo: int, hi: int, limit: int
) -> list[tuple[Any, ...]]:
    """(seq, id) of the rows of `table` with lo < seq <= hi, in seq order, at most `limit`."""
    q = (
        sa.select(table.c.seq, table.c.id)
        .where(table.c.seq > lo, table.c.seq <= hi)
        .order_by(table.c.seq)
        .limit(limit)
    )
    return [tuple(r) for r in conn.execute(q)]


def rows_between(
    conn: sa.Connection, table: sa.Table, lo: int, hi: int, limit: int
) -> list[dict[str, Any]]:
    """The rows of `table` with lo < seq <= hi, in seq order, at most `limit`, as dicts."""
    q = (
        sa.select(table)
        .where(table.c.seq > lo, table.c.seq <= hi)
        .order_by(table.c.seq)
        .limit(limit)
    )
    return _fetch(conn, q)


def links_between(conn: sa.Connection, lo: int, hi: int) -> list[dict[str, Any]]:
    """The event_artifacts rows of the events with lo < seq <= hi, in (seq, position) order."""
    q = (
        sa.select(event_artifacts)
        .join(events, events.c.id == event_artifacts.c.event_id)
        .where(events.c.seq > lo, events.c.seq <= hi)
        .order_by(events.c.seq, event_artifacts.c.position)
    )
    return _fetch(conn, q)


def _fetch(conn: sa.Connection, query: sa.Select[Any]) -> list[dict[str, Any]]:
    """Run a read on the driver cursor: SQLAlchemy Row objects cost more than the copy itself
    at 100k rows. Only integer bounds are inlined (literal_binds), never user text."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        cursor.close()


def held_blobs(conn: sa.Connection, shas: Collection[str]) -> set[str]:
    """The sha256 among `shas` whose blob is held."""
    q = sa.select(artifact_blobs.c.sha256).where(artifact_blobs.c.sha256.in_(shas))
    return set(conn.execute(q).scalars())


def blob(conn: sa.Connection, sha: str) -> tuple[bytes, int]:
    """(content, size_bytes) of the blob `sha`."""
    c = artifact_blobs.c
    content, size_bytes = conn.execute(
        sa.select(c.content, c.size_bytes).where(c.sha256 == sha)
    ).one()
    return bytes(content), size_bytes


def redaction_names_blob(conn: sa.Connection, sha: str) -> bool:
    """Whether a redaction held here names the blob `sha`."""
    named = sa.select(artifact_redactions.c.sha256).where(artifact_redactions.c.sha256 == sha)
    return conn.execute(named.limit(1)).first() is not None


def insert_artifacts(ex: Executor, rows: Sequence[dict[str, Any]]) -> None:
    """Insert artifact rows verbatim (seq included)."""
    ex.insert("imports.artifacts", "artifacts", list(rows))
