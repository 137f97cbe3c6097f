"""What `logstream hook pretooluse` imports on a local log (issue 22): it runs before every
edit, so the console script must reach the decision with the standard library and the lean
modules only: no SQLAlchemy, pydantic, FastAPI, MCP, typer or click, none of the package's
models, read filters or clock, and none of the standard modules the decision does not need
(dataclasses and inspect, subprocess, pathlib, secrets, hashlib). Each call is the real console
entry (`cli.main`) in a fresh interpreter against a real SQLite log; `sys.modules` is the
record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream.store import LogStore, lease_ops
from tests.hubproc import env_for
from tests.leankit import CODE

ROOT = "/work/proj"
HEAVY = (
    "sqlalchemy",
    "pydantic",
    "fastapi",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "mcp",
    "typer",
    "click",
    "rich",
    "httpx",
    "alembic",
)
# Standard modules the hook path has no use for (each costs milliseconds on every edit).
NOT_NEEDED = ("subprocess", "pathlib", "secrets", "hashlib", "random", "dataclasses", "inspect")
# The package's modules the decision may load: the entry, the lease rules, the lean reader.
LEAN = {
    "mempalace_logstream",
    "mempalace_logstream.backends",
    "mempalace_logstream.backends.sqlite_file",
    "mempalace_logstream.backends.sqlite_lease_sql",
    "mempalace_logstream.backends.sqlite_reader",
    "mempalace_logstream.cli",
    "mempalace_logstream.config",
    "mempalace_logstream.errors",
    "mempalace_logstream.hook",
    "mempalace_logstream.lease_hook",
    "mempalace_logstream.leases",
    "mempalace_logstream.leases.check",
    "mempalace_logstream.leases.globs",
    "mempalace_logstream.leases.harness",
    "mempalace_logstream.leases.inputs",
    "mempalace_logstream.leases.rules",
    "mempalace_logstream.payload",
    "mempalace_logstream.store",
    "mempalace_logstream.store.ids",
    "mempalace_logstream.store.lean_leases",
    "mempalace_logstream.validation",
}


def _edit(tool: str, **tool_input: Any) -> str:
    return json.dumps(
        {
            "session_id": "s1",
            "cwd": ROOT,
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": tool_input,
        }
    )


def _console(tmp_path: Path, stdin: str, *argv: str) -> tuple[int, list[str], str]:
    """(exit code, modules loaded, stdout) of `logstream ARGV` run as the console script."""
    report = tmp_path / "report.json"
    env = env_for(tmp_path, LEAN_REPORT=str(report))
    done = subprocess.run(
        [sys.executable, "-c", CODE, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert report.exists(), done.stderr
    got = json.loads(report.read_text())
    report.unlink()
    assert done.stderr == "", done.stderr
    return int(got["code"] or 0), list(got["modules"]), done.stdout


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.sqlite3"
    with LogStore.open(str(path)) as store:
        lease_ops.lease_acquire(store, agent="alice", paths=["src/**"], project="proj")
    return path


CASES = [
    ("claude", _edit("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b"), 1),
    ("claude", _edit("Write", file_path=f"{ROOT}/docs/free.md", content="x"), 0),
    ("claude", _edit("Bash", command="cd src && echo x > gen.py"), 1),
    ("codex", _edit("apply_patch", command="*** Begin Patch\n*** Update File: src/a.py\n"), 1),
]


@pytest.mark.parametrize(
    ("client", "stdin", "denies"), CASES, ids=["edit", "free", "bash", "codex"]
)
def test_the_local_pretooluse_path_imports_only_the_lean_modules(
    tmp_path: Path, db: Path, client: str, stdin: str, denies: int
) -> None:
    argv = ("hook", "pretooluse", "--agent", "bob", "--client", client, "--db", str(db))
    code, modules, out = _console(tmp_path, stdin, *argv)
    assert code == 0
    assert out.count('"permissionDecision": "deny"') == denies, out
    assert sorted({m.split(".")[0] for m in modules} & set(HEAVY)) == []
    assert sorted(set(modules) & set(NOT_NEEDED)) == []
    assert sorted(m for m in modules if m.startswith("mempalace_logstream") and m not in LEAN) == []


def test_the_package_loads_its_models_and_store_on_first_use(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "import mempalace_logstream as m\n"
        "before = sorted(x for x in sys.modules if x.startswith('mempalace_logstream.'))\n"
        "event, store = m.Event, m.LogStore\n"
        "print(json.dumps([before, event.__module__, store.__module__]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env_for(tmp_path),
        timeout=60,
        check=True,
    )
    before, event_module, store_module = json.loads(done.stdout)
    assert before == ["mempalace_logstream.errors"]
    assert event_module == "mempalace_logstream.models"
    assert store_module == "mempalace_logstream.store.core"
