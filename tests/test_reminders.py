"""Reminders for unclaimed work (issue 20 item 4): an unclaimed task is re-pushed to its
assignee N times, then one `task.stalled` reaches the requester; a claim stops them; a
restart (the store reopened on the same file or database) neither loses nor doubles one; a
watcher that exits on a match wakes once per reminder, never twice for one. A manual clock:
nothing sleeps for minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, operations, reminders, workflows
from mempalace_logstream import watch as w
from mempalace_logstream.presence import Registry
from mempalace_logstream.tasks import guards as g
from tests.conftest import ManualClock

MIN = 60_000
COMMIT = "abc1234"


def _open(url: str, clock: ManualClock) -> LogStore:
    return LogStore.open(url, clock=clock)


def _task(store: LogStore, **extra: Any) -> str:
    out = workflows.task_create(
        store,
        project="p",
        from_agent="claude",
        to_agent="codex",
        goal="fix the bug",
        branch="main",
        base_commit=COMMIT,
        done="tests pass",
        **extra,
    )
    return str(out["task_id"])


def _notices(store: LogStore, task_id: str) -> list[Any]:
    page = store.event_list(correlation_id=task_id, writer=g.HUB_WRITER, order="asc", limit=500)
    return list(page.events)


def test_an_unclaimed_task_is_reminded_n_times_then_stalled_once(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock)
    try:
        tid = _task(store, claim_timeout_ms=10 * MIN, max_reminders=3)
        hub = Registry(clock=clock.now_ms)
        hub.announce(agent="codex", state="watching", ttl_s=3600)
        clock.advance(10 * MIN - 1)
        assert reminders.remind_once(store, hub) == []
        kinds = []
        for _ in range(6):
            clock.advance(10 * MIN)
            kinds += [(x.kind, x.n) for x in reminders.remind_once(store, hub)]
            assert reminders.remind_once(store, hub) == []  # the same instant: nothing owed
        assert kinds == [("reminder", 1), ("reminder", 2), ("reminder", 3), ("stalled", 0)]
        sent = _notices(store, tid)
        assert [e.type for e in sent] == [g.REMINDER_TYPE] * 3 + [g.STALLED_TYPE]
        assert {e.to_agent for e in sent[:3]} == {"codex"}
        stalled = sent[3]
        assert stalled.to_agent == "claude"
        details = stalled.metadata
        assert (details["task_id"], details["goal"]) == (tid, "fix the bug")
        assert [r["n"] for r in details["reminders"]] == [1, 2, 3]
        assert details["presence"]["known"] is True
        assert [p["agent"] for p in details["presence"]["live"]] == ["codex"]
        assert "codex watching" in stalled.body
        # The task itself never moved: reminders are part of its thread, not moves.
        assert store.task_status(tid)["task"]["state"] == "open"
    finally:
        store.close()


def test_the_hub_default_applies_and_zero_turns_reminders_off(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock)
    try:
        default = _task(store)
        off = _task(store, claim_timeout_ms=0)
        clock.advance(10 * MIN)
        written = reminders.remind_once(store)
        assert [(x.task_id, x.n) for x in written] == [(default, 1)]
        assert _notices(store, off) == []
        clock.advance(10 * MIN)
        stall = _task(store, max_reminders=0)
        clock.advance(10 * MIN)
        kinds = {(x.task_id, x.kind) for x in reminders.remind_once(store)}
        assert kinds == {(default, "reminder"), (stall, "stalled")}
        stalled = _notices(store, stall)[0]
        assert stalled.metadata["presence"] == {"known": False, "live": []}
    finally:
        store.close()


def test_a_claim_in_between_stops_the_reminders(db_url: str, clock: ManualClock) -> None:
    store = _open(db_url, clock)
    try:
        tid = _task(store, claim_timeout_ms=MIN, max_reminders=3)
        clock.advance(MIN)
        assert [x.n for x in reminders.remind_once(store)] == [1]
        workflows.task_update(store, task_id=tid, action="claim", from_agent="codex")
        for _ in range(5):
            clock.advance(MIN)
            assert reminders.remind_once(store) == []
        assert [e.type for e in _notices(store, tid)] == [g.REMINDER_TYPE]
    finally:
        store.close()


def test_a_restart_in_between_neither_loses_nor_doubles_a_reminder(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock)
    tid = _task(store, claim_timeout_ms=MIN, max_reminders=3)
    clock.advance(MIN)
    assert [x.n for x in reminders.remind_once(store)] == [1]
    store.close()
    # The hub was down past reminder 2's time: the restarted one owes exactly reminder 2.
    clock.advance(MIN + 30_000)
    again = _open(db_url, clock)
    other = _open(db_url, clock)  # a second process on the same log, at the same instant
    try:
        assert [x.n for x in reminders.remind_once(again)] == [2]
        assert reminders.remind_once(other) == []
        assert reminders.remind_once(again) == []
        clock.advance(MIN)
        both = reminders.remind_once(again) + reminders.remind_once(other)
        assert [(x.kind, x.n) for x in both] == [("reminder", 3)]
        ns = [e.metadata["reminder"] for e in _notices(again, tid)]
        assert ns == [1, 2, 3]
    finally:
        again.close()
        other.close()


def test_a_write_retried_after_a_crash_is_the_same_reminder(
    db_url: str, clock: ManualClock
) -> None:
    """A pass that wrote reminder 1 but died before it knew: the idempotency key per (task,
    n) makes the retry the same event, never a second one."""
    store = _open(db_url, clock)
    try:
        tid = _task(store, claim_timeout_ms=MIN)
        clock.advance(MIN)
        first = reminders.remind_once(store)[0]
        task = reminders.reads.unclaimed(store)[0]
        plan = g.ReminderPlan(requested_ms=task.created_ms, claim_timeout_ms=MIN, max_reminders=3)
        assert reminders._remind(store, task, 1, plan) == first.event_id
        assert len(_notices(store, tid)) == 1
    finally:
        store.close()


class _Out:
    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []

    def batch(self, batch: w.Batch, *, final: bool) -> None:
        if batch.events:
            self.batches.append(batch.events)

    def note(self, message: str) -> None:
        pass


def _watch_once(store: LogStore, state: Path) -> list[dict[str, Any]]:
    """One exit-on-match `watch --agent codex` run: the events of the batch it exited on."""
    opts = w.WatchOptions.parse(agent="codex", state_file=str(state), idle_exit_ms=1)
    out = _Out()
    code = w.Watcher(operations.LocalClient(store), opts, out, human=False).run()
    assert code in (w.EXIT_MATCHED, w.EXIT_IDLE)
    return out.batches[0] if code == w.EXIT_MATCHED else []


def test_an_exit_on_match_watcher_wakes_once_per_reminder(
    tmp_path: Path, clock: ManualClock
) -> None:
    url = str(tmp_path / "logstream.sqlite3")
    store = _open(url, clock)
    state = tmp_path / "codex.json"
    try:
        w.write_state(state, None, "codex")  # started on an empty log: replays from the start
        tid = _task(store, claim_timeout_ms=MIN, max_reminders=2)
        assert [e["type"] for e in _watch_once(store, state)] == ["task.request"]
        assert _watch_once(store, state) == []
        clock.advance(MIN)
        reminders.remind_once(store)
        woke = _watch_once(store, state)
        assert [(e["type"], e["metadata"]["reminder"]) for e in woke] == [(g.REMINDER_TYPE, 1)]
        # The same reminder again (a second pass, a restarted hub): no second wake-up.
        reminders.remind_once(store)
        store.close()
        store = _open(url, clock)
        reminders.remind_once(store)
        assert _watch_once(store, state) == []
        # Reminder 2 and the stall pile up while the watcher is away: one wake-up, and the
        # stall (to the requester) is not in it.
        clock.advance(MIN)
        reminders.remind_once(store)
        clock.advance(MIN)
        reminders.remind_once(store)
        woke = _watch_once(store, state)
        assert [e["metadata"]["reminder"] for e in woke] == [2]
        assert _watch_once(store, state) == []
        assert [e.type for e in _notices(store, tid)][-1] == g.STALLED_TYPE
    finally:
        store.close()


def test_the_reminder_loop_runs_in_the_background_and_stops_cleanly(
    sqlite_store: LogStore,
) -> None:
    import threading

    passes = threading.Condition()
    seen: list[list[reminders.Written]] = []

    def on_pass(written: list[reminders.Written]) -> None:
        with passes:
            seen.append(written)
            passes.notify_all()

    tid = _task(sqlite_store, claim_timeout_ms=1, max_reminders=1)
    loop = reminders.ReminderLoop(sqlite_store, interval_s=0.01, on_pass=on_pass)
    loop.start()
    try:
        with passes:
            assert passes.wait_for(lambda: sum(len(x) for x in seen) >= 2, timeout=30)
    finally:
        loop.stop()
    assert loop._thread is None
    kinds = [e.type for e in _notices(sqlite_store, tid)]
    assert kinds == [g.REMINDER_TYPE, g.STALLED_TYPE]
    assert not reminders.ReminderLoop(sqlite_store, interval_s=0).enabled


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("claim_timeout_ms", -1, "claim_timeout_ms is -1; it must be between 0 and 604,800,000"),
        ("max_reminders", 21, "max_reminders is 21; it must be between 0 and 20"),
        ("thread_budget", 0, "thread_budget is 0; it must be between 1 and 100,000 events"),
    ],
)
def test_task_options_are_checked_before_anything_is_written(
    sqlite_store: LogStore, field: str, value: int, message: str
) -> None:
    from mempalace_logstream import errors

    with pytest.raises(errors.ValidationError) as info:
        _task(sqlite_store, **{field: value})
    assert str(info.value).startswith(message)
    assert info.value.field == field
    assert not sqlite_store.event_list(limit=1).events


@pytest.mark.slow
def test_a_real_hub_restarted_in_between_neither_loses_nor_doubles_a_reminder(
    tmp_path: Path,
) -> None:
    """`logstream serve` runs the reminders in its background; stopped after reminder 1 and
    started again, it sends reminder 2 and the stall once each (real time: 1.5 s timeouts)."""
    from tests.hubproc import HubProcess, wait_for

    db = tmp_path / "hub.sqlite3"
    with LogStore.open(str(db)) as store:
        tid = _task(store, claim_timeout_ms=1_500, max_reminders=2)
    flags = ("--remind-interval", "0.05", "--sync-interval", "0")
    hub = HubProcess(db, tmp_path, extra=flags)

    def kinds() -> list[str]:
        with LogStore.open(str(db)) as s:
            return [e.type + str(e.metadata.get("reminder", "")) for e in _notices(s, tid)]

    hub.start()
    try:
        wait_for(lambda: len(kinds()) >= 1, 60, "reminder 1")
    finally:
        hub.stop()
    assert kinds()[0] == "task.reminder1"
    hub.start()
    try:
        wait_for(lambda: g.STALLED_TYPE in kinds(), 60, "the stall")
    finally:
        hub.stop()
    assert kinds() == ["task.reminder1", "task.reminder2", g.STALLED_TYPE]


def test_the_cli_creates_a_task_with_its_options_and_reminds_without_a_hub(
    tmp_path: Path,
) -> None:
    import json

    from tests.conftest import run_cli

    db = ("--db", str(tmp_path / "log.sqlite3"))
    made = run_cli(
        *("task", "create", "--project", "p", "--from-agent", "claude", "--to-agent", "codex"),
        *("--goal", "g", "--branch", "main", "--base-commit", COMMIT, "--done", "d"),
        *("--claim-timeout-ms", "1", "--max-reminders", "1", "--thread-budget", "9", "--json"),
        *db,
    )
    assert made.returncode == 0, made.stderr
    task = json.loads(made.stdout)["task"]
    assert task["metadata"] == {"claim_timeout_ms": 1, "max_reminders": 1, "thread_budget": 9}
    first = run_cli("task", "remind", "--json", *db)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert [(r["kind"], r["n"]) for r in out["written"]] == [("reminder", 1)]
    assert out["written"][0]["task_id"] == task["correlation_id"]
    second = run_cli("task", "remind", *db)
    assert second.returncode == 0, second.stderr
    assert second.stdout.decode().startswith(f"stalled: {task['correlation_id']} (evt_")
    assert run_cli("task", "remind", *db).stdout.decode().strip() == "nothing due"
