"""The fast path of `inbox`, `list`, `get`, `wait`, `tail --no-follow` (issue 25, cli/fast.py): its
option table is the typer commands' own (names, flags, values, repeats, environment variables,
defaults), it loads no typer, click, rich, SQLAlchemy, FastAPI or MCP, and each command line
answers with the same stdout, stderr and exit code as the typer app running it (which reads
through the store where the lean reader does not), hostile text and refusals included."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer.main

from mempalace_logstream import LogStore
from mempalace_logstream.cli import fast, fastargs, options, plain
from tests.conftest import REPO
from tests.leankit import CODE

HEAVY = ("sqlalchemy", "typer", "click", "rich", "fastapi", "starlette", "mcp", "uvicorn")
# The typer app alone, as `logstream` ran every command line before the fast path.
TYPER = """
import sys
from mempalace_logstream.cli.root import main
main()
"""
PKG = REPO / "mempalace_logstream"


# ----------------------------------------------------------------------------- the table


def _click(words: tuple[str, ...]) -> Any:
    from mempalace_logstream import cli

    group: Any = typer.main.get_command(cli.app)
    for word in words:
        group = group.commands[word]
    return group


def _kind(p: Any, flag: str) -> str:
    """The fast table's kind of a click option (typer vendors its own click: read by
    attribute, not by class)."""
    if p.is_flag:
        return "off" if flag in p.secondary_opts else "on"
    if p.multiple:
        return "multi"
    return {int: "int", str: "str", float: "float"}[p.type_descriptor.annotation]


def _is(p: Any, kind: str) -> bool:
    return bool(p.param_type_name == kind)


@pytest.mark.parametrize("words", sorted(fast.COMMANDS), ids=" ".join)
def test_the_fast_table_is_the_typer_command_s_parameters(words: tuple[str, ...]) -> None:
    cmd = fast.COMMANDS[words]
    assert cmd.words == words
    built = _click(words)
    arguments = [p for p in built.params if _is(p, "argument")]
    assert tuple(p.name for p in arguments) == cmd.arguments + tuple(n for n, _k in cmd.optional)
    seen = set()
    for p, (name, kind) in zip(arguments[len(cmd.arguments) :], cmd.optional, strict=True):
        assert not p.required and cmd.defaults[name] == p.default, name
        assert {float: "float", int: "int"}[p.type_descriptor.annotation] == kind, name
        seen.add(name)
    table = dict(cmd.options)
    for p in built.params:
        if not _is(p, "option"):
            continue
        if p.name in cmd.slow:  # left to typer: none of its flags is in the table
            assert not set(p.opts + p.secondary_opts) & set(table), p.name
            continue
        assert p.name in cmd.defaults, f"{p.name}: add it to the table or to `slow`"
        assert cmd.defaults[p.name] == p.default, p.name
        assert p.required == (p.name in cmd.required), p.name
        assert p.envvar == fastargs.ENVVARS.get(str(p.name)), p.name
        assert options.is_global(p) == (p.name in {n for n, _k in fastargs.GLOBALS.values()})
        for flag in (*p.opts, *p.secondary_opts):
            assert table.pop(flag) == (p.name, _kind(p, flag)), flag
        seen.add(p.name)
    assert table == {}, "flags in the fast table that the typer command lacks"
    assert set(cmd.defaults) == seen


def test_the_root_table_is_the_root_app_s_options() -> None:
    from mempalace_logstream import cli

    root = typer.main.get_command(cli.app)
    table = dict(fastargs.ROOT)
    for p in root.params:
        assert _is(p, "option")
        if p.name == "version":  # eager: prints and exits; typer's
            assert not set(p.opts) & set(table)
            continue
        for flag in p.opts:
            assert table.pop(flag) == (p.name, _kind(p, flag)), flag
        own = p.name in fastargs.ROOT_DEFAULTS  # --db and the like read theirs on the command
        assert p.envvar == (fastargs.ENVVARS.get(str(p.name)) if own else None), p.name
        want = fastargs.ROOT_DEFAULTS.get(str(p.name), False if p.is_flag else None)
        assert p.default == want, p.name
    assert table == {}


def test_the_fast_modules_import_no_framework_nor_the_store_at_load() -> None:
    for name in ("fast.py", "fastargs.py", "plain.py", "writes.py"):
        tree = ast.parse((PKG / "cli" / name).read_text(encoding="utf-8"))
        imported = {
            (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        bad = {m for m in imported if m.split(".")[0] in HEAVY or m.startswith("typer")}
        bad |= {
            m
            for m in imported
            if m.startswith("mempalace_logstream.store")
            and m != ("mempalace_logstream.store")
            and not m.endswith(("lean", "lean_write", "store.options"))
        }
        assert bad == set(), name


# ----------------------------------------------------------------------------- parity


def _env(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}
    for name in fast.RICH_ENV + ("NO_COLOR",):
        env.pop(name, None)
    env.update(PYTHONPATH=str(REPO), HOME=str(tmp_path), COLUMNS="80", **(extra or {}))
    return env


def both(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """({code, out, err, modules} of the console script, {code, out, err} of the typer app)."""
    return run_console(tmp_path, argv, env=env), run_typer(tmp_path, argv, env=env)


def run_console(
    tmp_path: Path,
    argv: Sequence[str],
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """{code, out, err, modules} of the console script (`cli.main`) running `argv`."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", CODE, *argv],
        capture_output=True,
        input=stdin,
        env={**_env(tmp_path, env), "LEAN_REPORT": str(report)},
        timeout=60,
        check=False,
    )
    said = json.loads(report.read_text())
    report.unlink()
    return {
        "out": done.stdout,
        "err": done.stderr,
        "modules": said["modules"],
        "code": said["code"] or 0,
    }


