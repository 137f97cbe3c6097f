"""MCP tools through the official SDK client: in memory, over stdio (`logstream mcp`) and over
streamable HTTP on a real hub. A full delegation runs on both transports.

Two protocol eras: `ClientSession.initialize()` (the 2025-11-25 handshake that today's agents,
Claude Code and Codex, speak) and the SDK's `Client` in its default mode, which probes
`server/discover` and speaks 2026-07-28."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mempalace_logstream import LogStore, mcp_server, operations
from mempalace_logstream.validation import DEFAULT_MAX_ARTIFACT_BYTES
from tests.hubkit import live_hub

REPO = Path(__file__).resolve().parents[1]
# The default set (`--tools coord`) without a hub, the presence tools a hub adds to it, and
# the operator tools of `--tools all`.
COORD_READ = {
    "mempalace_event_list",
    "mempalace_event_wait",
    "mempalace_event_get",
    "mempalace_artifact_get",
    "mempalace_task_status",
    "mempalace_task_list",
}
COORD_WRITE = {
    "mempalace_event_append",
    "mempalace_event_ack",
    "mempalace_artifact_put",
    "mempalace_patch_submit",
    "mempalace_task_create",
    "mempalace_task_update",
}
COORD = COORD_READ | COORD_WRITE
PRESENCE = {"mempalace_presence_list", "mempalace_presence_announce", "mempalace_presence_leave"}
OPERATOR = {
    "mempalace_version_vector",
    "mempalace_stats",
    "mempalace_delivery_status",
    "mempalace_event_redact",
}
LEASE_READ = {"mempalace_lease_list", "mempalace_lease_check"}  # in `all` (toolsets.LEASES)
MODES = ["auto", "legacy"]  # `Client(mode=...)`: 2026-07-28 (discover) or the 2025 handshake
PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-print('bug')\n+print('fixed ✓')\n"


Session = Client | ClientSession  # the SDK's two client APIs answer the same calls


def _data(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


async def _tool_names(session: Session) -> dict[str, Any]:
    return {t.name: t for t in (await session.list_tools()).tools}


async def delegation(session: Session, offered: set[str] = COORD) -> None:
    """task_create → event_wait woken by a claim → patch_submit → artifact_get → event_ack."""
    tools = await _tool_names(session)
    assert set(tools) == offered
    assert tools["mempalace_event_wait"].annotations.read_only_hint is True
    append = tools["mempalace_event_append"].annotations  # MCP's default: not read-only
    assert not append.read_only_hint and append.destructive_hint is False
    assert "writer" in tools["mempalace_event_list"].input_schema["properties"]
    assert "limit" in tools["mempalace_event_wait"].input_schema["properties"]

    created = _data(
        await session.call_tool(
            "mempalace_task_create",
            {
                "project": "Demo App",
                "from_agent": "lead",
                "to_agent": "worker",
                "goal": "Fix the bug",
                "branch": "main",
                "base_commit": "abc1234",
                "done": "tests pass",
            },
        )
    )
    task = created["task"]
    assert task["status"] == "open" and created["handoff"]
    corr, stream = task["correlation_id"], task["stream"]

    # The lead blocks for a claim; the claim arrives through the same session meanwhile.
    wait = asyncio.create_task(
        session.call_tool(
            "mempalace_event_wait",
            {
                "correlation_id": corr,
                "status": "claimed",
                "since_event_id": task["id"],
                "timeout_ms": 120_000,
            },
        )
    )
    claim = _data(
        await session.call_tool(
            "mempalace_event_append",
            {
                "type": "task.claim",
                "stream": stream,
                "room": "delegation",
                "from_agent": "worker",
                "to_agent": "lead",
                "correlation_id": corr,
                "status": "claimed",
            },
        )
    )["event"]
    woke = _data(await asyncio.wait_for(wait, 30))
    assert woke["timed_out"] is False and [e["id"] for e in woke["events"]] == [claim["id"]]

    submitted = _data(
        await session.call_tool(
            "mempalace_patch_submit",
            {
                "content": PATCH,
                "from_agent": "worker",
                "stream": stream,
                "to_agent": "lead",
                "correlation_id": corr,
                "branch": "main",
                "base_commit": "abc1234",
            },
        )
    )
    art_id = submitted["artifact"]["id"]
    got = _data(await session.call_tool("mempalace_artifact_get", {"artifact_id": art_id}))
    art = got["artifact"]
    assert art["content"] == PATCH
    assert art["sha256"] == hashlib.sha256(PATCH.encode()).hexdigest()
    assert art["sha256"] == submitted["artifact"]["sha256"]

    ack = _data(
        await session.call_tool(
            "mempalace_event_ack",
            {"event_id": submitted["event"]["id"], "from_agent": "lead", "status": "applied"},
        )
    )
    assert ack["event"]["to_agent"] == "worker" and ack["event"]["correlation_id"] == corr
    thread = _data(
        await session.call_tool(
            "mempalace_event_list", {"correlation_id": corr, "order": "asc", "slim": True}
        )
    )
    assert [e["type"] for e in thread["events"]] == [
        "task.request",
        "task.claim",
        "patch.ready",
        "event.ack",
    ]


async def validation_errors_are_tool_errors(session: Session) -> None:
    bad = await session.call_tool(
        "mempalace_event_append",
        {"type": "Not A Type", "stream": "s", "room": "r", "from_agent": "a"},
    )
    assert bad.is_error is True
    assert "type 'Not A Type' is not a valid event type" in bad.content[0].text
    bad = await session.call_tool("mempalace_event_wait", {"timeout_ms": 300_001})
    assert bad.is_error is True and "timeout_ms" in bad.content[0].text
    bad = await session.call_tool("mempalace_artifact_get", {"artifact_id": "art_nope"})
    assert bad.is_error is True and "artifact 'art_nope' not found" in bad.content[0].text


# --------------------------------------------------------------------------- in memory


@pytest.fixture
def mcp_store(tmp_path: Path):
    store = LogStore.open(str(tmp_path / "mcp.sqlite3"))
    yield store
    store.close()


@pytest.mark.parametrize("mode", MODES)
def test_in_memory_delegation_and_tool_errors(mcp_store: LogStore, mode: str) -> None:
    async def scenario() -> None:
        server = mcp_server.build_server(mcp_store)
        async with Client(server.protocol, mode=mode) as client:
            await delegation(client)
            await validation_errors_are_tool_errors(client)

    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.parametrize("mode", MODES)
def test_read_only_hides_and_refuses_mutating_tools(mcp_store: LogStore, mode: str) -> None:
    async def scenario() -> None:
        server = mcp_server.build_server(mcp_store, read_only=True)
        async with Client(server.protocol, mode=mode) as client:
            assert set(await _tool_names(client)) == COORD_READ
        server = mcp_server.build_server(mcp_store, read_only=True, tools="all")
        async with Client(server.protocol, mode=mode) as client:
            reads = COORD_READ | LEASE_READ | OPERATOR - {"mempalace_event_redact"}
            assert set(await _tool_names(client)) == reads
            refused = await client.call_tool(
                "mempalace_event_append",
                {"type": "note", "stream": "s", "room": "r", "from_agent": "a"},
            )
            assert refused.is_error is True
            assert refused.content[0].text == "unknown tool 'mempalace_event_append'"
        assert mcp_store.event_list().events == ()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_every_tool_is_an_operation_of_the_table_with_agent_docs() -> None:
    for name, op in operations.every_operation().items():
        tool = mcp_server.spec_tool(name, op)
        assert tool.name == f"mempalace_{name}"
        assert tool.description and len(tool.description.split()) >= 12, name


# --------------------------------------------------------------------------- stdio


def _stdio_params(tmp_path: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mempalace_logstream", "mcp", "--db", str(tmp_path / "stdio.sqlite3"), *extra],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@asynccontextmanager
async def _stdio(tmp_path: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """A 2025-11-25 session, as Claude Code and Codex open it."""
    params = _stdio_params(tmp_path, *extra)
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@pytest.mark.slow
def test_stdio_servers_run_a_delegation_and_hide_writes_when_read_only(tmp_path: Path) -> None:
    # Both subprocesses start at once: interpreter start-up dominates on a loaded machine.
    async def full() -> None:
        async with _stdio(tmp_path / "rw") as session:
            await delegation(session)
            await validation_errors_are_tool_errors(session)

    async def read_only() -> None:  # the SDK's own `Client`: 2026-07-28 over stdio
        async with Client(_stdio_params(tmp_path / "ro", "--read-only")) as client:
            assert client.protocol_version == "2026-07-28"
            assert set(await _tool_names(client)) == COORD_READ
            refused = await client.call_tool("mempalace_task_create", {})
            assert refused.is_error is True

    async def scenario() -> None:
        await asyncio.gather(full(), read_only())

    (tmp_path / "rw").mkdir()
    (tmp_path / "ro").mkdir()
    asyncio.run(asyncio.wait_for(scenario(), 120))


# --------------------------------------------------------------------------- streamable HTTP


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_streamable_http_on_the_hub_runs_a_full_delegation(tmp_path: Path, mode: str) -> None:
    with live_hub(tmp_path, token="s3cret-token") as hub:

        async def scenario() -> None:
            headers = {"Authorization": "Bearer s3cret-token"}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                transport = streamable_http_client(hub.url + "/mcp", http_client=http)
                async with Client(transport, mode=mode) as client:
                    await delegation(client, COORD | PRESENCE)  # the hub keeps presence
                    await validation_errors_are_tool_errors(client)

        asyncio.run(asyncio.wait_for(scenario(), 90))


# --------------------------------------------------------------------------- polish (issue 9)


@pytest.mark.parametrize("mode", MODES)
def test_server_info_descriptions_and_results_read_well(mcp_store: LogStore, mode: str) -> None:
    import mempalace_logstream

    async def scenario() -> None:
        server = mcp_server.build_server(mcp_store, tools="all")
        async with Client(server.protocol, mode=mode) as client:
            assert client.server_info is not None
            assert client.server_info.version == mempalace_logstream.__version__
            assert client.instructions == mcp_server.INSTRUCTIONS
            for tool in (await client.list_tools()).tools:
                assert "\n    " not in (tool.description or ""), tool.name
                assert tool.output_schema is None
            result = await client.call_tool("mempalace_stats", {})
            text = result.content[0].text
            assert result.structured_content is None and len(result.content) == 1
            assert "\n" not in text and '": ' not in text  # compact JSON, once
            assert json.loads(text)["replica_id"] == mcp_store.replica_id

    asyncio.run(scenario())


def _vanish_mid_call(url: str) -> None:
    """A client whose connection drops with a call in flight (its process died): no
    `notifications/cancelled`, no DELETE, just a closed socket."""
    accept = {"accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "gone", "version": "1"},
    }
    call = {"name": "mempalace_event_wait", "arguments": {"timeout_ms": 10_000}}
    with httpx.Client(timeout=30) as http:
        init = http.post(url, headers=accept, json=_rpc("initialize", hello, 1))
        assert init.status_code == 200, init.text
        session = {
            **accept,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        http.post(url, headers=session, json=_rpc("notifications/initialized"))
        with http.stream("POST", url, headers=session, json=_rpc("tools/call", call, 2)) as resp:
            assert resp.status_code == 200  # the answer's SSE stream is open; we leave
    # closing the unread streaming response closed the connection


def _rpc(method: str, params: dict[str, Any] | None = None, ident: int | None = None) -> Any:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if ident is not None:
        msg["id"] = ident
    return msg


def test_a_client_disconnect_is_one_debug_line_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)

    async def gives_up(url: str) -> None:  # the SDK client abandons a call (2.x cancels it)
        async with streamable_http_client(f"{url}/mcp") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("mempalace_task_list", {})
        with pytest.raises(BaseException):  # noqa: B017 - the client gives up mid-call
            async with streamable_http_client(f"{url}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    call = session.call_tool("mempalace_event_wait", {"timeout_ms": 10_000})
                    await asyncio.wait_for(call, 0.5)

    def went_away() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "MCP client went away" in r.getMessage()]

    with live_hub(tmp_path) as hub:
        asyncio.run(gives_up(hub.url))
        _vanish_mid_call(f"{hub.url}/mcp")
        deadline = time.monotonic() + 10  # the server notices the closed stream on its own
        while not any("POST /mcp" in r.getMessage() for r in went_away()):
            assert time.monotonic() < deadline, "the disconnect was never logged"
            time.sleep(0.01)
    # The hub's side: the SDK's server loggers and ours. (The SDK's client, in this process
    # too, logs its own error when the cancelled call's answer reaches its closed stream.)
    hub_side = ("mcp.server", "mempalace_logstream")
    loud = [
        r for r in caplog.records if r.name.startswith(hub_side) and r.levelno >= logging.WARNING
    ]
    assert loud == [], [r.getMessage() for r in loud]
    assert all(r.levelno == logging.DEBUG and "\n" not in r.getMessage() for r in went_away())


def test_the_sdk_transport_logging_a_disconnect_traceback_becomes_one_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The safety net on the SDK's transport loggers (SDK 1.x logged every disconnect as a
    45-line traceback; 2.x catches them, but still logs any other exception in its stream
    tasks with one)."""
    import logging

    import anyio

    mcp_server.quiet_disconnects()
    caplog.set_level(logging.DEBUG)
    sdk = logging.getLogger("mcp.server.streamable_http")
    try:
        raise BaseExceptionGroup("writer", [anyio.BrokenResourceError(), anyio.EndOfStream()])
    except BaseExceptionGroup:
        sdk.exception("Error in SSE writer")
    try:
        raise RuntimeError("a real bug")
    except RuntimeError:
        sdk.exception("Error in message router")
    sdk_records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == sdk.name]
    assert sdk_records == [("ERROR", "Error in message router")]
    went = [r for r in caplog.records if "MCP client went away" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in went] == [
        ("DEBUG", "MCP client went away (Error in SSE writer: ExceptionGroup)")
    ]


