"""The PostgreSQL backend (psycopg 3): an advisory lock serializes seq assignment, appends
`pg_notify` in their transaction and a dedicated connection LISTENs for them.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import notify
from mempalace_logstream.backends import base

PG_APPEND_LOCK = 0x6C6F6773  # "logs": one advisory lock serializes seq assignment
# The log's own tables (indexes and TOAST included), not the whole database: several logs may
# share one database in different schemas.
_TABLES = ("events", "artifacts", "artifact_blobs", "event_artifacts", "logstream_meta")
_SIZE_SQL = (
    "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY["
    + ", ".join(f"'{t}'::regclass" for t in _TABLES)
    + "]) c"
)


class PostgresBackend:
    name = "postgresql"
    driver_errors: tuple[type[BaseException], ...] = ()
    split_inbox = False  # an IN list is read in index order by a merge of index scans
    rows_json_sql: str | None = None

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.notify_channel: str | None = None

    def sql_dialect(self) -> sa.Dialect:
        return self.engine.dialect

    def links_functions(self) -> base.LinksFunctions:
        return sa.func.chr, sa.func.string_agg

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def lock_writes(self, conn: sa.Connection) -> None:
        # Keyed by the events table's oid (resolved through search_path like every query),
        # so logs in different schemas of one database do not serialize each other. Held
        # to commit, and released only after the commit is visible: seq order = commit order.
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(:k, 'events'::regclass::oid::int)"),
            {"k": PG_APPEND_LOCK},
        )

    def lock_migrations(self, conn: sa.Connection, key: int) -> None:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    def after_appends(self, conn: sa.Connection) -> None:
        if self.notify_channel is not None:
            # Delivered by PostgreSQL at commit, never before: a hint for LISTENers.
            conn.execute(sa.select(sa.func.pg_notify(self.notify_channel, "")))

    def change_signal(self) -> Callable[[], notify.ChangeSignal] | None:
        # One channel per log: NOTIFY is per database, and logs in other schemas of the same
        # database have other `events` tables (the same key as the append lock above).
        with base.wrap_exceptions(), self.engine.connect() as conn:
            oid = conn.execute(sa.text("SELECT 'events'::regclass::oid::bigint")).scalar()
        channel = self.notify_channel = f"logstream_{oid}"
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)

        def connect() -> Any:
            import psycopg

            return psycopg.connect(*cargs, **{**cparams, "autocommit": True})

        return lambda: PgListenSignal(connect, channel)

    def fast_path(self) -> None:
        return None

    def db_size(self) -> int | None:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text(_SIZE_SQL)).scalar() or 0)

    def bulk_insert(self, conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        """COPY, several times faster than row-wise INSERTs, inside the same transaction (and
        savepoint) as the rest of the batch."""
        quote = conn.dialect.identifier_preparer.quote
        names = [c.name for c in table.c]
        sql = f"COPY {quote(table.name)} ({', '.join(quote(n) for n in names)}) FROM STDIN"
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            with cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row([row[n] for n in names])
        finally:
            cursor.close()

    def close(self) -> None:
        """Nothing held beyond the engine's pool."""


class PgListenSignal:
    """LISTEN on a dedicated autocommit psycopg connection; appends `pg_notify` in their
    transaction, so the notification is delivered exactly when the commit is visible."""

    def __init__(self, connect: Callable[[], Any], channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: Any = None
        self._waker = notify.Waker()

    def open(self) -> None:
        self._conn = self._connect()
        self._conn.execute(f'LISTEN "{self._channel}"')

    def wait(self, timeout: float) -> bool:
        # Block on the socket and the wake-up pipe together, then let psycopg consume what
        # arrived without blocking again; a cancel returns at once. Notifications psycopg
        # already buffered (its backlog) are taken first, without blocking.
        for _ in self._conn.notifies(timeout=0, stop_after=1):
            return True
        ready, _, _ = select.select([self._conn.fileno(), self._waker.fd], [], [], timeout)
        if self._waker.fd in ready:
            return False
        if ready:
            for _ in self._conn.notifies(timeout=0, stop_after=1):
                return True
        if self._conn.closed or self._conn.broken:
            raise ConnectionError("the LISTEN connection was lost")
        return False

    def cancel(self) -> None:
        self._waker.set()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        self._waker.close()
