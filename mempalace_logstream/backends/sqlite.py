"""The SQLite backend: a file in WAL mode, one writer at a time.

The write lock is `BEGIN IMMEDIATE` (engine.py sets it for SQLAlchemy connections); the change
signal is `PRAGMA data_version` (see `sqlite_signal.py`). The store's precompiled SQL runs on
the writer's own DBAPI connection, with no SQLAlchemy per statement, and a write transaction
skips the transaction-state query while nobody else committed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from mempalace_logstream import errors, notify
from mempalace_logstream.backends import base, sqlite_file
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.sqlite_signal import SqliteSignal
from mempalace_logstream.backends.sqlite_typed import TypedRange
from mempalace_logstream.backends.sqlite_walindex import header_reader
from mempalace_logstream.backends.sqlite_writer import SqliteWriter
from mempalace_logstream.models import EVENT_SPEC
from mempalace_logstream.schema import event_artifacts, events

# SQLite text uses named parameters, which the sqlite3 module binds from dicts.
_NAMED = SQLiteDialect_pysqlite(paramstyle="named")


class _NumberedCompiler(SQLiteCompiler):
    """SQLAlchemy's "numeric" parameters (each distinct parameter numbered once, in the order
    first met) written as SQLite's `?NNN`, which binds the NNNth value of a sequence wherever
    it occurs: a statement that repeats a parameter (an inbox split in legs repeats its
    bounds) binds by position too. `?NNN`, not `:NNN`: SQLite numbers a `:name` by where it
    first occurs in the text, and the sqlite3 module deprecates a sequence for named ones."""

    def _process_numeric(self) -> None:
        self._numeric_binds_identifier_char = "?"
        super()._process_numeric()  # type: ignore[no-untyped-call]


class _NumberedDialect(SQLiteDialect_pysqlite):
    statement_compiler = _NumberedCompiler


# A read's page statement binds its parameters by position (`positional_dialect`).
_NUMBERED = _NumberedDialect(paramstyle="numeric")

# Idle read connections a backend keeps out of the pool (`SqliteBackend.reading`): a hub's
# concurrent reads beyond it take pooled connections, given back after.
READERS_KEPT = 4
# Log facts a reader keeps while no commit moved the WAL index header (`_Kept`): the tip, the
# marks and the cursors' seqs of the reads since the last commit.
FACTS_KEPT = 64

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


class SqliteBackend(SqliteWriter):
    name = "sqlite"
    driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    notify_channel: str | None = None
    # SQLite cannot read an IN list in the order of the (to_agent, seq) index.
    split_inbox = True
    rows_json_sql: str | None = ROWS_JSON_CHUNK

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__()
        self.engine = engine
        # The writer's pooled DBAPI connection (engine.py's connect listener set WAL, the
        # synchronous level, busy_timeout, foreign_keys and isolation_level=None on it),
        # opened on first use and used only under the store's commit lock; reads take their own.
        self._proxy: Any = None
        self._db: sqlite3.Connection | None = None  # its DBAPI connection
        # Idle reader connections (pool proxies), the most recently used last (`reading`).
        self._readers: list[_Kept] = []
        self._closed = False
        # The SQL texts of the log facts (`remember_log_facts`).
        self.log_facts: frozenset[str] = frozenset()

    def remember_log_facts(self, statements: Iterable[str]) -> None:
        """Statements whose rows depend only on what the log holds (the tip, the keyring's
        marks: asked by every read), which a read snapshot answers from what its connection
        read before while the log's WAL index header (sqlite_walindex.py; else `PRAGMA
        data_version`) shows no commit since (issue 25: no statement instead of two on a log
        nobody wrote to meanwhile). Both change with every commit of another connection, the
        store's own writer included, and a reader never writes."""
        self.log_facts = self.log_facts | frozenset(statements)

    def sql_dialect(self) -> sa.Dialect:
        return _NAMED

    def positional_dialect(self) -> sa.Dialect:
        """The dialect a read's page statement is compiled with (`Reads._page_entry`): `?NNN`
        parameters (`_NumberedCompiler`), bound from a tuple of the distinct parameters in
        the compiled `positiontup`'s order. The sqlite3 module binds a named parameter through
        a new string of its name and a dict lookup, ~1.1k instructions each (issue 25: 4 of
        a 9-row page's ~390k, 5 of a split inbox's)."""
        return _NUMBERED

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

    def reading(self) -> _Kept:
        """A read snapshot: a deferred transaction on one of the backend's reader connections,
        rolled back after. Up to `READERS_KEPT` idle readers are kept out of the pool, the most
        recently used first (issue 25): its page cache is the warmest, and a read pays no pool
        checkout, no reset-on-return ROLLBACK (~8 µs of a 100 µs read). The reader is its own
        context manager (no object made per read). A reader that met a database error goes
        back to the pool, which resets or discards it."""
        try:
            return self._readers.pop()  # atomic: no two reads share a connection
        except IndexError:
            with base.wrap_exceptions():
                return _Kept(self, self.engine.raw_connection())

    def glancing(self) -> _Kept:
        """A list read's snapshot (`Reads.list_args`, `read`): `reading` without BEGIN and
        ROLLBACK (issue 25: 9k instructions of a 1M correlation read's 377k), each statement
        at its own snapshot, as PostgreSQL reads a page at READ COMMITTED. The log facts are
        those of the first look at the header (a fact read after it is labelled with it:
        never newer than what it holds); the page is bounded by the tip's seq, and seqs only
        grow, so the later statements read the rows the facts describe. The one column a
        stored row may see change is its body (a redaction): the row reader tests its type
        on every page (`plan.events_from_rows`). Only for reads whose statements follow that
        rule: every other snapshot is `reading`'s."""
        try:
            kept = self._readers.pop()  # `reading`'s, inline (one call a read)
        except IndexError:
            kept = self.reading()
        kept.glance = True
        return kept

    def close(self) -> None:
        self._closed = True
        while self._readers:
            self._readers.pop().proxy.close()  # back to the pool, which dispose() closes
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = self._db = None


class _Kept:
    """A reader connection of the backend (`SqliteBackend.reading`): the pool's proxy, its
    DBAPI connection, and the log facts it read (`remember_log_facts`), at the WAL index
    header (or `PRAGMA data_version`) it read them at. Made once per connection, so a read
    walks no SQLAlchemy property and builds no closure (issue 25). Each read's snapshot is
    this object as a context manager (a plain one: it runs once per read): a database error
    inside the snapshot or in its BEGIN/ROLLBACK becomes a StorageError and sends the
    connection back to the pool."""

    __slots__ = (
        "backend",
        "proxy",
        "db",
        "cur",
        "hooks",
        "known",
        "version",
        "checked",
        "rows",
        "last",
        "typed",
        "ran",
        "ran_rows",
        "glance",
        "header",
        "started",
    )

    def __init__(self, backend: SqliteBackend, proxy: Any) -> None:
        self.backend = backend
        self.proxy, self.db = proxy, proxy.driver_connection
        # One cursor for every statement of the connection's reads: `db.execute` makes (and
        # registers) a new cursor per statement, ~0.15 µs of each of a read's four (issue 25).
        self.cur: sqlite3.Cursor = self.db.cursor()
        self.hooks, self.known = backend.statement_hooks, backend.log_facts
        self.version: Any = None  # the last check's header (bytes) or data_version
        self.checked = False  # the version was read in this snapshot
        self.rows: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        # Each fact's rows of the parameters it was last asked with (a copy of them), by its
        # SQL text: a read asks the tip and the marks with the same parameters every time, and
        # comparing two dicts costs less than a key of their items (issue 25).
        self.last: dict[str, tuple[dict[str, Any], list[tuple[Any, ...]]]] = {}
        self.typed = TypedRange()  # the seqs found holding values of their columns' types
        # The last statement run that is not a log fact, as (SQL text, parameters), and its
        # rows: a page's statement, whose rows `typed_rows` and `tested_rows` are asked about.
        self.ran: tuple[str, Any] = ("", None)
        self.ran_rows: list[tuple[Any, ...]] | None = None
        self.glance = False  # this read runs without BEGIN / ROLLBACK (`glancing`)
        # The reader of the log's WAL index header (sqlite_walindex.py), made at the first
        # check; None: there is none, `PRAGMA data_version` tells.
        self.header: Any = False
        self.started = False  # this snapshot ran a statement of its own (`__call__`)

    def __enter__(self) -> _Kept:
        backend = self.backend
        if self.known is not backend.log_facts:  # facts named after this connection was kept
            self.known, self.rows, self.last, self.version = backend.log_facts, {}, {}, None
        self.checked = self.started = False
        if self.glance:
            return self
        try:
            self.cur.execute("BEGIN")
        except sqlite3.Error as exc:
            self.proxy.close()  # back to the pool, which resets or discards it
            raise _storage_error(exc) from exc
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        failed = exc if isinstance(exc, sqlite3.Error) else None
        self.glance = False
        try:
            if self.db.in_transaction:
                self.cur.execute("ROLLBACK")
        except sqlite3.Error as rollback_error:
            failed = failed or rollback_error
        backend = self.backend  # kept while healthy, else back to the pool
        if failed is None and not backend._closed and len(backend._readers) < READERS_KEPT:
            backend._readers.append(self)
        else:
            self.proxy.close()
        if failed is not None and (exc is None or exc is failed):
            raise _storage_error(failed) from failed

    def _check_version(self) -> None:
        """Once per snapshot, inside it: has anyone committed since the facts were read? A
        commit drops them. A list read (`glancing`: each statement its own snapshot, the
        facts those of the check) reads the WAL index header (sqlite_walindex.py), no
        statement. A transaction's snapshot starts at its first statement, the `PRAGMA
        data_version`, and its facts must be that snapshot's: the header is read before and
        after it, and a commit between (headers that differ) leaves the snapshot matching no
        header, so its facts are never answered again; nor are those of a snapshot that began
        at an earlier statement (`event_get`'s event, then the marks). No header to read:
        `data_version`, which is the snapshot's."""
        header = self.header
        if header:
            version: Any = header()
            if not self.glance:
                if self.started:  # the snapshot began at an earlier statement: of no header
                    version = object()  # equal to nothing: these facts are read afresh
                else:
                    self.cur.execute("PRAGMA data_version").fetchone()
                    if header() != version:
                        version = object()
        elif header is None:
            version = self.cur.execute("PRAGMA data_version").fetchone()[0]
        else:  # the first check: the PRAGMA reads the log, then its header can be read
            version = self.cur.execute("PRAGMA data_version").fetchone()[0]
            header = self.header = header_reader(self.db)
            if header is not None:  # a list read's facts come after: the header read now
                version = header() if self.glance else object()
        if version != self.version:
            self.rows.clear()
            self.last.clear()
            self.version = version
            self.typed.stale = True
        self.checked = True

    def typed_rows(self, rows: Sequence[Any], low: int, high: int, seq_at: int) -> bool:
        """Whether the event read rows `rows` of seqs low..high read in this snapshot hold
        only values of their columns' types, as this connection learnt them
        (backends/sqlite_typed.py): the row reader then tests none of them."""
        if not self.checked:
            self._check_version()
        ran = self.ran  # `_statement_of`, inline: a read asks this of every page it reads
        statement = ran if rows is self.ran_rows and type(ran[1]) is tuple else None
        return self.typed.covers(self.cur, rows, low, high, seq_at, statement)

    def tested_rows(self, rows: Sequence[Any], low: int, high: int, seq_at: int) -> None:
        """`rows` of this snapshot (seqs low..high) passed the row reader's type test."""
        self.typed.learn(rows, low, high, seq_at, self._statement_of(rows))

    def _statement_of(self, rows: Sequence[Any]) -> tuple[str, Any] | None:
        """(SQL text, parameters) of the statement that read `rows` when it is the last one
        run and its parameters are a tuple (hashable: a page statement's, bound by position),
        else None."""
        ran = self.ran
        return ran if rows is self.ran_rows and type(ran[1]) is tuple else None

    def __call__(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """`base.Query` of a read snapshot: the statements of the log facts are answered from
        what this connection read at the same header (or `PRAGMA data_version`)."""
        if sql in self.known:
            if not self.checked:
                self._check_version()
            last = self.last.get(sql)
            if last is not None and last[0] == params:
                return last[1]
            key = (sql, tuple(params.items()))
            rows = self.rows.get(key)
            if rows is None:
                if self.hooks:
                    base.observe(self.hooks, sql, params)
                if len(self.rows) >= FACTS_KEPT:  # a reader polling many cursors on a quiet log
                    self.rows.clear()
                rows = self.rows[key] = sqlite_file.fetch_all(self.db, sql, params, self.cur)
            self.last[sql] = (dict(params), rows)
            return rows
        if self.hooks:
            base.observe(self.hooks, sql, params)
        self.started = True
        self.ran = (sql, params)
        rows = self.ran_rows = sqlite_file.fetch_all(self.db, sql, params, self.cur)
        return rows


def _storage_error(exc: sqlite3.Error) -> errors.StorageError:
    return base.storage_error(exc, (sqlite3.Error,)) or errors.StorageError(str(exc))
