"""The PostgreSQL backend (psycopg 3): an advisory lock serializes seq assignment, appends
a NOTIFY in their transaction and a dedicated connection LISTENs for them.

The store's precompiled SQL runs on psycopg connections directly: the writer holds one
autocommit connection (no pre-ping, no SQLAlchemy per statement). A write transaction costs
as few round trips as its reads allow: `BEGIN`, the lock and the starting state (or, after a
commit of our own, its check: pg_begin.py) go with its first message; single-row writes are
queued (`pg_writer.WriteQueue`) and sent, in order, in one message with the next read (a
prepared statement's EXECUTE), the end of a savepoint, or the NOTIFY and the `COMMIT`. A
plain append is one round trip (raw psycopg's `INSERT; COMMIT` is three), a directed one too,
and so is a group commit of appends (its items without savepoints: pg_batch.py).
Readers: pg_readers.py; LISTEN: pg_listen.py.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa

from mempalace_logstream import errors, notify, schema
from mempalace_logstream.backends import base, ddl, pg_batch, pg_begin
from mempalace_logstream.backends.pg_listen import PgListenSignal, autocommit_connector
from mempalace_logstream.backends.pg_readers import FRESH_S, READERS_KEPT, Reader, end_read
from mempalace_logstream.backends.pg_writer import (
    INSERT_EVENT_PREPARED,
    PgExecutor,
    PreparedReads,
    WriteQueue,
    WriterCursors,
)

# The partial indexes of migrations 0011 and 0015 in PostgreSQL's words too (schema.py
# names SQLite's).
ddl.postgresql_where_too(schema.events)
ddl.postgresql_where_too(schema.tasks)

PG_APPEND_LOCK = 0x6C6F6773  # "logs": one advisory lock serializes seq assignment
# The log's own tables (indexes and TOAST included), not the whole database: several logs may
# share one database in different schemas.
_AMCHECK_SCHEMA_SQL = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'amcheck'"
)
# The B-tree indexes of our tables in the schema this connection uses.
_BTREE_SQL = (
    "SELECT CAST(c.oid AS regclass)::text FROM pg_index i "
    "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
    "JOIN pg_am a ON a.oid = c.relam "
    "WHERE a.amname = 'btree' AND t.relnamespace = CAST(current_schema() AS regnamespace) "
    "AND t.relname = ANY(:tables)"
)
_TABLES = ("events", "artifacts", "artifact_blobs", "event_artifacts", "logstream_meta")
_REGCLASSES = ", ".join(f"'{t}'::regclass" for t in _TABLES)
_SIZE_SQL = f"SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY[{_REGCLASSES}]) c"


class PostgresBackend:
    name = "postgresql"
    driver_errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    split_inbox = False  # an IN list is read in index order by a merge of index scans
    gather_s = 0.0005  # a leader waits this long at most for a batch's callers (pipeline)
    rows_json_sql: str | None = None

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.notify_channel: str | None = None
        self.statement_hooks: list[base.StatementHook] = []
        # The writer: one psycopg connection held by the store (autocommit; transactions are
        # explicit), used only under the store's commit lock; reads take pooled connections.
        self._proxy: Any = None
        self._cursors: WriterCursors | None = None  # held on the writer's connection
        self._lock_sql: str | None = None
        # Idle reader connections, the most recently used last (`reading`).
        self._readers: list[Reader] = []
        self._closed = False
        # The starting-state query (and its check) prepared on the writer's connection:
        # (the connection, the query's key, the prepared name). Reads: `reads`.
        self._prepared: tuple[Any, Any, str] | None = None
        self._prepared_name = f"logstream_state_{secrets.token_hex(4)}"
        self.reads = PreparedReads(self, "logstream_read")
        # The writes of the open write transaction not sent yet (None outside of one).
        self._queue: WriteQueue | None = None
        # What our last write transaction left (None after a failed one): the next may begin
        # optimistically (pg_begin.py), unless `_alone` is off (`pg_begin.unmoved`).
        self._left: pg_begin.Left | None = None
        self._alone = True
        # The next transaction's group-commit items may go without savepoints (pg_batch.py):
        # not when it runs a batch again after its message failed (`StateMoved`).
        self._batch = True
        # Round trips on the writer's connection (read by tests and benches).
        self.round_trips = 0

    def sql_dialect(self) -> sa.Dialect:
        return self.engine.dialect

    def links_functions(self) -> base.LinksFunctions:
        return sa.func.chr, sa.func.string_agg

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def check_log(self, conn: sa.Connection, create: bool) -> None:
        """A search_path naming no schema that exists leaves nowhere to read or create a log
        (PostgreSQL's `current_schema()` is NULL): said for readers and writers alike. A
        reader finding no logstream table creates none (issue 18)."""
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar()
        if schema is None:
            path = conn.execute(sa.text("SHOW search_path")).scalar()
            raise errors.StorageError(
                f"{self.describe()}: the schema its search_path names ({path}) does not "
                "exist in this database; create it (CREATE SCHEMA …) or set another "
                "search_path in the URL"
            )
        if create or sa.inspect(conn).has_table("events"):
            return
        raise errors.NotFoundError(
            f"no log in {self.describe()} (schema {schema}): it holds no logstream tables, "
            "and reading creates none; run `logstream migrate` on this database to create "
            "them (commands that write, such as `logstream append` or `serve`, also do)",
            field="db",
            ident=self.describe(),
        )

    def lock_migrations(self, conn: sa.Connection, key: int) -> None:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    def change_signal(self) -> Callable[[], notify.ChangeSignal] | None:
        # One channel per log: NOTIFY is per database, and logs in other schemas of the same
        # database have other `events` tables (the same key as the append lock above).
        with base.wrap_exceptions(), self.engine.connect() as conn:
            oid = conn.execute(sa.text("SELECT 'events'::regclass::oid::bigint")).scalar()
        channel = self.notify_channel = f"logstream_{oid}"
        connect = autocommit_connector(self.engine)
        return lambda: PgListenSignal(connect, channel)

    def integrity_problems(self, conn: sa.Connection) -> tuple[str, list[str]]:
        """Every table of the schema read through (a damaged page fails the read), and, when
        the `amcheck` extension is installed in the database, `bt_index_check` on each of
        their B-tree indexes (never installed by us: it needs a superuser)."""
        from mempalace_logstream.schema import metadata

        problems = []
        names = [t.name for t in metadata.sorted_tables]
        for name in names:
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(f'SELECT count(*) FROM "{name}"').scalar()
            except sa.exc.DBAPIError as exc:
                problems.append(f"{name}: {str(exc.orig).splitlines()[0]}")
        where = conn.execute(sa.text(_AMCHECK_SCHEMA_SQL)).scalar()
        if where is None:
            return f"every table read ({len(names)}); amcheck not installed", problems
        indexes = [str(r[0]) for r in conn.execute(sa.text(_BTREE_SQL), {"tables": names})]
        check = f'SELECT "{where}".bt_index_check(CAST(:ix AS regclass))'
        for ix in indexes:
            try:
                with conn.begin_nested():
                    conn.execute(sa.text(check), {"ix": ix})
            except sa.exc.DBAPIError as exc:
                problems.append(f"index {ix}: {str(exc.orig).splitlines()[0]}")
        return f"every table read ({len(names)}); amcheck on {len(indexes)} indexes", problems

    def before_redaction(self) -> str | None:
        return None

    def db_size(self) -> int | None:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text(_SIZE_SQL)).scalar() or 0)

    def _writer(self) -> psycopg.Connection[Any]:
        if self._proxy is None:
            proxy = self.engine.raw_connection()
            db: psycopg.Connection[Any] = proxy.driver_connection  # type: ignore[assignment]
            if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                db.rollback()
            db.autocommit = True
            db.prepare_threshold = None  # PreparedReads (no DEALLOCATE ALL at a ROLLBACK)
            # Keyed by the events table's oid (resolved through search_path like every query,
            # once), so logs in different schemas of one database do not serialize each other.
            # Held to commit, and released only after the commit is visible: seq order =
            # commit order.
            oid = db.execute("SELECT 'events'::regclass::oid::int").fetchone()[0]  # type: ignore[index]
            self._lock_sql = f"BEGIN; SELECT pg_advisory_xact_lock({PG_APPEND_LOCK}, {int(oid)})"
            self._cursors = WriterCursors.on(db)
            self._proxy = proxy
        conn: psycopg.Connection[Any] = self._proxy.driver_connection
        return conn

    def _drop_writer(self) -> None:
        """Forget a connection that failed (the server restarted, the network dropped)."""
        self._prepared = None
        self._cursors = None
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.invalidate()
            self._proxy = None

    def close(self) -> None:
        self._closed = True
        while self._readers:
            reader = self._readers.pop()
            with contextlib.suppress(Exception):
                reader.restore()
            reader.proxy.close()  # back to the pool, which dispose() closes
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.driver_connection.autocommit = False
                self._proxy.driver_connection.prepare_threshold = 5  # psycopg's default
            self._proxy.close()
            self._proxy = None
            self._cursors = None

    @contextlib.contextmanager
    def transaction(self, state: base.Statement | None = None) -> Iterator[_Tx]:
        """BEGIN + the append lock + the `state` query in one message … the queued writes,
        the NOTIFY and the COMMIT in one message. After a commit of our own, the begin is
        optimistic (pg_begin.py): BEGIN, the lock and the state's check go with the first
        message, and a plain append is one round trip.

        The writer's connection is held between transactions, so the server may have ended it
        meanwhile (a restart, `pg_terminate_backend`, an idle timeout): when BEGIN finds it
        lost, nothing was written, and the transaction begins once more on a new connection.
        A connection lost later is never retried here: its COMMIT may have happened. (A
        server that ended the connection said so on its socket: the begin is not optimistic
        then.)"""
        begun = self._optimistic(state) if self._alone else None
        if begun is None:
            db, row = self._begin(state)
            tx, first = _Tx(db, state_row=row), None
            marks = (row[4], row[5]) if row is not None else None
            if self._left is not None:  # else nothing to compare (kept as it was)
                self._alone = pg_begin.unmoved(self._left, row)
        else:
            tx, marks, first = begun
            db = tx.db
        self._left = None
        queue = self._queue = WriteQueue(self, db, self._writer_cursors(db))
        queue.batch, self._batch = self._batch, True
        if first is not None:
            queue.add(first, None)
            queue.checking = True
        try:
            yield tx
            channel = self.notify_channel
            if tx.appended and channel is not None:
                # Delivered by PostgreSQL at commit, never before: a hint for LISTENers.
                # (NOTIFY, not `SELECT pg_notify(…)`: a utility statement, nothing to plan)
                queue.add(f'NOTIFY "{channel}"', None)
            queue.add("COMMIT", None)
            queue.flush(db)
        except BaseException as exc:
            queue.items.clear()
            # A lost connection, or an interrupt (Ctrl-C, a cancelled task) that may have left
            # a command in progress: drop the connection. Else (an error, or the optimistic
            # begin's `StateMoved`) roll back and keep it.
            kept = isinstance(exc, (Exception, base.StateMoved))
            if isinstance(exc, pg_batch.ItemFailed):  # again, each item in its savepoint
                self._batch = False
            elif isinstance(exc, base.StateMoved):  # read the state until nobody else wrote
                self._alone = self._batch = False
            if not kept or isinstance(exc, psycopg.OperationalError) or db.broken:
                self._drop_writer()
            elif db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                try:
                    self._rollback(db, "ROLLBACK")
                except psycopg.Error:
                    self._drop_writer()
            raise
        finally:
            self._queue = None
        if tx.counters is not None and marks is not None:
            self._left = pg_begin.Left(db, tx.counters[0] - 1, tx.counters[1] - 1, marks)

    def _optimistic(self, state: base.Statement | None) -> tuple[_Tx, Any, str] | None:
        """(the transaction, the marks it starts from, its queued BEGIN with the check) when
        it may begin optimistically (pg_begin.py): the last commit was ours, on the writer
        held now, whose check is prepared, and the server sent nothing since (a connection
        it ended)."""
        left, held = self._left, self._prepared
        if state is None or left is None or held is None or held[0] is not left.db:
            return None
        db = left.db
        if self._proxy is None or self._proxy.driver_connection is not db or db.closed:
            return None
        if held[1] != pg_begin.state_key(state) or pg_begin.server_spoke(db):
            return None
        if self.statement_hooks:  # the check runs the state query (the columns it needs)
            base.observe(self.statement_hooks, *state)
        check = pg_begin.check(held[2], left, self._writer_cursors(db).inline)
        tx = _Tx(db, known=(left.max_seq + 1, left.max_art + 1))
        return tx, left.marks, f"{self._lock_sql}; {check}"

    def insert_event_execute(self, db: psycopg.Connection[Any]) -> str | None:
        """`EXECUTE <name>_insert` of the INSERT of one event prepared on `db` with the
        starting state (`_prepare`), or None when it is not held there (the statement's
        text is inlined whole then, and planned by the server on every append)."""
        held = self._prepared
        if held is None or held[0] is not db:
            return None
        return f"EXECUTE {held[2]}_insert"

    def _writer_cursors(self, db: psycopg.Connection[Any]) -> WriterCursors:
        cursors = self._cursors
        if cursors is None or cursors.run.connection is not db:  # not the writer's (a test's)
            cursors = WriterCursors.on(db)
        return cursors

    def _rollback(self, db: psycopg.Connection[Any], sql: str) -> None:
        """A ROLLBACK (or ROLLBACK TO) on the writer. Our prepared statements stay: psycopg,
        which answers one by deallocating every statement of the session when it prepared
        any itself, prepares nothing on the writer's connection (`_writer`)."""
        self.round_trips += 1
        db.execute(sql)

    def forget_prepared(self) -> None:
        """Our prepared statements are gone from the writer's session (a DEALLOCATE ALL or
        DISCARD behind the store's back): prepare them again when next used."""
        self._prepared = None
        self.reads.held.clear()

    def _begin(
        self, state: base.Statement | None
    ) -> tuple[psycopg.Connection[Any], Sequence[Any] | None]:
        db = self._writer()
        try:
            return db, self._lock(db, state)
        except psycopg.errors.InvalidSqlStatementName:
            # The prepared state query is gone (a DISCARD or DEALLOCATE by someone else):
            # nothing was written; roll the begun transaction back and prepare it again.
            self.forget_prepared()
            self._rollback(db, "ROLLBACK")
            return db, self._lock(db, state)
        except psycopg.OperationalError:
            if not (db.broken or db.closed):
                raise  # a lock timeout or the like, on a live connection
        db = self._writer()  # a new connection (the pool pings it first)
        return db, self._lock(db, state)

    def _lock(self, db: psycopg.Connection[Any], state: base.Statement | None) -> Any:
        """BEGIN, the append lock and the `state` query as one simple-protocol message; the
        state's row. The query runs as a statement prepared once per connection with its
        parameters as literals: planned once per connection (sent as text inside the message,
        its six subqueries were planned again in every transaction: 2-4 ms under load)."""
        text = self._lock_sql or ""
        try:
            if state is not None:
                if self.statement_hooks:
                    base.observe(self.statement_hooks, *state)
                text = f"{text}; EXECUTE {self._prepare(db, state)}"
            self.round_trips += 1
            cur = self._writer_cursors(db).run.execute(text)
        except psycopg.OperationalError:
            self._drop_writer()
            raise
        if state is None:
            return None
        cur.nextset()  # the lock's row
        cur.nextset()
        return cur.fetchone()

    def _prepare(self, db: psycopg.Connection[Any], state: base.Statement) -> str:
        key = pg_begin.state_key(state)
        held = self._prepared
        if held is None or held[0] is not db or held[1] != key:
            name, replace = self._prepared_name, held is not None and held[0] is db
            self.round_trips += pg_begin.prepare(db, name, state, replace, INSERT_EVENT_PREPARED)
            self._prepared = held = (db, key, name)
        return held[2]

    @contextlib.contextmanager
    def savepoint(self, db: psycopg.Connection[Any]) -> Iterator[None]:
        """A group commit's item (pg_batch.py): in the writer's transaction, without a
        savepoint on a batch's first run, else in one queued with its writes."""
        queue = self._queue
        if queue is None or queue.db is not db:  # not the writer's transaction: at once
            self.round_trips += 1
            db.execute(pg_batch.SAVEPOINT)
            try:
                yield
            except Exception:
                self.rollback_item(db)
                raise
            self.round_trips += 1
            db.execute(pg_batch.RELEASE)
            return
        item = pg_batch.deferred_item(db, queue) if queue.batch else None
        with item or pg_batch.queued_savepoint(self, db, queue):
            yield

    def rollback_item(self, db: psycopg.Connection[Any]) -> None:
        """Roll a group commit's item back to its savepoint."""
        self._rollback(db, pg_batch.ROLLBACK_ITEM)

    def remember_log_facts(self, statements: Iterable[str]) -> None:
        """Nothing to remember: PostgreSQL has no cheap "nothing committed since" (each read
        runs its statements)."""

    @contextlib.contextmanager
    def reading(self) -> Iterator[base.Query]:
        """Reads on one of the backend's reader connections (issue 25). At READ COMMITTED (the
        server's default, and what the store's engine asks for) every statement of a
        transaction block reads its own snapshot, so a reader on such a connection runs in
        autocommit: the block's BEGIN and ROLLBACK were two round trips that changed nothing
        a read sees. A connection at a stricter level reads in one transaction, as before.

        Up to `READERS_KEPT` idle readers are kept out of the pool, the most recently used
        first; one used within `FRESH_S` skips the pool's pre-ping (a round trip). If the
        server ended it meanwhile, its first statement fails on a broken connection and runs
        again on a fresh pooled (pinged) one: a read has nothing to undo."""
        reader = self._reader()
        healthy = False
        try:
            with base.wrap_exceptions(self.driver_errors):
                try:
                    yield reader.query(self.statement_hooks, self._fresh_reader)
                except BaseException as exc:
                    end_read(reader.proxy, reader.db, exc)
                    raise
                if not reader.plain:
                    reader.db.rollback()
                healthy = True
        finally:
            self._release(reader, healthy)

    def _reader(self) -> Reader:
        try:
            reader = self._readers.pop()  # atomic: no two reads share a connection
        except IndexError:
            return self._fresh_reader()
        if time.monotonic() - reader.used_at <= FRESH_S:
            reader.pinged = False
            return reader
        with contextlib.suppress(Exception):
            reader.restore()  # the pool's connections are not in autocommit
        reader.proxy.close()  # idle a while: back through the pool's pre-ping
        return self._fresh_reader()

    def _fresh_reader(self) -> Reader:
        with base.wrap_exceptions(self.driver_errors):
            proxy = self.engine.raw_connection()
            return Reader(proxy)

    def _release(self, reader: Reader, healthy: bool) -> None:
        db = reader.db
        if (
            healthy
            and not self._closed
            and not db.broken
            and db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            and len(self._readers) < READERS_KEPT
        ):
            reader.used_at = time.monotonic()
            self._readers.append(reader)
            return
        with contextlib.suppress(Exception):
            reader.restore()
        reader.proxy.close()

    def query(self, db: psycopg.Connection[Any]) -> base.Query:
        hooks = self.statement_hooks

        def run(sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
            if hooks:
                base.observe(hooks, sql, params)
            queue = self._queue
            if queue is not None and queue.db is db:  # the writer's: its writes go first
                return queue.rows(sql, params)
            return db.execute(sql, params).fetchall()

        return run

    def executor(
        self,
        db: psycopg.Connection[Any],
        compile: base.Compile,
        on_bulk: Callable[[], Any] | None = None,
    ) -> PgExecutor:
        queue = self._queue
        return PgExecutor(
            db, compile, self.statement_hooks, queue if queue and queue.db is db else None, self
        )


@dataclass
class _Tx:
    db: psycopg.Connection[Any]
    known: tuple[int, int] | None = None  # PostgreSQL has no data_version: always re-read
    state_row: Sequence[Any] | None = None
    counters: tuple[int, int] | None = None
    appended: bool = False
