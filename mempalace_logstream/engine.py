"""Engines for both backends. SQLite: WAL, durability level, busy timeout and explicit
`BEGIN IMMEDIATE` for write transactions, set in one connect listener. PostgreSQL: psycopg 3.

Must not import store or any surface.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from mempalace_logstream import errors

DURABILITY = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
WRITE_OPTION = "logstream_write"


def sqlite_url(path: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def create_engine(
    url: str, *, durability: str = "full", busy_timeout_ms: int = 30_000
) -> sa.Engine:
    """Create the engine for `url` (a SQLAlchemy URL or a plain file path)."""
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
        return _sqlite_engine(parsed, durability, busy_timeout_ms)
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
            # PostgreSQL's analogue of SQLite NORMAL: a commit returns before its WAL flush, so
            # a server crash may lose the last few commits, never corrupt the database.
            with dbapi_conn.cursor() as cur:
                cur.execute("SET synchronous_commit = off")
            dbapi_conn.commit()

    return engine


def _sqlite_engine(url: sa.URL, durability: str, busy_timeout_ms: int) -> sa.Engine:
    database = url.database
    if not database or database == ":memory:":
        raise errors.ValidationError("db: the SQLite store needs a file path", field="db")
    try:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.StorageError(
            f"cannot create the directory of {database}: {exc.strerror or exc}"
        ) from exc
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        pool_size=8,
        max_overflow=32,
    )
    sync = DURABILITY[durability]

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Own the transaction boundaries ourselves (pysqlite's implicit BEGIN is deferred and
        # skips DDL), so writers can take the lock up front with BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        mode = cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise errors.StorageError(f"could not switch {database} to WAL (got {mode})")
        cur.execute(f"PRAGMA synchronous={sync}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def writer(engine: sa.Engine) -> sa.Engine:
    """The same engine whose transactions take the write lock at BEGIN (SQLite)."""
    return engine.execution_options(**{WRITE_OPTION: True})
