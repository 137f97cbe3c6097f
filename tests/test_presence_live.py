"""Presence on the SSE feed (S-8.4, issue 14) on a real uvicorn hub with a real client:
`presence=1` adds `event: presence` frames (no `id:`): a snapshot at connect, every announce,
leave and expiry (the hub's sweeper, nobody listing); none without it; a bad value is a 400;
a client that does not read holds a bounded backlog."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.hubkit import LiveHub, append, live_hub

STREAM = "/v1/stream"
GONE_WITHIN_S = 2.5  # the sweeper wakes at the expiry (at most 1 s late); margin for a busy box


def _run(coro: Any, timeout: float = 30.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _blocks(resp: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The raw SSE blocks of a response as {field: value} (comments dropped)."""
    block: dict[str, str] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if block:
                yield block
            block = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            block[name] = value.removeprefix(" ")


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


class Frames:
    """Reads one stream in the background; `next_presence()` waits for the next presence frame."""

    def __init__(self, resp: httpx.Response) -> None:
        self.blocks: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._pump(resp))

    async def _pump(self, resp: httpx.Response) -> None:
        async for block in _blocks(resp):
            await self.blocks.put(block)

    async def next(self, timeout: float = 10.0) -> dict[str, str]:
        return await asyncio.wait_for(self.blocks.get(), timeout)

    async def next_presence(self, timeout: float = 10.0) -> dict[str, Any]:
        while True:
            block = await self.next(timeout)
            if block.get("event") == "presence":
                assert "id" not in block, block  # not part of the resumable log
                data: dict[str, Any] = json.loads(block["data"])
                return data

    def close(self) -> None:
        self.task.cancel()


@pytest.fixture
def hub(tmp_path: Path):
    with live_hub(tmp_path, ping_interval_s=5) as h:
        yield h


def test_snapshot_then_announce_leave_and_expiry_frames(hub: LiveHub) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            made = await ac.post(
                "/v1/presence_announce",
                json={"agent": "codex", "state": "working", "task_id": "task_x_1", "note": "n"},
            )
            assert made.status_code == 200
            async with ac.stream("GET", STREAM, params={"presence": "1"}) as resp:
                assert resp.status_code == 200
                frames = Frames(resp)
                first = await frames.next_presence()
                assert first == made.json()["presence"]
                assert set(first) == {
                    *("agent", "state", "task_id", "note", "announced_at", "expires_at"),
                }
                await ac.post("/v1/presence_announce", json={"agent": "claude", "state": "idle"})
                got = await frames.next_presence()
                assert (got["agent"], got["state"]) == ("claude", "idle")
                await ac.post("/v1/presence_leave", json={"agent": "claude"})
                got = await frames.next_presence()
                assert (got["agent"], got["state"]) == ("claude", "gone")
                # an expiry reaches the stream without anyone listing
                short = await ac.post(
                    "/v1/presence_announce", json={"agent": "brief", "state": "idle", "ttl_s": 1}
                )
                got = await frames.next_presence()
                assert (got["agent"], got["state"]) == ("brief", "idle")
                expires = short.json()["presence"]["expires_at"]
                got = await frames.next_presence(timeout=10)
                gone_at = time.time()
                assert (got["agent"], got["state"], got["expires_at"]) == ("brief", "gone", expires)
                from datetime import datetime

                due = datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
                assert gone_at - due < GONE_WITHIN_S, gone_at - due
                # log frames still flow beside presence, with their ids
                with httpx.Client(base_url=hub.url, timeout=30) as c:
                    sent = append(c, room="beside")
                while (block := await frames.next()).get("event") != "logstream":
                    pass
                assert block["id"] == sent["id"]
                frames.close()
        await _until(lambda: hub.app.state.sse_clients == 0 and not hub.app.state.sse_presence)

    _run(scenario())


