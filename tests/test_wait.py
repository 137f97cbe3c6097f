"""event_wait (S-5.4) on both backends, and `logstream wait` across real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, run_cli
from watchkit import fork_cli, run_forked

from mempalace_logstream import LogStore, errors, operations


def _append(store: LogStore, **kw: object):
    fields = {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", **kw}
    return store.event_append(**fields)


def test_wait_without_a_cursor_returns_existing_matches_at_once(store: LogStore) -> None:
    first = _append(store, to_agent="bob")
    _append(store, to_agent="carol")
    t0 = time.monotonic()
    page = store.event_wait(to_agent="bob", timeout_ms=30_000)
    assert [e.id for e in page.events] == [first.id]
    assert not page.timed_out and time.monotonic() - t0 < 5


def test_wait_at_tip_times_out_with_an_empty_result_not_an_error(store: LogStore) -> None:
    last = _append(store)
    out = operations.call(store, "event_wait", {"since_event_id": "tip", "timeout_ms": 50})
    assert out == {
        "timed_out": True,
        "events": [],
        "count": 0,
        "cursor": last.id,
        "has_more": False,
    }


def test_wait_on_an_empty_log_times_out_with_a_null_cursor(store: LogStore) -> None:
    out = operations.call(store, "event_wait", {"timeout_ms": 0})
    assert out["timed_out"] is True and out["cursor"] is None and out["events"] == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "timeout_ms is -1; it must be between 0 and 300000 ms"),
        (300_001, "timeout_ms is 300001; it must be between 0 and 300000 ms"),
        (True, "timeout_ms"),
        ("soon", "timeout_ms must be an integer"),
        (1.5, "timeout_ms must be an integer"),
    ],
)
def test_wait_rejects_bad_timeouts_naming_the_field_and_limit(
    sqlite_store: LogStore, value: object, message: str
) -> None:
    with pytest.raises(errors.ValidationError) as info:
        sqlite_store.event_wait(timeout_ms=value)
    assert message in info.value.message
    assert info.value.field == "timeout_ms"


def test_wait_rejects_an_unknown_cursor(store: LogStore) -> None:
    with pytest.raises(errors.NotFoundError, match="since_event_id 'evt_nope' not found"):
        store.event_wait(since_event_id="evt_nope", timeout_ms=0)


def test_wait_wakes_on_an_append_in_another_thread(store: LogStore) -> None:
    tip = _append(store).id
    timer = threading.Timer(0.1, lambda: _append(store, type="task.reply", to_agent="bob"))
    timer.start()
    t0 = time.monotonic()
    page = store.event_wait(since_event_id=tip, to_agent="bob", timeout_ms=30_000)
    timer.join()
    assert [e.type for e in page.events] == ["task.reply"]
    assert time.monotonic() - t0 < 5


def test_repeated_filters_are_or_within_a_field_and_and_across(store: LogStore) -> None:
    tip = _append(store).id
    _append(store, type="a.one", stream="s1")
    want1 = _append(store, type="a.two", stream="s1")
    _append(store, type="a.two", stream="s3")
    want2 = _append(store, type="a.three", stream="s2")
    page = store.event_wait(
        since_event_id=tip, type=["a.two", "a.three"], stream=["s1", "s2"], timeout_ms=0
    )
    assert [e.id for e in page.events] == [want1.id, want2.id]


def test_the_cursor_passes_rejected_rows_so_a_selective_wait_never_rescans(
    store: LogStore,
) -> None:
    tip = _append(store).id
    rejected = [_append(store, to_agent="carol") for _ in range(5)]
    page = store.event_wait(since_event_id=tip, to_agent="bob", timeout_ms=0)
    assert page.timed_out and page.cursor == rejected[-1].id
    # While waiting, each wake resumes after everything examined so far.
    resumed: list[int | None] = []
    real_read = store.read

    def spy(req, after_seq=None):  # type: ignore[no-untyped-def]
        resumed.append(after_seq)
        return real_read(req, after_seq=after_seq)

    store.read = spy  # type: ignore[method-assign]
    late = []
    timer = threading.Timer(
        0.1, lambda: [late.append(_append(store, to_agent=t)) for t in ("carol", "bob")]
    )
    timer.start()
    page = store.event_wait(since_event_id=page.cursor, to_agent="bob", timeout_ms=30_000)
    timer.join()
    assert [e.id for e in page.events] == [late[1].id]
    assert resumed[0] is None  # the first read resolves the cursor
    assert all(seq is not None and seq >= rejected[-1].seq for seq in resumed[1:])


def test_wait_reports_has_more_and_resumes_from_the_cursor(store: LogStore) -> None:
    tip = _append(store).id
    ids = [_append(store, to_agent="bob").id for _ in range(3)]
    page = store.event_wait(since_event_id=tip, to_agent="bob", limit=2, timeout_ms=0)
    assert [e.id for e in page.events] == ids[:2] and page.has_more and page.cursor == ids[1]
    page = store.event_wait(since_event_id=page.cursor, to_agent="bob", limit=2, timeout_ms=0)
    assert [e.id for e in page.events] == ids[2:] and not page.has_more


# ----------------------------------------------------------------------------- real processes


def _cli_env(db_url: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "LOGSTREAM_DB": db_url}


@pytest.mark.slow
def test_a_waiting_process_is_woken_by_an_append_in_another_process(db_url: str) -> None:
    with LogStore.open(db_url) as s:
        tip = _append(s).id
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mempalace_logstream",
            "wait",
            "--since-event-id",
            tip,
            "--to-agent",
            "bob",
            "--timeout-ms",
            "60000",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_cli_env(db_url),
    )
    try:
        appended = run_cli(
            "append",
            "--type",
            "task.reply",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "alice",
            "--to-agent",
            "bob",
            "--json",
            env={"LOGSTREAM_DB": db_url},
        )
        assert appended.returncode == 0, appended.stderr
        event_id = json.loads(appended.stdout)["event"]["id"]
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, err
    doc = json.loads(out)
    assert doc["timed_out"] is False and [e["id"] for e in doc["events"]] == [event_id]


def test_cli_wait_exits_2_on_timeout_1_on_bad_input_and_0_on_a_match(tmp_path) -> None:
    db = str(tmp_path / "log.sqlite3")
    LogStore.open(db).close()
    timed_out = run_forked("wait", "--db", db, "--since-event-id", "tip", "--timeout-ms", "10")
    assert timed_out.returncode == 2, timed_out.stderr
    bad = run_forked("wait", "--db", db, "--timeout-ms", "300001")
    assert bad.returncode == 1
    assert b"timeout_ms is 300001; it must be between 0 and 300000 ms" in bad.stderr
    with LogStore.open(db) as s:
        _append(s)
    matched = run_forked("wait", "--db", db, "--timeout-ms", "10", "--json")
    assert matched.returncode == 0 and json.loads(matched.stdout)["count"] == 1


def test_cli_wait_exits_130_on_ctrl_c(tmp_path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as s:
        tip = _append(s).id
    proc = fork_cli("wait", "--db", db, "--since-event-id", tip, "--timeout-ms", "60000")
    # Blocked in event_wait once its change-signal thread runs (a second task in /proc).
    deadline = time.monotonic() + 30
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 2 and time.monotonic() < deadline:
        proc.wait_for_stderr(b"never printed", timeout=0.01)
    assert len(os.listdir(f"/proc/{proc.pid}/task")) >= 2
    proc.send(signal.SIGINT)
    assert proc.wait(60) == 130


def test_cli_wait_prints_its_answer_before_the_store_closes(tmp_path, monkeypatch) -> None:
    """Issue 9, item 15: the output line reaches the reader while the store's close is held
    (before the fix the CLI printed only after close, which waited for the signal thread)."""
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as s:
        ident = _append(s, to_agent="bob").id
    release = tmp_path / "release-close"
    real_close = LogStore.close

    def held_close(self: LogStore) -> None:
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.005)  # the forked CLI's close, held until the test lets it go
        real_close(self)

    monkeypatch.setattr(LogStore, "close", held_close)  # inherited by the forked child only
    proc = fork_cli("wait", "--db", db, "--to-agent", "bob", "--timeout-ms", "10", "--json")
    monkeypatch.undo()
    try:
        assert proc.wait_for_stdout(ident.encode(), timeout=30), proc.stderr
        assert proc.returncode is None and os.waitpid(proc.pid, os.WNOHANG) == (0, 0)
    finally:
        release.touch()
    assert proc.wait(60) == 0, proc.stderr
    assert json.loads(proc.stdout)["events"][0]["id"] == ident


def test_a_blocked_wait_has_its_page_statement_compiled_already(sqlite_store: LogStore) -> None:
    """The wake-up path runs no SQL compilation (about 10-20 ms in a fresh CLI process): the
    page statement is compiled before the wait blocks."""
    tip = _append(sqlite_store).id
    result: list[object] = []
    waiter = threading.Thread(
        target=lambda: result.append(
            sqlite_store.event_wait(since_event_id=tip, to_agent="bob", timeout_ms=30_000)
        )
    )
    waiter.start()
    deadline = time.monotonic() + 30
    while sqlite_store.notifier.waiters == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sqlite_store.notifier.waiters == 1
    assert any(isinstance(k, tuple) and k[0] == "log.page" for k in sqlite_store._sql_cache)
    _append(sqlite_store, to_agent="bob")
    waiter.join(30)
    assert len(result[0].events) == 1  # type: ignore[attr-defined]