def test_the_largest_artifact_fits_through_the_hubs_mcp_endpoint(tmp_path: Path) -> None:
    """The hub's guard owns the body limit (16 MiB by default); the SDK adds none of its own
    (2.x would refuse any body over 4 MiB with a 413)."""
    content = "x" * DEFAULT_MAX_ARTIFACT_BYTES  # the JSON-RPC envelope makes it > 4 MiB

    async def scenario(url: str) -> dict[str, Any]:
        async with Client(url, mode="legacy") as client:
            args = {"kind": "file", "content": content, "created_by": "big"}
            return _data(await client.call_tool("mempalace_artifact_put", args))

    with live_hub(tmp_path) as hub:
        put = asyncio.run(asyncio.wait_for(scenario(f"{hub.url}/mcp"), 60))["artifact"]
        assert put["sha256"] == hashlib.sha256(content.encode()).hexdigest()
        assert hub.store.artifact_get(put["id"]).sha256 == put["sha256"]


@pytest.mark.parametrize("era", [None, "2025-11-25", "2026-07-28"])
def test_an_mcp_body_nested_too_deeply_is_a_parse_error_not_a_500(
    tmp_path: Path, era: str | None
) -> None:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if era is not None:  # the protocol version header picks the SDK's code path
        headers["mcp-protocol-version"] = era
    with live_hub(tmp_path) as hub:
        resp = httpx.post(f"{hub.url}/mcp", content=b"[" * 100_000, headers=headers, timeout=30)
        bad = httpx.post(f"{hub.url}/mcp", content=b"{nope", headers=headers, timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == -32700
    assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
