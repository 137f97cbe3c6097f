"""File leases in presence (issue 22): a hub's presence list says, per agent, how many active
file leases it holds and on which globs (one read of the hub's log), on HTTP, in the CLI's
`presence list` line and through the hub's MCP tool; a released lease leaves the count."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import run_cli
from tests.hubkit import live_hub


def test_presence_lists_each_agents_active_leases(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url) as c:
        for agent in ("claude", "codex"):
            body = {"agent": agent, "state": "working", "ttl_s": 60}
            assert c.post("/v1/presence_announce", json=body).status_code == 200
        taken = []
        for paths in (["src/**"], ["src/**", "tests/*.py"], ["docs/**"]):
            body = {"agent": "claude", "paths": paths, "project": f"p{len(taken)}"}
            resp = c.post("/v1/lease_acquire", json=body)
            assert resp.status_code == 200, resp.text
            taken.append(resp.json()["lease"]["lease_id"])
        by_agent = {a["agent"]: a for a in c.get("/v1/presence").json()["agents"]}
        assert by_agent["claude"]["leases"] == {
            "count": 3,
            "paths": ["docs/**", "src/**", "tests/*.py"],  # newest lease first, each once
        }
        assert by_agent["codex"]["leases"] == {"count": 0, "paths": []}
        posted = c.post("/v1/presence_list", json={}).json()["agents"]
        assert {a["agent"]: a["leases"] for a in posted} == {
            a: by_agent[a]["leases"] for a in by_agent
        }
        out = run_cli("presence", "list", "--hub", hub.url)
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.decode().splitlines() if x.startswith("claude:"))
        assert line.endswith("; leases: 3 (docs/**, src/**, tests/*.py)")
        codex = next(x for x in out.stdout.decode().splitlines() if x.startswith("codex:"))
        assert "leases" not in codex
        release = {"lease_id": taken[2], "agent": "claude"}
        assert c.post("/v1/lease_release", json=release).status_code == 200
        again = {a["agent"]: a for a in c.get("/v1/presence").json()["agents"]}
        assert again["claude"]["leases"]["count"] == 2


def test_the_hubs_mcp_presence_list_says_the_same(tmp_path: Path) -> None:
    import asyncio
    import json

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def listed(url: str) -> dict[str, object]:
        async with (
            streamable_http_client(url + "/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            out = await session.call_tool("mempalace_presence_list", {})
            assert not out.is_error, out.content
            return dict(json.loads(out.content[0].text))  # type: ignore[union-attr]

    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url) as c:
        body = {"agent": "claude", "state": "working", "ttl_s": 60}
        assert c.post("/v1/presence_announce", json=body).status_code == 200
        lease = {"agent": "claude", "paths": ["src/**"], "project": "demo"}
        assert c.post("/v1/lease_acquire", json=lease).status_code == 200
        agents = asyncio.run(listed(hub.url))["agents"]
        assert [a["leases"] for a in agents] == [{"count": 1, "paths": ["src/**"]}]  # type: ignore[union-attr,index]
