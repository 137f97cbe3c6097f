"""Presence shared by every hub on one PostgreSQL log (issue 23): `registry_for(store)` gives
a hub its presence table, a cache of the database's `presence` table there (written first,
then applied), plain memory on SQLite (one hub per file). `start` / `stop` run the cache's
feed for a hub's lifetime: a thread that LISTENs for the changes every hub writes and applies
them in change order, so each hub's listeners (SSE) hear every announce and leave, wherever it
was made; each hub tells expiries itself (its sweeper). After a lost connection the feed reads
the whole table again and listeners hear what changed meanwhile.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING

from mempalace_logstream.backends import pg_presence
from mempalace_logstream.presence import Registry

if TYPE_CHECKING:
    from mempalace_logstream.backends.pg_listen import PgListener
    from mempalace_logstream.store import LogStore

log = logging.getLogger(__name__)

WAIT_S = 1.0  # the listener's longest block (how soon a stop is seen without a cancel)
RETRY_MIN_S, RETRY_MAX_S = 0.2, 5.0
START_WAIT_S = 10.0  # a hub starts serving after this even if the table cannot be read yet


class PresenceFeed:
    """Keeps one registry in step with the shared table (a daemon thread)."""

    def __init__(self, registry: Registry, table: pg_presence.PgPresenceTable) -> None:
        self.registry, self.table = registry, table
        self.synced = threading.Event()  # set once the table was read (a resync done)
        self.resyncs = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: PgListener | None = None
        self._thread: threading.Thread | None = None

    def start(self, wait_s: float = START_WAIT_S) -> None:
        """Start the feed and wait (at most `wait_s`) until the table was read once."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="presence-feed", daemon=True)
            self._thread.start()
        self.synced.wait(wait_s)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._listener is not None:
                self._listener.cancel()
        if self._thread is not None:
            self._thread.join(WAIT_S * 10)

    def _run(self) -> None:
        delay = RETRY_MIN_S
        while not self._stop.is_set():
            listener = self.table.listener()
            try:
                with self._lock:
                    self._listener = listener
                listener.open()  # LISTEN first: no change falls between it and the snapshot
                self._resync()
                delay = RETRY_MIN_S
                while not self._stop.is_set():
                    for payload in listener.payloads(WAIT_S):
                        self._apply(payload)
            except Exception as exc:  # the database went away: read it all again once back
                if not self._stop.is_set():
                    log.warning("shared presence: %s; retrying in %.1f s", exc, delay)
            finally:
                with self._lock:
                    self._listener = None
                listener.close()
            self._stop.wait(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    def _resync(self) -> None:
        rev, rows = self.table.snapshot()
        self.registry.resync(rev, rows)
        self.resyncs += 1
        self.synced.set()

    def _apply(self, payload: str) -> None:
        op, rev, agent, entry, paths = pg_presence.read_change(payload)
        if op == "announce" and entry is not None:
            self.registry.apply(rev, entry, paths)
        elif op == "leave":
            self.registry.apply_leave(rev, agent)
        else:
            self._resync()


_FEEDS: weakref.WeakKeyDictionary[Registry, PresenceFeed] = weakref.WeakKeyDictionary()


def registry_for(store: LogStore) -> Registry:
    """A hub's presence table for `store`: shared through the database on PostgreSQL (its
    feed runs between `start` and `stop`), in this process's memory on SQLite."""
    table = pg_presence.for_engine(store.engine)
    if table is None:
        return Registry()
    registry = Registry(backing=table)
    _FEEDS[registry] = PresenceFeed(registry, table)
    return registry


def feed_of(registry: Registry) -> PresenceFeed | None:
    """The feed of a shared registry, None for one held in memory."""
    return _FEEDS.get(registry)


def start(registry: Registry) -> None:
    """Run `registry`'s feed (if it is shared) until `stop`; returns once it read the table."""
    feed = _FEEDS.get(registry)
    if feed is not None:
        feed.start()


def stop(registry: Registry) -> None:
    feed = _FEEDS.get(registry)
    if feed is not None:
        feed.stop()
