"""A hub in its own process (`logstream serve`) that a test stops and restarts on the same port,
an appender process that writes through the hub while it answers and straight into the log
file while it does not, and a stdin pump that times how long an MCP server takes to exit after
its stdin closes. Every wait is on a condition with a deadline."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: this repo, no LOGSTREAM_* of the caller's."""
    env = {k: val for k, val in os.environ.items() if not k.startswith("LOGSTREAM_")}
    return {**env, "PYTHONPATH": str(REPO), "HOME": str(home), **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(done: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `done` (a file or a process: nothing to wait on but its state) until true."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class HubProcess:
    """`logstream serve --db DB --port PORT` in a subprocess; `start()` returns once it listens,
    `stop()` sends SIGTERM and waits for the process to end."""

    def __init__(
        self,
        db: Path,
        home: Path,
        *,
        port: int | None = None,
        token: str = "",
        extra: tuple[str, ...] = (),
    ) -> None:
        self.db = db
        self.extra = extra
        self.home = home
        self.port = port or free_port()
        self.token = token
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60) -> None:
        args = ["serve", "--db", str(self.db), "--port", str(self.port), "--host", "127.0.0.1"]
        args += self.extra
        env = env_for(self.home, LOGSTREAM_TOKEN=self.token)
        self.starts += 1
        log = (self.home / f"hub-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mempalace_logstream", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
        log.close()
        line = _first_line(self.proc, timeout)
        assert line.startswith("logstream hub listening on "), line

    def stop(self, timeout: float = 30) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        assert remaining > 0 and proc.poll() is None, "serve did not print its URL"
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 1)
            assert chunk, "serve closed its stdout"
            buf += chunk
    return buf.decode().strip()


# ----------------------------------------------------------------------------- the appender

APPENDER = """
import sys, time, httpx
from mempalace_logstream import LogStore
db, url, prefix, count, every_s, out = sys.argv[1:7]
store = None
with open(out, "a") as ids:
    for i in range(int(count)):
        fields = {"type": "note", "stream": "s", "room": "r", "from_agent": "claude",
                  "to_agent": "codex", "body": f"{prefix} {i}",
                  "idempotency_key": f"{prefix}-{i}"}
        sent = time.monotonic()  # any signal of this change comes after this
        try:
            resp = httpx.post(url + "/v1/event_append", json=fields, timeout=2)
            assert resp.status_code == 200, resp.status_code
            eid, via = resp.json()["event"]["id"], "hub"
        except Exception:  # the hub is down or stopping: straight into the file, same key
            if store is None:
                store = LogStore.open(db)
            eid, via = store.event_append(**fields).id, "file"
        ids.write(f"{eid} {via} {sent}\\n")
        ids.flush()
        time.sleep(float(every_s))
if store is not None:
    store.close()
"""


def start_appender(
    db: Path, url: str, prefix: str, count: int, every_s: float, out: Path, home: Path
) -> subprocess.Popen[bytes]:
    """Append `count` notes to codex, one every `every_s`, each through the hub or (when it
    does not answer) into `db` directly with the same idempotency key: each lands once. The
    ids go to `out` as `<id> hub|file <monotonic time before the append>` lines, in order."""
    args = [db, url, prefix, count, every_s, out]
    with (home / f"appender-{prefix}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-c", APPENDER, *map(str, args)], env=env_for(home), stderr=log
        )


def appended(out: Path) -> list[tuple[str, str, float]]:
    """(id, "hub" | "file", monotonic time before the append) per appended event."""
    if not out.exists():
        return []
    whole = out.read_text().split("\n")[:-1]  # a line still being written is not yet one
    rows = (line.split() for line in whole)
    return [(eid, via, float(sent)) for eid, via, sent in rows]


# ----------------------------------------------------------------------------- the stdin pump

PUMP = """
import os, subprocess, sys, threading, time
record, cmd = sys.argv[1], sys.argv[2:]
child = subprocess.Popen(cmd, stdin=subprocess.PIPE)
src = sys.stdin.buffer
while True:
    chunk = src.read1(65536)
    if not chunk:
        break
    child.stdin.write(chunk)
    child.stdin.flush()
eof = time.monotonic()
child.stdin.close()
code = child.wait()
with open(record, "w") as fh:
    fh.write(f"{time.monotonic() - eof:.3f} {code}\\n")
sys.exit(code)
"""


def pumped(record: Path, *cmd: str) -> list[str]:
    """argv that runs `cmd` behind a pump which, once its own stdin ends, closes the child's
    and writes `<seconds until the child exited> <exit code>` to `record`."""
    return [sys.executable, "-c", PUMP, str(record), *cmd]


def exit_record(record: Path) -> tuple[float, int]:
    """(seconds from stdin EOF to exit, exit code); the file is missing when the pump was
    killed (the client killed the server tree after its own 2 s grace)."""
    assert record.exists(), "the server did not exit by itself after stdin closed"
    took, code = record.read_text().split()
    return float(took), int(code)
