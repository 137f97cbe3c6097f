"""The SQLite change signal: `PRAGMA data_version` on a dedicated connection, woken by inotify
on the database directory (Linux) or polled elsewhere. See notify.py for how signals are used.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import sqlite3
import struct
import threading
import time
from typing import Any

from mempalace_logstream.notify import (
    CONFIRM_INTERVAL_S,
    CONFIRM_WINDOW_S,
    POLL_INTERVAL_S,
    Waker,
)


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
        self._waker = Waker()

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
