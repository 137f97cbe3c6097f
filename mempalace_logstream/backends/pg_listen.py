"""PostgreSQL connections of their own, outside the store's pool: a LISTEN (the store's change
signal, the hubs' shared presence) and the autocommit connector they and the hubs' leader lock
open. psycopg is imported by the first connection: a SQLite hub, which imports this module
through its presence table, never loads it."""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import notify


class PgListener:
    """LISTEN on `channel` over a dedicated autocommit psycopg connection; a writer's
    NOTIFY (or `pg_notify`) runs in its transaction, so a notification arrives exactly when
    the commit is visible. The store's change signal and the hubs' shared presence each hold
    one."""

    def __init__(self, connect: Callable[[], Any], channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: Any = None
        self._waker = notify.Waker()

    def open(self) -> None:
        self._conn = self._connect()
        self._conn.execute(f'LISTEN "{self._channel}"')

    def payloads(self, timeout: float, stop_after: int | None = None) -> list[str]:
        """The payloads that arrived within `timeout` seconds, in order (at most `stop_after`);
        [] on a timeout or a cancel; ConnectionError when the connection was lost
        (notifications may be missing: read the state again)."""
        # Notifications psycopg already buffered are taken first, without blocking; then block
        # on the socket and the wake-up pipe together, and let psycopg consume what arrived
        # without blocking again. A cancel returns at once.
        got = [n.payload for n in self._conn.notifies(timeout=0, stop_after=stop_after)]
        if got:
            return got
        ready, _, _ = select.select([self._conn.fileno(), self._waker.fd], [], [], timeout)
        if self._waker.fd in ready:
            return []
        if ready:
            got = [n.payload for n in self._conn.notifies(timeout=0, stop_after=stop_after)]
        if not got and (self._conn.closed or self._conn.broken):
            raise ConnectionError(f"the LISTEN connection on {self._channel} was lost")
        return got

    def cancel(self) -> None:
        self._waker.set()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        self._waker.close()


class PgListenSignal(PgListener):
    """The store's cross-process change signal: appends announce themselves on the channel."""

    def wait(self, timeout: float) -> bool:
        return bool(self.payloads(timeout, stop_after=1))


def autocommit_connector(engine: sa.Engine) -> Callable[[], Any]:
    """A function that opens a new autocommit psycopg connection to `engine`'s database, outside
    its pool: a LISTEN's, or the hubs' leader lock's (a session lock lives as long as it)."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)

    def connect() -> Any:
        import psycopg

        return psycopg.connect(*cargs, **{**cparams, "autocommit": True})

    return connect
