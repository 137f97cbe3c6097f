"""`logstream mcp` (stdio) answers `initialize` before it opens its log (issue 25: answered in
≤ 1 s): what the start loads, the log opened after the answer, a bad --db failing as before.

Raw JSON-RPC lines over the process's pipes; every wait has a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from bench.bench_cli import INIT
from tests.conftest import REPO
from tests.leankit import modules_after, modules_after_import

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
# What the start of stdio does not need: the store (SQLAlchemy; opened after the answer) and
# the hub's streamable HTTP endpoint.
NOT_AT_START = (
    "sqlalchemy",
    "mempalace_logstream.store.core",
    "mempalace_logstream.aio",
    "mempalace_logstream.mcp_server.endpoint",
)
# A fresh interpreter builds the stdio server over a deferred log, as `logstream mcp` does
# before it serves, and reports the modules it then holds.
BUILD_STDIO_SERVER = """
from mempalace_logstream import mcp_server
from mempalace_logstream.cli import mcp_stdio
server = mcp_server.build_server(mcp_server.DeferredStore(lambda: None))
assert "mempalace_event_append" in server.tools
"""


@contextmanager
def _started(db: Path | str) -> Iterator[subprocess.Popen[bytes]]:
    """`logstream mcp --db DB`, killed (if need be) and its pipes closed at the end."""
    with subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", "mcp", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def _say(proc: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()


def _answer(out: IO[bytes] | None) -> dict[str, Any]:
    """The next line the server writes (the test's timeout bounds a server that says nothing)."""
    assert out is not None
    line = out.readline()
    assert line, "the server closed stdout without an answer"
    answer: dict[str, Any] = json.loads(line)
    return answer


def test_the_stdio_start_loads_neither_the_store_nor_the_http_endpoint() -> None:
    imported = set(modules_after_import("mempalace_logstream.mcp_server"))
    assert not imported & {"mcp", "mempalace_logstream.mcp_server.endpoint"}  # names on use
    loaded = set(modules_after(BUILD_STDIO_SERVER))
    assert "mcp.server.lowlevel" in loaded  # the check sees the SDK's server
    assert loaded.isdisjoint(NOT_AT_START), loaded & set(NOT_AT_START)


def test_initialize_is_answered_before_the_log_is_opened_and_a_bad_log_still_fails(
    tmp_path: Path,
) -> None:
    """A directory is no log: the answer to `initialize` comes first (the log is opened after
    it), then the process ends with exit 1 and the store's own message, though the client
    keeps stdin open (the SDK's reader would wait for it forever)."""
    with _started(tmp_path) as proc:
        _say(proc, INIT)
        answer = _answer(proc.stdout)
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "mempalace-logstream"
        assert proc.wait(timeout=120) == 1
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert err == f"error: {tmp_path} is not a logstream database (it is a directory)\n"
        assert proc.stdout is not None and proc.stdout.read() == b""


def test_a_bad_log_fails_as_before_when_the_client_says_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n" * 100)
    done = subprocess.run(
        [sys.executable, "-m", "mempalace_logstream", "mcp", "--db", str(bad)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().startswith(f"error: {bad} is not a logstream database")
    assert bad.read_text() == "not a database\n" * 100


def test_a_tool_call_right_after_initialize_waits_for_the_new_log(tmp_path: Path) -> None:
    db = tmp_path / "new.sqlite3"
    with _started(db) as proc:
        append = {"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "hi"}
        call = {"name": "mempalace_event_append", "arguments": append}
        _say(
            proc,
            INIT,
            INITIALIZED,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
        )
        assert _answer(proc.stdout)["id"] == 1
        result = _answer(proc.stdout)
        assert result["id"] == 2 and not result["result"].get("isError"), result
        event = json.loads(result["result"]["content"][0]["text"])
        assert event["event"]["body"] == "hi"
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        assert proc.stderr is not None
        assert proc.stderr.read().decode() == f"created a new log at {db}\n"
