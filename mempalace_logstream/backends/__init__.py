"""Database backends behind the store's seam (`base.Backend`): SQLite and PostgreSQL.

Only this package names a dialect. A new backend is a module here implementing `Backend`,
plus one line in `for_engine`.

sqlite_file.py     a SQLite log file before any engine: present, ours, writable (stdlib only)
sqlite_reader.py   a read-only snapshot on a SQLite log with the stdlib `sqlite3` (the hook's
                   lean inbox reader, store/lean.py)
sqlite_inbox_sql.py  generated: the store's SQLite text for the inbox's reads
sqlite_writer.py   the SQLite write transaction and executor on a stdlib `sqlite3` connection
                   (SqliteBackend's write half; the lean local writer's, store/lean_write.py)
sqlite_write_sql.py  generated: the store's SQLite text for the lean writer's operations

Names are loaded on first use (PEP 562): the stdlib-only modules above import without
SQLAlchemy.
"""

from __future__ import annotations

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream.backends.base import (
        Backend,
        Compiler,
        Executor,
        QueryExecutor,
        StatementHook,
        storage_error,
        wrap_exceptions,
    )

__all__ = [
    "Backend",
    "Compiler",
    "Executor",
    "QueryExecutor",
    "StatementHook",
    "for_engine",
    "storage_error",
    "wrap_exceptions",
]
_FROM_BASE = frozenset(__all__) - {"for_engine"}


def __getattr__(name: str) -> object:
    if name not in _FROM_BASE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("mempalace_logstream.backends.base"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def for_engine(engine: sa.Engine) -> Backend:
    """The backend of an engine made by `engine.create_engine` (a SQLite file or PostgreSQL)."""
    if engine.dialect.name == "postgresql":
        from mempalace_logstream.backends.postgres import PostgresBackend

        return PostgresBackend(engine)
    from mempalace_logstream.backends.sqlite import SqliteBackend

    return SqliteBackend(engine)
