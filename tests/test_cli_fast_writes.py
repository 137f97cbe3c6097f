"""The fast path's writes (issue 25, cli/fast.py and cli/writes.py): `append`, `ack`, `task
create`, the task moves and `task status`, locally (the lean writer) and through a live hub,
answer as the typer app does (stdout with ids and times aside, stderr, exit code) and write
exactly once; and how a fast command ends when its reader closed the pipe or on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore
from tests.leankit import CODE
from tests.test_cli_fast import HOSTILE, TYPER, _env, heavy, run_console, run_typer
from tests.test_cli_fast import log as log  # the fixture: a small log with hostile text

# ----------------------------------------------------------------------------- writes

# What differs between two runs of the same write: ids, times, positions (in order of first
# appearance in each answer, so a repeated id must repeat at the same places).
VOLATILE = (
    re.compile(r"evt_[0-9]{8}T[0-9]{6}_[0-9a-f]{20}"),
    re.compile(r"task_[a-z0-9_]*?_[0-9a-f]{8}\b"),
    re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z"),
    re.compile(r'"(?:seq|origin_seq)": [0-9]+'),
    re.compile(r"[0-9]{13}-[0-9]{6}-rep_[0-9a-f]+"),  # a hybrid logical clock
)


def normal(text: bytes) -> str:
    """`text` with each volatile token as its kind and its rank of first appearance."""
    out = text.decode()
    for kind, pattern in enumerate(VOLATILE):
        seen: dict[str, int] = {}
        for token in pattern.findall(out):
            seen.setdefault(token, len(seen))
        out = pattern.sub(lambda m, k=kind, s=seen: f"<{k}:{s[m.group(0)]}>", out)
    return out


def events_in(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_writes_through_a_hub_answer_as_the_typer_app_and_write_once(tmp_path: Path) -> None:
    """Each write command line runs twice on one hub, on twin objects made the same way (a
    fresh task each): once through the console script, once through the typer app. The same
    stdout (ids and times aside), stderr and exit code, the same number of events written (a
    write the fast path made is never handed to typer to make again), and no typer loaded
    for any answer the fast path gives, hub errors and an unreachable hub included."""
    import httpx

    from mempalace_logstream import operations
    from tests.hubkit import live_hub

    with live_hub(tmp_path / "hub") as hub:
        at = ("--hub", hub.url)
        db = tmp_path / "hub" / "hub.sqlite3"

        def op(name: str, **args: Any) -> dict[str, Any]:
            return operations.call(hub.store, name, args)

        def task(state: str = "open", to: str = "bob", by: str | None = None) -> str:
            made = op(
                "task_create",
                project="p",
                from_agent="alice",
                to_agent=to,
                goal="g",
                done="d",
                branch="main",
                base_commit="abcdef1",
            )
            if state != "open":
                claimer = by or to  # a task offered to everyone (`*`) is claimed by someone
                op("task_update", task_id=made["task_id"], action="claim", from_agent=claimer)
            return str(made["task_id"])

        def event() -> str:
            return str(
                op("event_append", type="note", stream="s", room="r", from_agent="a")["event"]["id"]
            )

        # An agent only a hook reaches: the hub warns whoever writes to it (delivery_hook.py).
        hooked = {"agent": "hooked", "state": "idle", "ttl_s": 600, "path": "hook"}
        httpx.post(hub.url + "/v1/presence_announce", json=hooked, timeout=30).raise_for_status()
        append = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent")
        by_bob = ("--from-agent", "bob")
        unknown = "evt_20260101T000000_00000000000000000000"
        body_file = tmp_path / "body.txt"
        body_file.write_bytes(HOSTILE.encode())
        cases: list[tuple[Callable[[], tuple[str, ...]], bytes | None]] = [
            (lambda: (*append, "alice", "--to-agent", "bob", "--body", HOSTILE, *at), None),
            (lambda: ("--json", *at, *append, "alice", "--topic", "t", "--artifact-id", "x"), None),
            (lambda: (*append, "alice", "--body-file", "-", "--json", *at), b"from\nstdin\n"),
            (lambda: (*append, "alice", "--body-file", str(body_file), *at), None),
            (lambda: (*append, "alice", "--to-agent", "hooked", *at), None),  # a warning
            (lambda: (*append, "alice", "--metadata", "[1]", *at), None),  # the hub refuses
            (lambda: (*append, "alice", "--metadata", "[1]", "--json", *at), None),
            (lambda: (*append, "alice", "--body", "x", "--body-file", "-", *at), b"y"),  # usage
            (lambda: (*append, "alice", "--body-file", str(tmp_path / "none"), *at), None),
            (lambda: ("ack", event(), *by_bob, "--status", "applied", "--body", "ok", *at), None),
            (lambda: ("ack", unknown, *by_bob, *at), None),  # not found
            (lambda: ("ack", unknown, *by_bob, "--json", *at), None),
            (lambda: ("task", "claim", task(), *by_bob, "--lease-ms", "60000", *at), None),
            (lambda: ("task", "claim", task(), "--from-agent", "mallory", *at), None),  # refused
            (
                lambda: (
                    "task",
                    "claim",
                    task("claimed", "*", "dave"),
                    "--from-agent",
                    "carol",
                    *at,
                ),
                None,
            ),
            (lambda: ("task", "claim", "task_nope_0000000a", *by_bob, "--json", *at), None),
            (lambda: ("task", "progress", task("claimed"), "50", *by_bob, *at), None),
            (lambda: ("task", "progress", task("claimed"), *by_bob, "--progress=12.5", *at), None),
            (
                lambda: ("task", "progress", task("claimed"), "5", *by_bob, "--progress", "6", *at),
                None,
            ),
            (lambda: ("task", "progress", task("claimed"), "500", *by_bob, "--json", *at), None),
            (
                lambda: (
                    *("task", "complete", task("claimed"), *by_bob, "--body", "done"),
                    *("--disposition", "completed", "--verification", "tests=passed", *at),
                ),
                None,
            ),
            (
                lambda: ("task", "complete", task("claimed"), *by_bob, "--verification", "x", *at),
                None,
            ),
            (lambda: ("task", "fail", task("claimed"), *by_bob, "--retryable", *at), None),
            (lambda: ("task", "status", task("claimed")) + at, None),
            (lambda: ("task", "status", task(), "--json", *at), None),
            (
                lambda: (
                    *("task", "create", "--project", "p", "--from-agent", "alice"),
                    *("--to-agent", "bob", "--branch", "main", "--base-commit", "abcdef1"),
                    *("--goal", "g", "--done-file", "-", "--lease-ms", "60000", *at),
                ),
                b"the definition\nof done\n",
            ),
            (
                lambda: (
                    *("task", "create", "--project", "p", "--from-agent", "alice"),
                    *("--to-agent", "hooked", "--branch", "main", "--base-commit", "abcdef1"),
                    *("--goal", "g", "--done", "d", "--json", *at),
                ),
                None,
            ),
            (lambda: (*append, "alice", "--hub", "http://127.0.0.1:9"), None),  # unreachable
            (
                lambda: ("task", "claim", "t", *by_bob, "--json", "--hub", "http://127.0.0.1:9"),
                None,
            ),
        ]
        typers: list[tuple[Callable[[], tuple[str, ...]], bytes | None]] = [
            (lambda: ("append", "--stream", "s", "--room", "r", "--from-agent", "a", *at), None),
            (lambda: (*append, "alice", "--body", "-5 points", *at), None),  # click's reading
            (lambda: ("task", "progress", task("claimed"), "1e1", *by_bob, *at), None),
            (lambda: ("task", "claim", task(), *by_bob, "--help", *at), None),
            (lambda: ("--debug", "ack", event(), *by_bob, *at), None),
            (lambda: ("task", "claim", task(), *by_bob, "--limit", "1", *at), None),
        ]
        for lean, (make, stdin) in [*((True, c) for c in cases), *((False, c) for c in typers)]:
            before = events_in(db)
            fast_argv = make()
            ours = run_console(tmp_path, fast_argv, stdin)
            between = events_in(db)
            typer_argv = make()
            ref = run_typer(tmp_path, typer_argv, stdin)
            after = events_in(db)
            modules = ours.pop("modules")
            assert normal(ours["out"]) == normal(ref["out"]), fast_argv
            assert normal(ours["err"]) == normal(ref["err"]), fast_argv
            assert ours["code"] == ref["code"], fast_argv
            assert between - before == after - between, fast_argv  # written once each
            warned = "hooked" in fast_argv and ref["code"] == 0
            assert warned == (b"has no live delivery path" in ours["err"]), fast_argv
            status = "status" in fast_argv and ref["code"] != 0  # a read: typer reads again
            assert ("typer" in modules) == (status or not lean), " ".join(fast_argv)
            assert "sqlalchemy" not in modules, fast_argv
            assert lean == (heavy(modules) == []) or status, " ".join(fast_argv)


def test_local_writes_answer_as_the_typer_app_and_write_once(
    tmp_path: Path, log: dict[str, Any]
) -> None:
    """A local write through the lean writer (plain.local_write), else typer's through the
    store with what the fast path read of stdin given back: the same stdout (ids and times
    aside), stderr and exit code as the typer app, the same number of events written, and no
    typer nor SQLAlchemy loaded when the fast path answered (refusals included)."""
    from mempalace_logstream import operations

    db = log["db"]
    append = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")
    create = ("task", "create", "--project", "p", "--from-agent", "alice", "--to-agent", "bob")
    create += ("--branch", "main", "--base-commit", "abcdef1", "--db", db)

    def task(claimed: bool = False) -> str:
        with LogStore.open(db) as store:
            made = operations.call(
                store,
                "task_create",
                {
                    **{"project": "p", "from_agent": "alice", "to_agent": "bob"},
                    **{"goal": "g", "done": "d", "branch": "main", "base_commit": "abcdef1"},
                },
            )
            if claimed:
                claim = {"task_id": made["task_id"], "action": "claim", "from_agent": "bob"}
                operations.call(store, "task_update", claim)
        return str(made["task_id"])

    missing = str(tmp_path / "new.sqlite3")
    cases: list[tuple[Callable[[], tuple[str, ...]], bytes | None, bool]] = [
        (lambda: (*append, "--body-file", "-", "--json", "--db", db), HOSTILE.encode(), True),
        (lambda: (*append, "--body", HOSTILE, "--to-agent", "bob", "--db", db), None, True),
        (lambda: (*append, "--body-file", "-", "--db", db), b"\xff not utf-8", True),
        (lambda: (*append, "--metadata", "[1]", "--db", db), None, True),  # refused
        (lambda: (*append, "--metadata", "[1]", "--json", "--db", db), None, True),
        (lambda: (*create, "--goal-file", "-", "--done-file", "-"), b"goal\nlines\n", True),
        (lambda: (*create, "--goal-file", "-", "--done", "d"), b"the goal", True),
        (
            lambda: ("ack", log["ids"][0], "--from-agent", "bob", "--body-file", "-", "--db", db),
            b"ok",
            True,
        ),
        (
            lambda: (
                "ack",
                "evt_20260101T000000_00000000000000000000",
                "--from-agent",
                "b",
                "--db",
                db,
            ),
            None,
            True,
        ),
        (lambda: ("task", "claim", task(), "--from-agent", "bob", "--db", db), None, True),
        (lambda: ("task", "claim", task(), "--from-agent", "mallory", "--db", db), None, True),
        (
            lambda: ("task", "progress", task(True), "40", "--from-agent", "bob", "--db", db),
            None,
            True,
        ),
        (
            lambda: ("task", "progress", task(True), "400", "--from-agent", "bob", "--db", db),
            None,
            True,
        ),
        (
            lambda: ("task", "complete", task(True), "--from-agent", "bob", "--json", "--db", db),
            None,
            True,
        ),
        (lambda: ("task", "status", task(True), "--db", db), None, True),
        (lambda: ("task", "status", task(), "--json", "--db", db), None, True),
        (lambda: ("task", "status", "task_nope_0000000a", "--db", db), None, False),  # typer's
        (lambda: (*append, "--body-file", "-", "--db", missing), b"first", False),  # created
    ]
    for make, stdin, lean in cases:
        before = events_in(Path(db))
        argv = make()
        ours = run_console(tmp_path, argv, stdin)
        between = events_in(Path(db))
        if missing in argv:
            Path(missing).unlink()  # the typer app creates it again (and says so)
        ref = run_typer(tmp_path, make(), stdin)
        assert events_in(Path(db)) - between == between - before, argv
        assert normal(ours["out"]) == normal(ref["out"]), argv
        assert normal(ours["err"]) == normal(ref["err"]), argv
        assert ours["code"] == ref["code"], argv
        assert (heavy(ours["modules"]) == []) == lean, argv
        if missing in argv:
            Path(missing).unlink()
    with sqlite3.connect(db) as conn:
        bodies = [row[0] for row in conn.execute("SELECT body FROM events WHERE type = 'note'")]
    assert bodies.count(HOSTILE) == 4  # twice by each path


@pytest.mark.parametrize(
    "argv",
    [
        ("list", "--limit", "500"),
        ("list", "--json"),
        ("inbox", "--agent", "bob", "--from-start", "--state-file="),
        ("tail", "--no-follow", "--from-start"),
    ],
    ids=" ".join,
)
def test_a_reader_that_closed_the_pipe_ends_the_command_as_typer_does(
    tmp_path: Path, log: dict[str, Any], argv: tuple[str, ...]
) -> None:
    """`logstream list | head -1`: the reader is gone before the answer is written. The fast
    path ends as the typer app does (click: exit 1, nothing on stderr; tail: exit 0)."""
    done = []
    for code in (CODE, TYPER):
        read, write = os.pipe()
        os.close(read)  # no reader at all: the first write fails, whatever the timing
        report = tmp_path / "report.json"
        env = {**_env(tmp_path), "LEAN_REPORT": str(report)}
        env.pop("PYTHONUNBUFFERED", None)  # a user's shell: stdout buffered
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, *argv, "--db", log["db"]],
                stdout=write,
                stderr=subprocess.PIPE,
                env=env,
                timeout=60,
                check=False,
            )
        finally:
            os.close(write)
        done.append((proc.returncode, proc.stderr))
        if code is CODE:
            said = json.loads(report.read_text())
            assert "typer" not in said["modules"]  # the fast path answered
            done[-1] = (said["code"] or 0, proc.stderr)
    assert done[0] == done[1]
    assert done[0][1] == b""


@pytest.mark.parametrize(
    "argv",
    [
        ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a"),
        ("task", "claim", "task_x_0000000a", "--from-agent", "bob"),
        ("list", "--limit", "1"),
    ],
    ids=lambda argv: argv[0],
)
def test_ctrl_c_while_waiting_for_the_hub_ends_it_as_typer_does(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """Interrupted after its request reached the hub (a socket that never answers), the fast
    path does not hand the line to typer (which would send a write again): it ends as the
    typer app ends (typer: exit 130, nothing said)."""
    said = []
    for code in (CODE, TYPER):
        with socket.create_server(("127.0.0.1", 0)) as server:
            server.settimeout(60)
            url = f"http://127.0.0.1:{server.getsockname()[1]}"
            report = tmp_path / "report.json"
            proc = subprocess.Popen(
                [sys.executable, "-c", code, *argv, "--hub", url],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**_env(tmp_path), "LEAN_REPORT": str(report)},
            )
            conn, _addr = server.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:  # the request is sent: the client waits
                    request += conn.recv(65536)
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=60)
        if code is CODE:
            done = json.loads(report.read_text())
            assert "typer" not in done["modules"]
            said.append((done["code"], out, err))
        else:
            said.append((proc.returncode, out, err))
    assert said[0] == said[1]
    assert said[0] == (130, b"", b"")


# ----------------------------------------------------------------------------- settings


def test_task_settings_left_at_their_defaults_are_the_store_s_defaults() -> None:
    """`config.Settings.task_settings()` is None when no task setting is set (a local write
    then builds no TaskSettings: issue 25): that must be what the store takes for None,
    `TaskSettings()`; one setting set gives them all, that one changed."""
    from mempalace_logstream import config
    from mempalace_logstream.tasks import TaskSettings

    plain = config.Settings.from_env({})
    assert plain.task_settings() is None
    assert plain.all_task_settings() == TaskSettings()
    for var, field, value in (
        ("MEMPALACE_LOGSTREAM_PAIR_BUDGET", "pair_budget", 7),
        ("MEMPALACE_LOGSTREAM_HUMANS", "humans", ("ann",)),
        ("MEMPALACE_LOGSTREAM_TASK_MAX_DEPTH", "max_depth", 5),
    ):
        given = config.Settings.from_env(
            {var: ",".join(value) if field == "humans" else str(value)}
        )
        settings = given.task_settings()
        assert settings is not None and getattr(settings, field) == value, var
        assert settings == given.all_task_settings()


# ----------------------------------------------------------------------------- console

CONSOLE = "from mempalace_logstream.cli import console; console()"
MAIN = "from mempalace_logstream.cli import main; main()"


def test_the_console_script_ends_a_lean_call_as_main_does(tmp_path: Path) -> None:
    """`logstream` is `cli.console`: a call the lean path answered ends with `os._exit` once
    its output is flushed (no interpreter teardown). It answers as `cli.main` does (stdout,
    stderr, exit code), the write is stored once, and a reader that closed the pipe ends it
    as it ends `main` (the pipe test above)."""
    db = tmp_path / "log.sqlite3"
    with LogStore.open(str(db)) as store:
        seed = store.event_append(type="note", stream="s", room="r", from_agent="al")
    env = _env(tmp_path)
    env.pop("PYTHONUNBUFFERED", None)  # a user's shell: stdout buffered until the exit
    note = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "al")
    calls = [
        (*note, "--body", "hi", "--json"),
        (*note, "--body", "hi"),
        ("ack", seed.id, "--from-agent", "bob"),
        ("task", "claim", "task_x_0000000a", "--from-agent", "bob"),  # refused: no such task
        ("list", "--limit", "5"),
    ]
    for argv in calls:
        answers = []
        for code in (CONSOLE, MAIN):
            before = events_in(db)
            proc = subprocess.run(
                [sys.executable, "-c", code, *argv, "--db", str(db)],
                capture_output=True,
                env=env,
                timeout=60,
                check=False,
            )
            written = events_in(db) - before
            answers.append((normal(proc.stdout), normal(proc.stderr), proc.returncode, written))
        assert answers[0] == answers[1], argv
        assert answers[0][2] == (1 if argv[0] == "task" else 0), argv
        assert answers[0][0] or argv[0] == "task", argv
    read, write = os.pipe()
    os.close(read)  # no reader: the first write fails
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CONSOLE, "list", "--limit", "500", "--db", str(db)],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (1, b"")


def test_the_console_script_skips_the_teardown_only_after_a_lean_call(tmp_path: Path) -> None:
    """What `os._exit` skips (an atexit hook stands for the teardown): after a lean call, not
    after one the typer app ran (`--help`), nor after `main`."""
    db = tmp_path / "log.sqlite3"
    LogStore.open(str(db)).close()
    hooked = "import atexit; atexit.register(print, 'teardown'); "
    note = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "al")
    for code, argv, torn_down in (
        (CONSOLE, (*note, "--db", str(db)), False),
        (MAIN, (*note, "--db", str(db)), True),
        (CONSOLE, ("append", "--help"), True),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", hooked + code, *argv],
            capture_output=True,
            env=_env(tmp_path),
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, (argv, proc.stderr)
        assert proc.stdout.decode().endswith("teardown\n") == torn_down, (code, argv)
