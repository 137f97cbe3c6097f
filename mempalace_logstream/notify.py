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

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # a waiter in asyncio imports it: a one-call writer never does
    import asyncio

FALLBACK_CHECK_S = 1.0
IDLE_EXIT_S = 5.0
TICK_S = 0.1
RETRY_S = 0.5
POLL_INTERVAL_S = 0.002
CONFIRM_INTERVAL_S = 0.0005
CONFIRM_WINDOW_S = 0.5


# The signals a person or a supervisor stops a process with.
_STOPPING = frozenset({signal.SIGINT, signal.SIGTERM})


def start_deaf(thread: threading.Thread) -> None:
    """Start `thread` with SIGINT and SIGTERM blocked in it: a new thread takes the mask of
    the thread that starts it, set for that moment only. The kernel gives a signal sent to the
    process to any thread that does not block it; Python runs its handler in the main thread
    only when that thread next runs Python code, and a main thread blocked in a lock's wait
    (`logstream watch --follow` between events) would not, so a Ctrl-C that went to this
    thread went unanswered (tests/test_watch.py `test_ctrl_c_exits_130_and_never_0`, about
    one run in five). Blocked here, it goes to the main thread, whose waits it interrupts."""
    if not hasattr(signal, "pthread_sigmask"):  # not a POSIX system
        thread.start()
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class Notifier:
    """A version counter that waiters block on; `bump()` wakes all of them at once.

    Usage, race-free: `seen = n.version`, read the table, then `n.wait(seen, timeout)`. Any bump
    after `seen` was taken returns at once. The cross-process signal (if attached) runs while
    anyone waits; when it (re)starts it bumps once, because it cannot vouch for the time it was
    not running.
    """

    def __init__(self) -> None:
        # A plain lock under the condition: `bump` takes it directly (a C context manager;
        # the condition's own `with` is two Python calls, once per commit). Never re-entered.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
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
        with self._mutex:  # `self._cond`'s lock
            self._version += 1
            # A waiter counts itself under this lock before it waits, and sees the new
            # version if it counted itself after this bump: nobody counted, nobody to wake.
            if self._waiters:
                self._cond.notify_all()
            if not self._async:
                return
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
        import asyncio

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
        self.opens = 0  # how many times a signal was opened (read by tests)

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
            start_deaf(thread)
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


class Waker:
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


# The signals live with their backends (backends/sqlite_signal.py, backends/postgres.py);
# their old names here stay importable.
_MOVED = {
    "SqliteSignal": "mempalace_logstream.backends.sqlite_signal",
    "PgListenSignal": "mempalace_logstream.backends.postgres",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
