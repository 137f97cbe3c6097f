"""The MCP context budget (issue 25): every tool `logstream mcp` lists costs each agent context
on every session. The default set (`--tools coord`) stays under 16,000 bytes of `tools/list`
and the eight tools shared with the reference under the reference's own bytes for them; the
operator tools come with `--tools all`; the presence tools only where a hub keeps presence;
and the descriptions keep telling an agent what to do next.

Bytes are counted as bench/bench_mcp_tools.py counts them (`list_bytes`: the `tools` array as
JSON, `json.dumps` defaults), each server spoken to over stdio by the real SDK client.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from bench import bench_mcp_tools as bench
from mempalace_logstream import LogStore, mcp_server
from mempalace_logstream.presence import Registry
from tests.conftest import REPO, run_cli
from tests.hubkit import live_hub

BUDGET = 16_000
# The reference's bytes for the tools we share, mempalace==3.11.0's `python -m
# mempalace.mcp_server`, as printed ("reference per tool:") by
# `python bench/bench_mcp_tools.py --quick` (2026-12-04).
REFERENCE_BYTES = {
    "mempalace_event_append": 1779,
    "mempalace_task_create": 1095,
    "mempalace_event_list": 3142,
    "mempalace_event_wait": 2090,
    "mempalace_event_ack": 768,
    "mempalace_artifact_put": 646,
    "mempalace_artifact_get": 293,
    "mempalace_patch_submit": 1179,
}
COORD = {
    *(f"mempalace_event_{op}" for op in ("append", "get", "list", "wait", "ack")),
    *(f"mempalace_artifact_{op}" for op in ("put", "get")),
    "mempalace_patch_submit",
    *(f"mempalace_task_{op}" for op in ("create", "update", "status", "list")),
}
LEASES = {f"mempalace_lease_{op}" for op in ("acquire", "renew", "release", "list", "check")}
PRESENCE = {f"mempalace_presence_{op}" for op in ("announce", "leave", "list")}
OPERATOR = {
    *("mempalace_version_vector", "mempalace_stats"),
    *("mempalace_event_redact", "mempalace_delivery_status"),
}


def _listed(*args: str) -> dict[str, dict[str, Any]]:
    """{name: tool} that `logstream mcp ARGS` lists over stdio."""
    cmd = [sys.executable, "-m", "mempalace_logstream", "mcp", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    _, tools = asyncio.run(asyncio.wait_for(bench.stdio_tools(cmd, env), 120))
    return {t["name"]: t for t in tools}


def test_the_default_set_is_under_budget_and_the_shared_eight_under_the_references(
    tmp_path: Path,
) -> None:
    tools = _listed("--db", str(tmp_path / "log.sqlite3"))
    assert set(tools) == COORD  # no operator tools; no presence without a hub
    assert bench.list_bytes(list(tools.values())) <= BUDGET
    ours = {name: bench.tool_bytes(tools[name]) for name in REFERENCE_BYTES}
    assert sum(ours.values()) <= sum(REFERENCE_BYTES.values()), ours


def test_presence_is_offered_through_a_hub_and_the_set_stays_under_budget(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub:
        tools = _listed("--hub", hub.url)
        every = _listed("--hub", hub.url, "--tools", "all")
    assert set(tools) == COORD | PRESENCE
    assert bench.list_bytes(list(tools.values())) <= BUDGET
    assert set(every) == COORD | PRESENCE | OPERATOR | LEASES


def test_tools_all_offers_the_operator_tools_which_the_default_refuses(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    assert set(_listed("--db", db, "--tools", "all")) == COORD | OPERATOR | LEASES
    assert set(_listed("--db", db, "--tools", "event_list,mempalace_stats")) == {
        "mempalace_event_list",
        "mempalace_stats",
    }
    assert set(_listed("--db", db, "--tools", "coord,stats")) == COORD | {"mempalace_stats"}
    assert set(_listed("--db", db, "--tools", "coord,leases")) == COORD | LEASES
    channel = ("--agent", "a", "--channel", "--state-file", "")  # channel mode serves the same
    assert set(_listed("--db", db, *channel)) == COORD
    assert set(_listed("--db", db, *channel, "--tools", "all")) == COORD | OPERATOR | LEASES

    async def calls() -> tuple[str, str]:
        with LogStore.open(db) as store:
            async with Client(mcp_server.build_server(store).protocol) as client:
                refused = await client.call_tool("mempalace_stats", {})
                assert refused.is_error is True
            every = mcp_server.build_server(store, tools="all")
            async with Client(every.protocol) as client:
                stats = await client.call_tool("mempalace_stats", {})
                assert stats.is_error is False
        return refused.content[0].text, stats.content[0].text  # type: ignore[union-attr]

    refused, stats = asyncio.run(asyncio.wait_for(calls(), 60))
    assert refused == "unknown tool 'mempalace_stats'"
    assert "replica_id" in json.loads(stats)


def test_a_bad_tools_value_is_refused_naming_the_option_and_the_allowed_values(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.sqlite3"
    out = run_cli("mcp", "--tools", "coord,bogus", "--db", str(db))
    err = out.stderr.decode()
    assert out.returncode == 1, err
    assert err.startswith(
        "error: --tools: 'bogus' is not a profile (coord, leases, all) or a tool ("
    ), err
    assert "event_list" in err and "version_vector" in err
    out = run_cli("mcp", "--tools", "presence_list", "--db", str(db))
    assert out.returncode == 1
    assert "--tools: presence_list needs a hub" in out.stderr.decode()
    assert not db.exists()  # refused before anything was opened or created


def test_the_hubs_mcp_lists_the_default_set_unless_its_url_asks_for_more(tmp_path: Path) -> None:
    async def names(url: str) -> tuple[set[str], bool]:
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {t.name for t in (await session.list_tools()).tools}
                stats = await session.call_tool("mempalace_stats", {})
        return listed, stats.is_error is True

    with live_hub(tmp_path) as hub:
        default, refused = asyncio.run(asyncio.wait_for(names(hub.url + "/mcp"), 60))
        every, not_refused = asyncio.run(asyncio.wait_for(names(hub.url + "/mcp?tools=all"), 60))
        bad = httpx.post(hub.url + "/mcp?tools=nope", json={}, timeout=30)
    assert default == COORD | PRESENCE and refused
    assert every == COORD | PRESENCE | OPERATOR | LEASES and not not_refused
    assert bad.status_code == 400
    assert bad.json()["field"] == "tools"
    assert bad.json()["error"].startswith(
        "tools: 'nope' is not a profile (coord, leases, all) or a tool"
    )


# What each tool of the default set tells an agent to do next (or how to read its answer): the
# guidance that makes the tools work well, kept through any trimming.
NEXT_STEP = {
    "event_append": ("correlation_id", "to_agent", "append a new one"),
    "event_get": ("{event}",),
    "event_list": ("`cursor` as since_event_id", "mempalace_event_wait", "Newest first"),
    "event_wait": ("timed_out=true", "call again with the returned cursor"),
    "event_ack": ("status=claimed", "status=applied"),
    "artifact_put": ("artifact_ids", "mempalace_artifact_get", "mempalace_patch_submit"),
    "artifact_get": ("sha256", "base64"),
    "patch_submit": ("patch.ready", "warnings are advice"),
    "task_create": ("handoff", "mempalace_task_status", "mempalace_task_update"),
    "task_update": ("open -> claimed", "A refused move writes nothing and says why"),
    "task_status": ("state", "lease"),
    "task_list": ("state=open, to_agent=<you>", "state=ready, from_agent=<you>"),
    "presence_announce": ("ttl_s", "Needs a hub"),
    "presence_leave": ("announcing again",),
    "presence_list": ("before delegating", "wakeable"),
}
PARAM_HINTS = {  # (tool, parameter): what its description must keep saying
    ("event_list", "since_event_id"): "cursor",
    ("event_wait", "since_event_id"): "cursor",
    ("event_list", "from_agent"): "NOT a filter (use writer)",
    ("task_create", "base_commit"): "not a branch",
    ("task_update", "progress"): "0-100",
}


def test_the_default_sets_descriptions_keep_saying_what_to_do_next(tmp_path: Path) -> None:
    async def tools() -> dict[str, Any]:
        with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
            server = mcp_server.build_server(store, presence=Registry())
            async with Client(server.protocol) as client:
                return {t.name: t for t in (await client.list_tools()).tools}

    listed = asyncio.run(asyncio.wait_for(tools(), 60))
    assert set(listed) == {f"mempalace_{op}" for op in NEXT_STEP}
    for op, phrases in NEXT_STEP.items():
        text = listed[f"mempalace_{op}"].description or ""
        for phrase in phrases:
            assert phrase in text, (op, phrase, text)
    for (op, param), phrase in PARAM_HINTS.items():
        described = listed[f"mempalace_{op}"].input_schema["properties"][param]["description"]
        assert phrase in described, (op, param, described)
