"""Wake-ups: one notifier per store fans every commit out to any number of waiters.

In-process commits call `Notifier.bump()`. One `ChangeWatcher` thread per store turns a
cross-process change signal into the same bump: on SQLite, inotify on the database directory
(Linux) confirmed by `PRAGMA data_version` on a dedicated connection, or plain `data_version`
polling elsewhere; on PostgreSQL, LISTEN on a dedicated psycopg connection. Signals are hints:
waiters always re-read the table after their cursor, and re-check at least every
`FALLBACK_CHECK_S`, so a lost signal costs latency, never an event. Stopping is immediate:
every blocking wait of a signal also watches a wake-up pipe that `cancel()` writes to, so a
store closes (and a CLI exits) without waiting out the thread's tick.
Must not import fastapi, typer or mcp (nor the store: the store wires itself in).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import select
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

FALLBACK_CHECK_S = 1.0
IDLE_EXIT_S = 5.0
TICK_S = 0.1
RETRY_S = 0.5
POLL_INTERVAL_S = 0.002
CONFIRM_INTERVAL_S = 0.0005
CONFIRM_WINDOW_S = 0.5


class Notifier:
    """A version counter that waiters block on; `bump()` wakes all of them at once.

    Usage, race-free: `seen = n.version`, read the table, then `n.wait(seen, timeout)`. Any bump
    after `seen` was taken returns at once. The cross-process signal (if attached) runs while
    anyone waits; when it (re)starts it bumps once, because it cannot vouch for the time it was
    not running.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._waiters = 0
        self._async: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._watcher: ChangeWatcher | None = None

    @property
    def version(self) -> int:
        return self._version

    @property
    def waiters(self) -> int:
        return self._waiters + len(self._async)

    def attach(self, watcher: ChangeWatcher) -> None:
        self._watcher = watcher

    def bump(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
            subscribers = list(self._async)
        for loop, event in subscribers:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed; its waiter is gone
                self._async.discard((loop, event))

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the version differs from `seen` or `timeout` seconds pass."""
        with self._cond:
            if self._version != seen:
                return self._version
            self._waiters += 1
        try:
            # Registered first, then ensure the signal runs: the watcher only exits while
            # the waiter count is zero under its lock, so it cannot slip away unseen.
            if self._watcher is not None:
                self._watcher.ensure_running()
            with self._cond:
                self._cond.wait_for(lambda: self._version != seen, timeout=max(0.0, timeout))
                return self._version
        finally:
            with self._cond:
                self._waiters -= 1

    async def wait_async(self, seen: int, timeout: float) -> int:
        """The asyncio twin of `wait` for the hub: no thread per waiter."""
        if self._version != seen:
            return self._version
        entry = (asyncio.get_running_loop(), asyncio.Event())
        self._async.add(entry)
        try:
            if self._watcher is not None:
                self._watcher.ensure_running()
            if self._version == seen:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(entry[1].wait(), timeout=max(0.0, timeout))
        finally:
            self._async.discard(entry)
        return self._version


class ChangeSignal(Protocol):
    """A cross-process hint that the store may have changed."""

    def open(self) -> None:
        """Connect and take the baseline; changes after this return True from `wait`."""

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds; True if the store changed (or may have)."""

    def cancel(self) -> None:
        """Make a blocked `wait` return soon (called from another thread on shutdown)."""

    def close(self) -> None: ...


class ChangeWatcher:
    """One daemon thread per store that bumps the notifier when another process commits.

    It runs while anyone waits and exits `idle_exit_s` after the last waiter left. A failed
    signal is reopened after `RETRY_S`; each (re)open bumps, since changes may have been missed.
    """

    def __init__(
        self,
        notifier: Notifier,
        factory: Callable[[], ChangeSignal],
        *,
        idle_exit_s: float = IDLE_EXIT_S,
        tick_s: float = TICK_S,
    ) -> None:
        self._notifier = notifier
        self._factory = factory
        self._idle_exit = idle_exit_s
        self._tick = tick_s
        self._lock = threading.Lock()
        self._running = False
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._signal: ChangeSignal | None = None
        self.opens = 0  # how many times a signal was opened (tests, doctor)

    @property
    def running(self) -> bool:
        return self._running

    def ensure_running(self) -> None:
        with self._lock:
            if self._running or self._closed:
                return
            stop = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(stop,), name="logstream-change-signal", daemon=True
            )
            # Only a started thread counts as running: start() can be interrupted (Ctrl-C).
            self._stop = stop
            thread.start()
            self._thread, self._running = thread, True

    def stop(self) -> None:
        with self._lock:  # with `_open`: either it sees `stop` set, or we see its signal
            self._closed = True
            self._running = False
            stop, thread, signal = self._stop, self._thread, self._signal
            stop.set()
        if signal is not None:
            signal.cancel()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2)

    def _run(self, stop: threading.Event) -> None:
        signal: ChangeSignal | None = None
        idle_since: float | None = None
        try:
            while not stop.is_set():
                if signal is None:
                    signal = self._open(stop)
                else:
                    signal = self._step(signal)
                idle_since = self._idle_check(idle_since)
                if idle_since is not None and time.monotonic() - idle_since >= self._idle_exit:
                    with self._lock:
                        if self._stop is not stop:  # superseded by a newer thread
                            return
                        # Decide under the lock: a waiter registers before ensure_running().
                        if self._notifier.waiters == 0:
                            self._running = False
                            return
                    idle_since = None
        finally:
            if signal is not None:
                with self._lock:
                    if self._signal is signal:
                        self._signal = None
                with contextlib.suppress(Exception):
                    signal.close()

    def _open(self, stop: threading.Event) -> ChangeSignal | None:
        signal = self._factory()
        try:
            signal.open()
        except Exception:  # the database is unreachable: waiters fall back to timed re-checks
            with contextlib.suppress(Exception):
                signal.close()
            stop.wait(RETRY_S)
            return None
        self.opens += 1
        with self._lock:
            self._signal = signal
            stopped = stop.is_set()
        if stopped:  # stop() ran before the signal was published: cancel it ourselves
            signal.cancel()
        self._notifier.bump()  # the baseline is fresh: make every waiter re-read once
        return signal

    def _step(self, signal: ChangeSignal) -> ChangeSignal | None:
        try:
            changed = signal.wait(self._tick)
        except Exception:  # connection lost: reopen (and bump) on the next turn
            with contextlib.suppress(Exception):
                signal.close()
            return None
        if changed:
            self._notifier.bump()
        return signal

    def _idle_check(self, idle_since: float | None) -> float | None:
        if self._notifier.waiters:
            return None
        return idle_since if idle_since is not None else time.monotonic()


