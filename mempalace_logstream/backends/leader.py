"""Which hub runs the background loops (sync rounds, reminders) when several serve one log
(issue 23), and the one hub a SQLite file allows.

`LeaderLock.hold()` answers whether this hub leads now, taking the lead when nobody holds it.
On PostgreSQL the lead is a session advisory lock on a connection of its own: when the
leading hub dies its connection closes and PostgreSQL frees the lock at once, so another hub
takes it on its next try (every loop interval). The leader writes its name under the meta key
`sync_leader` when it takes the lead; `holder()` reads it back while the lock is held, so
every hub can say who leads. On SQLite the file allows one hub (`hold_sqlite_file`), which
always leads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any, Protocol

import sqlalchemy as sa

from mempalace_logstream import errors
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.schema import meta

log = logging.getLogger(__name__)

PG_LEADER_LOCK = 0x6C656164  # "lead": with the events table's oid, one lead per log
LEADER_KEY = "sync_leader"


class LeaderLock(Protocol):
    name: str  # this hub, as `holder()` names it to the others

    def hold(self) -> bool:
        """True when this hub leads now (taking the lead if nobody holds it)."""

    def holder(self) -> str | None:
        """The leading hub's name, or None when no hub leads."""

    def release(self) -> None: ...


class SoleLeader:
    """A log only one hub serves (a SQLite file): that hub always leads."""

    def __init__(self, name: str) -> None:
        self.name = name

    def hold(self) -> bool:
        return True

    def holder(self) -> str | None:
        return self.name

    def release(self) -> None:
        return None


class PgLeaderLock:
    """The lead among the hubs on one PostgreSQL log: a session advisory lock held by a
    connection of its own, checked alive on every `hold()`."""

    def __init__(self, engine: sa.Engine, name: str) -> None:
        self.engine, self.name = engine, name
        self._conn: Any = None  # a psycopg connection while this hub leads
        self._lock = threading.Lock()  # the sync loop and the reminders both ask
        from mempalace_logstream.backends.pg_listen import autocommit_connector

        self._connect = autocommit_connector(engine)

    def hold(self) -> bool:
        with self._lock:
            return self._hold()

    def _hold(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute("SELECT 1")
                return True
            except Exception:  # the connection died: its lock went with it
                log.warning("hub lead lost: its database connection closed")
                self._drop()
        return self._take()

    def _take(self) -> bool:
        import psycopg

        conn = None
        try:
            conn = self._connect()
            got = conn.execute(
                "SELECT pg_try_advisory_lock(%s, 'events'::regclass::oid::int)",
                (PG_LEADER_LOCK,),
            ).fetchone()
            if not (got and got[0]):
                conn.close()
                return False
            self._conn = conn
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            log.warning("hub lead not taken: %s", exc)
            return False
        self._announce()
        return True

    def _announce(self) -> None:
        from sqlalchemy.dialects import postgresql

        stmt = postgresql.insert(meta).values(key=LEADER_KEY, value=self.name)
        stmt = stmt.on_conflict_do_update(index_elements=["key"], set_={"value": self.name})
        with contextlib.suppress(sa.exc.SQLAlchemyError), self.engine.begin() as conn:
            conn.execute(stmt)

    def holder(self) -> str | None:
        held = sa.text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = :k AND objid = 'events'::regclass::oid::int"
        )
        try:
            with self.engine.connect() as conn:
                if not conn.execute(held, {"k": PG_LEADER_LOCK}).scalar():
                    return None
                return meta_rows.value(conn, LEADER_KEY)
        except sa.exc.SQLAlchemyError:
            return None

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def release(self) -> None:
        """Give the lead up now (unlocked before the connection closes, so the next hub to
        try takes it at once)."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.execute(
                        "SELECT pg_advisory_unlock(%s, 'events'::regclass::oid::int)",
                        (PG_LEADER_LOCK,),
                    )
            self._drop()


# The descriptors of `hold_sqlite_file`s refused (another hub serves them), kept open.
_REFUSED: list[int] = []


def hold_sqlite_file(path: str) -> Any:
    """An exclusive `flock` on the SQLite file for this process's lifetime (the kernel drops
    it when the process dies), or a StorageError naming the way out when another hub serves
    the file. The lock never meets SQLite's own byte-range locks. Returns the open file to
    keep, to close once the store is closed (closing a descriptor of the file drops the
    process's POSIX locks on it: SQLite's too); where `flock` does not exist (Windows), None
    and no check."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # Not closed: the store is open, and closing any descriptor of the file would drop
        # this process's POSIX locks on it, SQLite's among them (the process is leaving).
        _REFUSED.append(fd)
        raise errors.ConflictError(
            f"another hub already serves {path} (pid {_holder_pid(path)}): a SQLite file "
            "has one hub; stop that one, or serve several hubs from one PostgreSQL database "
            '(--db postgresql+psycopg://…, README "Running several hubs")',
            field="db",
        ) from None
    return os.fdopen(fd, "rb")  # closed by the hub after its store (`cli/hub.py`)


def _holder_pid(path: str) -> str:
    """The pid /proc/locks names for a flock on `path`, or "unknown"."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].endswith(f":{inode}"):
                    return parts[4]
    except OSError:
        pass
    return "unknown"


def for_engine(engine: sa.Engine, name: str) -> tuple[LeaderLock, Any]:
    """The lead of a hub named `name` serving `engine`'s log, and what it holds for its
    lifetime (the SQLite file's lock; close it to let another hub serve the file)."""
    if engine.dialect.name == "postgresql":
        return PgLeaderLock(engine, name), None
    path = engine.url.database
    held = hold_sqlite_file(path) if path and path != ":memory:" else None
    return SoleLeader(name), held
