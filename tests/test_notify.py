"""The notifier: in-process fan-out to threads and asyncio, and the cross-process signal thread.

Cross-process here means another store instance with its own connections (the signal cannot
tell a second process from a second engine); tests/test_wait.py uses real processes.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from mempalace_logstream import LogStore, notify


class FakeSignal:
    """A change signal the test fires by hand."""

    def __init__(self, fired: threading.Event, opened: list[str]) -> None:
        self.fired = fired
        self.opened = opened

    def open(self) -> None:
        self.opened.append("open")

    def wait(self, timeout: float) -> bool:
        if self.fired.wait(timeout):
            self.fired.clear()
            return True
        return False

    def cancel(self) -> None:
        self.fired.set()

    def close(self) -> None:
        self.opened.append("close")


def _wait_until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_wait_returns_at_once_when_the_version_already_moved() -> None:
    n = notify.Notifier()
    seen = n.version
    n.bump()
    t0 = time.monotonic()
    assert n.wait(seen, 5) == seen + 1
    assert time.monotonic() - t0 < 0.5


def test_one_bump_wakes_every_thread_and_asyncio_waiter() -> None:
    n = notify.Notifier()
    seen = n.version
    woke: list[str] = []

    def thread_waiter(i: int) -> None:
        if n.wait(seen, 10) != seen:
            woke.append(f"t{i}")

    async def async_waiters() -> None:
        async def one(i: int) -> None:
            if await n.wait_async(seen, 10) != seen:
                woke.append(f"a{i}")

        await asyncio.gather(*(one(i) for i in range(5)))

    threads = [threading.Thread(target=thread_waiter, args=(i,)) for i in range(5)]
    threads.append(threading.Thread(target=lambda: asyncio.run(async_waiters())))
    for t in threads:
        t.start()
    assert _wait_until(lambda: n.waiters == 10)
    t0 = time.monotonic()
    n.bump()
    for t in threads:
        t.join(5)
    assert sorted(woke) == sorted([f"t{i}" for i in range(5)] + [f"a{i}" for i in range(5)])
    assert time.monotonic() - t0 < 2
    assert n.waiters == 0


def test_wait_times_out_without_a_bump() -> None:
    n = notify.Notifier()
    t0 = time.monotonic()
    assert n.wait(n.version, 0.05) == 0
    assert 0.04 <= time.monotonic() - t0 < 2


def test_the_signal_thread_bumps_when_it_starts_and_on_every_change() -> None:
    n = notify.Notifier()
    fired = threading.Event()
    opened: list[str] = []
    watcher = notify.ChangeWatcher(n, lambda: FakeSignal(fired, opened), tick_s=0.01)
    n.attach(watcher)
    seen = n.version
    # The first waiter starts the thread; a fresh signal cannot vouch for the past: it bumps.
    assert n.wait(seen, 5) != seen
    assert opened == ["open"]
    seen = n.version
    threading.Timer(0.05, fired.set).start()
    assert n.wait(seen, 5) != seen
    watcher.stop()
    assert opened == ["open", "close"]


def test_the_signal_thread_exits_when_idle_and_a_new_waiter_restarts_it_race_free() -> None:
    n = notify.Notifier()
    fired = threading.Event()
    opened: list[str] = []

    class Baseline(FakeSignal):
        def open(self) -> None:
            # Like data_version or LISTEN: changes before the baseline are invisible.
            fired.clear()
            super().open()

    watcher = notify.ChangeWatcher(
        n, lambda: Baseline(fired, opened), idle_exit_s=0.0, tick_s=0.001
    )
    n.attach(watcher)
    # Hammer the start/stop boundary: every wait must be answered by a bump (the restart or
    # a change), never left to its timeout, whatever the thread was doing at that moment.
    rng = random.Random(7)
    for i in range(200):
        seen = n.version
        # The "commit" lands at a random moment around the waiter's registration.
        threading.Timer(rng.random() * 0.002, fired.set).start()
        t0 = time.monotonic()
        assert n.wait(seen, 5) != seen
        assert time.monotonic() - t0 < 2
        if i % 10 == 9:
            # Back-to-back waits may never leave the thread a moment to go idle: let it, so
            # the next wait must restart it (the other iterations race the exit instead).
            deadline = time.monotonic() + 5
            while watcher.running:
                assert time.monotonic() < deadline, "the idle signal thread never exited"
                time.sleep(0.001)
    assert watcher.opens >= 2  # it did go idle and come back
    watcher.stop()
    assert not watcher.running


def test_a_stopped_watcher_never_restarts() -> None:
    n = notify.Notifier()
    opened: list[str] = []
    watcher = notify.ChangeWatcher(n, lambda: FakeSignal(threading.Event(), opened))
    n.attach(watcher)
    watcher.stop()
    assert n.wait(n.version, 0.05) == 0
    assert opened == [] and not watcher.running


def test_a_failing_signal_is_reopened_and_bumps_again() -> None:
    n = notify.Notifier()
    attempts: list[int] = []

    class Flaky(FakeSignal):
        def open(self) -> None:
            attempts.append(1)
            if len(attempts) == 1:
                raise OSError("database unreachable")

    monkey_retry = notify.RETRY_S
    notify.RETRY_S = 0.01
    try:
        watcher = notify.ChangeWatcher(n, lambda: Flaky(threading.Event(), []), tick_s=0.01)
        n.attach(watcher)
        seen = n.version
        assert n.wait(seen, 5) != seen
        assert len(attempts) == 2 and watcher.opens == 1
        watcher.stop()
    finally:
        notify.RETRY_S = monkey_retry


@pytest.mark.parametrize("use_inotify", [True, False])
def test_sqlite_signal_sees_a_commit_from_another_connection(
    tmp_path: Path, use_inotify: bool
) -> None:
    path = str(tmp_path / "x.sqlite3")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    signal = notify.SqliteSignal(path, use_inotify=use_inotify)
    signal.open()
    try:
        if use_inotify:
            assert signal.mode == "inotify"
        assert signal.wait(0.05) is False
        threading.Timer(
            0.05,
            lambda: sqlite3.connect(path).execute("INSERT INTO t VALUES (1)").connection.commit(),
        ).start()
        t0 = time.monotonic()
        assert signal.wait(5) is True
        assert time.monotonic() - t0 < 2
        assert signal.wait(0.05) is False
    finally:
        signal.close()
        db.close()


def test_another_store_instance_wakes_a_waiter_through_the_signal(db_url: str) -> None:
    waiter = LogStore.open(db_url)
    writer = LogStore.open(db_url)
    try:
        tip = writer.event_append(type="x.one", stream="s", room="r", from_agent="w").id
        result: dict[str, object] = {}

        def wait() -> None:
            t0 = time.monotonic()
            page = waiter.event_wait(since_event_id=tip, timeout_ms=30_000)
            result["page"], result["s"] = page, time.monotonic() - t0

        t = threading.Thread(target=wait)
        t.start()
        assert _wait_until(lambda: waiter.notifier.waiters == 1)
        new = writer.event_append(type="x.two", stream="s", room="r", from_agent="w")
        t.join(30)
        page = result["page"]
        assert [e.id for e in page.events] == [new.id]  # type: ignore[attr-defined]
        # The writer's in-process bump cannot reach the other instance: this was the signal.
        assert result["s"] < 10
    finally:
        writer.close()
        waiter.close()


def test_postgres_appends_notify_their_channel_on_commit(pg_url: str) -> None:
    import psycopg

    store = LogStore.open(pg_url)
    try:
        channel = store._notify_channel
        assert channel is not None
        cargs, cparams = store.engine.dialect.create_connect_args(store.engine.url)
        with psycopg.connect(*cargs, **{**cparams, "autocommit": True}) as conn:
            conn.execute(f'LISTEN "{channel}"')
            assert list(conn.notifies(timeout=0.05, stop_after=1)) == []
            store.event_append(type="x.one", stream="s", room="r", from_agent="w")
            got = list(conn.notifies(timeout=5, stop_after=1))
            assert [n.channel for n in got] == [channel]
    finally:
        store.close()


def test_a_lost_signal_costs_at_most_the_fallback_interval(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.sqlite3'}"
    waiter = LogStore.open(url)
    writer = LogStore.open(url)
    try:
        waiter._change_watcher.stop()  # no cross-process signal at all
        tip = writer.event_append(type="x.one", stream="s", room="r", from_agent="w").id
        threading.Timer(
            0.1, lambda: writer.event_append(type="x.two", stream="s", room="r", from_agent="w")
        ).start()
        t0 = time.monotonic()
        page = waiter.event_wait(since_event_id=tip, timeout_ms=30_000)
        assert len(page.events) == 1
        assert time.monotonic() - t0 < notify.FALLBACK_CHECK_S + 3
    finally:
        writer.close()
        waiter.close()


# ----------------------------------------------------------------------------- issue 9, item 15


@pytest.mark.parametrize("kind", ["sqlite-inotify", "sqlite-poll", "postgresql"])
def test_stopping_the_signal_thread_is_immediate(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """stop() returns with the thread gone although the signal's tick is a minute long: the
    cancel interrupts the blocked wait (before the fix, join gave up with the thread alive)."""
    if kind == "postgresql":
        store = LogStore.open(request.getfixturevalue("pg_url"))
    else:
        store = LogStore.open(str(tmp_path / "x.sqlite3"))
    try:
        if kind.startswith("sqlite"):
            path = str(store.engine.url.database)
            inotify = kind == "sqlite-inotify"
            factory = lambda: notify.SqliteSignal(path, use_inotify=inotify)  # noqa: E731
        else:
            factory = store._change_watcher._factory
        watcher = notify.ChangeWatcher(notify.Notifier(), factory, idle_exit_s=600, tick_s=600)
        watcher.ensure_running()
        assert _wait_until(lambda: watcher.opens == 1, 30)
        thread = watcher._thread
        assert thread is not None and thread.is_alive()
        watcher.stop()
        assert not thread.is_alive(), "stop() returned while the signal thread still waited"
        assert watcher._signal is None  # the thread closed its signal on the way out
    finally:
        store.close()


def test_a_cancel_that_races_the_open_still_stops_the_thread(tmp_path: Path) -> None:
    """stop() between the signal's open and its publication: the thread cancels it itself."""
    LogStore.open(str(tmp_path / "x.sqlite3")).close()
    path = str(tmp_path / "x.sqlite3")
    opened = threading.Event()
    proceed = threading.Event()

    class SlowOpen(notify.SqliteSignal):
        def open(self) -> None:
            super().open()
            opened.set()
            proceed.wait(30)

    watcher = notify.ChangeWatcher(
        notify.Notifier(), lambda: SlowOpen(path), idle_exit_s=600, tick_s=600
    )
    watcher.ensure_running()
    assert opened.wait(30)
    thread = watcher._thread
    stopper = threading.Thread(target=watcher.stop)
    stopper.start()
    assert _wait_until(lambda: watcher._closed, 30)  # stop() saw no signal to cancel
    proceed.set()
    stopper.join(30)
    assert thread is not None and not thread.is_alive()


def _blocked(native_id: int) -> int:
    """The signal mask of this process's thread `native_id`, from the kernel."""
    with open(f"/proc/self/task/{native_id}/status") as f:
        return int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)


def test_the_signal_thread_leaves_ctrl_c_to_the_main_thread() -> None:
    """The kernel gives a signal sent to the process to any thread that does not block it; the
    change-signal thread blocks SIGINT and SIGTERM, so a Ctrl-C reaches the main thread, whose
    blocked wait Python interrupts (one run in five of `logstream watch --follow` ignored a
    Ctrl-C that went to this thread). The starting thread's own mask is as it was."""
    n = notify.Notifier()
    fired = threading.Event()
    watcher = notify.ChangeWatcher(n, lambda: FakeSignal(fired, []), tick_s=0.01)
    n.attach(watcher)
    before = _blocked(threading.get_native_id())
    try:
        watcher.ensure_running()
        thread = watcher._thread
        assert thread is not None and thread.native_id is not None
        stopping = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
        assert _blocked(thread.native_id) & stopping == stopping
        assert _blocked(threading.get_native_id()) == before
    finally:
        watcher.stop()
