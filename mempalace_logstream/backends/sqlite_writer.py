"""The write half of the SQLite backend on a stdlib `sqlite3` connection: the write lock
(`BEGIN IMMEDIATE`, retried to the busy timeout), the write transaction that skips the state
query while `PRAGMA data_version` shows nobody else committed, savepoints, and the executor
of the store's precompiled SQL (positional INSERTs of events, a TEMP stage for big pages).

`SqliteBackend` (sqlite.py) is this on the SQLAlchemy engine's writer connection; the lean
local writer (store/lean_write.py) is this on a connection `open_writer` opens itself, set up
as engine.py's connect listener sets the store's (`SqliteFileWriter`). One transaction rule
for both. Must not import sqlalchemy (tests/test_lean_write.py).
"""

from __future__ import annotations

import abc
import contextlib
import operator
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from mempalace_logstream import errors
from mempalace_logstream.backends import base, sqlite_file
from mempalace_logstream.backends.sqlite_reader import BUSY_TIMEOUT_MS, URL_PREFIX, SqliteReader

EVENTS_TABLE = "events"  # schema.events.name (tests/test_lean_write.py holds them equal)

_COLS = base.EVENT_INSERT_COL_NAMES
_QMARK_INSERT_EVENTS = (
    f"INSERT INTO {EVENTS_TABLE} ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})"
)
# A row whose sparse columns are all NULL (a plain local append: no topic, thread, branch,
# status, signature or idempotency key) is inserted without them: 8 binds and columns fewer
# cost ~1.8 µs less of SQLite's time per row, and the columns left out are NULL all the same.
_SPARSE = ("topic", "correlation_id", "branch", "base_commit", "status", "sig", "key_id")
_SPARSE_ALL = (*_SPARSE, "idempotency_key")
_DENSE = tuple(c for c in _COLS if c not in _SPARSE_ALL)
_sparse_of = operator.itemgetter(*(_COLS.index(c) for c in _SPARSE_ALL))
_dense_of = operator.itemgetter(*(_COLS.index(c) for c in _DENSE))
_NO_SPARSE = (None,) * len(_SPARSE_ALL)
_QMARK_INSERT_DENSE = (
    f"INSERT INTO {EVENTS_TABLE} ({', '.join(_DENSE)}) VALUES ({', '.join('?' * len(_DENSE))})"
)
# A big page is bound into a constraint-free TEMP table, then moved with one INSERT…SELECT:
# the 13 index updates run in one C statement, which releases the GIL for its whole length
# (the next page is validated meanwhile), instead of 5,000 short steps.
_QMARK_HELD_IDS: dict[int, str] = {}
_STAGE = "logstream_sync_stage"
_STAGE_MIN_ROWS = 64
_STAGE_DDL = f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ({', '.join(_COLS)})"
_STAGE_INSERT = _QMARK_INSERT_EVENTS.replace(f"INTO {EVENTS_TABLE} ", f"INTO temp.{_STAGE} ", 1)
_STAGE_MOVE = (
    f"INSERT INTO main.{EVENTS_TABLE} ({', '.join(_COLS)}) "
    f"SELECT {', '.join(_COLS)} FROM temp.{_STAGE} ORDER BY rowid"
)


