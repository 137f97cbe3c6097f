"""`logstream hook pretooluse` (issue 22): the real PreToolUse stdin shapes of Claude Code and
Codex, fed to the real command in a subprocess, through a local SQLite log and a real hub;
the exact JSON out and the exit code, `--auto-lease`, fail-open and `--fail-closed`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream.leases import harness
from mempalace_logstream.store import LogStore, lease_ops
from tests.hubproc import HubProcess, env_for, free_port

ROOT = "/work/proj"  # the hook JSON's cwd: the project root (no file is touched)


def _acquire(db: Path, agent: str, paths: list[str], **extra: Any) -> dict[str, Any]:
    with LogStore.open(str(db)) as store:
        out = lease_ops.lease_acquire(store, agent=agent, paths=paths, project="proj", **extra)
    return dict(out["lease"])


def _hook(
    home: Path, stdin: dict[str, Any] | str, *args: str, db: Path | None = None
) -> subprocess.CompletedProcess[str]:
    line = [sys.executable, "-m", "mempalace_logstream", *args]
    env = env_for(home, **({"LOGSTREAM_DB": str(db)} if db else {}))
    text = stdin if isinstance(stdin, str) else json.dumps(stdin)
    return subprocess.run(line, input=text, capture_output=True, text=True, env=env, timeout=60)


def _claude(tool: str, **tool_input: Any) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": ROOT,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": "toolu_01",
    }


def _codex(patch: str) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "turn_id": "t1",
        "cwd": ROOT,
        "hook_event_name": "PreToolUse",
        "model": "gpt-5-codex",
        "tool_name": "apply_patch",
        "tool_input": {"command": patch},
        "tool_use_id": "call_1",
    }


def _deny(reason: str) -> str:
    return json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    )


def _held(path: str, lease: dict[str, Any]) -> str:
    return f"{path} is leased to alice until {lease['expires_at']} (refactor); ask them or wait"


@pytest.fixture
def log(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    db = tmp_path / "log.sqlite3"
    lease = _acquire(db, "alice", ["src/**"], reason="refactor")
    return db, lease


DENIED = [
    (
        _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b"),
        "src/auth.py",
    ),
    (_claude("Write", file_path=f"{ROOT}/src/new.py", content="x = 1\n"), "src/new.py"),
    (_claude("MultiEdit", file_path=f"{ROOT}/src/a.py", edits=[{"old_string": "a"}]), "src/a.py"),
    (_claude("NotebookEdit", notebook_path=f"{ROOT}/src/nb.ipynb", new_source="1"), "src/nb.ipynb"),
    (_claude("Bash", command="echo x > src/gen.py && ls", description="write"), "src/gen.py"),
    (_claude("Bash", command="sed -i 's/a/b/' src/auth.py"), "src/auth.py"),
    (_claude("Bash", command="cd src && sed -i 's/a/b/' auth.py"), "src/auth.py"),
    (_claude("Bash", command="cp -t src/ new.py"), "src/new.py"),
    (_claude("Bash", command="mv --target-directory=src lib.py"), "src/lib.py"),
]


@pytest.mark.parametrize(("payload", "path"), DENIED, ids=[p["tool_name"] for p, _ in DENIED])
def test_claude_edit_of_a_path_leased_to_another_agent_is_denied(tmp_path, log, payload, path):
    db, lease = log
    done = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "bob", db=db)
    expect = f"{path} is leased to alice until {lease['expires_at']} (refactor); ask them or wait"
    assert (done.returncode, done.stdout, done.stderr) == (0, _deny(expect) + "\n", "")


ALLOWED = [
    _claude("Edit", file_path=f"{ROOT}/docs/a.md", old_string="a", new_string="b"),
    _claude("Read", file_path=f"{ROOT}/src/auth.py"),
    _claude("Bash", command="cat src/auth.py | grep x 2>&1"),
    _claude("Write", file_path="/elsewhere/src/auth.py", content=""),
]


@pytest.mark.parametrize("payload", ALLOWED, ids=lambda p: str(p["tool_input"])[:30])
def test_an_edit_of_a_free_path_prints_nothing(tmp_path, log, payload):
    db, _ = log
    done = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "bob", db=db)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_holder_itself_may_edit(tmp_path, log):
    db, _ = log
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    done = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "alice", db=db)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_codex_apply_patch_touching_a_leased_path_is_denied(tmp_path, tmp_path_factory):
    db = tmp_path / "log.sqlite3"
    lease = _acquire(db, "alice", ["lib/core.py"], task_id=None)
    patch = (
        "*** Begin Patch\n*** Update File: docs/readme.md\n@@\n-a\n+b\n"
        "*** Update File: lib/core.py\n@@\n-x\n+y\n*** End Patch\n"
    )
    args = ("hook", "pretooluse", "--agent", "bob", "--client", "codex")
    done = _hook(tmp_path, _codex(patch), *args, db=db)
    expect = f"lib/core.py is leased to alice until {lease['expires_at']}; ask them or wait"
    assert (done.returncode, done.stdout, done.stderr) == (0, _deny(expect) + "\n", "")
    free = "*** Begin Patch\n*** Add File: docs/new.md\n+hi\n*** End Patch\n"
    done = _hook(tmp_path, _codex(free), *args, db=db)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_auto_lease_takes_a_free_path_and_then_denies_others(tmp_path, log):
    db, _ = log
    payload = _claude("Write", file_path=f"{ROOT}/docs/a.md", content="x")
    args = ("hook", "pretooluse", "--project", "proj", "--auto-lease")
    done = _hook(tmp_path, payload, *args, "--agent", "bob", db=db)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    with LogStore.open(str(db), create=False) as store:
        held = lease_ops.lease_list(store, agent="bob")["leases"]
    assert [(x["paths"], x["agent"], x["state"]) for x in held] == [
        (["docs/a.md"], "bob", "active")
    ]
    again = _hook(tmp_path, payload, *args, "--agent", "bob", db=db)  # its own: no second lease
    assert (again.returncode, again.stdout) == (0, "")
    other = _hook(tmp_path, payload, *args, "--agent", "carol", db=db)
    reason = f"docs/a.md is leased to bob until {held[0]['expires_at']} ("
    assert other.returncode == 0
    assert json.loads(other.stdout)["hookSpecificOutput"]["permissionDecisionReason"].startswith(
        reason
    )


def test_unreachable_hub_fails_open_with_a_warning(tmp_path):
    hub = f"http://127.0.0.1:{free_port()}"
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    done = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "bob", "--hub", hub)
    assert (done.returncode, done.stdout) == (0, "")
    assert "could not check the leases" in done.stderr and "edit allowed" in done.stderr
    assert hub in done.stderr


def test_unreachable_hub_fail_closed_denies_naming_the_failure(tmp_path):
    hub = f"http://127.0.0.1:{free_port()}"
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    args = ("hook", "pretooluse", "--agent", "bob", "--hub", hub, "--fail-closed")
    done = _hook(tmp_path, payload, *args)
    assert done.returncode == 0
    reason = json.loads(done.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("logstream lease hook could not check the leases: cannot reach hub")
    assert done.stdout == _deny(reason) + "\n"


def test_a_missing_log_fails_open_and_closed(tmp_path):
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    missing = tmp_path / "nope.sqlite3"
    done = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "bob", db=missing)
    assert (done.returncode, done.stdout) == (0, "") and str(missing) in done.stderr
    assert not missing.exists()
    closed = _hook(
        tmp_path, payload, "hook", "pretooluse", "--agent", "b", "--fail-closed", db=missing
    )
    assert (
        closed.returncode == 0
        and str(missing)
        in json.loads(closed.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    )


def test_unreadable_hook_input_fails_open(tmp_path, log):
    db, _ = log
    done = _hook(tmp_path, "not json", "hook", "pretooluse", "--agent", "bob", db=db)
    assert (done.returncode, done.stdout) == (0, "") and "unreadable hook input" in done.stderr


def test_through_a_real_hub(tmp_path, log):
    db, lease = log
    hub = HubProcess(db, tmp_path)
    hub.start()
    try:
        payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
        args = ("hook", "pretooluse", "--agent", "bob", "--hub", hub.url)
        done = _hook(tmp_path, payload, *args)
        expect = _held("src/auth.py", lease)
        assert (done.returncode, done.stdout, done.stderr) == (0, _deny(expect) + "\n", "")
        free = _claude("Edit", file_path=f"{ROOT}/docs/a.md", old_string="a", new_string="b")
        done = _hook(tmp_path, free, *args, "--auto-lease", "--project", "proj")
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        other = _hook(tmp_path, free, "hook", "pretooluse", "--agent", "carol", "--hub", hub.url)
        assert "docs/a.md is leased to bob until" in other.stdout
    finally:
        hub.stop()


def test_the_typer_path_gives_the_same_decision(tmp_path, log):
    """A line the lean parser leaves to typer (a root option first) decides the same."""
    db, lease = log
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    args = ("--durability", "full", "hook", "pretooluse", "--agent", "bob")
    done = _hook(tmp_path, payload, *args, db=db)
    expect = (
        f"src/auth.py is leased to alice until {lease['expires_at']} (refactor); ask them or wait"
    )
    assert (done.returncode, done.stdout) == (0, _deny(expect) + "\n")


def test_a_misconfigured_hook_exits_1_so_the_harness_does_not_block_every_edit(tmp_path, log):
    """Claude Code reads exit 2 of a PreToolUse hook as "block this tool call": a usage error
    (a bad --client, no --agent) exits 1 instead, naming the option, with nothing on stdout."""
    db, _ = log
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    bad = _hook(tmp_path, payload, "hook", "pretooluse", "--agent", "bob", "--client", "vim")
    assert (bad.returncode, bad.stdout) == (1, "") and "--client" in bad.stderr
    line = ["--durability", "full", "hook", "pretooluse", "--client", "codex"]
    missing = _hook(tmp_path, payload, *line, db=db)
    assert (missing.returncode, missing.stdout) == (1, "") and "--agent" in missing.stderr
    other = _hook(tmp_path, payload, "list", "--bogus", db=db)  # other commands keep click's 2
    assert other.returncode == 2


@pytest.mark.parametrize(
    ("command", "targets"),
    [
        ("echo hi > out.txt", ["out.txt"]),
        ("cat a >> b/c.txt 2>&1 && ls", ["b/c.txt"]),
        ("sed -i s/a/b/ x.py y.py", ["x.py", "y.py"]),
        ("sed -i -e s/a/b/ z.py", ["z.py"]),
        ("mv a.py b.py; rm -rf dir", ["b.py", "b.py/a.py", "a.py", "dir"]),
        ("cp a b", ["b", "b/a"]),  # b may be a file or a directory
        ("cp a b/", ["b/a"]),
        ("cp -r a b/c dst", ["dst/a", "dst/c"]),
        # `cd` moves the directory later targets are resolved against (not in a subshell)
        ("cd src && echo x > gen.py", ["src/gen.py"]),
        ("cd src; cd sub && sed -i s/a/b/ a.py", ["src/sub/a.py"]),
        ("pushd pkg && rm old.py", ["pkg/old.py"]),
        ("cd /abs && touch x > y", ["/abs/y"]),
        ("cd .. && echo > a", ["../a"]),
        ("cd && echo > notes", ["~/notes"]),
        ("cd src | echo > a", ["a"]),
        ("cd - && echo > a && echo > /abs/b", ["/abs/b"]),  # unknown directory: only absolute
        ('cd "$X" && echo > a', []),
        # -t DIR / --target-directory: each source lands in DIR
        ("mv -t dst a b/c", ["dst/a", "dst/c", "a", "b/c"]),
        ("cp -t dst a", ["dst/a"]),
        ("cp -tdst a", ["dst/a"]),
        ("cp --target-directory=dst a b", ["dst/a", "dst/b"]),
        ("cp --target-directory dst a", ["dst/a"]),
        ("cd src && mv -t ../lib x.py", ["lib/x.py", "src/x.py"]),
        ("cp -S .bak a b", ["b", "b/a"]),
        ("cp -- -odd b", ["b", "b/-odd"]),
        ("echo x | tee -a log.txt", ["log.txt"]),
        ("ls > /dev/null", []),
        ("git status", []),
        ("echo 'unclosed", []),
    ],
)
def test_bash_targets_best_effort(command, targets):
    assert harness.bash_targets(command) == targets


def test_paths_outside_the_root_are_not_the_projects():
    assert harness.relative("/r/src/a.py", "/r", "/r") == "src/a.py"
    assert harness.relative("x.py", "/r/sub", "/r") == "sub/x.py"
    assert harness.relative("/etc/passwd", "/r", "/r") is None
    assert harness.relative("../r2/a", "/r", "/r") is None


# ------------------------------------------------------------------------- the git guard


def _git(repo: Path, *args: str, agent: str | None = None) -> subprocess.CompletedProcess[str]:
    env = env_for(repo.parent, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t")
    env["GIT_COMMITTER_EMAIL"] = "t@x"
    if agent:
        env["LOGSTREAM_AGENT"] = agent
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_git_guard_refuses_a_commit_of_a_leased_path_until_release(tmp_path):
    db = tmp_path / "log.sqlite3"
    lease = _acquire(db, "alice", ["src/**"], reason="refactor")
    repo = tmp_path / "repo"
    assert _git(tmp_path, "init", "-q", str(repo)).returncode == 0
    args = ("lease", "guard", "install", "--repo", str(repo), "--db", str(db), "--project", "proj")
    done = _hook(tmp_path, "", *args)
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert (done.returncode, done.stdout) == (0, f"installed the lease guard: {hook}\n")
    (repo / "src").mkdir()
    (repo / "src" / "auth.py").write_text("x = 1\n")
    (repo / "notes.txt").write_text("n\n")
    _git(repo, "add", "-A")
    refused = _git(repo, "commit", "-qm", "touch src", agent="bob")
    assert refused.returncode == 1
    assert (
        f"src/auth.py is leased to alice until {lease['expires_at']} (refactor) "
        f"(lease {lease['lease_id']}, fence {lease['fence']}); ask them or wait"
    ) in refused.stderr
    assert "commit refused (git commit --no-verify skips this check)" in refused.stderr
    assert _git(repo, "rev-parse", "-q", "--verify", "HEAD").returncode != 0  # nothing committed
    own = _git(repo, "commit", "-qm", "alice's", agent="alice")
    assert own.returncode == 0, own.stderr
    (repo / "src" / "auth.py").write_text("x = 2\n")
    _git(repo, "add", "-A")
    assert _git(repo, "commit", "-qm", "again", agent="bob").returncode == 1
    with LogStore.open(str(db), create=False) as store:
        lease_ops.lease_release(store, lease_id=lease["lease_id"], agent="alice")
    after = _git(repo, "commit", "-qm", "after release", agent="bob")
    assert (after.returncode, after.stderr) == (0, "")


def test_guard_install_refuses_a_foreign_hook_and_a_non_repository(tmp_path):
    repo = tmp_path / "repo"
    _git(tmp_path, "init", "-q", str(repo))
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    done = _hook(tmp_path, "", "lease", "guard", "install", "--repo", str(repo))
    assert done.returncode == 1
    assert done.stderr.startswith("error: repo already has a pre-commit hook")
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
    plain = tmp_path / "plain"
    plain.mkdir()
    done = _hook(tmp_path, "", "lease", "guard", "install", "--repo", str(plain))
    assert done.returncode == 1 and "is not a git repository" in done.stderr


# ------------------------------------------------------------------- the lean lease check


def test_the_generated_lease_sql_is_the_stores_own() -> None:
    """sqlite_lease_sql.py holds what a real store compiles for lease_check today; if the
    store's SQL changed, regenerate: python -m mempalace_logstream.store.lean_leases."""
    from mempalace_logstream.backends import sqlite_lease_sql
    from mempalace_logstream.store import lean_leases

    kept = {
        "SCHEMA_HEAD": sqlite_lease_sql.SCHEMA_HEAD,
        "COLUMNS": sqlite_lease_sql.COLUMNS,
        "STATEMENTS": sqlite_lease_sql.STATEMENTS,
    }
    assert lean_leases.generate() == kept, "run `python -m mempalace_logstream.store.lean_leases`"


