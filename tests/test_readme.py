"""The README's promises, run for real: the quick-start delegation through the CLI against a
live hub, and the four MCP client snippets connected with the official SDK client exactly as
they are written (only the palace directory and the hub port are pointed at the test's own)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import run_cli
from tests.hubkit import live_hub

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
TOKEN = "readme-token"
pytestmark = pytest.mark.slow


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _mcp_snippets() -> dict[str, dict[str, Any]]:
    """{"claude-stdio", "claude-http", "codex-stdio", "codex-http"} -> the server entry."""
    out: dict[str, dict[str, Any]] = {}
    for text in _blocks("json"):
        if '"mcpServers"' in text:
            entry = json.loads(text)["mcpServers"]["logstream"]
            out["claude-http" if "url" in entry else "claude-stdio"] = entry
    for text in _blocks("toml"):
        if "[mcp_servers.logstream]" in text:
            entry = tomllib.loads(text)["mcp_servers"]["logstream"]
            out["codex-http" if "url" in entry else "codex-stdio"] = entry
    return out


def test_the_readme_opens_with_exactly_two_commands() -> None:
    first = _blocks("sh")[0].strip().splitlines()
    assert len(first) == 2
    assert first[0].endswith("logstream serve") and first[1].endswith("python -m pytest")
    assert set(_mcp_snippets()) == {"claude-stdio", "claude-http", "codex-stdio", "codex-http"}


def _logstream_exe() -> str:
    exe = Path(sys.executable).with_name("logstream")
    return str(exe) if exe.exists() else shutil.which("logstream") or "logstream"


async def _list_and_call(session: ClientSession) -> None:
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"mempalace_task_create", "mempalace_event_wait", "mempalace_patch_submit"} <= names
    made = await session.call_tool("mempalace_event_append", {
        "type": "note", "stream": "readme", "room": "r", "from_agent": "snippet"})  # fmt: skip
    assert made.isError is False
    bad = await session.call_tool("mempalace_event_list", {"limit": 501})
    assert bad.isError is True and "limit" in bad.content[0].text


@pytest.mark.parametrize("client", ["claude-stdio", "codex-stdio"])
def test_stdio_snippets_start_a_working_mcp_server(client: str, tmp_path: Path) -> None:
    entry = _mcp_snippets()[client]
    assert entry["command"] == "logstream" and entry["args"] == ["mcp"]
    env = {**os.environ, **entry["env"], "MEMPALACE_PALACE_PATH": str(tmp_path)}
    env["PYTHONPATH"] = str(REPO)
    params = StdioServerParameters(command=_logstream_exe(), args=entry["args"], env=env)

    async def scenario() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _list_and_call(session)

    asyncio.run(asyncio.wait_for(scenario(), 90))
    assert (tmp_path / "logstream.sqlite3").exists()


@pytest.mark.parametrize("client", ["claude-http", "codex-http"])
def test_http_snippets_reach_the_hubs_mcp_endpoint(client: str, tmp_path: Path) -> None:
    entry = _mcp_snippets()[client]
    if client == "claude-http":
        assert entry["type"] == "http"
        header = entry["headers"]["Authorization"].replace("${LOGSTREAM_TOKEN}", TOKEN)
    else:
        header = f"Bearer {TOKEN}"  # what Codex sends from bearer_token_env_var
        assert entry["bearer_token_env_var"] == "LOGSTREAM_TOKEN"
    assert entry["url"] == "http://127.0.0.1:8765/mcp"
    with live_hub(tmp_path, token=TOKEN) as hub:
        url = entry["url"].replace("http://127.0.0.1:8765", hub.url)

        async def scenario() -> None:
            async with httpx.AsyncClient(headers={"Authorization": header}, timeout=60) as http:
                async with streamable_http_client(url, http_client=http) as (read, write, _), \
                        ClientSession(read, write) as session:  # fmt: skip
                    await _list_and_call(session)

        asyncio.run(asyncio.wait_for(scenario(), 90))
        assert httpx.post(url, json={}).status_code == 401  # the token is required


def _cli(hub: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    proc = run_cli(*args, input=input, env={"LOGSTREAM_HUB": hub, "LOGSTREAM_TOKEN": TOKEN})
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def test_the_quick_start_delegation_runs_against_a_hub(tmp_path: Path) -> None:
    patch = b"--- a/login.py\r\n+++ b/login.py\n@@ -1 +1 @@\n-redirect(next)\n+redirect(safe(next))"
    with live_hub(tmp_path, token=TOKEN) as hub:
        env = {**os.environ, "PYTHONPATH": str(REPO), "LOGSTREAM_HUB": hub.url,
               "LOGSTREAM_TOKEN": TOKEN}  # fmt: skip
        watcher = subprocess.Popen(
            [sys.executable, "-m", "mempalace_logstream", "watch", "--agent", "codex-desktop",
             "--state-file", str(tmp_path / "w.json"), "--idle-exit-ms", "60000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            # A first run starts at the tip: the task must come after the watcher's first
            # checkpoint (written before its first poll), as it does when a person types.
            deadline = time.monotonic() + 60
            while not (tmp_path / "w.json").exists():
                assert watcher.poll() is None and time.monotonic() < deadline, "no checkpoint"
                time.sleep(0.01)
            created = _cli(hub.url, "task", "create", "--project", "Demo App",
                "--from-agent", "claude-laptop", "--to-agent", "codex-desktop",
                "--goal", "Fix the login redirect loop", "--done", "tests/test_login.py passes",
                "--branch", "main", "--base-commit", "3f2a9c1", "--json")  # fmt: skip
            task = json.loads(created.stdout)["task"]
            out, err = watcher.communicate(timeout=60)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.communicate()
        assert watcher.returncode == 0, err.decode()
        assert task["id"].encode() in out
        corr, stream = task["correlation_id"], task["stream"]
        assert stream == "project/demo_app"
        _cli(hub.url, "append", "--type", "task.claim", "--stream", stream, "--room", "delegation",
             "--from-agent", "codex-desktop", "--to-agent", "claude-laptop",
             "--correlation-id", corr, "--status", "claimed")  # fmt: skip
        _cli(hub.url, "patch", "submit", "-", "--from-agent", "codex-desktop",
             "--to-agent", "claude-laptop", "--stream", stream, "--correlation-id", corr,
             "--branch", "main", "--base-commit", "3f2a9c1", "--body", "fixed; tests pass",
             input=patch)  # fmt: skip
        ready = json.loads(_cli(hub.url, "wait", "--correlation-id", corr, "--type", "patch.ready",
                                "--since-event-id", task["id"], "--json").stdout)  # fmt: skip
        assert ready["timed_out"] is False and ready["count"] == 1
        event = ready["events"][0]
        _cli(hub.url, "artifact", "get", event["artifact_ids"][0], "--out",
             str(tmp_path / "fix.patch"))  # fmt: skip
        assert (tmp_path / "fix.patch").read_bytes() == patch
        _cli(hub.url, "ack", event["id"], "--from-agent", "claude-laptop", "--status", "applied")
        thread = json.loads(_cli(hub.url, "list", "--correlation-id", corr, "--order", "asc",
                                 "--json").stdout)  # fmt: skip
    assert [e["type"] for e in thread["events"]] == [
        "task.request", "task.claim", "patch.ready", "event.ack"]  # fmt: skip
    assert thread["events"][-1]["status"] == "applied"
