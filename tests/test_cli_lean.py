"""What a `logstream` call imports (issue 25): the console script's lean paths load no
SQLAlchemy, FastAPI or MCP. Importing the CLI package loads no typer; `--help` builds the app
without the store; a command builds only its own module; the reads through `--hub` (list, get,
inbox) need httpx, not the store; a local `inbox` runs before typer (hook.py); a local `list`
or `get` is read by the lean reader (store/lean.py) and answers as the store does, unless it
names its reader (the delivery ledger records that one) or fails (the store says why). Each
call runs in a fresh interpreter (`sys.modules` is the record) against real logs and a hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import typer.main

from mempalace_logstream import LogStore, deliveries
from mempalace_logstream.cli import root
from tests.conftest import REPO
from tests.hubkit import live_hub
from tests.leankit import CODE, modules_after_import

SERVERS = ("sqlalchemy", "fastapi", "starlette", "mcp", "uvicorn")


def console(tmp_path: Path, *argv: str) -> tuple[dict[str, Any], str]:
    """({code, modules}, stdout) of one `logstream ARGV` in a fresh interpreter."""
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}
    env.update(PYTHONPATH=str(REPO), LEAN_REPORT=str(report), HOME=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", CODE, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert report.exists(), proc.stderr
    done = json.loads(report.read_text())
    report.unlink()
    assert done["code"] in (0, None), (argv, proc.stdout, proc.stderr)
    return done, proc.stdout


def heavy(modules: list[str], names: tuple[str, ...] = SERVERS) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(names))


def test_importing_the_cli_package_loads_no_typer_and_no_store() -> None:
    modules = modules_after_import("mempalace_logstream.cli")
    assert heavy(modules, (*SERVERS, "typer", "click", "httpx", "pydantic")) == []
    assert "mempalace_logstream.store" not in modules


def test_help_pages_load_neither_the_store_nor_the_servers(tmp_path: Path) -> None:
    done, out = console(tmp_path, "--help")
    assert "append" in out and "presence" in out  # every command is listed
    assert heavy(done["modules"]) == []
    done, out = console(tmp_path, "task", "claim", "--help")
    assert "--from-agent" in out
    assert heavy(done["modules"]) == []


def test_a_command_builds_only_its_own_module(tmp_path: Path) -> None:
    done, out = console(tmp_path, "list", "--help")
    assert "--limit" in out
    loaded = {m for m in done["modules"] if m.startswith("mempalace_logstream.cli.")}
    assert "mempalace_logstream.cli.events" in loaded
    others = {f"mempalace_logstream.cli.{m}" for m in ("tasks", "hub", "sync", "agent", "tail")}
    assert loaded & others == set()


def test_reads_through_a_hub_load_httpx_but_not_the_store(tmp_path: Path) -> None:
    with live_hub(tmp_path / "hub") as hub:
        event = hub.store.event_append(
            type="note", stream="s", room="r", from_agent="alice", to_agent="bob", body="hi bob"
        )
        at = ("--hub", hub.url)
        for argv in (("list", "--limit", "5"), ("get", event.id)):
            done, out = console(tmp_path, *argv, *at)
            assert event.id in out, (argv, out)
            assert heavy(done["modules"]) == [], argv
            assert "httpx" in done["modules"]
            # The operation table (its pydantic models) is the local store's business.
            assert "mempalace_logstream.operations" not in done["modules"], argv
        state = str(tmp_path / "inbox.json")
        done, out = console(
            tmp_path, "inbox", "--agent", "bob", "--from-start", "--state-file", state, *at
        )
        assert "hi bob" in out
        assert heavy(done["modules"]) == []


def test_a_local_inbox_runs_before_typer_and_without_sqlalchemy(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        store.event_append(
            type="note", stream="s", room="r", from_agent="alice", to_agent="bob", body="lean mail"
        )
    state = str(tmp_path / "inbox.json")
    argv = ("inbox", "--agent", "bob", "--from-start", "--state-file", state, "--db", db)
    done, out = console(tmp_path, *argv)
    assert "lean mail" in out
    assert heavy(done["modules"], (*SERVERS, "typer", "click")) == []


def test_the_command_table_names_every_command_in_the_order_help_lists_them() -> None:
    from mempalace_logstream import cli

    built = typer.main.get_command(cli.app)
    # Registration order follows import order (another test may have imported a command's
    # module first); help lists them in the table's order.
    assert set(built.commands) == set(root.COMMANDS)  # type: ignore[attr-defined]
    listed = built.list_commands(click.Context(built))  # type: ignore[attr-defined]
    assert listed == list(root.COMMANDS)


def test_a_local_list_reads_with_the_lean_reader_and_answers_as_the_store(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        for i in range(7):
            to = "bob" if i % 2 else "*"
            store.event_append(type="note", stream="s", room="r", from_agent="al", to_agent=to)
        want = store.event_list(limit=5).to_dict()
        want_typed = store.event_list(type=["note"], order="asc", limit=3).to_dict()
    done, out = console(tmp_path, "list", "--limit", "5", "--json", "--db", db)
    assert json.loads(out) == want
    assert heavy(done["modules"]) == []
    # Another shape: the lean reader's if it has the statements, else the store's; one answer.
    argv = ("list", "--type", "note", "--order", "asc", "--limit", "3", "--json", "--db", db)
    done, out = console(tmp_path, *argv)
    assert json.loads(out) == want_typed


def test_a_local_get_reads_with_the_lean_reader_and_answers_as_the_store(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        event = store.event_append(type="note", stream="s", room="r", from_agent="al", body="x")
        want = {"event": store.event_get(event.id).to_dict()}
    done, out = console(tmp_path, "get", event.id, "--json", "--db", db)
    assert json.loads(out) == want
    assert heavy(done["modules"]) == []
    assert "mempalace_logstream.store.lean" in done["modules"]


def test_a_list_that_names_its_reader_goes_to_the_store_which_records_it(tmp_path: Path) -> None:
    """The delivery ledger marks what a named reader was shown: that read stays the store's."""
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        store.event_append(type="note", stream="s", room="r", from_agent="al", to_agent="bob")
    done, out = console(tmp_path, "list", "--to-agent", "bob", "--json", "--db", db)
    assert json.loads(out)["count"] == 1
    assert "sqlalchemy" in heavy(done["modules"])


