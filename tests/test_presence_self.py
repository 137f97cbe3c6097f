"""Self-announcement (S-8.4, issue 14): `logstream watch --hub --agent`, `logstream mcp --agent
--hub` (stdio) and channel mode announce `watching` at start, refresh before the TTL passes and
leave when they stop (normal end, Ctrl-C, SIGTERM); `--no-presence` turns it off; a hub that is
down, slow or refusing never blocks or ends them (one line on stderr). Real subprocesses of the
CLI against a real uvicorn hub; every wait is on a condition."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mempalace_logstream.presence import Registry
from tests.hubkit import LiveHub, append, live_hub

REPO = Path(__file__).resolve().parents[1]
Frames = list[dict[str, Any]]


class Seen:
    """Every presence change of a hub's registry, waitable."""

    def __init__(self, registry: Registry) -> None:
        self.frames: Frames = []
        self._cond = threading.Condition()
        self.stop = registry.subscribe(self._put)

    def _put(self, frame: dict[str, Any]) -> None:
        with self._cond:
            self.frames.append(frame)
            self._cond.notify_all()

    def wait(self, predicate: Callable[[Frames], bool], timeout: float = 30) -> Frames:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.frames), timeout), self.frames
            return list(self.frames)

    def of(self, agent: str) -> list[tuple[str, str]]:
        with self._cond:
            return [(f["event"], f["state"]) for f in self.frames if f["agent"] == agent]


def count(agent: str, event: str) -> Callable[[Frames], int]:
    return lambda frames: sum(1 for f in frames if f["agent"] == agent and f["event"] == event)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    with live_hub(tmp_path) as h:
        yield h