class _Waker:
    """A self-pipe: `fd` turns readable (for good) once `set()` was called from any thread, so
    a `select` on it next to a socket or an inotify descriptor returns at once on cancel."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def fd(self) -> int:
        return self._r

    def set(self) -> None:
        # Under the lock: a closed descriptor's number may already belong to another file.
        with self._lock:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):  # the pipe is full: already set
                    os.write(self._w, b"x")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._r)
            os.close(self._w)


# ----------------------------------------------------------------------------- SQLite


class SqliteSignal:
    """`PRAGMA data_version` on a dedicated connection: it changes on every commit by any other
    connection (any process, any program). On Linux, inotify on the database directory wakes the
    thread when a writer touches the file, so the idle cost is zero; the version is then polled
    every `POLL_INTERVAL_S` until the commit becomes visible. Elsewhere, poll all the time.
    """

    def __init__(self, path: str, *, use_inotify: bool = True, uri: str | None = None) -> None:
        self._path = path
        self._uri = uri  # a read-only store's `file:…?mode=ro` URI, used to connect
        self._use_inotify = use_inotify
        self._conn: sqlite3.Connection | None = None
        self._last: int | None = None
        self._inotify: _Inotify | None = None
        self._cancel = threading.Event()
        self._waker = _Waker()

    @property
    def mode(self) -> str:
        return "inotify" if self._inotify is not None else "poll"

    def open(self) -> None:
        self._conn = sqlite3.connect(
            self._uri or self._path,
            check_same_thread=False,
            isolation_level=None,
            uri=self._uri is not None,
        )
        if self._use_inotify:
            self._inotify = _Inotify.watch(self._path)
        self._last = self._version()

    def _version(self) -> int:
        assert self._conn is not None
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _changed(self) -> bool:
        current = self._version()
        if current != self._last:
            self._last = current
            return True
        return False

    def wait(self, timeout: float) -> bool:
        if self._inotify is None:
            return self._poll(timeout)
        if not self._inotify.wait(timeout, self._waker.fd):
            return False if self._cancel.is_set() else self._changed()
        # A writer touched the file; its commit is visible once the WAL index is updated
        # (after its fsync), so look closely for a short while.
        return self._poll(CONFIRM_WINDOW_S, CONFIRM_INTERVAL_S)

    def _poll(self, window: float, interval: float = POLL_INTERVAL_S) -> bool:
        deadline = time.monotonic() + window
        while True:
            if self._changed():
                return True
            if time.monotonic() >= deadline or self._cancel.wait(interval):
                return False

    def cancel(self) -> None:
        self._cancel.set()
        self._waker.set()

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._waker.close()


_IN_MODIFY, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x8, 0x80, 0x100
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")


class _Inotify:
    """A minimal inotify watch on one directory, filtered to the database's own files."""

    _libc: Any = None

    def __init__(self, fd: int, names: frozenset[str]) -> None:
        self._fd = fd
        self._names = names

    @classmethod
    def watch(cls, db_path: str) -> _Inotify | None:
        if not hasattr(os, "uname") or os.uname().sysname != "Linux":
            return None
        if cls._libc is None:
            cls._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc = cls._libc
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None  # out of inotify instances: fall back to polling
        directory, base = os.path.split(os.path.abspath(db_path))
        mask = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            os.close(fd)
            return None
        names = frozenset({base, base + "-wal", base + "-journal"})
        return cls(fd, names)

    def wait(self, timeout: float, wake_fd: int) -> bool:
        """True when one of the database's files was written within `timeout` seconds; False
        at once when `wake_fd` turns readable (a cancel)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select([self._fd, wake_fd], [], [], remaining)
            if wake_fd in ready:
                return False
            if ready and self._relevant():
                return True

    def _relevant(self) -> bool:
        hit = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return hit
            pos = 0
            while pos + _EVENT.size <= len(data):
                _wd, _mask, _cookie, length = _EVENT.unpack_from(data, pos)
                raw = data[pos + _EVENT.size : pos + _EVENT.size + length]
                pos += _EVENT.size + length
                if raw.rstrip(b"\0").decode(errors="replace") in self._names:
                    hit = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


# ----------------------------------------------------------------------------- PostgreSQL


def pg_channel(schema: str) -> str:
    """The NOTIFY channel of the store in `schema` (NOTIFY is per database, not per schema)."""
    import hashlib

    return "logstream_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


class PgListenSignal:
    """LISTEN on a dedicated autocommit psycopg connection; appends `pg_notify` in their
    transaction, so the notification is delivered exactly when the commit is visible."""

    def __init__(self, connect: Callable[[], Any], channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: Any = None
        self._waker = _Waker()

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
