"""Engines for both backends. SQLite: WAL, durability level, busy timeout and explicit
`BEGIN IMMEDIATE` for write transactions, set in one connect listener. PostgreSQL: psycopg 3.

Opening a SQLite file follows one rule for every surface (issue 9, items 4-5):
* a missing file is created only when the caller writes (`create=True`: append, serve, …); a
  reader (`create=False`: list, wait, `--peer-db`, …) gets `NotFoundError` naming the path. A
  new log appears atomically (built under a temporary name, then linked into place), marked as
  ours with `PRAGMA application_id`, so a racing opener never sees a half-made file;
* an existing file must be a logstream database: an SQLite file that carries our application
  id, our schema (`alembic_version`) or a reference log (`events`). Anything else, an empty
  file included, is refused as "PATH is not a logstream database", never initialised;
* a file this process may not write (or whose directory it may not write) opens read-only:
  `mode=ro`, or `immutable=1` when SQLite could not create the WAL index beside it. Writers
  are refused at open, naming the path. `read_only_kind(engine)` / `was_created(engine)` say
  which happened.
PostgreSQL: the server's database exists or the connect fails; the store then refuses, for a
reader, a database (schema) that holds no log (`Backend.check_log`), and creates one only for a
writer or `logstream migrate`.

Must not import store or any surface.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from mempalace_logstream import errors
from mempalace_logstream.backends import sqlite_file
from mempalace_logstream.backends.sqlite_file import (
    APPLICATION_ID,
    DURABILITY,
    LOG_TABLES,
    check_log_file,
    read_only_mode,
    sqlite_uri,
)

__all__ = [
    "APPLICATION_ID",
    "CREATED_OPTION",
    "DURABILITY",
    "LOG_TABLES",
    "READ_ONLY_OPTION",
    "WRITE_OPTION",
    "check_log_file",
    "create_engine",
    "read_only_kind",
    "read_only_mode",
    "sqlite_uri",
    "sqlite_url",
    "was_created",
    "writer",
]

WRITE_OPTION = "logstream_write"
# Engine-wide execution options that record how the file was opened (read by the store).
READ_ONLY_OPTION = "logstream_read_only"  # None (read-write), "ro" or "immutable"
CREATED_OPTION = "logstream_created"


def sqlite_url(path: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def create_engine(
    url: str, *, durability: str = "full", busy_timeout_ms: int = 30_000, create: bool = True
) -> sa.Engine:
    """Create the engine for `url` (a SQLAlchemy URL or a plain file path).

    SQLite: `create=False` refuses a missing file; see the module docstring for the rules."""
    if "://" not in url:
        url = sqlite_url(url)
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as exc:
        raise errors.ValidationError(f"db: {url!r} is not a database URL", field="db") from exc
    if durability not in DURABILITY:
        raise errors.ValidationError(
            f"durability {durability!r} must be one of {', '.join(DURABILITY)}",
            field="durability",
        )
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, durability, busy_timeout_ms, create)
    if parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() not in ("psycopg", ""):
            raise errors.ValidationError(
                "db: PostgreSQL URLs must use the psycopg 3 driver (postgresql+psycopg://…)",
                field="db",
            )
        parsed = parsed.set(drivername="postgresql+psycopg")
        return _pg_engine(parsed, durability)
    raise errors.ValidationError(
        f"db: unsupported backend {parsed.get_backend_name()!r} (use sqlite:/// or "
        "postgresql+psycopg://)",
        field="db",
    )


def _pg_engine(url: sa.URL, durability: str) -> sa.Engine:
    engine = sa.create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    if durability != "full":

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            relax_durability(dbapi_conn)

    return engine


def relax_durability(db: Any) -> None:
    """`--durability normal`/`off` on a new PostgreSQL DBAPI connection (`_pg_engine`'s connect
    listener): PostgreSQL's analogue of SQLite NORMAL. A commit returns before its WAL flush,
    so a server crash may lose the last few commits, never corrupt the database."""
    with db.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
    db.commit()


def _sqlite_engine(url: sa.URL, durability: str, busy_timeout_ms: int, create: bool) -> sa.Engine:
    database = url.database
    if not database or database == ":memory:":
        raise errors.ValidationError("db: the SQLite store needs a file path", field="db")
    created = False
    if not os.path.exists(database):
        if not create:
            raise sqlite_file.missing_log(database)
        created = _create_log_file(database)
    mode = read_only_mode(database)
    if mode is not None and create:
        raise errors.StorageError(
            f"cannot write {database}: this user may not write the file or its directory "
            "(read commands such as `logstream list` can still read it)"
        )
    if not created:
        check_log_file(database, mode)
    connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
    extra: dict[str, Any] = {}
    if mode is not None:  # the same file, through a read-only URI
        target = sqlite_uri(database, immutable=mode == "immutable")
        extra["creator"] = lambda: sqlite3.connect(target, uri=True, **connect_args)
    engine = sa.create_engine(url, connect_args=connect_args, pool_size=8, max_overflow=32, **extra)
    _listen_sqlite(engine, database, DURABILITY[durability], busy_timeout_ms, mode is None)
    engine.update_execution_options(**{READ_ONLY_OPTION: mode, CREATED_OPTION: created})
    return engine


def _listen_sqlite(
    engine: sa.Engine, database: str, sync: str, busy_timeout_ms: int, writable: bool
) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Own the transaction boundaries ourselves (pysqlite's implicit BEGIN is deferred and
        # skips DDL), so writers can take the lock up front with BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        sqlite_file.configure(dbapi_conn, database, sync, busy_timeout_ms, writable)
        sqlite_file.add_functions(dbapi_conn)

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        sqlite_file.begin(conn, write)


def read_only_kind(engine: sa.Engine) -> str | None:
    """How this engine reads its SQLite file: None (read-write), "ro" or "immutable"."""
    return engine.get_execution_options().get(READ_ONLY_OPTION)


def was_created(engine: sa.Engine) -> bool:
    """True when this engine's open made a new log file (the caller may say so once)."""
    return bool(engine.get_execution_options().get(CREATED_OPTION))


def _create_log_file(path: str) -> bool:
    """Make a new, empty log at `path` atomically: built under a temporary name (WAL mode, our
    application id), flushed, then hard-linked into place, so another process sees no file or
    a whole one. False when another process created it first (that file is used as is)."""
    directory = os.path.dirname(path) or "."
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.StorageError(
            f"cannot create the directory of {path}: {exc.strerror or exc}"
        ) from exc
    tmp = f"{path}.creating-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            sqlite_file.mark_new_file(db)
        finally:
            db.close()  # the last connection: checkpointed, no -wal left behind
        _fsync(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links on this filesystem: a rename, if still free
            if os.path.exists(path):
                return False
            os.replace(tmp, path)
        _fsync(directory)
        return True
    except (OSError, sqlite3.Error) as exc:
        raise errors.StorageError(f"cannot create a log at {path}: {exc}") from exc
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)


def _fsync(path: str) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def writer(engine: sa.Engine) -> sa.Engine:
    """The same engine whose transactions take the write lock at BEGIN (SQLite)."""
    return engine.execution_options(**{WRITE_OPTION: True})
