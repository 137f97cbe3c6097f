"""A fake `codex` executable and a `logstream deliver --codex` process, for the Codex queue
bridge tests (issue 19) and its benchmark's smoke test.

The fake records each invocation as one JSON line: its argv, the deliverer's cursor file as it
was when `codex queue` ran, whether it answered 0, and a CLOCK_REALTIME stamp. A control file
says how it answers: `ok`, `fail-first:N` (exit 1 for the first N invocations), `not-loaded`
(exit 1 with what Codex says of an unknown session) or `error` (exit 1 always).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.conftest import REPO

FAKE = """#!{python}
import json, os, sys, time
t = time.time_ns()
log, control, cursor_file = {log!r}, {control!r}, {cursor!r}
def cursor():
    try:
        with open(cursor_file) as fh:
            return json.load(fh)["cursor"]
    except FileNotFoundError:
        return "<absent>"
mode = open(control).read().strip() if os.path.exists(control) else "ok"
with open(log, "a+") as fh:
    fh.seek(0)
    n = sum(1 for _ in fh)
    fail = mode in ("not-loaded", "error") or (
        mode.startswith("fail-first:") and n < int(mode.split(":")[1])
    )
    rec = {{"argv": sys.argv[1:], "cursor": cursor(), "ok": not fail, "t": t}}
    fh.write(json.dumps(rec) + "\\n")
if mode == "not-loaded":
    sys.stderr.write("Error: No active session found matching '" + sys.argv[3] + "'.\\n")
    sys.exit(1)
if fail:
    sys.stderr.write("Error: boom\\n")
    sys.exit(1)
print("Queued message m%d for thread %s." % (n, sys.argv[3]))
"""
ID_RE = re.compile(r'"(evt_[A-Za-z0-9_]+)"')
SINCE_RE = re.compile(r'since_event_id="(evt_[A-Za-z0-9_]+)"')
LAST_RE = re.compile(r'\(the last is "(evt_[A-Za-z0-9_]+)"\)')


class FakeCodex:
    """`dir/codex`: put `dir` on PATH, or name the file with CODEX_BIN."""

    def __init__(self, root: Path, cursor: Path | None, mode: str = "ok") -> None:
        self.dir = root / "fakebin"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "codex"
        self.log = root / "codex-calls.jsonl"
        self.control = root / "codex-mode"
        self.control.write_text(mode)
        text = FAKE.format(
            python=sys.executable,
            log=str(self.log),
            control=str(self.control),
            cursor=str(cursor or root / "no-cursor"),
        )
        self.path.write_text(text)
        self.path.chmod(0o755)

    def set(self, mode: str) -> None:
        self.control.write_text(mode)

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def accepted(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["ok"]]


def message(call: dict[str, Any]) -> str:
    argv = call["argv"]
    assert argv[:2] == ["queue", "--thread"] and argv[3] == "--message" and len(argv) == 5
    return str(argv[4])


def listed(call: dict[str, Any]) -> set[str]:
    """The event ids a message names (its since_event_id is the cursor, not an event of it)."""
    text = message(call)
    since = SINCE_RE.search(text)
    return set(ID_RE.findall(text)) - ({since.group(1)} if since else set())


def covered(calls: Iterable[dict[str, Any]], order: list[str]) -> list[str]:
    """The event ids the accepted messages deliver: the ids each lists, and for a coalesced
    message every event after its since_event_id up to its last (in `order`, the log's)."""
    pos = {eid: i for i, eid in enumerate(order)}
    out: set[str] = set()
    for call in calls:
        text = message(call)
        out |= listed(call)
        last = LAST_RE.search(text)
        if last:
            since = SINCE_RE.search(text)
            low = pos[since.group(1)] if since else -1
            out |= {e for e in order if low < pos[e] <= pos[last.group(1)]}
    return [e for e in order if e in out]


def first_listed(call: dict[str, Any], order: list[str]) -> int:
    pos = {eid: i for i, eid in enumerate(order)}
    return min(pos[e] for e in listed(call) if e in pos)


def cursor_pos(call: dict[str, Any], order: list[str]) -> int:
    cursor = call["cursor"]
    return -1 if cursor in (None, "<absent>") else order.index(cursor)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Deliverer:
    """`python -m mempalace_logstream <args>` in the background, stderr to a file."""

    def __init__(self, root: Path, fake: FakeCodex | None, *args: str, **env: str) -> None:
        self.err_path = root / f"deliver-{time.monotonic_ns()}.err"
        full = {k: v for k, v in os.environ.items() if k != "CODEX_BIN"}
        full |= {"PYTHONPATH": str(REPO), **env}
        if fake is not None:
            full["PATH"] = f"{fake.dir}{os.pathsep}{os.environ.get('PATH', '')}"
        self._err = self.err_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mempalace_logstream", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            env=full,
        )

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.stderr().splitlines() if needle in line]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._err.close()

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(30)
        self._err.close()
        return code
