"""Wake-ups: one notifier per store fans out every commit to any number of waiters.

In-process commits bump a version counter under a condition variable; a single background
thread per store turns a cheap cross-process change signal (SQLite `PRAGMA data_version`,
PostgreSQL LISTEN/NOTIFY) into the same bump. Waiters re-read the table after their cursor, so a
lost signal only costs the bounded fallback interval, never an event.
Must not import fastapi, typer or mcp.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

FALLBACK_CHECK_S = 1.0


class Notifier:
    """A version counter that waiters block on; `bump()` wakes all of them at once."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._waiters = 0
        self._async: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._on_first_waiter: Callable[[], None] | None = None

    @property
    def version(self) -> int:
        return self._version

    @property
    def waiters(self) -> int:
        return self._waiters + len(self._async)

    def set_first_waiter_hook(self, hook: Callable[[], None]) -> None:
        self._on_first_waiter = hook

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
        hook = self._on_first_waiter
        if hook is not None:
            hook()
        with self._cond:
            self._waiters += 1
            try:
                self._cond.wait_for(lambda: self._version != seen, timeout=max(0.0, timeout))
            finally:
                self._waiters -= 1
            return self._version

    async def wait_async(self, seen: int, timeout: float) -> int:
        """The asyncio twin of `wait` for the hub: no thread per waiter."""
        if self._version != seen:
            return self._version
        hook = self._on_first_waiter
        if hook is not None:
            hook()
        entry = (asyncio.get_running_loop(), asyncio.Event())
        self._async.add(entry)
        try:
            if self._version == seen:
                try:
                    await asyncio.wait_for(entry[1].wait(), timeout=max(0.0, timeout))
                except TimeoutError:
                    pass
        finally:
            self._async.discard(entry)
        return self._version


class ChangeWatcher:
    """One daemon thread that bumps the notifier when another process commits.

    `probe()` returns a value that changes whenever the database changed (SQLite's
    `PRAGMA data_version` on a dedicated connection); it is checked every `interval_s` while
    anyone is waiting, and the thread exits after `idle_exit_s` without waiters.
    """

    def __init__(
        self,
        notifier: Notifier,
        probe: Callable[[], object],
        *,
        interval_s: float = 0.001,
        idle_exit_s: float = 5.0,
    ) -> None:
        self._notifier = notifier
        self._probe = probe
        self._interval = interval_s
        self._idle_exit = idle_exit_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def ensure_running(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="logstream-change-watcher", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2)

    def _run(self) -> None:
        last = self._safe_probe()
        idle = 0.0
        while not self._stop.wait(self._interval):
            current = self._safe_probe()
            if current is not None and current != last:
                last = current
                self._notifier.bump()
            if self._notifier.waiters == 0:
                idle += self._interval
                if idle >= self._idle_exit:
                    break
            else:
                idle = 0.0
        with self._lock:
            self._thread = None

    def _safe_probe(self) -> object:
        try:
            return self._probe()
        except Exception:  # a transient probe failure must not kill wake-ups; waiters re-check
            return None
