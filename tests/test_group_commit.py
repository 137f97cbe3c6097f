"""How group commit hands work on (store/pipeline.py): a caller that queues behind a leader
sleeps on its own lock and is woken once, by the leader that settled its item or by the one
that handed it the lead; a caller whose wait is interrupted never leaves the lead with nobody.
Every wait here is on a condition (a deadline only bounds it), never a sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors
from mempalace_logstream.store import pipeline as pipeline_mod

ROW = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
DEADLINE_S = 10.0


def _until(check: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


def _held_leader(store: LogStore) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread whose write leads and holds the commit until `release` is set."""
    entered, release = threading.Event(), threading.Event()

    def work(tx: Any) -> None:
        entered.set()
        assert release.wait(DEADLINE_S)
        tx.insert_event(store.draft_event(**ROW, body="leader"))

    leader = threading.Thread(target=store.transaction, args=(work,))
    leader.start()
    assert entered.wait(DEADLINE_S)
    return leader, entered, release


def _queued(store: LogStore) -> int:
    return len(store.pipeline._queue)


def test_callers_queued_behind_a_leader_share_one_commit_and_all_return(tmp_path: Path) -> None:
    with LogStore.open(str(tmp_path / "g.sqlite3")) as store:
        store.event_append(**ROW, body="first")
        commits = store.commits
        leader, _entered, release = _held_leader(store)
        results: dict[int, Any] = {}

        def append(i: int) -> None:
            results[i] = store.event_append(**ROW, body=f"queued {i}")

        queued = [threading.Thread(target=append, args=(i,)) for i in range(5)]
        for t in queued:
            t.start()
        _until(lambda: _queued(store) == 5)
        release.set()
        for t in [leader, *queued]:
            t.join(DEADLINE_S)
            assert not t.is_alive()
        # The leader's commit, then one commit for the five queued behind it (one was handed
        # the lead and ran the others' items with its own).
        assert store.commits - commits == 2
        assert sorted(e.seq for e in results.values()) == [3, 4, 5, 6, 7]
        assert store.pipeline._leading is False
        assert store.event_append(**ROW, body="after").seq == 8


class _Interrupted(BaseException):
    """What a signal raises in a waiting caller (KeyboardInterrupt, for one)."""


class _InterruptOnce:
    """A lock whose first blocking wait raises `_Interrupted` in the caller that waits."""

    def __init__(self, lock: Any, armed: list[bool]) -> None:
        self.lock, self.armed = lock, armed

    def acquire(self, *args: Any) -> bool:
        if self.lock.locked() and self.armed and self.armed.pop():
            raise _Interrupted
        return bool(self.lock.acquire(*args))

    def release(self) -> None:
        self.lock.release()


def test_a_caller_interrupted_while_queued_never_leaves_the_lead_with_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed = [True]  # the first caller that sleeps is interrupted
    real = threading.Lock  # what the pipeline allocates (`_thread.allocate_lock`)
    monkeypatch.setattr(pipeline_mod, "_allocate_lock", lambda: _InterruptOnce(real(), armed))
    with LogStore.open(str(tmp_path / "i.sqlite3")) as store:
        store.event_append(**ROW, body="first")
        leader, _entered, release = _held_leader(store)
        raised: list[BaseException] = []

        def interrupted() -> None:
            try:
                store.event_append(**ROW, body="interrupted")
            except _Interrupted as exc:
                raised.append(exc)

        first = threading.Thread(target=interrupted)
        first.start()
        first.join(DEADLINE_S)
        assert raised and not armed  # it stopped waiting; its item stays queued
        results: list[Any] = []
        second = threading.Thread(
            target=lambda: results.append(store.event_append(**ROW, body="second"))
        )
        second.start()
        _until(lambda: _queued(store) == 2)
        release.set()
        for t in (leader, second):
            t.join(DEADLINE_S)
            assert not t.is_alive()
        # The lead went to the caller still waiting, which committed both queued items (the
        # interrupted caller's too, as a caller interrupted after queueing always had it).
        assert [e.seq for e in results] == [4]
        page = store.event_list(stream="s", limit=10)
        assert [e.body for e in page.events][::-1] == ["first", "leader", "interrupted", "second"]
        assert store.pipeline._leading is False
        assert store.event_append(**ROW, body="after").seq == 5


