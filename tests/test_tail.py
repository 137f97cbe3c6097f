"""`logstream tail` (issue 13): follow any filter like `nats sub`, against a local file and a
live hub, as a real process; `--since 10m` and its refusals; Ctrl-C exits 130 and a closed pipe
exits 0, both quietly; colour only on a terminal, never with NO_COLOR."""

from __future__ import annotations

import json
import os
import pty
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.cli.tail import since_time
from tests.conftest import REPO, run_cli
from tests.hubkit import append as hub_append
from tests.hubkit import live_hub


class Follower:
    """`logstream tail ...` as a background process whose stdout lines arrive on a queue."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mempalace_logstream", "tail", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            # Ctrl-C must reach it even when the test run itself ignores SIGINT (a job started
            # in the background of a non-interactive shell does, and children inherit that).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        assert self.proc.stdout is not None
        self.pump = threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True)
        self.pump.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(b"")

    def next_event(self, timeout: float = 60) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line, f"tail ended: {self.stop_stderr()}"
        return json.loads(line)  # type: ignore[no-any-return]

    def stop_stderr(self) -> bytes:
        if self.proc.poll() is None:
            self.proc.kill()
        return self._finish()[1]

    def interrupt(self) -> tuple[int, bytes]:
        self.proc.send_signal(signal.SIGINT)
        return self._finish()

    def _finish(self) -> tuple[int, bytes]:
        assert self.proc.stderr is not None and self.proc.stdout is not None
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("tail did not exit within 60 s of the signal") from None
        err = self.proc.stderr.read()
        self.pump.join(60)  # stdout reached EOF with the process
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code, err


@pytest.fixture
def log(log_url: str) -> Iterator[LogStore]:
    s = LogStore.open(log_url)
    yield s
    s.close()


def note(store: LogStore, **fields: Any) -> str:
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", "body": "hi"}
    return store.event_append(**{**base, **fields}).id


def ndjson(proc: subprocess.CompletedProcess[bytes]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_no_follow_prints_what_is_there_from_each_start(log: LogStore, db_url: str) -> None:
    ids = [note(log, body=f"m{i}") for i in range(3)]
    other = note(log, type="review_request", from_agent="carol")
    everything = ndjson(run_cli("tail", "--db", db_url, "--from-start", "--no-follow", "--json"))
    assert [e["id"] for e in everything] == [*ids, other]
    after = run_cli("tail", "--db", db_url, "--since-event-id", ids[0], "--no-follow", "--json")
    assert [e["id"] for e in ndjson(after)] == [*ids[1:], other]
    by_type = ["--type", "review_request"]
    typed = run_cli("tail", "--db", db_url, "--from-start", "--no-follow", "--json", *by_type)
    assert [e["id"] for e in ndjson(typed)] == [other]
    recent = run_cli("tail", "--db", db_url, "--since", "10m", "--no-follow", "--json")
    assert [e["id"] for e in ndjson(recent)] == [*ids, other]
    future = run_cli("tail", "--db", db_url, "--since", "2999-01-01", "--no-follow", "--json")
    assert ndjson(future) == []
    tip = run_cli("tail", "--db", db_url, "--no-follow")  # default: only new events
    assert (tip.returncode, tip.stdout, tip.stderr) == (0, b"", b"")


def test_since_parses_durations_and_times() -> None:
    now = datetime(2026, 12, 2, 3, 30, 0, tzinfo=UTC)
    assert since_time("10m", now) == "2026-12-02T03:20:00Z"
    assert since_time("30s", now) == "2026-12-02T03:29:30Z"
    assert since_time("2h", now) == "2026-12-02T01:30:00Z"
    assert since_time("1d", now) == "2026-12-01T03:30:00Z"
    assert since_time("2026-11-30") == "2026-11-30T00:00:00Z"
    assert since_time("2026-11-30T10:00:00Z") == "2026-11-30T10:00:00Z"


@pytest.mark.parametrize("bad", ["10x", "-5m", "10", "m", "", "1.5h", "yesterday"])
def test_since_refusals_name_the_option(sqlite_store: LogStore, bad: str) -> None:
    db = str(sqlite_store.engine.url.database)
    proc = run_cli("tail", "--db", db, "--since", bad, "--no-follow")
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode().startswith(f"error: --since {bad!r} is not a duration")


def test_start_options_are_exclusive_and_a_bad_cursor_is_named(sqlite_store: LogStore) -> None:
    db = str(sqlite_store.engine.url.database)
    both = run_cli("tail", "--db", db, "--from-start", "--since", "1h")
    assert both.returncode == 2
    assert both.stderr == b"error: --since cannot be combined with --from-start: give one of them\n"
    missing = run_cli("tail", "--db", db, "--since-event-id", "evt_nope", "--no-follow")
    assert missing.returncode == 1
    assert missing.stderr == b"error: --since-event-id 'evt_nope' not found\n"
    bad_filter = run_cli("tail", "--db", db, "--stream", "", "--no-follow")
    assert bad_filter.returncode == 1 and bad_filter.stderr.startswith(b"error: --stream ")


def test_follow_wakes_on_appends_and_ctrl_c_exits_130_quietly(log: LogStore, db_url: str) -> None:
    start = note(log, body="before")
    tail = Follower("--db", db_url, "--since-event-id", start, "--json", "--writer", "alice")
    try:
        sent = [note(log, body="one"), note(log, from_agent="bob"), note(log, body="two")]
        got = [tail.next_event()["id"], tail.next_event()["id"]]
        assert got == [sent[0], sent[2]]  # bob's event is filtered out
    finally:
        code, err = tail.interrupt()
    assert (code, err) == (130, b""), err.decode()


def test_follow_against_a_live_hub(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url) as http:
        start = hub_append(http, body="before")["id"]
        tail = Follower("--hub", hub.url, "--since-event-id", start, "--json", "--type", "note")
        try:
            sent = hub_append(http, body="via the hub")["id"]
            event = tail.next_event()
            assert (event["id"], event["body"]) == (sent, "via the hub")
        finally:
            code, err = tail.interrupt()
        assert (code, err) == (130, b"")


def test_a_closed_pipe_exits_quietly(sqlite_store: LogStore) -> None:
    db = str(sqlite_store.engine.url.database)
    for i in range(600):  # far more than a pipe buffer holds
        note(sqlite_store, body=f"message {i} " + "x" * 200)
    shell = (
        f"{sys.executable} -m mempalace_logstream tail --db {db} --from-start --json | head -n 2"
    )
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 2 and proc.stderr == b""


def test_follow_notices_a_closed_pipe_on_its_next_write(sqlite_store: LogStore) -> None:
    db = str(sqlite_store.engine.url.database)
    start = note(sqlite_store)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mempalace_logstream",
            "tail",
            "--db",
            db,
            "--since-event-id",
            start,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    note(sqlite_store, body="first")
    assert b"first" in proc.stdout.readline()
    proc.stdout.close()  # the reader went away (`| head -n 1`)
    note(sqlite_store, body="second")
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
    proc.stderr.close()


def _run_on_pty(args: list[str], env: dict[str, str]) -> bytes:
    """Run the CLI with stdout on a pseudo-terminal; what it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**env, "PYTHONPATH": str(REPO)},
    )
    os.close(follower)
    out = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return bytes(out)