def test_a_bad_list_or_an_unknown_get_is_refused_in_the_store_s_words(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    LogStore.open(db).close()
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LEAN_REPORT": str(report)}
    proc = subprocess.run(
        [sys.executable, "-c", CODE, "list", "--limit", "0", "--db", db],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert json.loads(report.read_text())["code"] == 1
    assert proc.stderr.strip() == "error: limit is 0; it must be between 1 and 500"
    unknown = "evt_20260101T000000_00000000000000000000"
    proc = subprocess.run(
        [sys.executable, "-c", CODE, "get", unknown, "--db", db],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert json.loads(report.read_text())["code"] == 1
    assert proc.stderr.strip() == f"error: event_id {unknown!r} not found"


def test_local_writes_run_before_typer_without_sqlalchemy_or_pydantic(tmp_path: Path) -> None:
    """`append`, `ack` and a task's moves on a local log go through the lean writer
    (store/lean_write.py) from the fast path: no typer, pydantic, SQLAlchemy or server, and
    not pathlib or hashlib either (a plain write on a log without keys needs neither)."""
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        seed = store.event_append(type="note", stream="s", room="r", from_agent="al")
    lean = (*SERVERS, "typer", "click", "rich", "pydantic", "pathlib", "hashlib")
    where = ("--json", "--db", db)
    done, out = console(
        tmp_path,
        "append",
        "--type",
        "note",
        "--stream",
        "s",
        "--room",
        "r",
        "--from-agent",
        "al",
        "--body",
        "hi",
        *where,
    )
    appended = json.loads(out)["event"]["id"]
    assert heavy(done["modules"], lean) == []
    assert "mempalace_logstream.store.lean_write" in done["modules"]
    done, out = console(tmp_path, "ack", seed.id, "--from-agent", "bob", *where)
    assert heavy(done["modules"], lean) == []
    create = ("task", "create", "--project", "p", "--from-agent", "al", "--to-agent", "bob")
    create += ("--branch", "main", "--base-commit", "abcdef1", "--goal", "g", "--done", "d")
    done, out = console(tmp_path, *create, *where)
    task_id = json.loads(out)["task_id"]
    for move in (("claim", task_id), ("progress", task_id, "50"), ("complete", task_id)):
        done, out = console(tmp_path, "task", *move, "--from-agent", "bob", *where)
        assert heavy(done["modules"], lean) == [], move
    done, out = console(tmp_path, "task", "status", task_id, *where)
    assert heavy(done["modules"], lean) == []
    with LogStore.open(db) as store:
        assert store.event_get(appended).body == "hi"
        assert store.task_status(task_id)["task"]["state"] == "ready"


# What a plain local append (a note, no task, a log without keys) leaves unloaded (issue 25):
# signing and keys, the task lifecycle (a task and its settings, the moves and their rules,
# the thread's fold) and its caches, the readers and their filters, the reminder plan, the
# delivery ledger (a write's sign of life is memory only), the redaction rules and their
# statements (a local append holds no `event.redact`), URL parsing, base64.
APPEND_SKIPS = (
    "mempalace_logstream.identity.keys",
    "mempalace_logstream.identity.signing",
    "mempalace_logstream.identity.canonical",
    "mempalace_logstream.tasks.records",
    "mempalace_logstream.tasks.steps",
    "mempalace_logstream.tasks.moves",
    "mempalace_logstream.tasks.thread",
    "mempalace_logstream.tasks.reminders",
    "mempalace_logstream.store.task_cache",
    "mempalace_logstream.store.task_reads",
    "mempalace_logstream.store.reads",
    "mempalace_logstream.store.filters",
    "mempalace_logstream.store.lean",
    "mempalace_logstream.deliveries",
    "mempalace_logstream.backends.queries.ledger",
    "mempalace_logstream.store.redaction",
    "mempalace_logstream.backends.queries.redactions",
    "urllib.parse",
    "ipaddress",
    "base64",
)


def test_a_plain_local_append_loads_only_what_it_uses(tmp_path: Path) -> None:
    """A note appended to a local log without keys through the lean writer loads none of
    APPEND_SKIPS; an ack loads the delivery ledger, which writes its mark before the exit, and
    the task settings the loop guards read, but no Task."""
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        seed = store.event_append(type="note", stream="s", room="r", from_agent="al")
    where = ("--json", "--db", db)
    note = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "al")
    done, out = console(tmp_path, *note, "--body", "hi", *where)
    assert json.loads(out)["event"]["body"] == "hi"
    assert "mempalace_logstream.store.lean_write" in done["modules"]
    assert sorted(set(APPEND_SKIPS) & set(done["modules"])) == []
    done, out = console(tmp_path, "ack", seed.id, "--from-agent", "bob", *where)
    assert "mempalace_logstream.deliveries" in done["modules"]
    # An ack is on a thread (the acked event's) and to its writer: the loop guards read the
    # task settings and the thread's task row (none), and no Task is generated.
    assert "mempalace_logstream.tasks.settings" in done["modules"]
    assert "mempalace_logstream.tasks.records" not in done["modules"]
    with LogStore.open(db) as store:
        marks = deliveries.status_of(store, seed.id)["recipients"]
    assert [(m["recipient"], m["acked_at"] is not None) for m in marks] == [("bob", True)]


def test_the_file_uri_quoting_is_urllib_s() -> None:
    """`sqlite_file.quote` (urllib.parse left unloaded for a plain path) quotes as
    `urllib.parse.quote` does, whatever the path holds."""
    from urllib.parse import quote

    from mempalace_logstream.backends import sqlite_file

    paths = ["/tmp/log.sqlite3", "/a b/c", "/ü/ñ.db", "/x?y#z", "/50%/l", "C:\\x", "", "~/.l-_.db"]
    for path in paths:
        assert sqlite_file.quote(path) == quote(path), path
