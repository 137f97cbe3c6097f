"""The PostgreSQL backend's read connections (issue 25): kept out of the pool between reads,
read in autocommit at READ COMMITTED (a transaction block adds nothing a read sees there),
and ended cleanly when a read fails (`PostgresBackend.reading`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from mempalace_logstream.backends import base

# Idle read connections a backend keeps out of the pool (`PostgresBackend.reading`), and how
# long one may stay idle and still skip the pool's pre-ping.
READERS_KEPT = 4
FRESH_S = 1.0

_PLAIN_KEY = "logstream_reads_committed"


class Reader:
    """A read connection: its pool proxy, whether it reads in autocommit (`plain`: READ
    COMMITTED, where a transaction block adds nothing), when it was last given back, and
    whether the pool pinged it for this read (a fresh checkout). Its statements run on one
    cursor held with it (`Connection.execute` makes a cursor per statement: ~15 µs of CPU)."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.db: psycopg.Connection[Any] = proxy.driver_connection
        self.cur: psycopg.Cursor[Any] = self.db.cursor()
        self.pinged = True
        self.used_at = 0.0
        plain = proxy.info.get(_PLAIN_KEY)  # kept for the DBAPI connection's lifetime
        if plain is None:
            plain = proxy.info[_PLAIN_KEY] = reads_committed(self.db)
        self.plain: bool = plain
        if self.db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.db.rollback()  # (the pool resets a connection it hands out; to be sure)
        self.db.autocommit = plain
        self.utf8: bool = self.db.info.encoding == "utf-8"

    def restore(self) -> None:
        """The pool's connections are not in autocommit (the store's SQLAlchemy reads)."""
        if self.db.autocommit:
            self.db.autocommit = False

    def query(self, hooks: list[base.StatementHook], fresh: Callable[[], Reader]) -> ReaderQuery:
        return ReaderQuery(self, hooks, fresh)

    def _replace(self, other: Reader) -> None:
        with contextlib.suppress(Exception):
            self.proxy.invalidate()
        self.proxy, self.db, self.plain, self.pinged = other.proxy, other.db, other.plain, True
        self.cur, self.utf8 = other.cur, other.utf8


class ReaderQuery:
    """`base.Query` of one read on a `Reader`: an unpinged connection's first statement may
    run again once on a fresh one (`PostgresBackend.reading`)."""

    __slots__ = ("reader", "hooks", "fresh", "first")

    def __init__(
        self, reader: Reader, hooks: list[base.StatementHook], fresh: Callable[[], Reader]
    ) -> None:
        self.reader, self.hooks, self.fresh = reader, hooks, fresh
        self.first = not reader.pinged

    def __call__(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        reader = self.reader
        if self.hooks:
            base.observe(self.hooks, sql, params)
        try:
            rows: list[tuple[Any, ...]] = reader.cur.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if not (self.first and reader.db.broken):
                raise
            reader._replace(self.fresh())
            rows = reader.cur.execute(sql, params).fetchall()
        finally:
            self.first = False
        return rows

    def typed_rows(self, rows: Sequence[Any], low: int, high: int, seq_at: int) -> bool:
        """Whether the event read rows `rows` need no type test in the row reader: the
        column types refuse a value of another type when it is written (a BIGINT holds
        integers, a text column text), and text is str at a UTF-8 client encoding (psycopg
        gives bytes at SQL_ASCII)."""
        return self.reader.utf8


def reads_committed(db: psycopg.Connection[Any]) -> bool:
    """Whether `db` reads at READ COMMITTED (its own setting, else the server's default)."""
    level = db.isolation_level
    if level is not None:
        return bool(level == psycopg.IsolationLevel.READ_COMMITTED)
    if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        db.rollback()
    was = db.autocommit
    db.autocommit = True
    try:
        row = db.execute("SHOW default_transaction_isolation").fetchone()
    finally:
        db.autocommit = was
    return row is not None and str(row[0]).lower() == "read committed"


def end_read(proxy: Any, db: psycopg.Connection[Any], exc: BaseException) -> None:
    """After a read failed: roll back, or, when an interrupt (Ctrl-C, a cancelled task) may
    have left a command in progress or the rollback fails, invalidate the connection so the
    pool never hands it out again. The original exception is what the caller sees."""
    if isinstance(exc, Exception) and not db.broken:
        try:
            db.rollback()
            return
        except psycopg.Error:
            pass
    with contextlib.suppress(Exception):
        proxy.invalidate()
