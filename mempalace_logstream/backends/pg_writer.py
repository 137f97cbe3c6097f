"""The statements of the PostgreSQL writer's transactions (issue 25): `PgExecutor` runs them on
the writer's connection, and `WriteQueue` holds its single-row writes unsent until they go to
the server together, in order, before the next read, at the end of a savepoint or with the
COMMIT (`PostgresBackend.transaction`)."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from mempalace_logstream.backends import base
from mempalace_logstream.backends.pg_batch import ItemFailed, failed_on_server
from mempalace_logstream.backends.pg_inline import Inline
from mempalace_logstream.schema import events

if TYPE_CHECKING:
    from mempalace_logstream.backends.postgres import PostgresBackend


@dataclass(frozen=True)
class WriterCursors:
    """A cursor held on the writer's connection for its life (`run` executes), and `inline`,
    which writes a queued statement's parameters as literals (pg_inline.py).
    `Connection.execute` makes a new cursor per statement (~15 µs of CPU each, measured: 66
    vs 51 µs per `SELECT`)."""

    run: psycopg.Cursor[Any]
    inline: Inline

    @classmethod
    def on(cls, db: psycopg.Connection[Any]) -> WriterCursors:
        return cls(db.cursor(), Inline(db))


@dataclass
class QueueMark:
    """Where a savepoint's statements start in the queue, and which flush sent them."""

    index: int
    flushes: int