def test_the_lean_check_answers_as_the_store(tmp_path):
    """store/lean_leases.check (stdlib sqlite3) gives lease_check's answer: free, own, held by
    another (exclusive, shared), a task's lease before and after the task ends, any project."""
    from mempalace_logstream import workflows
    from mempalace_logstream.config import resolve_db
    from mempalace_logstream.store import lean_leases

    db = tmp_path / "log.sqlite3"
    with LogStore.open(str(db)) as store:
        task = workflows.task_create(
            store,
            project="proj",
            from_agent="lead",
            to_agent="*",
            goal="g",
            branch="main",
            base_commit="abcdef1",
            done="d",
        )
        lease_ops.lease_acquire(store, agent="alice", paths=["src/**"], reason="r", project="proj")
        lease_ops.lease_acquire(
            store, agent="bob", paths=["docs/*.md"], exclusive=False, project="proj"
        )
        lease_ops.lease_acquire(store, agent="carol", paths=["lib/**"], task_id=task["task_id"])
        lease_ops.lease_acquire(store, agent="dave", paths=["*.py"], project="other")
    cases = [
        (agent, path, project)
        for agent in ("alice", "bob", "carol", "erin")
        for path in ("src/a.py", "docs/x.md", "lib/core.c", "top.py", "free.txt")
        for project in ("proj", "other", None)
    ]

    def both() -> None:
        with LogStore.open(str(db), create=False) as store:
            for agent, path, project in cases:
                want = lease_ops.lease_check(store, agent=agent, path=path, project=project)
                got = lean_leases.check(
                    resolve_db(str(db), None), "full", agent=agent, path=path, project=project
                )
                assert got == want, (agent, path, project)

    both()
    with LogStore.open(str(db), create=False) as store:
        workflows.task_update(store, task_id=task["task_id"], action="cancel", from_agent="lead")
    both()


