"""A read-only look at a local SQLite log with the stdlib `sqlite3`, no SQLAlchemy: what the
hook's lean inbox reader (store/lean.py) reads through.

Opening follows engine.py's rule for a reader (`create=False`), through sqlite_file.py: a
missing file, a directory, a file that is not a log are refused with the store's texts; a file
this process may not write is opened through the same read-only URI. Snapshots map sqlite3's
errors as the SQLite backend does (`storage_message`). `open_reader` is None for whatever the
store must open itself: a URL that is not a plain `sqlite:///PATH`, an unknown durability.
Must not import sqlalchemy or the store.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.backends import sqlite_file

URL_PREFIX = "sqlite:///"
BUSY_TIMEOUT_MS = 30_000  # engine.create_engine's default


def open_reader(target: str, durability: str = "full") -> SqliteReader | None:
    """A reader of the log at `target` (`sqlite:///PATH`, as config.resolve_db makes it), or
    None when the store must open it. Raises NotFoundError / StorageError as the store does
    for a missing file or one that is not a logstream database."""
    if not target.startswith(URL_PREFIX) or durability not in sqlite_file.DURABILITY:
        return None
    path = target[len(URL_PREFIX) :]
    if not path or path == ":memory:" or "?" in path or "%" in path:
        return None  # no file, or URL options / escapes: SQLAlchemy's URL parser decides
    if not os.path.exists(path):
        raise sqlite_file.missing_log(path)
    mode = sqlite_file.read_only_mode(path)
    sqlite_file.check_log_file(path, mode)
    if mode is None:
        uri = f"file:{sqlite_file.quote(path)}?mode=rw"
    else:
        uri = sqlite_file.sqlite_uri(path, immutable=mode == "immutable")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as exc:
        raise _storage_error(exc) from exc
    return SqliteReader(db)


def _storage_error(exc: sqlite3.Error) -> errors.StorageError:
    return errors.StorageError(sqlite_file.storage_message(exc))


class SqliteReader:
    """One connection; each `snapshot()` is a deferred transaction, rolled back."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def snapshot(self) -> Iterator[SnapshotQuery]:
        """A read snapshot whose query runs SQL text with a dict of named parameters."""
        db = self.db
        try:
            db.execute("BEGIN")
            try:
                yield SnapshotQuery(db)
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise _storage_error(exc) from exc

    def schema_revision(self) -> str | None:
        """The log's Alembic revision; None without a version table (a reference log)."""
        with self.snapshot() as query:
            found = query(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'",
                {},
            )
            rows = query("SELECT version_num FROM alembic_version", {}) if found else []
        return str(rows[0][0]) if rows else None


class SnapshotQuery:
    """`base.Query` on a DBAPI connection: (SQL text, parameters) -> all rows."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __call__(self, sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        rows: list[Sequence[Any]] = sqlite_file.fetch_all(self.db, sql, params)
        return rows