def run_typer(
    tmp_path: Path,
    argv: Sequence[str],
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """{code, out, err} of the typer app alone running `argv`."""
    done = subprocess.run(
        [sys.executable, "-c", TYPER, *argv],
        capture_output=True,
        input=stdin,
        env=_env(tmp_path, env),
        timeout=60,
        check=False,
    )
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}


def heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


HOSTILE = (
    "\x1b[31mred\x1b[0m [bold]x[/bold] tab\there\nnext line \u202eevil\u202c é 漢字 " + "y" * 300
)


@pytest.fixture
def log(tmp_path: Path) -> dict[str, Any]:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        ids = [
            store.event_append(
                type="note" if i % 3 else "task.request",
                stream="s" if i % 2 else "other",
                room="r",
                from_agent="alice" if i % 2 else "carol",
                to_agent=("bob", "*", None)[i % 3],
                topic="t" if i == 2 else None,
                status="open" if i == 4 else None,
                correlation_id="task_1" if i == 5 else None,
                body=HOSTILE if i == 3 else f"body {i}",
                metadata={"k": i},
            ).id
            for i in range(8)
        ]
    return {"db": db, "ids": ids}


def cases(log: dict[str, Any]) -> list[tuple[tuple[str, ...], bool]]:
    """(argv, whether the fast path answers it without typer)."""
    db, ids = log["db"], log["ids"]
    unknown = "evt_20260101T000000_00000000000000000000"
    return [
        (("list", "--limit", "5", "--db", db), True),
        (("list", "--db", db, "--json"), True),
        (("--json", "--db", db, "list", "--limit", "2", "--preview"), True),
        (("list", "--stream", "s", "--order", "asc", "--db", db), True),
        (("list", "--type", "note", "--json", "--db", db), True),
        (("list", "--since-event-id", ids[2], "--limit=3", "--db", db), True),
        (("list", "--before-event-id", ids[5], "--db", db), True),
        (("list", "--topic", "t", "--topic", "u", "--db", db), False),  # no SQL: the store
        (("list", "--to-agent", "bob", "--db", db), False),  # a named reader: the ledger
        (("list", "--limit", "0", "--db", db), False),  # refused in the store's words
        (("list", "--limit", "0", "--db", db, "--json"), False),
        (("list", "--limit", "abc", "--db", db), False),  # typer's usage error
        (("list", "--limit", "5", "--limit", "6", "--db", db), False),
        (("list", "--from-agent", "bob", "--db", db), False),
        (("list", "--order", "sideways", "--db", db), False),
        (("list", "--since-event-id", unknown, "--db", db), False),
        (("list", "--db", str(Path(db).parent / "missing.sqlite3")), False),
        (("--debug", "list", "--limit", "1", "--db", db), True),
        (("--durability", "normal", "list", "--limit", "1", "--db", db), True),
        (("get", ids[3], "--db", db), True),
        (("get", ids[3], "--db", db, "--json"), True),
        (("get", unknown, "--db", db), False),
        (("get", "--db", db), False),
        (("get", ids[0], ids[1], "--db", db), False),
        (("wait", "--since-event-id", ids[1], "--limit", "2", "--db", db), True),
        (("wait", "--status", "open", "--json", "--db", db), True),
        (("wait", "--since-event-id", ids[-1], "--timeout-ms", "50", "--db", db), False),
        (("wait", "--timeout-ms", "999999999", "--db", db), False),
        (("wait", "--correlation-id", "task_1", "--preview", "--db", db), True),
        (("tail", "--no-follow", "--from-start", "--db", db), True),
        (("tail", "--no-follow", "--from-start", "--json", "--db", db), True),
        (("tail", "--no-follow", "--since-event-id", ids[4], "--stream", "s", "--db", db), True),
        (("tail", "--no-follow", "--db", db), True),  # from the tip: nothing
        (("tail", "--no-follow", "--from-start", "--agent", "bob", "--db", db), False),
        (("tail", "--no-follow", "--since-event-id", unknown, "--db", db), False),
        (("tail", "--no-follow", "--from-start", "--since-event-id", ids[0], "--db", db), False),
        (("tail", "--no-follow", "--since", "10m", "--db", db), False),
        (("tail", "--no-follow", "--from-start", "--writer", "carol", "--db", db), True),
        (("--hub", "http://127.0.0.1:9", "--token", "x", "list", "--db", db), False),
        (("inbox", "--agent", "bob", "--from-start", "--state-file", "", "--db", db), True),
        (("--json", "inbox", "--agent", "bob", "--from-start", "--state-file=", "--db", db), True),
        (("inbox", "--agent", "bob", "--limit", "x", "--db", db), False),
        (("inbox", "--db", db), True),  # refused by the inbox's own rule: one implementation
    ]