class WriteQueue:
    """The writes of one write transaction not sent yet, in order: sent together (one
    message, one round trip) before the next read, at the end of a savepoint, or with the
    COMMIT. Errors of a queued write surface when it is sent; the transaction (or the
    item's savepoint) then rolls back as if it had failed in place."""

    def __init__(
        self, backend: PostgresBackend, db: psycopg.Connection[Any], cursors: WriterCursors
    ) -> None:
        self.backend, self.db, self.cursors = backend, db, cursors
        self.items: list[tuple[str, Any]] = []
        self.flushes = 0
        # Statements queued by `add` so far, and how many of them were queued when the last
        # flush went: a statement numbered past `sent` was not sent (`pg_batch.deferred_item`).
        self.added = self.sent = 0
        # The queue starts with an optimistic BEGIN whose state check was not sent yet
        # (`PostgresBackend.transaction`): its failure, in the next flush, is `StateMoved`.
        self.checking = False
        # A group commit's items may run without savepoints, their writes sent together with
        # the COMMIT (`PostgresBackend.savepoint`): `batch` says they may, `deferred` that one
        # did. Then a statement failing on the server fails the whole message: `ItemFailed`,
        # and the batch runs again, each item in its savepoint.
        self.batch = False
        self.deferred = False

    def add(self, sql: str, params: Any) -> QueueMark:
        """Queue `sql` (with `params`, or None: sent as it is)."""
        self.items.append((sql, params))
        self.added += 1
        return QueueMark(len(self.items) - 1, self.flushes)

    def sent_at_once(self) -> None:
        """A statement of the transaction went to the server outside of the queue (bytes, a
        page of rows): counted as queued and sent."""
        self.added += 1
        self.sent = self.added

    def sent_since(self, mark: QueueMark) -> bool:
        return self.flushes != mark.flushes

    def only_savepoints(self) -> bool:
        """Nothing queued can fail: only SAVEPOINTs and their RELEASEs wait to be sent."""
        return all(sql.startswith(SAVEPOINT_STATEMENTS) for sql, _ in self.items)

    def flush(self, db: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        """Send the queued statements as one simple-protocol message, their parameters
        inlined as literals by psycopg (a psycopg pipeline costs more CPU, here, than the
        round trips it saves; a failing statement skips the rest, as in a pipeline)."""
        items = self.items
        run = self.cursors.run
        if not items:
            return run
        self.items = []
        self.flushes += 1
        self.sent = self.added
        self.backend.round_trips += 1
        checking, self.checking = self.checking, False
        try:
            if len(items) == 1 and items[0][1] is not None:
                return run.execute(items[0][0], items[0][1])
            inline = self.cursors.inline.text
            return run.execute("; ".join(sql if p is None else inline(sql, p) for sql, p in items))
        except psycopg.errors.InvalidSqlStatementName as exc:
            # A prepared statement of ours is gone (a DEALLOCATE behind the store's back):
            # the message failed at it, before any COMMIT. Prepared again by the next try.
            self.backend.forget_prepared()
            raise base.StateMoved from exc
        except psycopg.errors.DivisionByZero as exc:
            # The optimistic begin's check, or a check sent instead of a read (`PgExecutor.
            # check`): nothing else of ours divides.
            if checking:
                raise base.StateMoved from exc
            if self.deferred:
                raise ItemFailed from exc
            raise
        except psycopg.Error as exc:
            if self.deferred and failed_on_server(exc):
                raise ItemFailed from exc  # whose, the next run's savepoints tell
            raise

    def rows(self, sql: str, params: Any) -> list[Any]:
        """The rows of the read `sql`, after the queued writes: in the same message, as the
        EXECUTE of a statement prepared once per connection (`PreparedReads`), so a read
        costs no round trip of its own. (Sent as plain text, the read would be planned on
        every run; bound parameters cannot share a simple-protocol message.)"""
        execute = None
        if isinstance(params, Mapping) and not _has_bytes(params.values()):
            execute = self.backend.reads.execute(self.db, sql, params, self.cursors.inline)
        if execute is None:
            self.flush(self.db)
            self.backend.round_trips += 1
            return self.cursors.run.execute(sql, params).fetchall()
        self.items.append((execute, None))
        cur = self.flush(self.db)
        while cur.nextset():  # to the read's own rows, the last result
            pass
        return cur.fetchall()


class PreparedReads:
    """The writer's reads, each prepared once per connection (`PREPARE`, its parameters as
    `$n`) and run as `EXECUTE name(literals)`: text that shares a message with the queued
    writes before it. A statement's name is a digest of its text: one prepared on this
    connection before (given back to the pool, then taken again) is the same statement.
    The writer's connection has psycopg's own preparing off: psycopg answers a ROLLBACK
    by deallocating every statement of the session when it prepared any itself."""

    def __init__(self, backend: PostgresBackend, prefix: str) -> None:
        self.backend, self.prefix = backend, prefix
        self.db: psycopg.Connection[Any] | None = None
        self.held: dict[str, tuple[str, tuple[str, ...]]] = {}

    def execute(
        self,
        db: psycopg.Connection[Any],
        sql: str,
        params: Mapping[str, Any],
        inline: Inline,
    ) -> str | None:
        """`EXECUTE …` of `sql` with `params` (None past `MAX_PREPARED_READS` shapes)."""
        if self.db is not db:
            self.db, self.held = db, {}
        held = self.held.get(sql)
        if held is None:
            if len(self.held) >= MAX_PREPARED_READS:
                return None
            text, names = _positional(sql)
            name = f"{self.prefix}_{hashlib.blake2b(sql.encode(), digest_size=8).hexdigest()}"
            self.backend.round_trips += 1
            with contextlib.suppress(psycopg.errors.DuplicatePreparedStatement):
                db.execute(f"PREPARE {name} AS {text}")
            self.held[sql] = held = (f"EXECUTE {name}", names)
        execute, names = held
        if not names:
            return execute
        value = inline.value
        return f"{execute}({', '.join([value(params[n]) for n in names])})"


def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` (psycopg's `%(name)s` style) with `$n` parameters, and their names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql), tuple(names)


_PARAM = re.compile(r"%%|%\((\w+)\)s")
MAX_PREPARED_READS = 256


class PgExecutor(base.DbapiExecutor):
    """The statements of one transaction on the writer's psycopg connection: with a `queue`
    (the writer's own transaction), single-row writes are queued and every other statement
    sends the queue first; without one, each runs at once."""

    def __init__(
        self,
        db: psycopg.Connection[Any],
        compile: base.Compile,
        hooks: Sequence[base.StatementHook] = (),
        queue: WriteQueue | None = None,
        backend: PostgresBackend | None = None,
    ) -> None:
        super().__init__(db, compile, hooks)
        self.queue, self.backend = queue, backend

    def _send(self) -> None:
        """Send the queued writes, then count the caller's own round trip."""
        if self.queue is not None:
            self.queue.flush(self.db)
            self.queue.sent_at_once()
        if self.backend is not None:
            self.backend.round_trips += 1

    def rows(self, key: Any, build: base.Build, params: Mapping[str, Any]) -> Sequence[Any]:
        if self.queue is None:
            self._send()
            return super().rows(key, build, params)
        sql, bound = self.compile(key, build, params)
        if self.hooks:
            base.observe(self.hooks, sql, bound)
        return self.queue.rows(sql, bound)

    def check(self, key: Any, build: base.Build, params: Mapping[str, Any]) -> bool:
        """Queued as the `EXECUTE` of a prepared statement, and sent with the next message
        (the COMMIT's, for a lone writer): its division by zero fails that message as the
        optimistic begin's check does (`WriteQueue.flush`: `StateMoved`, the batch runs
        again, reading)."""
        queue = self.queue
        if queue is None or self.backend is None or _has_bytes(params.values()):
            return False
        sql, bound = self.compile(key, build, params)
        execute = self.backend.reads.execute(self.db, sql, bound, queue.cursors.inline)
        if execute is None:
            return False
        if self.hooks:
            base.observe(self.hooks, sql, bound)
        queue.add(execute, None)
        queue.checking = True
        return True

    def run(self, key: Any, build: base.Build, params: Mapping[str, Any]) -> None:
        if self.queue is None or _has_bytes(params.values()):
            self._send()
            super().run(key, build, params)
            return
        sql, bound = self.compile(key, build, params)
        if self.hooks:
            base.observe(self.hooks, sql, bound)
        self.queue.add(sql, bound)

    def run_many(self, key: Any, build: base.Build, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._send()
        super().run_many(key, build, rows)

    def insert(self, key: Any, table: str, rows: list[dict[str, Any]]) -> None:
        if self.queue is None or len(rows) != 1 or _has_bytes(rows[0].values()):
            self._send()
            super().insert(key, table, rows)
            return
        sql, _ = self.compile(key, lambda: base.insert_into(table), {})
        if self.hooks:
            base.observe(self.hooks, sql, rows[0])
        self.queue.add(sql, rows[0])

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:  # a local append
            if self.hooks:
                base.observe(self.hooks, _INSERT_EVENTS, rows[0])
            queue = self.queue
            if queue is not None:
                # The EXECUTE of the INSERT prepared with the starting state, its values as
                # literals: parsed and planned once per connection, not with every append.
                execute = self.backend.insert_event_execute(self.db) if self.backend else None
                if execute is None:
                    queue.add(_INSERT_EVENTS, rows[0])
                else:
                    value = queue.cursors.inline.value
                    queue.add(f"{execute}({', '.join([value(v) for v in rows[0]])})", None)
            else:
                self._send()
                self.db.execute(_INSERT_EVENTS, rows[0])
            return
        self._send()
        with self.db.cursor() as cur:
            if len(rows) < _COPY_MIN_ROWS:
                if self.hooks:
                    base.observe(self.hooks, _INSERT_EVENTS, rows)
                cur.executemany(_INSERT_EVENTS, rows)
                return
            if self.hooks:
                base.observe(self.hooks, _COPY_EVENTS, rows)
            with cur.copy(_COPY_EVENTS) as copy:  # a sync page: several times faster
                for row in rows:
                    copy.write_row(row)


# A group-committed item's own statements (pg_batch.py): they cannot fail.
SAVEPOINT_STATEMENTS = ("SAVEPOINT ", "RELEASE SAVEPOINT ")


def _has_bytes(values: Any) -> bool:
    """Bytes go at once, bound (a blob is not inlined as text into a queued message). By
    exact type, in C (no generator step per value): a subclass of bytes would be inlined,
    quoted by psycopg (`Inline.value`), which is right, only longer."""
    return not _BYTES.isdisjoint(map(type, values))


_BYTES = frozenset((bytes, bytearray, memoryview))


_NAMES = base.EVENT_INSERT_COL_NAMES
_COLS = ", ".join(_NAMES)
_INSERT_EVENTS = f"INSERT INTO {events.name} ({_COLS}) VALUES ({', '.join(['%s'] * len(_NAMES))})"
_COPY_EVENTS = f"COPY {events.name} ({_COLS}) FROM STDIN"
# `_INSERT_EVENTS` as a prepared statement's text (`pg_begin.prepare`): its values as `$n`.
INSERT_EVENT_PREPARED = (
    f"INSERT INTO {events.name} ({_COLS}) "
    f"VALUES ({', '.join(f'${n}' for n in range(1, len(_NAMES) + 1))})"
)
_COPY_MIN_ROWS = 64
