"""Channel mode and MCP resource subscriptions with `--hub` when the hub is down, refuses the
token, or restarts (issue 19, items 2-3): the official SDK client over stdio, a real hub
(`logstream serve` in its own process, or uvicorn in a thread), and an appender process that
writes through the hub while it answers and straight into the log file while it does not."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.extension import NotificationBinding
from mcp.client.stdio import stdio_client

from mempalace_logstream import LogStore
from mempalace_logstream.http import HubSettings
from mempalace_logstream.mcp_server import channel
from tests.hubkit import LiveHub
from tests.hubproc import (
    HubProcess,
    appended,
    env_for,
    exit_record,
    free_port,
    pumped,
    start_appender,
    wait_for,
)
from tests.test_channel import ChannelParams, Received

AGENT = "codex"
WAIT_S = 60
EXIT_S = 2.0
pytestmark = pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed")


class Updates:
    """`notifications/resources/updated` as (monotonic time, URI), waitable."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str]] = []
        self._changed = anyio.Event()

    async def handler(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.items.append((time.monotonic(), str(message.params.uri)))
            self._changed.set()
            self._changed = anyio.Event()

    async def until(self, done: Callable[[list[tuple[float, str]]], bool]) -> None:
        with anyio.fail_after(WAIT_S):
            while not done(self.items):
                await self._changed.wait()


async def until(received: Received, done: Callable[[list[ChannelParams]], bool]) -> None:
    with anyio.fail_after(WAIT_S):
        while not done(received.items):
            await received._changed.wait()


@asynccontextmanager
async def mcp_session(
    home: Path, record: Path, args: list[str], errlog: Path, **session: Any
) -> AsyncIterator[ClientSession]:
    """`logstream mcp ARGS` behind the stdin pump (which times its exit), with an SDK client."""
    cmd = pumped(record, sys.executable, "-m", "mempalace_logstream", "mcp", *args)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env_for(home))
    with errlog.open("a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write, **session) as client,
        ):
            await client.initialize()
            yield client


def channel_args(url: str, state: Path, *extra: str) -> list[str]:
    return ["--hub", url, "--agent", AGENT, "--channel", "--state-file", str(state), *extra]


def binding(received: Received) -> list[NotificationBinding[Any]]:
    return [
        NotificationBinding(
            method=channel.METHOD, params_type=ChannelParams, handler=received.handler
        )
    ]


def lines(errlog: Path, url: str) -> list[str]:
    """The stderr lines about the hub at `url` (a first run's note is another matter)."""
    said = errlog.read_text().splitlines() if errlog.exists() else []
    return [line for line in said if url in line]


async def told(errlog: Path, url: str, count: int) -> list[str]:
    """The lines about the hub once there are `count` (a line has no event to wait on: poll)."""
    with anyio.fail_after(WAIT_S):
        while len(lines(errlog, url)) < count:
            await anyio.sleep(0.02)
    return lines(errlog, url)


def text_of(result: types.CallToolResult) -> str:
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    return item.text


# ----------------------------------------------------------------------------- dead hub, token


def test_a_dead_hub_is_one_line_the_tools_answer_and_the_channel_resumes_when_it_is_up(
    tmp_path: Path,
) -> None:
    port = free_port()  # nothing listens here yet
    url = f"http://127.0.0.1:{port}"
    errlog, record = tmp_path / "err.log", tmp_path / "exit.txt"
    received = Received()
    args = channel_args(url, tmp_path / "cursor.json", "--from-start")
    store = LogStore.open(str(tmp_path / "hub.sqlite3"))
    hubs: list[LiveHub] = []  # made (and listening) only once the hub is to be up

    async def go() -> None:
        async with mcp_session(
            tmp_path, record, args, errlog, notification_bindings=binding(received)
        ) as client:
            [line] = await told(errlog, url, 1)
            assert line.startswith(f"logstream channel: hub {url} is unreachable"), line
            assert "Connection refused" in line and "retrying" in line
            tools = await client.list_tools()
            assert any(t.name == "mempalace_event_append" for t in tools.tools)
            out = await client.call_tool("mempalace_task_list", {})
            assert out.is_error and f"cannot reach hub {url}" in text_of(out)
            hubs.append(LiveHub(store, HubSettings(), port=port))
            await anyio.to_thread.run_sync(hubs[0].start)
            eid = store.event_append(
                type="note", stream="s", room="r", from_agent="claude", to_agent=AGENT
            ).id
            await until(received, lambda items: len(items) >= 1)
            assert received.ids() == [eid]
            out = await client.call_tool("mempalace_event_get", {"event_id": eid})
            assert not out.is_error and eid in text_of(out)

    try:
        anyio.run(go)
    finally:
        for hub in hubs:
            hub.stop()
        store.close()
    took, code = exit_record(record)
    assert took <= EXIT_S and code == 0, (took, code)
    print(f"\n[outage] exited {took:.3f} s after stdin closed")
    said = lines(errlog, url)
    assert len(said) == 2, said  # lost once (however many tries), back once
    assert said[1] == f"logstream channel: hub {url} is back; pushing from the cursor", said