def test_each_command_line_answers_as_the_typer_app(tmp_path: Path, log: dict[str, Any]) -> None:
    for argv, lean in cases(log):
        ours, ref = both(tmp_path, *argv)
        modules = ours.pop("modules")
        assert ours == ref, argv
        if lean:
            assert heavy(modules) == [], argv
            assert ours["code"] == 0 or argv[0] == "inbox", argv
        else:
            assert "typer" in heavy(modules), argv


def test_the_environment_gives_the_log_and_the_durability(
    tmp_path: Path, log: dict[str, Any]
) -> None:
    env = {"LOGSTREAM_DB": log["db"], "MEMPALACE_LOGSTREAM_DURABILITY": "normal"}
    for argv in (("list", "--limit", "3"), ("get", log["ids"][2]), ("tail", "--no-follow")):
        ours, ref = both(tmp_path, *argv, env=env)
        modules = ours.pop("modules")
        assert ours == ref and ours["code"] == 0, argv
        assert heavy(modules) == [], argv
    # an unknown durability: the store refuses it, in its words
    ours, ref = both(tmp_path, "list", env={**env, "MEMPALACE_LOGSTREAM_DURABILITY": "fast"})
    ours.pop("modules")
    assert ours == ref and ours["code"] != 0


def test_a_log_with_keys_is_marked_as_the_store_marks_it(tmp_path: Path) -> None:
    """Signed events and the keyring's marks: the lean read's `verified` is the store's."""
    from mempalace_logstream import agents

    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        agents.add(store, "alice")
        first = store.event_append(type="note", stream="s", room="r", from_agent="alice").id
        store.event_append(type="note", stream="s", room="r", from_agent="bob", body="unsigned")
    for argv in (("list", "--json", "--db", db), ("get", first, "--db", db, "--json")):
        ours, ref = both(tmp_path, *argv)
        modules = ours.pop("modules")
        assert ours == ref and ours["code"] == 0, argv
        assert heavy(modules) == [], argv


def test_reads_through_a_hub_answer_as_the_typer_app(tmp_path: Path) -> None:
    from tests.hubkit import live_hub

    with live_hub(tmp_path / "hub") as hub:
        ids = [
            hub.store.event_append(
                type="note", stream="s", room="r", from_agent="alice", to_agent="bob", body=body
            ).id
            for body in ("hi bob", HOSTILE)
        ]
        unknown = "evt_20260101T000000_00000000000000000000"
        at = ("--hub", hub.url)
        for argv, lean in (
            (("list", "--limit", "5", *at), True),
            (("--json", *at, "list", "--stream", "s"), True),
            (("get", ids[1], *at), True),
            (("get", ids[0], "--json", *at), True),
            (("get", unknown, *at), False),  # refused by the hub: typer says it
            (("list", "--limit", "0", *at), False),
            (("wait", "--since-event-id", ids[0], *at), True),  # a match there already
            (("wait", "--since-event-id", ids[0], "--json", "--timeout-ms", "10", *at), True),
            (("wait", "--since-event-id", ids[1], "--timeout-ms", "50", *at), False),  # blocks
            (("wait", "--since-event-id", "tip", "--timeout-ms", "50", *at), False),
            (("wait", "--timeout-ms", "999999999", *at), False),  # refused: typer says it
            (("wait", "--limit", "0", *at), False),  # refused by the hub: typer says it
            (("tail", "--no-follow", "--from-start", "--json", *at), True),  # one page
            (("tail", "--no-follow", "--from-start", *at), True),
            (("tail", "--no-follow", "--json", "--since-event-id", ids[0], *at), True),
            (("tail", "--no-follow", *at), True),  # from the tip: nothing
            (("tail", "--no-follow", "--since-event-id", "evt_x", *at), False),  # refused
        ):
            ours, ref = both(tmp_path, *argv)
            modules = ours.pop("modules")
            assert ours == ref, argv
            assert ("typer" in modules) != lean, argv
            if lean:  # not typer, not the store, not httpx's command line (click, rich)
                assert heavy(modules) == [] and ours["code"] == 0, argv
                assert "mempalace_logstream.store.lean" not in modules
        for i in range(plain.TAIL_PAGE):  # more than one page: typer's paging, which rides outages
            hub.store.event_append(type="note", stream="s", room="r", from_agent="a", body=str(i))
        ours, ref = both(tmp_path, "tail", "--no-follow", "--from-start", "--json", *at)
        assert "typer" in ours.pop("modules") and ours == ref and ours["code"] == 0
        assert len(ours["out"].splitlines()) == plain.TAIL_PAGE + 2
        ours, ref = both(tmp_path, "list", "--limit", "1", env={"LOGSTREAM_HUB": hub.url})
        modules = ours.pop("modules")
        assert ours == ref and ours["code"] == 0
        assert "typer" not in modules and "sqlalchemy" not in modules
