"""The task operations on every surface (issue 11): the CLI (local and --hub), HTTP (statuses
and the error shape) and MCP tools, with the same names and the same texts."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client

from mempalace_logstream import LogStore, mcp_server, workflows
from tests.conftest import run_cli
from tests.hubkit import live_hub

CREATE = (
    *("task", "create", "--project", "demo", "--from-agent", "claude", "--to-agent", "codex"),
    *("--goal", "fix it", "--done", "green", "--branch", "main", "--base-commit", "abcdef1"),
)


def _created(out: bytes) -> str:
    return str(json.loads(out)["task"]["correlation_id"])


def test_the_cli_moves_a_task_and_refuses_like_the_core(tmp_path: Path) -> None:
    db = ("--db", str(tmp_path / "log.sqlite3"))
    tid = _created(run_cli(*CREATE, *db, "--json").stdout)
    claim = run_cli("task", "claim", tid, "--from-agent", "codex", *db)
    assert claim.returncode == 0, claim.stderr
    assert claim.stdout.decode().startswith(
        f"{tid}: claimed held by codex (attempt 1), lease until"
    )
    prog = run_cli("task", "progress", tid, "--from-agent", "codex", "--progress", "40", *db)
    assert b"working held by codex (attempt 1), progress 40" in prog.stdout
    stale = run_cli("task", "progress", tid, "--from-agent", "codex", "--progress", "10", *db)
    assert stale.returncode == 1
    assert stale.stderr.decode().strip() == (
        "error: progress 10 must be greater than the last reported progress 40"
    )
    steal = run_cli("task", "cancel", tid, "--from-agent", "codex", *db, "--json")
    assert steal.returncode == 1
    assert json.loads(steal.stderr) == {
        "error": f"only the requester (claude) may cancel task {tid}",
        "field": "from_agent",
    }
    put = ("artifact", "put", "-", "--kind", "log", "--created-by", "codex", *db, "--json")
    art = json.loads(run_cli(*put, input=b"ok").stdout)["artifact"]["id"]
    done = run_cli(
        *("task", "complete", tid, "--from-agent", "codex", "--artifact-id", art),
        *("--disposition", "completed", "--verification", "pytest=passed", *db, "--json"),
    )
    assert json.loads(done.stdout)["task"]["result"] == {
        "disposition": "completed",
        "artifact_ids": [art],
        "verification": [{"name": "pytest", "status": "passed"}],
    }
    status = run_cli("task", "status", tid, *db).stdout.decode()
    assert status.splitlines()[0] == f"{tid}: ready held by codex (attempt 1), progress 40"
    assert f"result: completed, artifacts {art}" in status
    listed = json.loads(run_cli("task", "list", "--state", "ready", *db, "--json").stdout)
    assert [t["task_id"] for t in listed["tasks"]] == [tid]
    bad = run_cli("task", "complete", tid, "--from-agent", "codex", "--verification", "x", *db)
    assert bad.returncode == 2 and b"--verification 'x' must be NAME=STATUS" in bad.stderr


@pytest.mark.slow
def test_http_and_a_hub_client_answer_with_the_same_texts(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub:
        tid = workflows.task_create(
            hub.store,
            project="demo",
            from_agent="claude",
            to_agent="codex",
            goal="g",
            branch="main",
            base_commit="abcdef1",
            done="d",
        )["task"].correlation_id
        post = lambda op, **body: httpx.post(f"{hub.url}/v1/{op}", json=body, timeout=30)  # noqa: E731
        wrong = post("task_update", task_id=tid, action="claim", from_agent="gemini")
        assert wrong.status_code == 403
        assert wrong.json() == {
            "error": f"task {tid} is addressed to codex; only codex may claim it",
            "field": "from_agent",
        }
        assert (
            post("task_update", task_id=tid, action="claim", from_agent="codex").status_code == 200
        )
        again = post("task_update", task_id=tid, action="claim", from_agent="codex")
        assert again.status_code == 409
        assert "already claimed by codex (attempt 1)" in again.json()["error"]
        got = httpx.get(f"{hub.url}/v1/tasks/{tid}", timeout=30)
        assert got.status_code == 200 and got.json()["task"]["state"] == "claimed"
        missing = httpx.get(f"{hub.url}/v1/tasks/task_nope", timeout=30)
        assert missing.status_code == 404
        assert missing.json() == {"error": "task task_nope not found", "field": "task_id"}
        listed = post("task_list", state="claimed", to_agent="codex").json()
        assert [t["task_id"] for t in listed["tasks"]] == [tid]
        # the CLI through the hub says what the core says
        cli = run_cli("task", "cancel", tid, "--from-agent", "codex", "--hub", hub.url)
        assert cli.returncode == 1
        assert (
            cli.stderr.decode().strip()
            == f"error: only the requester (claude) may cancel task {tid}"
        )
        ok = run_cli("task", "status", tid, "--hub", hub.url, "--json")
        assert json.loads(ok.stdout)["task"]["assignee"] == "codex"


def test_mcp_tools_move_a_task(tmp_path: Path) -> None:
    async def scenario() -> None:
        with LogStore.open(str(tmp_path / "mcp.sqlite3")) as store:
            async with Client(mcp_server.build_server(store).protocol) as client:
                made = await client.call_tool(
                    "mempalace_task_create",
                    {
                        "project": "demo",
                        "from_agent": "claude",
                        "to_agent": "*",
                        "goal": "g",
                        "branch": "main",
                        "base_commit": "abcdef1",
                        "done": "d",
                        "lease_ms": 60_000,
                    },
                )
                tid = json.loads(made.content[0].text)["task"]["correlation_id"]  # type: ignore[union-attr]
                claim = await client.call_tool(
                    "mempalace_task_update",
                    {"task_id": tid, "action": "claim", "from_agent": "gemini"},
                )
                assert json.loads(claim.content[0].text)["task"]["assignee"] == "gemini"  # type: ignore[union-attr]
                refused = await client.call_tool(
                    "mempalace_task_update",
                    {"task_id": tid, "action": "decline", "from_agent": "codex"},
                )
                assert refused.is_error
                assert refused.content[0].text == (
                    f"task {tid} is addressed to everyone; nobody can decline it (cancel is the "
                    "requester's)"
                )  # type: ignore[union-attr]
                tools = {t.name: t for t in (await client.list_tools()).tools}
                prog = tools["mempalace_task_update"].input_schema["properties"]["progress"]
                assert (prog.get("minimum"), prog.get("maximum")) == (0, 100)
                assert "0-100" in prog["description"]
                status = await client.call_tool("mempalace_task_status", {"task_id": tid})
                task = json.loads(status.content[0].text)["task"]  # type: ignore[union-attr]
                assert (task["state"], task["a2a_state"]) == ("claimed", "working")
                listed = await client.call_tool("mempalace_task_list", {"state": "claimed"})
                assert json.loads(listed.content[0].text)["count"] == 1  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_task_progress_takes_its_value_as_an_argument_on_a_0_to_100_scale(tmp_path: Path) -> None:
    db = ("--db", str(tmp_path / "log.sqlite3"))
    tid = _created(run_cli(*CREATE, *db, "--json").stdout)
    assert run_cli("task", "claim", tid, "--from-agent", "codex", *db).returncode == 0
    prog = run_cli("task", "progress", tid, "40", "--from-agent", "codex", *db)  # as README
    assert prog.returncode == 0, prog.stderr
    assert b"working held by codex (attempt 1), progress 40" in prog.stdout
    over = run_cli("task", "progress", tid, "140", "--from-agent", "codex", *db, "--json")
    assert over.returncode == 1
    assert json.loads(over.stderr) == {
        "error": "progress 140 is out of range; it must be between 0 and 100 (percent)",
        "field": "progress",
    }
    helped = run_cli("task", "progress", "--help").stdout.decode()
    assert "[progress]" in helped and "0-100" in helped


def test_each_task_subcommand_shows_only_its_own_options() -> None:
    def options(command: str) -> set[str]:
        out = run_cli("task", command, "--help", env={"COLUMNS": "200"})
        assert out.returncode == 0, out.stderr
        words = out.stdout.decode().replace("│", " ").split()
        return {w.rstrip(",") for w in words if w.startswith("--")}

    specific = {
        "--lease-ms",
        "--progress",
        "--retryable",
        "--disposition",
        "--artifact-id",
        "--verification",
    }
    own = {
        "claim": {"--lease-ms"},
        "progress": {"--progress"},
        "complete": {"--disposition", "--artifact-id", "--verification"},
        "fail": {"--retryable"},
        "block": set(),
        "unblock": set(),
        "decline": set(),
        "cancel": set(),
        "accept": set(),
        "reject": set(),
        "reopen": set(),
    }
    for command, mine in own.items():
        shown = options(command)
        assert shown & specific == mine, command
        assert {"--from-agent", "--body", "--json"} <= shown, command


def test_task_create_json_names_the_task_id_at_the_top(tmp_path: Path) -> None:
    db = ("--db", str(tmp_path / "log.sqlite3"))
    out = json.loads(run_cli(*CREATE, *db, "--json").stdout)
    assert out["task_id"] == out["task"]["correlation_id"]
    assert out["task_id"].startswith("task_fix_it_") and out["task"]["id"].startswith("evt_")
    with LogStore.open(db[1]) as store:
        made = workflows.task_create(
            store,
            project="p",
            from_agent="a",
            to_agent="b",
            goal="g",
            branch="main",
            base_commit="abcdef1",
            done="d",
        )
        assert made["task_id"] == made["task"].correlation_id


def test_task_status_shows_the_goal_the_definition_of_done_the_question_and_a_lost_lease(
    tmp_path: Path,
) -> None:
    db = ("--db", str(tmp_path / "log.sqlite3"))
    create = (
        *("task", "create", "--project", "demo", "--from-agent", "claude", "--to-agent", "codex"),
        *("--goal", "Fix the login loop\nin app.py", "--done", "tests/test_login.py passes"),
        *("--branch", "main", "--base-commit", "abcdef1"),
    )
    blocked = _created(run_cli(*create, *db, "--json").stdout)
    run_cli("task", "claim", blocked, "--from-agent", "codex", *db)
    asked = run_cli("task", "block", blocked, "--from-agent", "codex", "--body", "Which DB?", *db)
    assert asked.returncode == 0, asked.stderr
    lines = run_cli("task", "status", blocked, *db).stdout.decode().splitlines()
    assert "goal: Fix the login loop" in lines and "  in app.py" in lines
    assert "done: tests/test_login.py passes" in lines
    assert "question: Which DB?" in lines
    status = json.loads(run_cli("task", "status", blocked, *db, "--json").stdout)["task"]
    assert (status["goal"], status["done"], status["question"]) == (
        "Fix the login loop\nin app.py",
        "tests/test_login.py passes",
        "Which DB?",
    )
    leased = _created(run_cli(*create, "--lease-ms", "1000", *db, "--json").stdout)
    run_cli("task", "claim", leased, "--from-agent", "codex", *db)
    deadline = time.monotonic() + 30
    while True:  # the lease runs on the wall clock: wait until a read shows it lost
        text = run_cli("task", "status", leased, *db).stdout.decode()
        if "lost:" in text or time.monotonic() > deadline:
            break
    assert "lost: attempt 1 (codex), lease expired at " in text, text
    assert text.splitlines()[0].startswith(f"{leased}: open")
