"""The SQLite backend: a file in WAL mode, one writer at a time.

The write lock is `BEGIN IMMEDIATE` (engine.py sets it for SQLAlchemy connections); the change
signal is `PRAGMA data_version` (see `sqlite_signal.py`). The store's precompiled SQL runs on
the writer's own DBAPI connection, with no SQLAlchemy per statement, and a write transaction
skips the transaction-state query while nobody else committed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from mempalace_logstream import errors, notify
from mempalace_logstream.backends import base, sqlite_file
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.sqlite_signal import SqliteSignal
from mempalace_logstream.models import EVENT_SPEC
from mempalace_logstream.schema import event_artifacts, events

# SQLite text uses named parameters, which the sqlite3 module binds from dicts.
_NAMED = SQLiteDialect_pysqlite(paramstyle="named")

_COLS = base.EVENT_INSERT_COL_NAMES
_QMARK_INSERT_EVENTS = (
    f"INSERT INTO {events.name} ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})"
)
# A big page is bound into a constraint-free TEMP table, then moved with one INSERT…SELECT:
# the 13 index updates run in one C statement, which releases the GIL for its whole length
# (the next page is validated meanwhile), instead of 5,000 short steps.
_QMARK_HELD_IDS: dict[int, str] = {}
_STAGE = "logstream_sync_stage"
# Idle read connections a backend keeps out of the pool (`SqliteBackend.reading`): a hub's
# concurrent reads beyond it take pooled connections, given back after.
READERS_KEPT = 4
# Log facts a reader keeps at one `PRAGMA data_version` (`_Kept`): the tip, the marks and the
# cursors' seqs of the reads since the last commit.
FACTS_KEPT = 64
_STAGE_MIN_ROWS = 64
_STAGE_DDL = f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ({', '.join(_COLS)})"
_STAGE_INSERT = _QMARK_INSERT_EVENTS.replace(f"INTO {events.name} ", f"INTO temp.{_STAGE} ", 1)
_STAGE_MOVE = (
    f"INSERT INTO main.{events.name} ({', '.join(_COLS)}) "
    f"SELECT {', '.join(_COLS)} FROM temp.{_STAGE} ORDER BY rowid"
)

# One chunk of a compact page built by SQLite's JSON functions (the hub's hot path on SQLite):
# the rows as UTF-8 JSON (a BLOB: no decoding to str and encoding back), their count, last
# origin_seq and body + metadata characters. The rows are the very values replication.ops_rows lists
# (artifact ids sorted, metadata parsed): a test holds the two equal. Row order inside the
# array is not guaranteed (nor needed: the client sorts by origin position).
_ROW_VALUES = {
    "artifact_ids": f"""(SELECT json_group_array(artifact_id) FROM (
            SELECT ea.artifact_id FROM {event_artifacts.name} ea WHERE ea.event_id = e.id
            ORDER BY ea.artifact_id))""",
    "metadata_json": """CASE WHEN json_valid(e.metadata_json)
              AND json_type(e.metadata_json) = 'object'
              THEN json(e.metadata_json) ELSE json_object() END""",
}
ROWS_JSON_CHUNK = f"""
SELECT CAST(json_group_array(json_array(
         {", ".join(_ROW_VALUES.get(name, f"e.{name}") for name, _ in EVENT_SPEC if name != "seq")}
       )) AS BLOB),
       count(*), max(e.origin_seq), sum(length(e.body) + length(e.metadata_json))
FROM (SELECT * FROM {events.name} WHERE origin_replica = :origin AND origin_seq > :after
      ORDER BY origin_seq LIMIT :lim) e