@pytest.fixture
def seen(hub: LiveHub) -> Iterator[Seen]:
    s = Seen(hub.presence)
    yield s
    s.stop()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: val for k, val in os.environ.items() if not k.startswith("LOGSTREAM_")}
    return {**env, "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}


def _sigint_default() -> None:
    # a background shell may ignore SIGINT; the CLI must see Ctrl-C as a user would send it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def _start(
    tmp_path: Path, *args: str, stdin: Any = subprocess.DEVNULL
) -> Iterator[subprocess.Popen[bytes]]:
    """`logstream ARGS` in a subprocess; killed (if still running) and its pipes closed after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        preexec_fn=_sigint_default,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _watch(tmp_path: Path, url: str, *extra: str) -> Any:
    return _start(tmp_path, "watch", "--agent", "codex", "--hub", url, "--state-file", "", *extra)


def test_watch_announces_refreshes_and_leaves_on_sigterm(
    tmp_path: Path, hub: LiveHub, seen: Seen
) -> None:
    with _watch(tmp_path, hub.url, "--follow", "--presence-ttl-s", "3") as proc:
        frames = seen.wait(lambda f: count("codex", "announce")(f) >= 2)  # refreshed each 1 s
        first = next(f for f in frames if f["agent"] == "codex")
        assert (first["state"], first["note"]) == ("watching", "logstream watch")
        listed = httpx.get(hub.url + "/v1/presence", timeout=30).json()["agents"]
        assert [(a["agent"], a["state"]) for a in listed] == [("codex", "watching")]
        proc.send_signal(signal.SIGTERM)
        seen.wait(lambda f: count("codex", "leave")(f) == 1)
        assert proc.wait(30) == -signal.SIGTERM  # it still ends by the signal
        assert proc.stderr is not None
        assert b"presence" not in proc.stderr.read()  # nothing to say when the hub answers
    assert httpx.get(hub.url + "/v1/presence", timeout=30).json()["count"] == 0
    assert seen.of("codex")[-1] == ("leave", "gone")


def test_watch_leaves_on_ctrl_c_and_on_a_normal_end(
    tmp_path: Path, hub: LiveHub, seen: Seen
) -> None:
    with _watch(tmp_path, hub.url, "--follow") as proc:
        seen.wait(lambda f: count("codex", "announce")(f) == 1)
        proc.send_signal(signal.SIGINT)
        seen.wait(lambda f: count("codex", "leave")(f) == 1)
        assert proc.wait(30) == 130
    with _watch(tmp_path, hub.url) as proc:  # without --follow: ends after the first match
        seen.wait(lambda f: count("codex", "announce")(f) == 2)
        with httpx.Client(base_url=hub.url, timeout=30) as http:
            assert proc.stderr is not None
            # the watch prints its start line once it has its cursor: append after that
            line = proc.stderr.readline()
            assert b"Watching agent codex" in line or b"first run" in line, line
            if b"first run" in line:
                assert b"Watching agent codex" in proc.stderr.readline()
            append(http, to_agent="codex", body="wake up")
        assert proc.wait(30) == 0
        seen.wait(lambda f: count("codex", "leave")(f) == 2)


def test_no_presence_announces_nothing(tmp_path: Path, hub: LiveHub, seen: Seen) -> None:
    with _watch(tmp_path, hub.url, "--no-presence") as proc:
        assert proc.stderr is not None
        while b"Watching agent codex" not in proc.stderr.readline():
            pass
        with httpx.Client(base_url=hub.url, timeout=30) as http:
            append(http, to_agent="codex")
        assert proc.wait(30) == 0
    assert seen.of("codex") == []


def test_a_hub_that_refuses_presence_does_not_stop_the_watch(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub:
        hub.presence._max = 0  # a full table: every announcement is refused (422)
        with _watch(tmp_path, hub.url, "--follow") as proc:
            assert proc.stderr is not None
            lines = [proc.stderr.readline() for _ in range(3)]
            with httpx.Client(base_url=hub.url, timeout=30) as http:
                sent = append(http, to_agent="codex", body="still delivered")
            assert proc.stdout is not None
            while sent["id"].encode() not in (out := proc.stdout.readline()):
                assert out, "the watch ended"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == -signal.SIGTERM
            err = b"".join(lines) + proc.stderr.read()
    told = [ln for ln in err.decode().splitlines() if "presence" in ln]
    assert len(told) == 1, err
    assert "could not announce codex" in told[0] and "at most 0 agents" in told[0]


def test_a_hub_that_is_down_does_not_block_the_watch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    started = time.monotonic()
    with _watch(tmp_path, url, "--follow", "--give-up-after", "1") as proc:
        code = proc.wait(30)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    # The watch's own outage (issue 19: it rides through, bounded by --give-up-after).
    assert code == 3 and f"hub {url} is unreachable (connection refused)" in err, err
    assert time.monotonic() - started < 15
    assert sum("presence" in ln for ln in err.splitlines()) <= 1


def _mcp_params(tmp_path: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mempalace_logstream", "mcp", *args],
        env=_env(tmp_path),
    )


def test_mcp_stdio_announces_and_leaves_when_the_client_closes(
    tmp_path: Path, hub: LiveHub, seen: Seen
) -> None:
    async def session() -> None:
        params = _mcp_params(tmp_path, "--agent", "claude", "--hub", hub.url)
        with (tmp_path / "mcp-stderr.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                await anyio.to_thread.run_sync(
                    lambda: seen.wait(lambda f: count("claude", "announce")(f) == 1)
                )
                out = await s.call_tool("mempalace_presence_list", {})
                assert '"agent":"claude"' in out.content[0].text  # type: ignore[union-attr]

    anyio.run(session)
    frames = seen.wait(lambda f: count("claude", "leave")(f) == 1)
    assert [f["note"] for f in frames if f["event"] == "announce"] == ["logstream mcp"]


@pytest.mark.parametrize("channel", [False, True], ids=["stdio", "channel"])
def test_mcp_and_channel_mode_leave_on_sigterm(
    tmp_path: Path, hub: LiveHub, seen: Seen, channel: bool
) -> None:
    extra = ["--channel", "--state-file", ""] if channel else []
    with _start(
        tmp_path, "mcp", "--agent", "claude", "--hub", hub.url, *extra, stdin=subprocess.PIPE
    ) as proc:
        frames = seen.wait(lambda f: count("claude", "announce")(f) == 1)
        note = "logstream mcp --channel" if channel else "logstream mcp"
        assert [f["note"] for f in frames] == [note]
        proc.send_signal(signal.SIGTERM)
        seen.wait(lambda f: count("claude", "leave")(f) == 1)
        assert proc.wait(30) == -signal.SIGTERM


def test_mcp_serves_at_once_and_exits_promptly_with_a_hub_that_never_answers(
    tmp_path: Path,
) -> None:
    """A hub that accepts connections and never answers: the announcer waits on it, the MCP
    server does not; closing stdin ends the process within the announcer's bounded wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel accepts; nobody reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"

        async def session() -> float:
            params = _mcp_params(tmp_path, "--agent", "claude", "--hub", url)
            with (tmp_path / "mcp-stderr.log").open("a") as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as s,
                ):
                    with anyio.fail_after(20):
                        await s.initialize()
                        tools = await s.list_tools()
                    assert any(t.name == "mempalace_event_append" for t in tools.tools)
                    closing = time.monotonic()
            return time.monotonic() - closing

        took = anyio.run(session)
    assert took < 10, took  # announce (2 s) + leave (2.5 s) at most, plus startup slack
    told = [ln for ln in (tmp_path / "mcp-stderr.log").read_text().splitlines() if "presence" in ln]
    assert len(told) <= 1, told


def test_a_bad_presence_ttl_is_refused_by_name(tmp_path: Path, hub: LiveHub) -> None:
    with _watch(tmp_path, hub.url, "--presence-ttl-s", "2") as proc:
        assert proc.wait(30) == 1
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    assert "presence_ttl_s is 2; it must be between 3 and 3600" in err
