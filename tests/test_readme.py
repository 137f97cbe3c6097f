"""The README's promises, run for real: the quick-start delegation through the CLI against a
live hub, and the four MCP client snippets connected with the official SDK client exactly as
they are written (only the palace directory and the hub port are pointed at the test's own)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from mempalace_logstream import cursors
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
            if "--channel" in entry.get("args", ()):
                out["claude-channel"] = entry
                continue
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
    assert set(_mcp_snippets()) == {
        *("claude-stdio", "claude-http", "codex-stdio", "codex-http", "claude-channel")
    }


def _logstream_exe() -> str:
    exe = Path(sys.executable).with_name("logstream")
    return str(exe) if exe.exists() else shutil.which("logstream") or "logstream"


async def _list_and_call(session: ClientSession) -> None:
    await session.initialize()  # the 2025-11-25 handshake, as Claude Code and Codex open it
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"mempalace_task_create", "mempalace_event_wait", "mempalace_patch_submit"} <= names
    made = await session.call_tool(
        "mempalace_event_append",
        {"type": "note", "stream": "readme", "room": "r", "from_agent": "snippet"},
    )
    assert made.is_error is False
    bad = await session.call_tool("mempalace_event_list", {"limit": 501})
    assert bad.is_error is True and "limit" in bad.content[0].text


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
            async with httpx2.AsyncClient(headers={"Authorization": header}, timeout=60) as http:
                async with streamable_http_client(url, http_client=http) as (read, write):
                    async with ClientSession(read, write) as session:
                        await _list_and_call(session)

        asyncio.run(asyncio.wait_for(scenario(), 90))
        assert httpx.post(url, json={}).status_code == 401  # the token is required


# --------------------------------------------------------------------------- the quick start

ID_RE = re.compile(r"\b(?:task|evt|art)_[A-Za-z0-9_]+\b")
DONE = "__readme_step_done__"


def _quick_start() -> list[tuple[str, list[str]]]:
    """The quick start's commands (continuations joined), each with the output lines the README
    shows right below it (`#   ` comment lines)."""
    section = README[README.index("## Quick start") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    steps: list[tuple[str, list[str]]] = []
    pending = ""
    for line in block.splitlines():
        if pending or (line.strip() and not line.startswith("#")):
            pending += line + "\n"
            if not line.endswith("\\"):
                steps.append((pending, []))
                pending = ""
        elif line.startswith("#   ") and steps:
            steps[-1][1].append(line[4:].strip())
    return steps


def _by_kind(text: str) -> dict[str, list[str]]:
    """The ids in `text` per kind (task/evt/art), in order of first appearance."""
    out: dict[str, list[str]] = {}
    for ident in dict.fromkeys(ID_RE.findall(text)):
        out.setdefault(ident.split("_", 1)[0], []).append(ident)
    return out


class Shell:
    """One bash fed the README's lines one command at a time, as a person types them: shell
    state (the venv activation, `cd`, exported variables, a background job) carries over."""

    def __init__(self, cwd: Path, env: dict[str, str], stderr: Path) -> None:
        self.stderr_path = stderr
        self._err = stderr.open("wb")
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.transcript: list[bytes] = []
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def run(self, command: str, timeout: float = 60) -> tuple[int, bytes]:
        """(exit status, stdout) of one command, the background job's lines included."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\nprintf '\\n{DONE} %s\\n' \"$?\"\n".encode())
        self.proc.stdin.flush()
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            line = self._next_line(deadline, command, out)
            if line.startswith(DONE.encode()):
                if out and out[-1] == b"\n":
                    out.pop()  # the newline the marker starts with
                self.transcript += out
                return int(line.split()[1]), b"".join(out)
            out.append(line)

    def _next_line(self, deadline: float, what: str, seen: list[bytes]) -> bytes:
        try:
            return self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(("no answer in time", what, seen, self.stderr())) from None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, needle: bytes, timeout: float = 60) -> None:
        """Until a line holding `needle` was printed (by the background watch)."""
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.transcript):
            self.transcript.append(self._next_line(deadline, repr(needle), self.transcript))

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # bash and the jobs it started
        self.proc.wait(timeout=10)
        self._pumper.join(timeout=10)  # EOF once bash and its jobs are gone
        for stream in (self.proc.stdin, self.proc.stdout, self._err):
            if stream is not None:
                stream.close()


def _fresh_env(home: Path) -> dict[str, str]:
    """No `logstream` on PATH, no LOGSTREAM_*/MEMPALACE_* settings, a HOME of our own."""
    path = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "logstream").exists()
    ]
    env = {
        k: val
        for k, val in os.environ.items()
        if not k.startswith(("LOGSTREAM_", "MEMPALACE_", "VIRTUAL_ENV"))
    }
    return {**env, "PATH": os.pathsep.join(path), "HOME": str(home), "PYTHONPATH": str(REPO)}