class SqliteWriter(abc.ABC):
    """The write transactions of one SQLite log on one writer connection (`_writer`, given
    by the subclass), used only under the store's commit lock."""

    def __init__(self) -> None:
        self.statement_hooks: list[base.StatementHook] = []
        self._busy_timeout_s = 30.0
        # (data_version, (next seq, next artifact seq)) after the writer's last commit: the
        # counters kept as the transaction's `known`, not rebuilt per commit.
        self._counters: tuple[int, tuple[int, int]] | None = None
        # The executor of the writes without bulk work (`executor`): it holds no state of a
        # transaction, so one serves every transaction on the same connection.
        self._executor: SqliteExecutor | None = None
        # The cursor of BEGIN, `PRAGMA data_version` and COMMIT on the writer's connection,
        # made once: `db.execute` makes (and frees) a cursor per statement (issue 25).
        self._cursor: sqlite3.Cursor | None = None

    @abc.abstractmethod
    def _writer(self) -> sqlite3.Connection:
        """The writer's connection (set up as engine.py's connect listener does)."""

    def before_redaction(self) -> str | None:
        # Freed pages are zeroed, so the removed bytes do not linger in the file.
        return "PRAGMA secure_delete = ON"

    def _begin(self, db: sqlite3.Connection, failed: sqlite3.OperationalError) -> None:
        """BEGIN IMMEDIATE again after it `failed` (the transaction tries it once inline).
        SQLite already waits up to busy_timeout for the lock; a SQLITE_BUSY returned early (WAL
        recovery by another connection, for one) is retried until the same deadline, so
        callers only ever see "database busy" once it has really passed."""
        deadline: float | None = None  # set at the first early SQLITE_BUSY (rare)
        delay = 0.001
        while True:
            if "locked" not in str(failed) and "busy" not in str(failed):
                raise failed
            now = time.monotonic()
            if deadline is None:
                deadline = now + self._busy_timeout_s
            if now + delay >= deadline:
                raise failed
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                failed = exc

    def transaction(self, state: base.Statement | None = None) -> _Transaction:
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK if the block raises).

        `PRAGMA data_version` changes when any other connection commits (another process, or
        a migration on the store's SQLAlchemy engine) and never for this connection's own
        commits. While it is unchanged since our last commit, the counters we left are exact:
        `known`, and the `state` query is skipped.
        """
        return _Transaction(self, state)

    def savepoint(self, db: sqlite3.Connection) -> _Savepoint:
        """SAVEPOINT … RELEASE (ROLLBACK TO and RELEASE if the block raises an Exception)."""
        return _Savepoint(db)

    def query(self, db: sqlite3.Connection) -> base.Query:
        hooks = self.statement_hooks

        def run(sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
            if hooks:
                base.observe(hooks, sql, params)
            return sqlite_file.fetch_all(db, sql, params)

        return run

    def executor(
        self,
        db: sqlite3.Connection,
        compile: base.Compile,
        on_bulk: Callable[[], Any] | None = None,
    ) -> SqliteExecutor:
        if on_bulk is None:  # the common case: one executor per connection and compiler
            ex = self._executor
            if ex is None or ex.db is not db or ex.compile is not compile:
                ex = self._executor = SqliteExecutor(db, compile, self.statement_hooks)
            return ex
        return SqliteExecutor(db, compile, self.statement_hooks, on_bulk)


class _Transaction:
    """`SqliteBackend.transaction` (a plain context manager: it runs once per commit), which
    is its own `base.WriteTx`: the connection and what the transaction learned (one object
    per commit, not two)."""

    __slots__ = (
        *("backend", "state", "db", "cursor", "version", "known", "state_row", "counters"),
        "appended",
    )

    def __init__(self, backend: SqliteWriter, state: base.Statement | None) -> None:
        self.backend, self.state = backend, state
        self.state_row: Sequence[Any] | None = None
        self.counters: tuple[int, int] | None = None
        self.appended = False  # nothing to announce: other processes see data_version change

    def __enter__(self) -> _Transaction:
        backend = self.backend
        db = self.db = backend._writer()
        cur = backend._cursor
        if cur is None or cur.connection is not db:
            cur = backend._cursor = db.cursor()
        self.cursor = cur
        try:
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # busy early (WAL recovery, …): retried
            backend._begin(db, exc)
        try:
            # (fetchall: the statement runs to its end, nothing of it is left pending)
            version = self.version = cur.execute("PRAGMA data_version").fetchall()[0][0]
            prev = backend._counters
            known = self.known = prev[1] if prev is not None and prev[0] == version else None
            if known is None and self.state is not None:
                self.state_row = backend.query(db)(*self.state)[0]
        except BaseException:
            self._rollback()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is not None:
            self._rollback()
            return
        try:
            self.cursor.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        counters = self.counters
        self.backend._counters = (self.version, counters) if counters else None

    def _rollback(self) -> None:
        self.backend._counters = None
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


class _Savepoint:
    """`SqliteWriter.savepoint` (a plain context manager: one per item of a shared commit)."""

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("SAVEPOINT logstream_item")

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is None:
            self.db.execute("RELEASE logstream_item")
        elif issubclass(kind, Exception):  # else the whole transaction rolls back
            self.db.execute("ROLLBACK TO logstream_item")
            self.db.execute("RELEASE logstream_item")


class SqliteExecutor(base.DbapiExecutor):
    """The statements of one transaction on the SQLite writer's DBAPI connection."""

    def __init__(
        self,
        db: sqlite3.Connection,
        compile: base.Compile,
        hooks: Sequence[base.StatementHook] = (),
        on_bulk: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(db, compile, hooks)
        self.on_bulk = on_bulk
        # A local append's INSERT: one cursor, made at the first (not one per row).
        self._cursor: sqlite3.Cursor | None = None

    def _execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if self.hooks:
            base.observe(self.hooks, sql, params)
        cursor: sqlite3.Cursor = self.db.execute(sql, params)
        return cursor

    def _executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if self.hooks:
            base.observe(self.hooks, sql, rows)
        self.db.executemany(sql, rows)

    def held_ids(self, ids: list[str]) -> set[str]:
        # Positional IN lists of 512 (padded): the probe of a fresh page costs ~1 µs an id.
        out: set[str] = set()
        for i in range(0, len(ids), base.IN_MAX):
            chunk = ids[i : i + base.IN_MAX]
            n = 1 << (len(chunk) - 1).bit_length()
            sql = _QMARK_HELD_IDS.get(n)
            if sql is None:
                sql = _QMARK_HELD_IDS[n] = (
                    f"SELECT id FROM {EVENTS_TABLE} WHERE id IN ({', '.join('?' * n)})"
                )
            out.update(r[0] for r in self._execute(sql, chunk + [chunk[-1]] * (n - len(chunk))))
        return out

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        # Positional binding: by name costs ~5 µs more per 19-column row.
        if len(rows) == 1:  # a local append
            row = rows[0]
            sql = _QMARK_INSERT_EVENTS
            if _sparse_of(row) == _NO_SPARSE:
                sql, row = _QMARK_INSERT_DENSE, _dense_of(row)
            if self.hooks:
                base.observe(self.hooks, sql, row)
            cur = self._cursor
            if cur is None:
                cur = self._cursor = self.db.cursor()
            cur.execute(sql, row)
            return
        if len(rows) < _STAGE_MIN_ROWS:
            self._executemany(_QMARK_INSERT_EVENTS, rows)
            return
        self._execute(_STAGE_DDL)  # once per connection; part of this transaction
        try:
            self._executemany(_STAGE_INSERT, rows)
            if self.on_bulk is not None:
                self.on_bulk()
            self._execute(_STAGE_MOVE)
        finally:
            self._execute(f"DELETE FROM temp.{_STAGE}")


def open_writer(target: str, durability: str = "full") -> SqliteFileWriter | None:
    """A writer of the log file at `target` (a plain `sqlite:///PATH`, what config.resolve_db
    makes), or None when the store must open it: another URL, options, an unknown durability,
    a missing file (the store creates it), a file this process may not write (the store says
    so in its words). Raises the store's StorageError for a file that is not a log."""
    if not target.startswith(URL_PREFIX) or durability not in sqlite_file.DURABILITY:
        return None
    path = target[len(URL_PREFIX) :]
    if not path or path == ":memory:" or "?" in path or "%" in path:
        return None  # no file, or URL options / escapes: SQLAlchemy's URL parser decides
    if not os.path.exists(path) or sqlite_file.read_only_mode(path) is not None:
        return None
    sqlite_file.check_log_file(path, None)
    try:
        db = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise errors.StorageError(sqlite_file.storage_message(exc)) from exc
    try:
        sync = sqlite_file.DURABILITY[durability]
        sqlite_file.configure(db, path, sync, BUSY_TIMEOUT_MS, True)
        sqlite_file.add_functions(db)
    except sqlite3.Error as exc:
        db.close()
        raise errors.StorageError(sqlite_file.storage_message(exc)) from exc
    except BaseException:
        db.close()
        raise
    return SqliteFileWriter(db, path)


class SqliteFileWriter(SqliteWriter):
    """The backend of the lean writer: `SqliteWriter` on its own connection, read snapshots on
    the same connection; what only the store does (compiling, opening, migrating, doctor,
    stats) is not here."""

    name = "sqlite"
    driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    notify_channel: str | None = None
    split_inbox = True  # SqliteBackend's (the generated table holds it too)
    rows_json_sql: str | None = None

    def __init__(self, db: sqlite3.Connection, path: str) -> None:
        super().__init__()
        self.db, self.path = db, path
        self._busy_timeout_s = BUSY_TIMEOUT_MS / 1000

    def _writer(self) -> sqlite3.Connection:
        return self.db

    def links_functions(self) -> base.LinksFunctions:
        """Only statement builds call them, and the lean writer builds none."""
        return _store_only("links_functions"), _store_only("links_functions")

    def describe(self) -> str:
        return self.path

    @contextlib.contextmanager
    def reading(self) -> Iterator[base.Query]:
        with SqliteReader(self.db).snapshot() as query:
            yield query

    def remember_log_facts(self, statements: Any) -> None:
        """Nothing to remember: one command, one connection."""

    def sql_dialect(self) -> Any:
        _store_only("sql_dialect")()

    def check_log(self, conn: Any, create: bool) -> None:
        _store_only("check_log")()

    def lock_migrations(self, conn: Any, key: int) -> None:
        _store_only("lock_migrations")()

    def change_signal(self) -> None:
        return None  # nobody waits in a one-call writer

    def integrity_problems(self, conn: Any) -> tuple[str, list[str]]:
        _store_only("integrity_problems")()

    def db_size(self) -> int | None:
        _store_only("db_size")()

    def close(self) -> None:
        self.db.close()


def _store_only(what: str) -> Callable[..., NoReturn]:
    """What the `Backend` protocol asks and only the full store does (compiling, opening,
    migrating, doctor, stats): the lean writer never calls it, and a caller that does is told
    which call and where it belongs."""

    def refuse(*_args: Any) -> NoReturn:
        raise errors.StorageError(
            f"{what}: the lean writer's backend does not do this; open the log with LogStore.open"
        )

    return refuse