def test_the_hook_on_a_local_log_loads_no_sqlalchemy_nor_typer(tmp_path, log):
    db, _ = log
    payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
    code = (
        "import sys\n"
        "from mempalace_logstream import hook\n"
        "code = hook.fast_path(['hook', 'pretooluse', '--agent', 'bob'])\n"
        "heavy = sorted(m for m in ('sqlalchemy', 'typer', 'click', 'httpx') if m in sys.modules)\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    env = env_for(tmp_path, LOGSTREAM_DB=str(db))
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.stderr == "0 []\n"
    assert '"permissionDecision": "deny"' in done.stdout


def test_a_hub_that_refuses_the_token_fails_open_naming_it(tmp_path, log):
    db, lease = log
    hub = HubProcess(db, tmp_path, token="hub-secret-token")
    hub.start()
    try:
        payload = _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b")
        args = ("hook", "pretooluse", "--agent", "bob", "--hub", hub.url)
        right = _hook(tmp_path, payload, *args, "--token", "hub-secret-token")
        assert (right.returncode, right.stdout) == (0, _deny(_held("src/auth.py", lease)) + "\n")
        wrong = _hook(tmp_path, payload, *args, "--token", "not-the-token")
        assert (wrong.returncode, wrong.stdout) == (0, "")
        assert "could not check the leases (" in wrong.stderr and "token" in wrong.stderr
    finally:
        hub.stop()


def _readme_pretooluse_commands() -> dict[str, str]:
    """{client: command} of the README's PreToolUse recipes (the JSON for Claude Code, the
    TOML for Codex)."""
    import re
    import tomllib

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    out = {}
    for text in re.findall(r"```json\n(.*?)```", readme, flags=re.S):
        for group in json.loads(text).get("hooks", {}).get("PreToolUse", []):
            out["claude"] = group["hooks"][0]["command"]
    for text in re.findall(r"```toml\n(.*?)```", readme, flags=re.S):
        doc = tomllib.loads(text)
        for group in doc.get("hooks", {}).get("PreToolUse", []):
            out["codex"] = group["hooks"][0]["command"]
    return out


def test_the_readme_recipes_deny_as_the_clients_run_them(tmp_path: Path) -> None:
    """The README's `.claude/settings.json` and Codex `config.toml` entries, run by a shell
    with the client's stdin, deny an edit of a path another agent leased in their project."""
    commands = _readme_pretooluse_commands()
    assert set(commands) == {"claude", "codex"}
    db = tmp_path / "log.sqlite3"
    with LogStore.open(str(db)) as store:
        out = lease_ops.lease_acquire(
            store, agent="alice", paths=["src/**"], project="myrepo", reason="refactor"
        )
    expires = out["lease"]["expires_at"]
    payloads = {
        "claude": _claude("Edit", file_path=f"{ROOT}/src/auth.py", old_string="a", new_string="b"),
        "codex": _codex("*** Begin Patch\n*** Update File: src/auth.py\n@@\n-a\n+b\n"),
    }
    env = env_for(tmp_path, LOGSTREAM_DB=str(db))
    for client, command in commands.items():
        assert command.startswith("logstream hook pretooluse "), command
        line = command.replace("logstream", f"{sys.executable} -m mempalace_logstream", 1)
        done = subprocess.run(
            ["sh", "-c", line],
            input=json.dumps(payloads[client]),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        reason = f"src/auth.py is leased to alice until {expires} (refactor); ask them or wait"
        assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecisionReason"] == (
            reason
        ), (client, done.stdout)
