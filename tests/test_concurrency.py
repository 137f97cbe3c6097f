"""Many writers on one SQLite file: separate OS processes, and threads in one process.

No event may be lost, duplicated or reordered (each writer's own sequence numbers must appear in
increasing seq order), a concurrent reader never sees seq go backwards, and "database is locked"
never reaches a caller.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa
from conftest import REPO

from mempalace_logstream import LogStore

pytestmark = pytest.mark.slow

# Opens the store (migrating a fresh file, racing the other writers), says "ready", waits for
# "go" on stdin, then appends N events numbered 0..N-1 in its body.
WRITER = r"""
import sys
from mempalace_logstream import LogStore
url, writer, n, durability = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = LogStore.open(url, durability=durability)
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    store.event_append(type="load.test", stream="load", room="r", from_agent=writer,
                       body=f"{writer}:{i}")
store.close()
print("done", flush=True)
"""


def _all_events(store: LogStore) -> list:
    out, cursor = [], None
    while True:
        page = store.event_list(since_event_id=cursor, order="asc", limit=500)
        out += page.events
        if not page.has_more:
            return out
        cursor = page.cursor


def _check_per_writer_order(events, writers: list[str], n: int) -> None:
    assert len(events) == len(writers) * n
    assert len({e.id for e in events}) == len(events)
    assert all(a.seq < b.seq for a, b in itertools.pairwise(events))
    assert all(a.hlc < b.hlc for a, b in itertools.pairwise(events))
    for w in writers:
        mine = [int(e.body.split(":")[1]) for e in events if e.from_agent == w]
        assert mine == list(range(n)), f"{w}: lost, duplicated or reordered events"


def test_four_processes_appending_500_each_lose_and_reorder_nothing(tmp_path):
    n, writers = 500, [f"proc{i}" for i in range(4)]
    url = f"sqlite:///{tmp_path / 'shared' / 'logstream.sqlite3'}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            # synchronous=NORMAL: the locking and ordering under test are the same as with
            # FULL, at a third of the fsyncs; durability itself is test_crash.py's subject.
            [sys.executable, "-c", WRITER, url, w, str(n), "normal"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for w in writers
    ]
    try:
        for p in procs:  # every writer has opened (and raced to migrate) the fresh file
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()
        seen_max, backwards = 0, []
        stop = threading.Event()

        def reader() -> None:
            nonlocal seen_max
            with LogStore.open(url) as r:
                cursor = None
                while not stop.is_set():
                    # Push-woken reads (no spinning): returns as soon as anything commits.
                    page = r.event_wait(since_event_id=cursor, timeout_ms=200, limit=500)
                    for e in page.events:
                        if e.seq <= seen_max:
                            backwards.append((seen_max, e.seq))
                        seen_max = e.seq
                    cursor = page.cursor or cursor

        watcher = threading.Thread(target=reader)
        watcher.start()
        for p in procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=240) for p in procs]
        stop.set()
        watcher.join(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err.decode()
        assert b"locked" not in err and b"Traceback" not in err
        assert out == b"done\n"
    assert backwards == []  # S-2.4: a reader never sees a new event below one it has seen
    with LogStore.open(url) as store:
        events = _all_events(store)
        _check_per_writer_order(events, writers, n)
        # The four processes raced to create and migrate the fresh file: one identity won.
        assert {e.origin_replica for e in events} == {store.replica_id}
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"


def test_eight_threads_are_group_committed_without_losing_anything(tmp_path):
    n, writers = 60, [f"thread{i}" for i in range(8)]
    with LogStore.open(str(tmp_path / "logstream.sqlite3")) as store:
        commits_before = store.commits
        failures: list[BaseException] = []
        gate = threading.Barrier(len(writers))

        def run(w: str) -> None:
            try:
                gate.wait(10)
                for i in range(n):
                    store.event_append(
                        type="load.test", stream="load", room="r", from_agent=w, body=f"{w}:{i}"
                    )
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(w,)) for w in writers]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert time.monotonic() - started < 120
        _check_per_writer_order(_all_events(store), writers, n)
        # Group commit: concurrent appends shared transactions (fewer commits than appends).
        commits = store.commits - commits_before
        assert 0 < commits < len(writers) * n


def test_two_stores_in_one_process_share_a_file_without_lock_errors(tmp_path):
    path = str(tmp_path / "logstream.sqlite3")
    n = 100
    with LogStore.open(path) as a, LogStore.open(path) as b:
        failures: list[BaseException] = []

        def run(store: LogStore, w: str) -> None:
            try:
                for i in range(n):
                    store.event_append(
                        type="x", stream="s", room="r", from_agent=w, body=f"{w}:{i}"
                    )
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(s, w)) for s, w in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        _check_per_writer_order(_all_events(a), ["a", "b"], n)