def test_colour_only_on_a_terminal_and_never_with_no_color(sqlite_store: LogStore) -> None:
    db = str(sqlite_store.engine.url.database)
    note(sqlite_store, body="colourful")
    args = ["tail", "--db", db, "--from-start", "--no-follow"]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(TERM="xterm-256color")
    coloured = _run_on_pty(args, env)
    assert b"\x1b[" in coloured and b"colourful" in coloured
    plain = _run_on_pty(args, {**env, "NO_COLOR": "1"})
    assert b"\x1b[" not in plain and b"colourful" in plain
    piped = run_cli(*args)
    assert b"\x1b[" not in piped.stdout and b"[note] s/r alice->-" in piped.stdout


def test_an_error_raised_while_a_ctrl_c_is_handled_counts_as_the_ctrl_c() -> None:
    """What every follower (tail, Monitor mode, wait, watch, deliver) ends by as for Ctrl-C:
    a storage error raised by the clean-up of a query the Ctrl-C cut short; any other error
    is reported as itself."""
    from mempalace_logstream import errors
    from mempalace_logstream.cli.shared import interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise errors.StorageError("can't change 'autocommit' now") from None
    except errors.StorageError as exc:
        assert interrupted(exc)  # `from None` hides the cause, not the context
    try:
        try:
            raise ValueError("a bad row")
        except ValueError as inner:
            raise errors.StorageError("database error") from inner
    except errors.StorageError as exc:
        assert not interrupted(exc)
    assert not interrupted(errors.StorageError("plain"))
