"""The statements of the PostgreSQL writer's transactions (issue 25): `PgExecutor` runs them on
the writer's connection, and `WriteQueue` holds its single-row writes unsent until they go to
the server together, in order, with the next read, the end of a savepoint or the COMMIT
(`PostgresBackend.transaction`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from mempalace_logstream.backends import base
from mempalace_logstream.schema import events

if TYPE_CHECKING:
    from mempalace_logstream.backends.postgres import PostgresBackend


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

    def __init__(self, backend: PostgresBackend, db: psycopg.Connection[Any]) -> None:
        self.backend, self.db = backend, db
        self.items: list[tuple[str, Any]] = []
        self.flushes = 0
        self.cursor: psycopg.ClientCursor[Any] | None = None

    def add(self, sql: str, params: Any) -> QueueMark:
        """Queue `sql` (with `params`, or None: sent as it is)."""
        self.items.append((sql, params))
        return QueueMark(len(self.items) - 1, self.flushes)

    def sent_since(self, mark: QueueMark) -> bool:
        return self.flushes != mark.flushes

    def flush(self, db: psycopg.Connection[Any]) -> None:
        """Send the queued statements as one simple-protocol message, their parameters
        inlined as literals by psycopg (a psycopg pipeline costs more CPU, here, than the
        round trips it saves; a failing statement skips the rest, as in a pipeline)."""
        items = self.items
        if not items:
            return
        self.items = []
        self.flushes += 1
        self.backend.round_trips += 1
        if len(items) == 1 and items[0][1] is not None:
            db.execute(items[0][0], items[0][1])
            return
        cur = self.cursor
        if cur is None:
            cur = self.cursor = psycopg.ClientCursor(db)
        db.execute("; ".join(sql if p is None else cur.mogrify(sql, p) for sql, p in items))


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
        if self.backend is not None:
            self.backend.round_trips += 1

    def rows(self, key: Any, build: base.Build, params: Mapping[str, Any]) -> Sequence[Any]:
        self._send()
        return super().rows(key, build, params)

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
            if self.queue is not None:
                self.queue.add(_INSERT_EVENTS, rows[0])
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


def _has_bytes(values: Any) -> bool:
    """Bytes go at once, bound (a blob is not inlined as text into a queued message)."""
    return any(isinstance(v, (bytes, bytearray, memoryview)) for v in values)


_NAMES = base.EVENT_INSERT_COL_NAMES
_COLS = ", ".join(_NAMES)
_INSERT_EVENTS = f"INSERT INTO {events.name} ({_COLS}) VALUES ({', '.join(['%s'] * len(_NAMES))})"
_COPY_EVENTS = f"COPY {events.name} ({_COLS}) FROM STDIN"
_COPY_MIN_ROWS = 64
