"""`logstream watch` (S-5.5): state files, the four read states, start rules, exit codes.

Watchers run as real processes: forked children of this interpreter (tests/watchkit.py) for
speed, and one freshly spawned interpreter per backend for the cross-process wake.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, skip_unless_ci
from watchkit import fork_cli, inotify_fds, run_forked, wait_until_blocked

from mempalace_logstream import LogStore, cursors, errors
from mempalace_logstream import watch as w

# ----------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("agent", "base"),
    [
        ("bob", "bob"),
        ("a:b_c:proj", "a_b__c_proj"),
        ("a_b:c:proj", "a__b_c_proj"),
        ("team/x\\y", "team_x_y"),
        ("  spaced  ", "spaced"),
    ],
)
def test_state_basenames_double_underscores_first_then_map_separators(
    agent: str, base: str
) -> None:
    assert cursors.state_basename(agent) == base


@pytest.mark.parametrize("agent", ["", " ", ".", ".."])
def test_state_basenames_refuse_names_that_are_not_files(agent: str) -> None:
    with pytest.raises(errors.ValidationError, match="agent"):
        cursors.state_basename(agent)


def test_state_file_resolution(tmp_path: Path) -> None:
    key, palace = cursors.log_key("sqlite:///x.db"), str(tmp_path)
    default = w.resolve_state_file(None, "a:b", "sqlite:///x.db", palace)
    assert default == tmp_path / "watch" / key / "a_b.json"
    assert w.resolve_state_file("", "bob", "sqlite:///x.db") is None
    assert w.resolve_state_file(None, None, "sqlite:///x.db") is None
    assert w.resolve_state_file(str(tmp_path / "s.json"), None) == tmp_path / "s.json"


def test_the_four_read_states(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert w.read_state(path)[:2] == (w.STATE_ABSENT, None)
    assert w.read_state(None)[:2] == (w.STATE_ABSENT, None)
    path.write_text('{"cursor": "evt_1"}')
    assert w.read_state(path)[:2] == (w.STATE_OK, "evt_1")
    for empty in ('{"cursor": null}', '{"cursor": ""}'):
        path.write_text(empty)
        assert w.read_state(path)[:2] == (w.STATE_EMPTY, None)
    for corrupt in ("{nope", "[1]", '{"agent": "x"}', '{"cursor": 5}', ""):
        path.write_text(corrupt)
        assert w.read_state(path)[0] == w.STATE_CORRUPT, corrupt
    path.unlink()
    path.mkdir()  # a directory in the way: unreadable, so corrupt (replay), never absent (tip)
    state, cursor, problem = w.read_state(path)
    assert (state, cursor) == (w.STATE_CORRUPT, None) and "cannot read" in (problem or "")


def test_state_writes_are_atomic_and_leave_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.json"
    w.write_state(path, "evt_1", "bob")
    doc = json.loads(path.read_text())
    assert doc["cursor"] == "evt_1" and doc["agent"] == "bob" and doc["updated_at"].endswith("Z")
    w.write_state(path, None, None)
    assert json.loads(path.read_text())["cursor"] is None
    blocked = tmp_path / "blocked.json"
    blocked.mkdir()
    with pytest.raises(OSError):
        w.write_state(blocked, "evt_2", None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked.json", "deep"]
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["state.json"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"poll_timeout_ms": 0}, "poll_timeout_ms is 0; it must be between 1 and 300000 ms"),
        ({"limit": 0}, "limit is 0; it must be between 1 and 500"),
        ({"idle_exit_ms": -1}, "idle_exit_ms is -1; it must be 0 (wait for ever) or more"),
        ({"from_start": True, "since_event_id": "evt_1"}, "from_start cannot be combined"),
        ({"idle_exit_ms": True}, "idle_exit_ms must be an integer"),
        ({"type": ["Task.Request"]}, "type"),
        ({"status": ["nope"]}, "status"),
        ({"stream": ["ok", "bad\x00"]}, "stream"),
        ({"agent": ".."}, "agent"),
        ({"since_event_id": "a\nb"}, "since_event_id"),
    ],
)
def test_watch_options_validate_every_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(errors.ValidationError, match=re.escape(message)):
        w.WatchOptions.parse(**kwargs)


def test_agent_means_my_inbox_minus_my_own_writes(tmp_path: Path) -> None:
    opts = w.WatchOptions.parse(
        agent="bob", to_agent=["team"], type=["a.b", "a.b"], target="t", palace=str(tmp_path)
    )
    assert opts.filters == {
        "type": ("a.b",),
        "to_agent": ("team", "bob"),
        "exclude_writer": ("bob",),
    }
    assert opts.state_file == tmp_path / "watch" / cursors.log_key("t") / "bob.json"


# ----------------------------------------------------------------------------- CLI, forked


_WRITERS: dict[str, LogStore] = {}


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    for store in _WRITERS.values():
        store.close()
    _WRITERS.clear()


def _append(db: str, **kw: object) -> str:
    """Append from this (test) process; one store per log, kept open for the test."""
    fields = {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", **kw}
    if db not in _WRITERS:
        _WRITERS[db] = LogStore.open(db)
    return _WRITERS[db].event_append(**fields).id


def _watch(db: str, home: Path, *args: str, timeout: float = 60):
    return run_forked("watch", "--db", db, *args, env={"HOME": str(home)}, timeout=timeout)


def _state(db: str, home: Path, agent: str = "bob") -> Path:
    """The default state file of `agent` watching `db` with HOME=`home`: one per log and agent."""
    palace = str(home / ".mempalace" / "palace")
    return cursors.default_file("watch", agent, cursors.log_target(db, None, None), palace)


def _ids(stdout: bytes) -> list[str]:
    ids: list[str] = []
    for line in stdout.decode().splitlines():
        if line.startswith("{"):
            ids += [e["id"] for e in json.loads(line)["events"]]
    return ids


@pytest.fixture
def db(tmp_path: Path) -> str:
    """An empty log (watch is a reader: it refuses a missing file)."""
    path = str(tmp_path / "log.sqlite3")
    LogStore.open(path).close()
    return path


def test_first_run_starts_at_the_tip_and_says_so(db: str, tmp_path: Path) -> None:
    old = _append(db, to_agent="bob")
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    assert run.returncode == 2, run.stderr
    assert b"first run: starting at the newest event" in run.stderr
    assert b"--from-start" in run.stderr
    # Both start messages name the same starting point.
    assert f"watching after event {old};".encode() in run.stderr
    assert f"Watching agent bob after event {old};".encode() in run.stderr
    state = json.loads(_state(db, tmp_path).read_text())
    assert state["cursor"] == old and state["agent"] == "bob"
    new = _append(db, to_agent="bob")
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert [e["id"] for e in doc["events"]] == [new] and doc["timed_out"] is False
    assert b"first run" not in run.stderr


def test_from_start_replays_the_whole_log_on_a_first_run(db: str, tmp_path: Path) -> None:
    ids = [_append(db, to_agent="bob") for _ in range(3)]
    run = _watch(db, tmp_path, "--agent", "bob", "--from-start", "--idle-exit-ms", "1", "--json")
    assert run.returncode == 0 and json.loads(run.stdout)["count"] == 3
    assert _ids(run.stdout.replace(b"\n", b"")) == ids


def test_a_watch_started_on_an_empty_log_replays_from_the_start_never_the_tip(
    db: str, tmp_path: Path
) -> None:
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    assert run.returncode == 2
    assert json.loads(_state(db, tmp_path).read_text())["cursor"] is None
    ids = [_append(db, to_agent="bob"), _append(db, to_agent="*", from_agent="carol")]
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1", "--json")
    assert run.returncode == 0 and _ids(run.stdout.replace(b"\n", b"")) == ids
    assert b"first run" not in run.stderr


@pytest.mark.parametrize("garbage", [b"{not json", b"[]", b'{"updated_at": "x"}'])
def test_a_corrupt_state_file_replays_from_the_start_with_a_notice(
    db: str, tmp_path: Path, garbage: bytes
) -> None:
    ids = [_append(db, to_agent="bob") for _ in range(2)]
    state = tmp_path / "state.json"
    state.write_bytes(garbage)
    run = _watch(
        db, tmp_path, "--agent", "bob", "--state-file", str(state), "--idle-exit-ms", "1", "--json"
    )
    assert run.returncode == 0
    assert _ids(run.stdout.replace(b"\n", b"")) == ids
    assert b"unreadable or corrupt" in run.stderr
    assert json.loads(state.read_text())["cursor"] == ids[-1]


def test_a_directory_in_the_way_refuses_to_start_and_consumes_nothing(
    db: str, tmp_path: Path
) -> None:
    _append(db, to_agent="bob")
    state = tmp_path / "state.json"
    state.mkdir()
    run = _watch(db, tmp_path, "--agent", "bob", "--state-file", str(state), "--idle-exit-ms", "1")
    assert run.returncode == 1
    assert b"could not write the initial checkpoint" in run.stderr
    assert run.stdout == b"" and state.is_dir() and list(state.iterdir()) == []


def test_an_ok_state_resumes_strictly_after_its_cursor(db: str, tmp_path: Path) -> None:
    first = _append(db, to_agent="bob")
    second = _append(db, to_agent="bob")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"cursor": first}))
    run = _watch(
        db, tmp_path, "--agent", "bob", "--state-file", str(state), "--idle-exit-ms", "1", "--json"
    )
    assert _ids(run.stdout.replace(b"\n", b"")) == [second]


def test_an_unknown_explicit_cursor_is_an_error_and_writes_nothing(db: str, tmp_path: Path) -> None:
    _append(db)
    state = tmp_path / "state.json"
    run = _watch(
        db,
        tmp_path,
        "--agent",
        "bob",
        "--state-file",
        str(state),
        "--since-event-id",
        "evt_missing",
        "--idle-exit-ms",
        "1",
    )
    assert run.returncode == 1
    assert b"since_event_id 'evt_missing' not found" in run.stderr
    assert b"Nothing was written to the state file" in run.stderr
    assert not state.exists()


def test_an_unknown_stored_cursor_replays_from_the_start(db: str, tmp_path: Path) -> None:
    ident = _append(db, to_agent="bob")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"cursor": "evt_from_another_log"}))
    run = _watch(
        db, tmp_path, "--agent", "bob", "--state-file", str(state), "--idle-exit-ms", "1", "--json"
    )
    assert run.returncode == 0 and _ids(run.stdout.replace(b"\n", b"")) == [ident]
    assert b"is not in this log" in run.stderr


def test_bad_arguments_exit_1_before_any_poll_or_write(tmp_path: Path) -> None:
    db = str(tmp_path / "never.sqlite3")
    for args in (
        ["--limit", "0"],
        ["--poll-timeout-ms", "0"],
        ["--idle-exit-ms", "-5"],
        ["--type", "Bad.Type"],
        ["--agent", ".."],
    ):
        run = _watch(db, tmp_path, "--agent", "bob", *args)
        assert run.returncode == 1, args
        assert run.stderr.startswith(b"error: ") and b"no log at" not in run.stderr
    assert not Path(db).exists()  # nothing opened, nothing created
    assert not (tmp_path / ".mempalace").exists()


def test_a_watcher_never_wakes_on_its_own_broadcast(db: str, tmp_path: Path) -> None:
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    assert run.returncode == 2
    _append(db, from_agent="bob", to_agent="*", body="bob is watching")
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    assert run.returncode == 2
    # The rejected broadcast was examined: the checkpoint moved past it.
    state = json.loads(_state(db, tmp_path).read_text())
    assert state["cursor"] is not None
    theirs = _append(db, from_agent="carol", to_agent="*")
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1", "--json")
    assert run.returncode == 0 and _ids(run.stdout.replace(b"\n", b"")) == [theirs]


def test_follow_json_prints_one_batch_envelope_per_line(db: str, tmp_path: Path) -> None:
    _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    proc = fork_cli(
        "watch",
        "--db",
        db,
        "--agent",
        "bob",
        "--follow",
        "--json",
        "--idle-exit-ms",
        "1500",
        env={"HOME": str(tmp_path)},
    )
    a = _append(db, to_agent="bob")
    assert proc.wait_for_stdout(a.encode())
    b = _append(db, to_agent="bob", type="task.reply")
    assert proc.wait(60) == 0  # something matched, then idle
    lines = proc.stdout.decode().splitlines()
    docs = [json.loads(line) for line in lines]
    assert all(set(d) == {"events", "count", "cursor", "timed_out"} for d in docs)
    assert [e["id"] for d in docs for e in d["events"]] == [a, b]
    assert docs[-1]["timed_out"] is True and docs[-1]["count"] == 0


def test_ctrl_c_exits_130_and_never_0(db: str, tmp_path: Path) -> None:
    proc = fork_cli("watch", "--db", db, "--agent", "bob", "--follow", env={"HOME": str(tmp_path)})
    assert proc.wait_for_stderr(b"Ctrl-C to stop")
    proc.send(signal.SIGINT)
    assert proc.wait(60) == 130, proc.stderr
    assert b"Stopped." in proc.stderr


def test_print_comes_before_the_checkpoint_so_a_kill_replays(db: str, tmp_path: Path) -> None:
    _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    ident = _append(db, to_agent="bob")
    env = {"HOME": str(tmp_path), "LOGSTREAM_TEST_KILL_AT": "print:1"}
    run = run_forked("watch", "--db", db, "--agent", "bob", "--json", env=env)
    assert run.returncode == -signal.SIGKILL
    assert _ids(run.stdout.replace(b"\n", b"")) == [ident]  # printed ...
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1", "--json")
    assert _ids(run.stdout.replace(b"\n", b"")) == [ident]  # ... and replayed, not skipped


# ----------------------------------------------------------------------------- spawned


@pytest.mark.slow
def test_a_spawned_watcher_wakes_on_an_append_from_another_process(
    db_url: str, tmp_path: Path
) -> None:
    with LogStore.open(db_url) as s:
        s.event_append(type="note", stream="s", room="r", from_agent="alice")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(tmp_path), "LOGSTREAM_DB": db_url}
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mempalace_logstream",
            "watch",
            "--agent",
            "bob",
            "--json",
            "--idle-exit-ms",
            "60000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        state = _state(db_url, tmp_path)
        # The first checkpoint is written before the first poll: once it exists, we are armed.
        deadline = time.monotonic() + 60
        while not state.exists() and watcher.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                watcher.wait(timeout=0.05)
        assert state.exists()
        with LogStore.open(db_url) as s:
            appended = s.event_append(
                type="task.reply", stream="s", room="r", from_agent="alice", to_agent="bob"
            ).id
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, err
    assert [e["id"] for e in json.loads(out)["events"]] == [appended]


def test_a_watch_through_a_hub_wakes_on_an_append_to_that_hub(tmp_path: Path) -> None:
    from hubkit import live_hub

    with live_hub(tmp_path) as hub:
        hub.store.event_append(type="note", stream="s", room="r", from_agent="alice")
        state = tmp_path / "state.json"
        args = ("--agent", "bob", "--state-file", str(state), "--idle-exit-ms", "30000", "--json")
        proc = fork_cli("watch", "--hub", hub.url, *args, env={"HOME": str(tmp_path)})
        assert proc.wait_for_stderr(b"first run")  # the tip is pinned before the first poll
        ident = hub.store.event_append(
            type="task.reply", stream="s", room="r", from_agent="alice", to_agent="bob"
        ).id
        assert proc.wait(60) == 0, proc.stderr
    assert _ids(proc.stdout.replace(b"\n", b"")) == [ident]
    assert json.loads(state.read_text())["cursor"] == ident


# ----------------------------------------------------------------------------- issue 9, item 16


def test_idle_exit_zero_means_wait_for_ever_as_in_the_reference() -> None:
    assert w.WatchOptions.parse(idle_exit_ms=0).idle_exit_ms is None
    assert w.WatchOptions.parse().idle_exit_ms is None
    assert w.WatchOptions.parse(idle_exit_ms=5).idle_exit_ms == 5


def test_a_watch_with_idle_exit_zero_keeps_waiting_until_interrupted(
    db: str, tmp_path: Path
) -> None:
    if inotify_fds() < 0:
        skip_unless_ci("needs Linux /proc to see that the watcher is blocked in its wait")
    _append(db)
    baseline = inotify_fds()
    proc = fork_cli(
        "watch",
        "--db",
        db,
        "--agent",
        "bob",
        "--follow",
        "--json",
        "--idle-exit-ms",
        "0",
        env={"HOME": str(tmp_path)},
    )
    # Blocked in a wait (its change signal is up) rather than exited at once with code 2.
    assert wait_until_blocked(proc, baseline), (proc.wait(10), proc.stdout, proc.stderr)
    ident = _append(db, to_agent="bob")
    assert proc.wait_for_stdout(ident.encode()), proc.stderr
    # Still following after the match with a zero idle limit: only Ctrl-C ends it.
    assert wait_until_blocked(proc, baseline), (proc.wait(10), proc.stdout, proc.stderr)
    proc.send(signal.SIGINT)
    assert proc.wait(60) == 130, (proc.stdout, proc.stderr)
    assert _ids(proc.stdout.replace(b"}\n{", b"}{").replace(b"\n", b"")) == [ident]


def test_from_start_with_a_stored_cursor_is_refused_and_consumes_nothing(
    db: str, tmp_path: Path
) -> None:
    first = _append(db, to_agent="bob")
    _append(db, to_agent="bob")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"cursor": first}))
    before = state.read_bytes()
    run = _watch(
        db,
        tmp_path,
        "--agent",
        "bob",
        "--state-file",
        str(state),
        "--from-start",
        "--idle-exit-ms",
        "1",
    )
    assert run.returncode == 1, run.stderr
    err = run.stderr.decode()
    assert "--from-start replays only on a first run" in err and str(state) in err, err
    assert first in err and "Delete that file" in err
    assert run.stdout == b"" and state.read_bytes() == before


def test_from_start_with_an_explicit_cursor_is_refused(db: str, tmp_path: Path) -> None:
    ident = _append(db)
    run = _watch(db, tmp_path, "--agent", "bob", "--from-start", "--since-event-id", ident)
    assert run.returncode == 1
    assert run.stderr.startswith(b"error: from_start cannot be combined with since_event_id")
    assert not (tmp_path / ".mempalace").exists()


def test_the_first_run_messages_agree_on_an_empty_log_and_with_from_start(
    db: str, tmp_path: Path
) -> None:
    run = _watch(db, tmp_path, "--agent", "bob", "--idle-exit-ms", "1")
    err = run.stderr.decode()
    assert "first run: the log is empty, so watching from the start of the log" in err, err
    assert "Watching agent bob from the start of the log;" in err
    assert "newest event" not in err
    ident = _append(db, to_agent="bob")
    run = _watch(db, tmp_path, "--agent", "carol", "--from-start", "--idle-exit-ms", "1")
    err = run.stderr.decode()
    assert "first run (--from-start): replaying the whole log, from the start of the log" in err
    assert "Watching agent carol from the start of the log;" in err
    assert "newest event" not in err and ident not in err


def test_a_forked_watch_past_its_deadline_is_killed_with_its_stacks_shown(
    db: str, tmp_path: Path
) -> None:
    # The helper the Ctrl-C tests rely on: a child that outlives `wait`'s deadline is killed,
    # and its stderr (the failing assertion's message) holds where each thread was.
    proc = fork_cli("watch", "--db", db, "--agent", "bob", "--follow", env={"HOME": str(tmp_path)})
    assert proc.wait_for_stderr(b"Ctrl-C to stop")
    assert proc.wait(0.5) == -signal.SIGKILL
    assert b"most recent call first" in proc.stderr
    assert b"watch.py" in proc.stderr
