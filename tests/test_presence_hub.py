"""Presence at the hub (S-8.4): HTTP routes and the CLI against a live hub, the refusals with
the error shape, nothing in the database, and the CLI's answer without a hub."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.conftest import run_cli
from tests.hubkit import live_hub


def test_announce_list_leave_over_http_and_the_cli(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url, timeout=30) as http:
        events_before = hub.store.stats()["events"]
        made = http.post(
            "/v1/presence_announce",
            json={"agent": "codex", "state": "working", "task_id": "task_x_1", "ttl_s": 30},
        )
        assert made.status_code == 200, made.text
        assert made.json()["presence"]["state"] == "working"
        cli = run_cli(
            *("presence", "announce", "--agent", "claude", "--state", "watching"),
            *("--hub", hub.url, "--json"),
        )
        assert cli.returncode == 0, cli.stderr
        listed = http.get("/v1/presence").json()
        assert [a["agent"] for a in listed["agents"]] == ["claude", "codex"]
        assert listed["count"] == 2
        human = run_cli("presence", "list", "--hub", hub.url).stdout.decode().splitlines()
        assert human[1].startswith("codex: working on task_x_1, until ")
        left = run_cli("presence", "leave", "--agent", "codex", "--hub", hub.url, "--json")
        assert json.loads(left.stdout) == {"left": True}
        assert [a["agent"] for a in http.post("/v1/presence_list").json()["agents"]] == ["claude"]
        assert hub.store.stats()["events"] == events_before  # never written to the log


def test_refusals_name_the_field_on_http_and_the_cli(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url, timeout=30) as http:
        cases = [
            (
                {"agent": "a", "state": "away"},
                "state",
                "state 'away' is not one of watching, working, idle",
            ),
            (
                {"agent": "a", "state": "idle", "ttl_s": 0},
                "ttl_s",
                "ttl_s is 0; it must be between 1 and 3600",
            ),
            (
                {"agent": "a", "state": "idle", "to": "b"},
                "to",
                "to is not a parameter of presence_announce",
            ),
            ({"state": "idle"}, "agent", "agent is required"),
        ]
        for body, field, text in cases:
            resp = http.post("/v1/presence_announce", json=body)
            assert resp.status_code == 422 and resp.json() == {"error": text, "field": field}
        assert http.post(
            "/v1/presence_list", content=b"[1]", headers={"content-type": "application/json"}
        ).json() == {
            "error": "the body must be a JSON object",
            "field": "body",
        }
        cli = run_cli("presence", "announce", "--agent", "a", "--state", "away", "--hub", hub.url)
        assert cli.returncode == 1
        assert (
            cli.stderr.decode().strip()
            == "error: state 'away' is not one of watching, working, idle"
        )
        assert http.get("/v1/presence").json()["count"] == 0


def test_without_a_hub_the_cli_says_presence_needs_one(tmp_path: Path) -> None:
    out = run_cli("presence", "list", "--json", env={"LOGSTREAM_HUB": ""})
    assert out.returncode == 1
    assert json.loads(out.stderr) == {
        "error": "presence is kept by a hub: give --hub URL (or LOGSTREAM_HUB), or start "
        "one with `logstream serve`",
        "field": "hub",
    }


def test_mcp_tools_share_the_hubs_table_and_need_a_hub_elsewhere(tmp_path: Path) -> None:
    import asyncio

    from mcp import Client, ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from mempalace_logstream import LogStore, mcp_server

    async def over_the_hub(url: str) -> None:
        async with (
            streamable_http_client(url + "/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            made = await session.call_tool(
                "mempalace_presence_announce", {"agent": "codex", "state": "idle", "ttl_s": 90}
            )
            assert not made.is_error, made.content
            bad = await session.call_tool(
                "mempalace_presence_announce", {"agent": "codex", "state": "asleep"}
            )
            assert bad.is_error
            assert bad.content[0].text == "state 'asleep' is not one of watching, working, idle"  # type: ignore[union-attr]

    async def without_a_hub() -> str:  # no hub keeps presence: its tools are not offered
        with LogStore.open(str(tmp_path / "local.sqlite3")) as store:
            async with Client(mcp_server.build_server(store, tools="all").protocol) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert not {n for n in names if n.startswith("mempalace_presence")}
                out = await client.call_tool("mempalace_presence_list", {})
                assert out.is_error
                return str(out.content[0].text)  # type: ignore[union-attr]

    with live_hub(tmp_path) as hub:
        asyncio.run(over_the_hub(hub.url))
        listed = httpx.get(hub.url + "/v1/presence", timeout=30).json()
        assert [(a["agent"], a["state"]) for a in listed["agents"]] == [("codex", "idle")]
    assert asyncio.run(without_a_hub()) == "unknown tool 'mempalace_presence_list'"