class Counting:
    """ASGI middleware: the paths of the HTTP requests a hub was asked."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


def test_a_refused_token_is_said_once_the_tools_answer_with_it_and_nothing_spins(
    tmp_path: Path,
) -> None:
    errlog, record = tmp_path / "err.log", tmp_path / "exit.txt"
    store = LogStore.open(str(tmp_path / "hub.sqlite3"))
    hub = LiveHub(store, HubSettings(token="the-right-token"))
    counting = Counting(hub.app)
    hub.server.config.app = counting
    hub.start()
    args = channel_args(hub.url, tmp_path / "cursor.json", "--token", "a-wrong-token")

    async def go() -> None:
        async with mcp_session(tmp_path, record, args, errlog) as client:
            [line] = await told(errlog, hub.url, 1)
            assert line.startswith(f"logstream channel: hub {hub.url} refused the token"), line
            assert "not retrying" in line
            tools = await client.list_tools()
            assert any(t.name == "mempalace_event_list" for t in tools.tools)
            out = await client.call_tool("mempalace_event_list", {"to_agent": AGENT})
            assert out.is_error and "refused the token" in text_of(out)
            out = await client.call_tool("mempalace_task_list", {})
            assert out.is_error and "refused the token" in text_of(out)

    try:
        anyio.run(go)
    finally:
        hub.stop()
        store.close()
    took, code = exit_record(record)
    assert took <= EXIT_S and code == 0, (took, code)
    print(f"\n[outage] exited {took:.3f} s after stdin closed")
    assert len(lines(errlog, hub.url)) == 1, errlog.read_text()
    asked = [p for p in counting.paths if p.startswith("/v1/") and "presence" not in p]
    # the channel's one try at the start, then the two tool calls: the channel never retried
    assert asked == ["/v1/event_list", "/v1/event_list", "/v1/task_list"], asked


# ----------------------------------------------------------------------------- hub restart


def test_a_subscription_signals_the_changes_made_while_its_hub_was_down(tmp_path: Path) -> None:
    """Subscribed, then the hub stops before anything changed (the follower's first wait is
    still open): what is appended meanwhile is signalled once the hub is back."""
    errlog, record = tmp_path / "err.log", tmp_path / "exit.txt"
    store = LogStore.open(str(tmp_path / "hub.sqlite3"))
    hubs = [LiveHub(store, HubSettings())]
    hubs[0].start()
    url = hubs[0].url
    updates = Updates()

    async def go() -> None:
        async with mcp_session(
            tmp_path, record, ["--hub", url], errlog, message_handler=updates.handler
        ) as sub:
            await sub.subscribe_resource(f"logstream://inbox/{AGENT}")
            await anyio.to_thread.run_sync(hubs[0].stop)
            store.event_append(
                type="note", stream="s", room="r", from_agent="claude", to_agent=AGENT
            )  # straight into the file while the hub is down
            [line] = await told(errlog, url, 1)
            assert line.startswith(f"logstream resources: hub {url} is unreachable"), line
            assert updates.items == []
            hubs.append(LiveHub(store, HubSettings(), port=int(url.rsplit(":", 1)[1])))
            await anyio.to_thread.run_sync(hubs[-1].start)
            await updates.until(lambda items: len(items) >= 1)
            assert [uri for _t, uri in updates.items] == [f"logstream://inbox/{AGENT}"]

    try:
        anyio.run(go)
    finally:
        hubs[-1].stop()
        store.close()
    took, code = exit_record(record)
    assert took <= EXIT_S and code == 0, (took, code)
    print(f"\n[outage] exited {took:.3f} s after stdin closed")
    said = lines(errlog, url)
    assert len(said) == 2, said
    assert said[1] == (
        f"logstream resources: hub {url} is back; resource updates go on from where they stopped"
    )


@pytest.mark.slow
def test_channel_and_subscription_ride_through_a_hub_restart_with_appends_meanwhile(
    tmp_path: Path,
) -> None:
    db, home = tmp_path / "hub.sqlite3", tmp_path
    hub = HubProcess(db, home)
    hub.start()
    with LogStore.open(str(db)) as store:  # a first start begins after it
        store.event_append(type="note", stream="s", room="r", from_agent="claude", to_agent=AGENT)
    received, updates = Received(), Updates()
    chan_err, chan_exit = tmp_path / "channel-err.log", tmp_path / "channel-exit.txt"
    sub_err, sub_exit = tmp_path / "sub-err.log", tmp_path / "sub-exit.txt"
    state = tmp_path / "cursor.json"
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    chan_args = channel_args(hub.url, state, "--burst", "1000", "--presence-ttl-s", "6")

    def present() -> list[str]:
        listed = httpx.get(hub.url + "/v1/presence", timeout=30).json()["agents"]
        return [entry["agent"] for entry in listed]

    async def go() -> None:
        async with (
            mcp_session(
                home, chan_exit, chan_args, chan_err, notification_bindings=binding(received)
            ) as chan,
            mcp_session(
                home, sub_exit, ["--hub", hub.url], sub_err, message_handler=updates.handler
            ) as sub,
        ):
            await sub.subscribe_resource(f"logstream://inbox/{AGENT}")
            await anyio.to_thread.run_sync(wait_for, state.exists, WAIT_S, "the channel start")
            # Appends go on through the hub, then into the file while the hub is down.
            appender = start_appender(db, hub.url, "a", 60, 0.1, first, home)
            await anyio.to_thread.run_sync(
                wait_for, lambda: len(appended(first)) >= 15, WAIT_S, "15 appends via the hub"
            )
            await anyio.to_thread.run_sync(hub.stop)
            stopped = time.monotonic()
            assert await anyio.to_thread.run_sync(appender.wait, WAIT_S) == 0
            via = [row[1] for row in appended(first)]
            assert via.count("hub") >= 15 and via[-1] == "file", via
            signalled = len(updates.items)
            await anyio.sleep(max(0.0, 10 - (time.monotonic() - stopped)))  # down for 10 s
            await anyio.to_thread.run_sync(hub.start)
            restarted = time.monotonic()
            ids = [row[0] for row in appended(first)]
            await until(received, lambda items: len(items) >= len(ids))
            resumed = time.monotonic() - restarted
            # The appends made while it was down were not signalled then; they are now.
            assert all(t < restarted for t, _uri in updates.items[:signalled])
            await updates.until(lambda items: any(t > restarted for t, _uri in items))
            # And through the hub again.
            appender = start_appender(db, hub.url, "b", 20, 0.05, second, home)
            assert await anyio.to_thread.run_sync(appender.wait, WAIT_S) == 0
            rows = appended(second)
            assert {row[1] for row in rows} == {"hub"}
            ids += [row[0] for row in rows]
            await until(received, lambda items: len(items) >= len(ids))
            assert received.ids() == ids  # each exactly once, in order
            # The last change was signalled too (a notification came after it was sent).
            last = rows[-1][2]
            await updates.until(lambda items: any(t > last for t, _uri in items))
            out = await chan.call_tool("mempalace_event_get", {"event_id": ids[-1]})
            assert not out.is_error
            await anyio.to_thread.run_sync(
                wait_for, lambda: AGENT in present(), WAIT_S, "presence announced again"
            )
            outage_rows = sum(1 for row in appended(first) if row[1] == "file")
            print(
                f"\n[outage] {len(ids)} events, {outage_rows} written while the hub was down; "
                f"all pushed {resumed:.2f} s after the restart"
            )

    try:
        anyio.run(go)
        for record in (chan_exit, sub_exit):
            took, code = exit_record(record)
            assert took <= EXIT_S and code == 0, (record.name, took, code)
            print(f"[outage] {record.stem}: exited {took:.3f} s after stdin closed")
        assert AGENT not in present()  # left at exit (its TTL is 6 s: not expired)
    finally:
        hub.close()
    said = lines(chan_err, hub.url)
    assert len(said) == 2, said
    assert said[0].startswith(f"logstream channel: hub {hub.url} "), said
    assert said[1] == f"logstream channel: hub {hub.url} is back; pushing from the cursor"