def test_a_lone_writer_runs_its_item_without_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody leading or queued: the write runs its work at once, in a transaction of its own
    (no queue, no `Pending`, no batch, no `_lead`, no wake lock); with the commit lock held
    (the leader seat), it queues and leads as before, and callers arriving meanwhile share
    its commit."""
    with LogStore.open(str(tmp_path / "a.sqlite3")) as store:
        pipe = store.pipeline
        led: list[int] = []
        batches: list[int] = []
        real_lead, real_run = pipe._lead, pipe._run_batch
        monkeypatch.setattr(pipe, "_lead", lambda: (led.append(1), real_lead())[1])
        monkeypatch.setattr(pipe, "_run_batch", lambda b: (batches.append(len(b)), real_run(b))[1])
        locks: list[int] = []
        monkeypatch.setattr(
            pipeline_mod, "_allocate_lock", lambda: (locks.append(1), threading.Lock())[1]
        )
        pending: list[int] = []
        real_pending = pipeline_mod.Pending
        monkeypatch.setattr(
            pipeline_mod, "Pending", lambda *a: (pending.append(1), real_pending(*a))[1]
        )
        commits = store.commits
        assert [store.event_append(**ROW, body=str(i)).seq for i in range(3)] == [1, 2, 3]
        assert (led, locks, batches, pending, store.commits - commits) == ([], [], [], [], 3)
        assert pipe._leading is False and pipe._queue == []
        with pytest.raises(errors.NotFoundError):  # refused in its transaction: lead let go
            store.event_append(**ROW, artifact_ids=["art_missing"])
        assert pipe._leading is False and (led, batches, pending) == ([], [], [])
        assert store.commits - commits == 3  # (the refused one committed nothing)
        assert store.event_append(**ROW, body="next").seq == 4  # its seq was given back

        results: list[Any] = []
        threads = [
            threading.Thread(target=lambda: results.append(store.event_append(**ROW, body="q")))
            for _ in range(3)
        ]
        with pipe._commit_lock:  # the leader seat held: the callers queue behind a leader
            for t in threads:
                t.start()
            _until(lambda: _queued(store) == 3)
        for t in threads:
            t.join(DEADLINE_S)
            assert not t.is_alive()
        assert (led, len(locks), batches, len(pending)) == ([1], 2, [3], 3)
        assert sorted(e.seq for e in results) == [5, 6, 7]
        assert pipe._leading is False


def test_two_writers_behind_a_lone_writer_share_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone writer commits without a batch; two writers that come while its transaction
    runs queue, and the one handed the lead commits both in one batch, as before the lone
    path (group commit for concurrent writers is unchanged)."""
    with LogStore.open(str(tmp_path / "two.sqlite3")) as store:
        pipe = store.pipeline
        batches: list[int] = []
        real_run = pipe._run_batch
        monkeypatch.setattr(pipe, "_run_batch", lambda b: (batches.append(len(b)), real_run(b))[1])
        commits = store.commits
        leader, _entered, release = _held_leader(store)  # alone: its own transaction
        results: list[Any] = []
        two = [
            threading.Thread(target=lambda: results.append(store.event_append(**ROW, body="w")))
            for _ in range(2)
        ]
        for t in two:
            t.start()
        _until(lambda: _queued(store) == 2)
        release.set()
        for t in [leader, *two]:
            t.join(DEADLINE_S)
            assert not t.is_alive()
        assert (batches, store.commits - commits) == ([2], 2)
        assert sorted(e.seq for e in results) == [2, 3]
        assert pipe._leading is False and pipe._queue == []