@pytest.mark.parametrize("params", [{}, {"presence": "0"}])
def test_no_presence_frames_unless_asked(hub: LiveHub, params: dict[str, str]) -> None:
    async def scenario() -> list[str]:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            await ac.post("/v1/presence_announce", json={"agent": "early", "state": "idle"})
            async with ac.stream("GET", STREAM, params={**params, "room": "only"}) as resp:
                frames = Frames(resp)
                await _until(lambda: hub.app.state.sse_clients >= 1)
                await ac.post("/v1/presence_announce", json={"agent": "late", "state": "idle"})
                await ac.post("/v1/presence_leave", json={"agent": "late"})
                with httpx.Client(base_url=hub.url, timeout=30) as c:
                    sent = append(c, room="only")
                kinds = []
                while True:
                    block = await frames.next()
                    if "data" in block:  # (the first block is the retry hint alone)
                        kinds.append(block.get("event", ""))
                    if block.get("id") == sent["id"]:
                        break
                frames.close()
            assert not hub.app.state.sse_presence
            return kinds

    assert _run(scenario()) == ["logstream"]


@pytest.mark.parametrize(
    ("value", "text"),
    [("maybe", "presence must be a boolean"), ("", "presence is empty")],
)
def test_a_bad_presence_value_is_400_naming_it(hub: LiveHub, value: str, text: str) -> None:
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        for path in (STREAM, "/logstream/stream"):
            resp = c.get(path, params={"presence": value})
            assert resp.status_code == 400
            assert resp.json()["field"] == "presence" and text in resp.json()["error"]
            again = c.get(path, params=[("presence", "1"), ("presence", "1")])
            assert again.status_code == 400 and again.json()["field"] == "presence"


def test_the_legacy_path_carries_presence_too(hub: LiveHub) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            await ac.post("/v1/presence_announce", json={"agent": "old", "state": "watching"})
            async with ac.stream("GET", "/logstream/stream", params={"presence": "1"}) as resp:
                frames = Frames(resp)
                got = await frames.next_presence()
                assert (got["agent"], got["state"]) == ("old", "watching")
                frames.close()

    _run(scenario())


def test_a_client_that_does_not_read_holds_a_bounded_backlog(tmp_path: Path) -> None:
    """A subscriber that stops reading: the hub's socket buffers fill, the stream blocks, and
    the frames that keep coming wait coalesced per agent, at most `sse_presence_backlog`.
    When it reads again it gets the latest state of the newest agents."""
    limit, agents = 25, 10_000
    with live_hub(tmp_path, ping_interval_s=30, sse_presence_backlog=limit) as h:
        host, port = h.url.removeprefix("http://").split(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(
            f"GET {STREAM}?presence=1 HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("ascii")
        )
        deadline = time.monotonic() + 10
        while not h.app.state.sse_presence:
            assert time.monotonic() < deadline, "the stream did not open"
            time.sleep(0.01)
        (queue,) = h.app.state.sse_presence
        # ~0.7 kB a frame, 2 per agent: ~14 MB in all, past the socket buffers (~4 MB here)
        note = "x" * 500
        for i in range(agents):
            h.presence.announce(agent=f"agent-{i:05d}", state="working", note=note)
            h.presence.leave(f"agent-{i:05d}")
        assert queue.high_water <= limit
        assert queue.dropped > 0  # it really was blocked: the backlog had to drop
        # Reading again: everything pending arrives, ending with the newest agent's leave.
        sock.settimeout(30)
        received = bytearray()
        last = b'"agent":"agent-%05d","state":"gone"' % (agents - 1)
        while last not in received:
            chunk = sock.recv(1 << 20)
            assert chunk, "the hub closed the stream"
            received += chunk
        sock.close()
        frames = received.count(b"event: presence")
        assert frames < 2 * agents  # some were coalesced or dropped, never all kept
        assert queue.high_water <= limit
        deadline = time.monotonic() + 10
        while h.app.state.sse_presence or h.app.state.sse_clients:
            assert time.monotonic() < deadline, "the slot was not released"
            time.sleep(0.01)
