"""Cursors per log and agent (issue 19, item 4): `inbox`, `watch` and channel mode keep one
cursor file per log and agent under the palace, named by one keying function; the per-agent
files of earlier versions (`~/.mempalace/watch|channel/<agent>.json`) are adopted once, by the
first log that holds their cursor. Real CLI processes (HOME pointed at the test's directory)
on both backends; channel mode through the official MCP client over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.extension import NotificationBinding
from mcp.client.stdio import stdio_client

from mempalace_logstream import LogStore, cursors, inbox, watch
from mempalace_logstream.mcp_server import channel
from tests.conftest import REPO, run_cli
from tests.test_channel import ChannelParams, Received

WAIT_S = 30


def _palace(home: Path) -> str:
    return str(home / ".mempalace" / "palace")  # the default palace under HOME


def _state(kind: str, db: str, home: Path, agent: str) -> Path:
    return cursors.default_file(kind, agent, cursors.log_target(db, None, None), _palace(home))


def _append(db: str, *, to: str, writer: str = "carol") -> str:
    with LogStore.open(db) as store:
        fields: dict[str, Any] = {"type": "note", "stream": "s", "room": "r", "body": "hi"}
        return store.event_append(from_agent=writer, to_agent=to, **fields).id


def _watch(db: str, home: Path) -> tuple[int, list[str], str]:
    """One `watch --agent bob` that exits at once when nothing is new: (code, ids, stderr)."""
    run = run_cli(
        *("watch", "--db", db, "--agent", "bob", "--idle-exit-ms", "1", "--json"),
        env={"HOME": str(home), "MEMPALACE_PALACE_PATH": ""},
    )
    ids = [e["id"] for e in json.loads(run.stdout)["events"]] if run.stdout.strip() else []
    return run.returncode, ids, run.stderr.decode()


@pytest.fixture
def logs(db_url: str, tmp_path: Path) -> tuple[str, str]:
    """Two logs: A on the backend under test, B a SQLite file (their keys differ)."""
    LogStore.open(db_url).close()
    b = f"sqlite:///{tmp_path / 'b.sqlite3'}"
    LogStore.open(b).close()
    return db_url, b


def test_inbox_watch_and_channel_key_a_log_the_same_way(tmp_path: Path) -> None:
    target, palace = "sqlite:////somewhere/log.sqlite3", str(tmp_path)
    key = cursors.log_key(target)
    files = [
        inbox.default_state_file(None, "a:b", target, palace),
        watch.WatchOptions.parse(agent="a:b", target=target, palace=palace).state_file,
        channel.ChannelOptions.parse(agent="a:b", target=target, palace=palace).state_file,
    ]
    assert files == [tmp_path / kind / key / "a_b.json" for kind in ("inbox", "watch", "channel")]
    assert cursors.log_target(None, None, "http://hub:8000/") == "http://hub:8000"
    assert len({key, cursors.log_key("http://hub:8000"), cursors.log_key(target + "x")}) == 3


def test_the_same_agent_on_a_second_log_starts_at_its_tip_not_replaying_its_inbox(
    logs: tuple[str, str], tmp_path: Path
) -> None:
    a, b = logs
    _append(a, to="bob")
    old_mail = [_append(b, to="bob") for _ in range(3)]
    assert _watch(a, tmp_path)[:2] == (2, [])  # a first run: at A's tip
    new_a = _append(a, to="bob")
    assert _watch(a, tmp_path)[:2] == (0, [new_a])
    code, ids, err = _watch(b, tmp_path)
    assert (code, ids) == (2, []), err  # B's old mail is not replayed
    assert "first run" in err and not set(old_mail) & set(ids)
    new_b = _append(b, to="bob")
    assert _watch(b, tmp_path)[:2] == (0, [new_b])
    assert _watch(a, tmp_path)[:2] == (2, [])  # A's cursor untouched by B's
    assert _state("watch", a, tmp_path, "bob").exists()
    assert _state("watch", b, tmp_path, "bob").exists()


def test_a_per_agent_watch_file_is_adopted_once_by_the_log_that_holds_its_cursor(
    logs: tuple[str, str], tmp_path: Path
) -> None:
    a, b = logs
    seen, unseen = _append(a, to="bob"), _append(a, to="bob")
    _append(b, to="bob")
    legacy = cursors.legacy_file("watch", "bob", tmp_path)
    watch.write_state(legacy, seen, "bob")  # what an earlier version left behind
    code, ids, err = _watch(b, tmp_path)  # B does not hold its cursor: left, B starts afresh
    assert (code, ids) == (2, []), err
    assert f"per-agent cursor file {legacy}" in err and "left for the log it belongs to" in err
    assert legacy.exists()
    code, ids, err = _watch(a, tmp_path)  # A holds it: adopted, and A goes on after it
    assert (code, ids) == (0, [unseen]), err
    assert f"adopted the per-agent cursor file {legacy}" in err
    assert not legacy.exists()
    state = json.loads(_state("watch", a, tmp_path, "bob").read_text())
    assert state["cursor"] == unseen
    code, ids, err = _watch(a, tmp_path)
    assert (code, ids) == (2, []) and "adopted" not in err and "per-agent" not in err


# ----------------------------------------------------------------------------- channel mode


@asynccontextmanager
async def _channel(db: str, home: Path, received: Received) -> AsyncIterator[ClientSession]:
    binding = NotificationBinding(
        method=channel.METHOD, params_type=ChannelParams, handler=received.handler
    )
    env = {k: val for k, val in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPAL"))}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mempalace_logstream", "mcp", "--db", db, "--agent", "codex", "--channel"],
        env={**env, "PYTHONPATH": str(REPO), "HOME": str(home)},
    )
    with (home / "channel-stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, notification_bindings=[binding]) as session,
        ):
            await session.initialize()
            yield session


async def _exists(path: Path) -> None:
    with anyio.fail_after(WAIT_S):
        while not path.exists():
            await anyio.sleep(0.01)  # a file appearing has no event to wait on


def test_channel_mode_adopts_its_per_agent_file_and_a_second_log_replays_nothing(
    logs: tuple[str, str], tmp_path: Path
) -> None:
    a, b = logs
    seen, unseen = _append(a, to="codex"), _append(a, to="codex")
    _append(b, to="codex")  # old mail on B
    legacy = cursors.legacy_file("channel", "codex", tmp_path)
    watch.write_state(legacy, seen, "codex")

    async def on_b() -> list[str]:
        received = Received()
        async with _channel(b, tmp_path, received):
            await _exists(_state("channel", b, tmp_path, "codex"))  # started, at B's tip
            fresh = _append(b, to="codex")
            await received.until(lambda items: len(items) >= 1)
        assert received.ids() == [fresh]  # B's old mail was not replayed
        return received.ids()

    async def on_a() -> list[str]:
        received = Received()
        async with _channel(a, tmp_path, received):
            await received.until(lambda items: len(items) >= 1)
        return received.ids()

    anyio.run(on_b)
    assert legacy.exists()  # B does not hold its cursor
    assert anyio.run(on_a) == [unseen]  # adopted by A: what came after its cursor is pushed
    assert not legacy.exists()
    said = (tmp_path / "channel-stderr.log").read_text()
    assert said.count(f"adopted the per-agent cursor file {legacy}") == 1, said
    state = json.loads(_state("channel", a, tmp_path, "codex").read_text())
    assert state["cursor"] == unseen