"""  # table names come from the schema; values are bound; one value per `models.ROW_FIELDS`


class SqliteBackend:
    name = "sqlite"
    driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    notify_channel: str | None = None
    # SQLite cannot read an IN list in the order of the (to_agent, seq) index.
    split_inbox = True
    rows_json_sql: str | None = ROWS_JSON_CHUNK

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.statement_hooks: list[base.StatementHook] = []
        # The writer's pooled DBAPI connection (engine.py's connect listener set WAL, the
        # synchronous level, busy_timeout, foreign_keys and isolation_level=None on it),
        # opened on first use and used only under the store's commit lock; reads take their own.
        self._proxy: Any = None
        self._db: sqlite3.Connection | None = None  # its DBAPI connection
        self._busy_timeout_s = 30.0
        # (data_version, next seq, next artifact seq) after the writer's last commit.
        self._counters: tuple[int, int, int] | None = None
        # Idle reader connections (pool proxies), the most recently used last (`reading`).
        self._readers: list[_Kept] = []
        self._closed = False
        # The SQL texts of the log facts (`remember_log_facts`).
        self.log_facts: frozenset[str] = frozenset()

    def remember_log_facts(self, statements: Iterable[str]) -> None:
        """Statements whose rows depend only on what the log holds (the tip, the keyring's
        marks: asked by every read), which a read snapshot answers from what its connection
        read before while `PRAGMA data_version` shows no commit since (issue 25: one PRAGMA
        instead of two statements on a log nobody wrote to meanwhile). `data_version`
        changes with every commit of another connection, the store's own writer included,
        and a reader never writes."""
        self.log_facts = self.log_facts | frozenset(statements)

    def sql_dialect(self) -> sa.Dialect:
        return _NAMED

    def links_functions(self) -> base.LinksFunctions:
        return sa.func.char, sa.func.group_concat

    def describe(self) -> str:
        return str(self.engine.url.database)

    def check_log(self, conn: sa.Connection, create: bool) -> None:
        """Nothing to do: engine.py refused a missing file for a reader, and any file that is
        not ours; a file of ours without tables yet is a log being made (a writer finishing
        it, or one that crashed before it could): the store completes it."""

    def lock_migrations(self, conn: sa.Connection, key: int) -> None:
        """Nothing to do: the migration's transaction is IMMEDIATE."""

    def change_signal(self) -> Callable[[], notify.ChangeSignal] | None:
        path = str(self.engine.url.database)
        kind = engine_mod.read_only_kind(self.engine)
        if kind == "immutable":
            return None  # opened as a snapshot: nothing it could signal
        uri = engine_mod.sqlite_uri(path) if kind else None
        return lambda: SqliteSignal(path, uri=uri)

    def integrity_problems(self, conn: sa.Connection) -> tuple[str, list[str]]:
        found = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
        return "PRAGMA integrity_check", [] if found == ["ok"] else found

    def before_redaction(self) -> str | None:
        # Freed pages are zeroed, so the removed bytes do not linger in the file.
        return "PRAGMA secure_delete = ON"

    def db_size(self) -> int | None:
        path = self.engine.url.database or ""
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))

    def _writer(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        with base.wrap_exceptions():
            proxy = self.engine.raw_connection()
        # Checked out for the backend's lifetime and used only through the DBAPI (which never
        # invalidates it): its driver connection is kept, not asked for on every write.
        db: sqlite3.Connection = proxy.driver_connection  # type: ignore[assignment]
        self._busy_timeout_s = db.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
        self._proxy, self._db = proxy, db
        return db

    def _begin(self, db: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE. SQLite already waits up to busy_timeout for the lock; a SQLITE_BUSY
        returned early (WAL recovery by another connection, for one) is retried until the
        same deadline, so callers only ever see "database busy" once it has really passed."""
        deadline: float | None = None  # set at the first early SQLITE_BUSY (rare)
        delay = 0.001
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._busy_timeout_s
                if now + delay >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def transaction(self, state: base.Statement | None = None) -> _Transaction:
        """BEGIN IMMEDIATE … COMMIT (ROLLBACK if the block raises).

        `PRAGMA data_version` changes when any other connection commits (another process, or
        a migration on the store's SQLAlchemy engine) and never for this connection's own
        commits. While it is unchanged since our last commit, the counters we left are exact:
        `known`, and the `state` query is skipped.
        """
        return _Transaction(self, state)

    @contextlib.contextmanager
    def savepoint(self, db: sqlite3.Connection) -> Iterator[None]:
        db.execute("SAVEPOINT logstream_item")
        try:
            yield
        except Exception:
            db.execute("ROLLBACK TO logstream_item")
            db.execute("RELEASE logstream_item")
            raise
        db.execute("RELEASE logstream_item")

    def reading(self) -> _Reading:
        """A read snapshot: a deferred transaction on one of the backend's reader connections,
        rolled back after. Up to `READERS_KEPT` idle readers are kept out of the pool, the most
        recently used first (issue 25): its page cache is the warmest, and a read pays no pool
        checkout, no reset-on-return ROLLBACK (~8 µs of a 100 µs read). A reader that met a
        database error goes back to the pool, which resets or discards it."""
        return _Reading(self)

    def _reader(self) -> _Kept:
        try:
            return self._readers.pop()  # atomic: no two reads share a connection
        except IndexError:
            with base.wrap_exceptions():
                return _Kept(self, self.engine.raw_connection())

    def _release(self, kept: _Kept, healthy: bool) -> None:
        if healthy and not self._closed and len(self._readers) < READERS_KEPT:
            self._readers.append(kept)
        else:
            kept.proxy.close()

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
        return SqliteExecutor(db, compile, self.statement_hooks, on_bulk)

    def close(self) -> None:
        self._closed = True
        while self._readers:
            self._readers.pop().proxy.close()  # back to the pool, which dispose() closes
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = self._db = None


class _Kept:
    """A reader connection of the backend (`SqliteBackend.reading`): the pool's proxy, its
    DBAPI connection, and the log facts it read (`remember_log_facts`), at the
    `PRAGMA data_version` it read them at. Made once per connection, so a read walks no
    SQLAlchemy property and builds no closure (issue 25)."""

    __slots__ = ("proxy", "db", "hooks", "known", "version", "checked", "rows")

    def __init__(self, backend: SqliteBackend, proxy: Any) -> None:
        self.proxy, self.db = proxy, proxy.driver_connection
        self.hooks, self.known = backend.statement_hooks, backend.log_facts
        self.version: int | None = None
        self.checked = False  # the version was read in this snapshot
        self.rows: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}

    def __call__(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """`base.Query` of a read snapshot: the statements of the log facts are answered from
        what this connection read at the same `PRAGMA data_version`."""
        if sql in self.known:
            if not self.checked:  # once per snapshot, inside it: the version it reads
                version = self.db.execute("PRAGMA data_version").fetchone()[0]
                if version != self.version:
                    self.rows.clear()
                    self.version = version
                self.checked = True
            key = (sql, tuple(params.items()))
            hit = self.rows.get(key)
            if hit is not None:
                return hit
            if self.hooks:
                base.observe(self.hooks, sql, params)
            if len(self.rows) >= FACTS_KEPT:  # a reader polling many cursors on a quiet log
                self.rows.clear()
            rows = self.rows[key] = sqlite_file.fetch_all(self.db, sql, params)
            return rows
        if self.hooks:
            base.observe(self.hooks, sql, params)
        return sqlite_file.fetch_all(self.db, sql, params)


class _Reading:
    """`SqliteBackend.reading` (a plain context manager: it runs once per read). A database
    error inside the snapshot or in its BEGIN/ROLLBACK becomes a StorageError and sends the
    connection back to the pool."""

    __slots__ = ("backend", "kept")

    def __init__(self, backend: SqliteBackend) -> None:
        self.backend = backend

    def __enter__(self) -> base.Query:
        backend = self.backend
        kept = self.kept = backend._reader()
        if kept.known is not backend.log_facts:  # facts named after this connection was kept
            kept.known, kept.rows, kept.version = backend.log_facts, {}, None
        kept.checked = False
        try:
            kept.db.execute("BEGIN")
        except sqlite3.Error as exc:
            backend._release(kept, False)
            raise _storage_error(exc) from exc
        return kept

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        kept = self.kept
        failed = exc if isinstance(exc, sqlite3.Error) else None
        try:
            if kept.db.in_transaction:
                kept.db.execute("ROLLBACK")
        except sqlite3.Error as rollback_error:
            failed = failed or rollback_error
        self.backend._release(kept, failed is None)
        if failed is not None and (exc is None or exc is failed):
            raise _storage_error(failed) from failed


def _storage_error(exc: sqlite3.Error) -> errors.StorageError:
    return base.storage_error(exc, (sqlite3.Error,)) or errors.StorageError(str(exc))


class _Transaction:
    """`SqliteBackend.transaction` (a plain context manager: it runs once per commit)."""

    __slots__ = ("backend", "state", "db", "tx", "version")

    def __init__(self, backend: SqliteBackend, state: base.Statement | None) -> None:
        self.backend, self.state = backend, state

    def __enter__(self) -> _Tx:
        backend = self.backend
        db = self.db = backend._writer()
        backend._begin(db)
        try:
            version = self.version = db.execute("PRAGMA data_version").fetchone()[0]
            prev = backend._counters
            tx = self.tx = _Tx(
                db, (prev[1], prev[2]) if prev is not None and prev[0] == version else None
            )
            if tx.known is None and self.state is not None:
                tx.state_row = backend.query(db)(*self.state)[0]
        except BaseException:
            self._rollback()
            raise
        return tx

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is not None:
            self._rollback()
            return
        try:
            self.db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        counters = self.tx.counters
        self.backend._counters = (self.version, *counters) if counters else None

    def _rollback(self) -> None:
        self.backend._counters = None
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")


@dataclass
class _Tx:
    db: sqlite3.Connection
    known: tuple[int, int] | None
    state_row: Sequence[Any] | None = None
    counters: tuple[int, int] | None = None
    appended: bool = False  # nothing to announce: other processes see data_version change


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
                    f"SELECT id FROM {events.name} WHERE id IN ({', '.join('?' * n)})"
                )
            out.update(r[0] for r in self._execute(sql, chunk + [chunk[-1]] * (n - len(chunk))))
        return out

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        # Positional binding: by name costs ~5 µs more per 19-column row.
        if len(rows) == 1:  # a local append
            self._execute(_QMARK_INSERT_EVENTS, rows[0])
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
