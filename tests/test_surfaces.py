"""One table of bad inputs, refused the same way on every surface: HTTP, MCP (the official SDK
client, in memory and over streamable HTTP, in both protocol eras) and the CLI. Same parameter
names, same texts, nothing written.

The CLI column is the command line a person would type for the same mistake; it is absent
where the CLI cannot express the mistake (a JSON `true` for an integer, an unknown key: typer
answers those itself as usage errors, exit 2).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from mempalace_logstream import LogStore, mcp_server, operations
from mempalace_logstream.presence import Registry
from tests.conftest import run_cli
from tests.hubkit import LiveHub, live_hub

MODES = ["auto", "legacy"]  # `Client(mode=...)`: 2026-07-28 (discover) or the 2025 handshake
NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
NOTE_CLI = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


@dataclass(frozen=True)
class Case:
    op: str
    args: dict[str, Any]
    field: str
    message: str
    cli: tuple[str, ...] | None = None


CASES = [
    Case("event_append", {**NOTE, "to": "claude"}, "to", "to is not a parameter of event_append"),
    Case("event_list", {"limit": True}, "limit", "limit must be an integer"),
    Case(
        "event_list",
        {"limit": 0},
        "limit",
        "limit is 0; it must be between 1 and 500",
        ("list", "--limit", "0"),
    ),
    Case("event_wait", {"order": "asc"}, "order", "order is not a parameter of event_wait"),
    Case(
        "event_append",
        {k: v for k, v in NOTE.items() if k != "from_agent"},
        "from_agent",
        "from_agent is required",
    ),
    Case("event_append", {**NOTE, "stream": 5}, "stream", "stream must be a string, not int"),
    Case("event_append", {**NOTE, "from_agent": None}, "from_agent", "from_agent is required"),
    Case(
        "event_append",
        {**NOTE, "type": "Not A Type"},
        "type",
        "type 'Not A Type' is not a valid event type (1-64 chars: a lowercase letter or digit, "
        "then lowercase letters, digits, '.', '_', '-')",
        ("append", "--type", "Not A Type", "--stream", "s", "--room", "r", "--from-agent", "a"),
    ),
    Case(
        "event_append",
        {**NOTE, "metadata": json.dumps(_nested(300))},
        "metadata",
        "metadata nests 300 levels deep; the limit is 64 levels",
        (*NOTE_CLI, "--metadata", json.dumps(_nested(300))),
    ),
    Case(
        "event_append",
        {**NOTE, "metadata": _nested(65)},
        "metadata",
        "metadata nests 65 levels deep; the limit is 64 levels",
    ),
    Case(
        "event_append",
        {**NOTE, "from_agent": "claude-laptop\u200d"},
        "from_agent",
        "from_agent contains U+200D (ZERO WIDTH JOINER); invisible and direction-changing "
        "characters are not allowed in routing fields",
        (
            "append",
            "--type",
            "note",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "claude-laptop\u200d",
        ),
    ),
    Case(
        "event_append",
        {**NOTE, "from_agent": "*"},
        "from_agent",
        "from_agent is '*', the broadcast address; a writer writes under its own name",
        (*NOTE_CLI[:-1], "*"),
    ),
    Case(
        "event_append",
        {**NOTE, "to_agent": "bob\u202e"},
        "to_agent",
        "to_agent contains U+202E (RIGHT-TO-LEFT OVERRIDE); invisible and direction-changing "
        "characters are not allowed in routing fields",
    ),
    Case(
        "event_append",
        {**NOTE, "room": "r\u0085"},
        "room",
        "room contains U+0085 (a control character); invisible and direction-changing "
        "characters are not allowed in routing fields",
    ),
    Case(
        "event_list",
        {"to_agent": ""},
        "to_agent",
        "to_agent is empty; give a value or leave the filter out",
        ("list", "--to-agent", ""),
    ),
    Case(
        "event_list",
        {"stream": ["s", "\ufeffs"]},
        "stream",
        "stream contains U+FEFF (ZERO WIDTH NO-BREAK SPACE); invisible and direction-changing "
        "characters are not allowed in routing fields",
    ),
    Case(
        "event_ack",
        {"event_id": "evt_x", "from_agent": "a", "to": "b"},
        "to",
        "to is not a parameter of event_ack",
    ),
    Case(
        "artifact_put",
        {"kind": "patch", "content": "x", "created_by": "a", "limit": 3},
        "limit",
        "limit is not a parameter of artifact_put",
    ),
    Case(
        "task_update",
        {"task_id": "task_x", "action": "finish", "from_agent": "a"},
        "action",
        "action 'finish' is not one of claim, decline, progress, block, unblock, complete, "
        "fail, cancel, accept, reject, reopen",
    ),
    Case(
        "task_update",
        {"task_id": "task_x", "action": "claim", "from_agent": "a", "to": "b"},
        "to",
        "to is not a parameter of task_update",
    ),
    Case(
        "task_update",
        {"task_id": "task_x", "action": "progress", "from_agent": "a", "progress": 140},
        "progress",
        "progress 140 is out of range; it must be between 0 and 100 (percent)",
        ("task", "progress", "task_x", "140", "--from-agent", "a"),
    ),
    Case(
        "task_list",
        {"state": "done"},
        "state",
        "state 'done' is not one of open, claimed, working, blocked, ready, completed, "
        "declined, failed, cancelled",
        ("task", "list", "--state", "done"),
    ),
    Case(
        "task_list",
        {"cursor": "x"},
        "cursor",
        "cursor must be the `cursor` a previous task_list returned",
        ("task", "list", "--cursor", "x"),
    ),
]
TASK = {
    "project": "p",
    "from_agent": "claude",
    "to_agent": "codex",
    "goal": "g",
    "branch": "main",
    "base_commit": "abc1234",
    "done": "d",
}
TASK_CLI = (
    *("task", "create", "--project", "p", "--from-agent", "claude", "--to-agent", "codex"),
    *("--goal", "g", "--branch", "main", "--base-commit", "abc1234", "--done", "d"),
)
CASES += [
    Case(
        "task_create",
        {**TASK, "claim_timeout_ms": -1},
        "claim_timeout_ms",
        "claim_timeout_ms is -1; it must be between 0 and 604,800,000 ms (0: no reminders)",
        (*TASK_CLI, "--claim-timeout-ms", "-1"),
    ),
    Case(
        "task_create",
        {**TASK, "max_reminders": 21},
        "max_reminders",
        "max_reminders is 21; it must be between 0 and 20",
        (*TASK_CLI, "--max-reminders", "21"),
    ),
    Case(
        "task_create",
        {**TASK, "thread_budget": 0},
        "thread_budget",
        "thread_budget is 0; it must be between 1 and 100,000 events",
        (*TASK_CLI, "--thread-budget", "0"),
    ),
]
# File leases (issue 22): the globs, the ttl, the project.
LEASE = {"agent": "claude", "paths": ["src/**"], "project": "demo"}
LEASE_CLI = ("lease", "acquire", "--agent", "claude", "--project", "demo")
CASES += [
    Case(
        "lease_acquire",
        {**LEASE, "ttl_s": 0},
        "ttl_s",
        "ttl_s is 0; it must be between 1 and 604800 seconds",
        (*LEASE_CLI, "--ttl", "0", "src/**"),
    ),
    Case(
        "lease_acquire",
        {**LEASE, "paths": ["../etc"]},
        "paths",
        "paths glob '../etc' must stay inside the project root ('..' is not allowed)",
        (*LEASE_CLI, "../etc"),
    ),
    Case(
        "lease_acquire",
        {**LEASE, "paths": [f"f{i}" for i in range(33)]},
        "paths",
        "paths has 33 globs; the limit is 32",
        (*LEASE_CLI, *(f"f{i}" for i in range(33))),
    ),
    Case(
        "lease_acquire",
        {"agent": "claude", "paths": ["src/**"]},
        "project",
        "project is required (or task_id: the task's project)",
        ("lease", "acquire", "--agent", "claude", "src/**"),
    ),
]
IDS = [f"{c.op}-{c.field}-{i}" for i, c in enumerate(CASES)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(tmp_path_factory.mktemp("surfaces")) as h:
        yield h


def _nothing_written(store: LogStore) -> None:
    stats = store.stats()
    assert stats["events"] == 0 and stats["artifacts"] == 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_http_refuses_with_the_message_and_field(hub: LiveHub, case: Case) -> None:
    resp = httpx.post(f"{hub.url}/v1/{case.op}", json=case.args, timeout=30)
    assert resp.status_code == 422, resp.text
    assert resp.json() == {"error": case.message, "field": case.field}
    _nothing_written(hub.store)


TOOLS = "coord,leases"  # the default profile and the lease tools the table refuses through


async def _mcp_errors(session: Client | ClientSession) -> list[str]:
    out = []
    for case in CASES:
        result = await session.call_tool(f"mempalace_{case.op}", case.args)
        assert result.is_error is True, (case, result.content)
        out.append(result.content[0].text)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_mcp_in_memory_refuses_with_the_same_texts(tmp_path: Path, mode: str) -> None:
    async def scenario() -> list[str]:
        with LogStore.open(str(tmp_path / "mcp.sqlite3")) as store:
            server = mcp_server.build_server(store, tools=TOOLS)
            async with Client(server.protocol, mode=mode) as client:
                texts = await _mcp_errors(client)
            _nothing_written(store)
        return texts

    assert asyncio.run(scenario()) == [c.message for c in CASES]


def test_mcp_over_streamable_http_refuses_with_the_same_texts(hub: LiveHub) -> None:
    async def scenario() -> list[str]:  # the 2025-11-25 handshake, as agents speak it today
        async with streamable_http_client(f"{hub.url}/mcp?tools={TOOLS}") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await _mcp_errors(session)

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == [c.message for c in CASES]
    _nothing_written(hub.store)


def test_mcp_2026_over_streamable_http_refuses_with_the_same_texts(hub: LiveHub) -> None:
    async def scenario() -> list[str]:  # `Client` discovers 2026-07-28: no session, no handshake
        async with Client(f"{hub.url}/mcp?tools={TOOLS}") as client:
            assert client.protocol_version == "2026-07-28"
            return await _mcp_errors(client)

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == [c.message for c in CASES]
    _nothing_written(hub.store)


@pytest.mark.parametrize("case", [c for c in CASES if c.cli], ids=lambda c: c.cli[0])
def test_the_cli_refuses_with_the_same_texts(tmp_path: Path, case: Case) -> None:
    db = str(tmp_path / "cli.sqlite3")
    with LogStore.open(db):
        pass  # an existing, empty log (reads refuse a missing one)
    assert case.cli is not None
    done = run_cli(*case.cli, "--db", db)
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode().strip() == f"error: {case.message}"
    with LogStore.open(db) as store:
        _nothing_written(store)


def test_every_tool_documents_exactly_the_operation_parameters(tmp_path: Path) -> None:
    async def scenario() -> dict[str, set[str]]:
        with LogStore.open(str(tmp_path / "schema.sqlite3")) as store:
            server = mcp_server.build_server(store, tools="all", presence=Registry())
            async with Client(server.protocol) as client:
                tools = (await client.list_tools()).tools
        return {t.name: set(t.input_schema["properties"]) for t in tools}

    schemas = asyncio.run(scenario())
    table = {**operations.params(), **operations.PRESENCE_PARAMS}
    assert {name.removeprefix("mempalace_") for name in schemas} == set(table)
    for name, props in schemas.items():
        assert props == set(table[name.removeprefix("mempalace_")]), name