def _demo_repo(home: Path) -> Path:
    """~/src/demo-app: a git repository with an uncommitted fix (a Latin-1 byte included)."""
    repo = home / "src" / "demo-app"
    repo.mkdir(parents=True)
    (repo / "login.py").write_bytes(b"# caf\xe9\ndef login(next):\n    return redirect(next)\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "login.py"], ["commit", "-q", "-m", "start"]):
        subprocess.run([*git, *args], cwd=repo, check=True, env={**os.environ, "HOME": str(home)})
    (repo / "login.py").write_bytes(
        b"# caf\xe9\ndef login(next):\n    return redirect(safe(next))\n"
    )
    return repo


def test_the_quick_start_runs_verbatim_in_a_fresh_shell(tmp_path: Path) -> None:
    """Every command of the quick start, as written, in bash: `logstream` is not on PATH until
    the README's own first line puts it there, the hub is a live one (only its port differs
    from the README's), and the README's example ids stand for the ids the earlier commands
    printed (learned from the output lines the README shows under those commands). A shown line
    without "…" must be printed exactly."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").exists(), "run the tests from the venv the README makes"
    checkout, home = tmp_path / "checkout", tmp_path / "home"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(venv)  # what the README's first command made
    repo = _demo_repo(home)
    with live_hub(tmp_path) as hub:
        shell = Shell(checkout, _fresh_env(home), tmp_path / "stderr.txt")
        try:
            assert shell.run("command -v logstream")[0] != 0, "logstream is on PATH already"
            outputs = _run_quick_start(shell, hub.url, home)
        finally:
            shell.close()
    diff = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, check=True).stdout
    assert b"\xe9" in diff and (repo / "fix.patch").read_bytes() == diff  # byte for byte
    thread = outputs[-1].decode().splitlines()
    assert thread[0] == "4 event(s):", outputs[-1]
    assert [re.search(r"\[(\S+)\]", line).group(1) for line in thread[1:]] == [
        "task.request",
        "task.claim",
        "patch.ready",
        "task.accept",
    ]
    assert "status=completed" in thread[-1]


def _run_quick_start(shell: Shell, hub_url: str, home: Path) -> list[bytes]:
    ids: dict[str, str] = {}  # README example id -> the real one
    outputs: list[bytes] = []
    for command, shown in _quick_start():
        line = ID_RE.sub(lambda m: ids.get(m.group(0), m.group(0)), command)
        line = line.replace("http://127.0.0.1:8765", hub_url)
        unknown = [i for i in ID_RE.findall(line) if i not in ids.values()]
        assert not unknown, (f"no earlier output showed {unknown}", command)
        if "task create" in line:  # a person starts the lead after the watch said it is on
            palace = str(home / ".mempalace" / "palace")  # the watch's cursor: per log and agent
            state = cursors.default_file("watch", "codex-desktop", hub_url, palace)
            _wait_for_file(state, shell)
        code, out = shell.run(line)
        assert code == 0 and "command not found" not in shell.stderr(), (command, shell.stderr())
        outputs.append(out)
        _learn_ids(ids, shown, out.decode(errors="replace"), command)
        if "task create" in line:  # the watch wakes on the task and prints it
            shell.wait_for(b"[task.request]")
    return outputs


def _learn_ids(ids: dict[str, str], shown: list[str], printed: str, command: str) -> None:
    real = _by_kind(printed)
    for kind, examples in _by_kind("\n".join(shown)).items():
        assert len(real.get(kind, [])) >= len(examples), (command, kind, printed)
        ids.update(zip(examples, real[kind], strict=False))
    lines = printed.splitlines()
    for want in shown:
        if "…" not in want:
            exact = ID_RE.sub(lambda m: ids[m.group(0)], want)
            assert exact in lines, (command, exact, printed)


def _wait_for_file(path: Path, shell: Shell, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert "command not found" not in shell.stderr(), shell.stderr()
        assert time.monotonic() < deadline, (f"{path} did not appear", shell.stderr())
        time.sleep(0.01)


# --------------------------------------------------------------------------- channel mode


def test_the_channel_snippet_pushes_new_mail_into_the_session(tmp_path: Path) -> None:
    """The README's channel entry, run as written: its command and args, its palace env."""
    from mcp.client.extension import NotificationBinding
    from pydantic import BaseModel

    from mempalace_logstream import LogStore

    entry = _mcp_snippets()["claude-channel"]
    assert entry["command"] == "logstream"
    assert entry["args"][:1] == ["mcp"] and "--channel" in entry["args"]
    agent = entry["args"][entry["args"].index("--agent") + 1]
    home = tmp_path / "home"
    env = {**os.environ, **entry["env"], "MEMPALACE_PALACE_PATH": str(tmp_path), "HOME": str(home)}
    env["PYTHONPATH"] = str(REPO)
    params = StdioServerParameters(command=_logstream_exe(), args=entry["args"], env=env)
    palace = str(tmp_path)  # the default the README names: <palace>/channel/<log key>/<agent>.json
    target = cursors.log_target(None, palace, None)
    cursor = cursors.default_file("channel", agent, target, palace)
    got: list[dict[str, str]] = []
    arrived = asyncio.Event()

    class Params(BaseModel):
        content: str
        meta: dict[str, str]

    async def on_channel(params: Params) -> None:
        got.append(params.meta)
        arrived.set()

    binding = NotificationBinding(
        method="notifications/claude/channel", params_type=Params, handler=on_channel
    )

    async def scenario() -> None:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, notification_bindings=[binding]) as session,
        ):
            init = await session.initialize()
            assert init.capabilities.experimental == {"claude/channel": {}}
            while not cursor.exists():  # the first checkpoint: the channel has started
                await asyncio.sleep(0.01)
            with LogStore.open(str(tmp_path / "logstream.sqlite3")) as store:
                sent = store.event_append(
                    type="note", stream="s", room="r", from_agent="codex", to_agent=agent
                )
            await arrived.wait()
            assert got == [
                {
                    "event_id": sent.id,
                    "type": "note",
                    "from_agent": "codex",
                    "to_agent": agent,
                    "stream": "s",
                    "room": "r",
                }
            ]

    asyncio.run(asyncio.wait_for(scenario(), 90))
    launch = [b for b in _blocks("sh") if "--dangerously-load-development-channels" in b]
    assert launch == ["claude --dangerously-load-development-channels server:logstream\n"]
