"""Database backends behind the store's seam (`base.Backend`): SQLite and PostgreSQL.

Only this package names a dialect. A new backend is a module here implementing `Backend`,
plus one line in `for_engine`.
"""

from __future__ import annotations

import sqlalchemy as sa

from mempalace_logstream.backends.base import (
    Backend,
    CoreExecutor,
    Executor,
    FastPath,
    QueryExecutor,
    storage_error,
    wrap_exceptions,
)

__all__ = [
    "Backend",
    "CoreExecutor",
    "Executor",
    "FastPath",
    "QueryExecutor",
    "for_engine",
    "storage_error",
    "wrap_exceptions",
]


def for_engine(engine: sa.Engine) -> Backend:
    """The backend of an engine made by `engine.create_engine` (a SQLite file or PostgreSQL)."""
    if engine.dialect.name == "postgresql":
        from mempalace_logstream.backends.postgres import PostgresBackend

        return PostgresBackend(engine)
    from mempalace_logstream.backends.sqlite import SqliteBackend

    return SqliteBackend(engine)
