"""Wakeable presence and the sender's warning (issue 20 items 1-2, RFC 0009), on a real hub
(uvicorn on a free port): a state per test, each reached the way an agent reaches it (a
channel or SSE client that reads after a push: yes; a live `logstream watch` that never
reacts: unverified; a hook-only agent and a reaped watcher: no), and the warning on append
and task create to a `no` agent over HTTP, MCP (the SDK's client) and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mempalace_logstream import deliveries
from mempalace_logstream.hub_client import HubClient
from tests.hubkit import LiveHub, live_hub
from tests.hubproc import env_for, wait_for

NOTE = {"type": "note", "stream": "s", "room": "r"}
TASK = {"project": "p", "goal": "g", "branch": "main", "base_commit": "abc1234", "done": "d"}
WARNING = "{} has no live delivery path; it will see this at its next prompt"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    with live_hub(tmp_path) as h:
        yield h


def _post(hub: LiveHub, op: str, **args: Any) -> dict[str, Any]:
    resp = httpx.post(f"{hub.url}/v1/{op}", json=args, timeout=30)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def _listed(hub: LiveHub) -> dict[str, dict[str, Any]]:
    out = _post(hub, "presence_list")
    return {e["agent"]: e for e in out["agents"] + out["unreachable"]}


def _announce(hub: LiveHub, agent: str, path: str, ttl_s: int = 60) -> None:
    _post(hub, "presence_announce", agent=agent, state="watching", path=path, ttl_s=ttl_s)


def test_a_channel_client_that_reads_after_a_push_is_wakeable_yes(hub: LiveHub) -> None:
    _announce(hub, "w1", "channel")
    assert _listed(hub)["w1"]["wakeable"] == "unverified"
    since = _post(hub, "event_append", **NOTE, from_agent="lead", body="start")["event"]["id"]
    _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="w1")
    pusher = HubClient(hub.url, delivery="channel")  # what `logstream mcp --channel` reads by
    try:
        pusher.call("event_wait", to_agent="w1", since_event_id=since, timeout_ms=0)
    finally:
        pusher.close()
    entry = _listed(hub)["w1"]
    assert (entry["wakeable"], entry["last_push_path"]) == ("unverified", "channel")
    assert entry["paths"][0]["path"] == "channel" and entry["last_push_at"]
    _post(hub, "event_list", to_agent="w1")  # the agent reacts: reads its inbox
    entry = _listed(hub)["w1"]
    assert entry["wakeable"] == "yes" and entry["last_life_at"] >= entry["last_push_at"]


def test_an_sse_client_that_acks_after_a_push_is_wakeable_yes(hub: LiveHub) -> None:
    _announce(hub, "w4", "sse")
    since = _post(hub, "event_append", **NOTE, from_agent="lead", body="start")["event"]["id"]
    eid = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="w4")["event"]["id"]
    params = {"from_agent": "w4", "since_event_id": since}
    with httpx.stream("GET", f"{hub.url}/v1/stream", params=params, timeout=30) as resp:
        for line in resp.iter_lines():
            if line == f"id: {eid}":
                break
    wait_for(lambda: _listed(hub)["w4"]["last_push_path"] == "sse", 10, "the SSE push")
    assert _listed(hub)["w4"]["wakeable"] == "unverified"
    _post(hub, "event_ack", event_id=eid, from_agent="w4")
    assert _listed(hub)["w4"]["wakeable"] == "yes"


def _watch(tmp_path: Path, url: str, agent: str, ttl_s: int) -> subprocess.Popen[bytes]:
    out = (tmp_path / f"watch-{agent}.out").open("wb")
    args = ["watch", "--agent", agent, "--hub", url, "--state-file", "", "--follow"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", *args, "--presence-ttl-s", str(ttl_s)],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env_for(tmp_path),
    )
    out.close()
    return proc


def test_a_live_watcher_that_never_reacts_is_unverified(tmp_path: Path, hub: LiveHub) -> None:
    proc = _watch(tmp_path, hub.url, "w2", 30)
    try:
        wait_for(lambda: "w2" in _listed(hub), 30, "the watcher's announcement")
        assert [p["path"] for p in _listed(hub)["w2"]["paths"]] == ["watch"]
        _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="w2", body="wake")
        wait_for(lambda: _listed(hub)["w2"]["last_push_path"] == "watch", 30, "the push")
        entry = _listed(hub)["w2"]
        assert entry["wakeable"] == "unverified" and entry["last_life_at"] is None
        out = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="w2")
        assert "warning" not in out  # a live path: no warning
    finally:
        proc.kill()
        proc.wait()


def test_monitor_mode_announces_its_path_and_its_reads_are_pushes(
    tmp_path: Path, hub: LiveHub
) -> None:
    out = (tmp_path / "monitor.out").open("wb")
    args = ["tail", "--agent", "m1", "--monitor", "--hub", hub.url, "--state-file", ""]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", *args],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env_for(tmp_path),
    )
    out.close()
    try:
        wait_for(lambda: "m1" in _listed(hub), 30, "Monitor mode's announcement")
        assert [p["path"] for p in _listed(hub)["m1"]["paths"]] == ["monitor"]
        out_ = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="m1", body="wake")
        assert "warning" not in out_  # a live path: no warning
        wait_for(lambda: _listed(hub)["m1"]["last_push_path"] == "monitor", 30, "the push")
        assert _listed(hub)["m1"]["wakeable"] == "unverified"
    finally:
        proc.kill()
        proc.wait()


def test_a_hook_only_agent_is_not_wakeable(hub: LiveHub) -> None:
    _announce(hub, "w3", "hook")
    entry = _listed(hub)["w3"]
    assert entry["wakeable"] == "no" and entry["state"] == "watching"
    assert [p["path"] for p in entry["paths"]] == ["hook"]
    out = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="someone-new")
    assert "warning" not in out  # an agent this hub never heard of: nothing to say


def test_a_reaped_watcher_is_not_wakeable_within_its_ttl(tmp_path: Path, hub: LiveHub) -> None:
    ttl = 3
    proc = _watch(tmp_path, hub.url, "w5", ttl)
    try:
        wait_for(lambda: _listed(hub).get("w5", {}).get("wakeable") == "unverified", 30, "w5")
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # reaped: no leave, its presence just lapses
        proc.wait()
    killed = time.monotonic()
    wait_for(lambda: _listed(hub)["w5"]["wakeable"] == "no", ttl + 1, "the lapse")
    assert time.monotonic() - killed <= ttl + 1
    listed = _post(hub, "presence_list")
    assert "w5" not in {e["agent"] for e in listed["agents"]}
    assert [e["agent"] for e in listed["unreachable"]] == ["w5"]
    out = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="w5")
    assert out["warning"] == WARNING.format("w5")


def test_the_warning_on_http(hub: LiveHub) -> None:
    _announce(hub, "codex-desktop", "hook")
    out = _post(hub, "event_append", **NOTE, from_agent="lead", to_agent="codex-desktop")
    assert out["warning"] == WARNING.format("codex-desktop") and out["event"]["id"]
    task = _post(hub, "task_create", **TASK, from_agent="lead", to_agent="codex-desktop")
    assert task["warning"] == WARNING.format("codex-desktop") and task["task_id"]
    # The write succeeded: it is in the log.
    assert _post(hub, "task_status", task_id=task["task_id"])["task"]["state"] == "open"


def _data(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


def test_the_warning_on_mcp(hub: LiveHub) -> None:
    _announce(hub, "w6", "hook")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            streamable_http_client(f"{hub.url}/mcp") as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            note = {**NOTE, "from_agent": "lead", "to_agent": "w6"}
            appended = _data(await session.call_tool("mempalace_event_append", note))
            task = {**TASK, "from_agent": "lead", "to_agent": "w6"}
            created = _data(await session.call_tool("mempalace_task_create", task))
            return appended, created

    appended, created = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert appended["warning"] == WARNING.format("w6")
    assert created["warning"] == WARNING.format("w6")


def test_the_warning_on_the_cli(tmp_path: Path, hub: LiveHub) -> None:
    _announce(hub, "w7", "hook")
    env = env_for(tmp_path)
    base = [sys.executable, "-m", "mempalace_logstream"]
    note = ["--type", "note", "--stream", "s", "--room", "r", "--from-agent", "lead"]
    append = subprocess.run(
        [*base, "append", *note, "--to-agent", "w7", "--hub", hub.url],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert append.returncode == 0, append.stderr
    assert append.stdout.startswith(b"Appended: ")
    assert f"warning: {WARNING.format('w7')}".encode() in append.stderr
    task = ["--project", "p", "--goal", "g", "--branch", "main", "--base-commit", "abc1234"]
    created = subprocess.run(
        [*base, "task", "create", *task, "--done", "d", "--from-agent", "lead"]
        + ["--to-agent", "w7", "--hub", hub.url, "--json"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["warning"] == WARNING.format("w7")
    assert f"warning: {WARNING.format('w7')}".encode() in created.stderr


def test_a_bad_path_is_refused_naming_the_field(hub: LiveHub) -> None:
    resp = httpx.post(
        f"{hub.url}/v1/presence_announce",
        json={"agent": "w8", "state": "watching", "path": "pigeon"},
        timeout=30,
    )
    assert resp.status_code == 422 and resp.json()["field"] == "path"
    assert "w8" not in _listed(hub)
    assert deliveries.PATHS == ("watch", "channel", "codex", "monitor", "sse", "hook")
