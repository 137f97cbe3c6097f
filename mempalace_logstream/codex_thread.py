"""Where the Codex queue bridge keeps its local state (issue 19): the Codex thread an agent's
session runs in, recorded by `logstream inbox --hook codex` on Codex's `SessionStart`, and the
deliverer's own cursor. Both are keyed per log and per agent as every cursor is
(`cursors.default_file`: `<palace>/codex-thread/<log key>/<agent>.json`,
`<palace>/codex-deliver/<log key>/<agent>.json`).

On the lean hook path: the standard library and the package's pure modules only (no SQLAlchemy,
no CLI framework, no servers). Must not import typer, click, rich, fastapi, mcp, httpx, the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mempalace_logstream import cursors, errors
from mempalace_logstream import validation as v

# A Codex thread id is a UUID (the `session_id` Codex gives its hooks); any id of these
# characters is kept. It must start with a letter or digit: it becomes an argument of
# `codex queue --thread`, where a leading `-` would read as an option.
THREAD_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
THREAD_DIR = "codex-thread"
CURSOR_DIR = "codex-deliver"
RECORDING_EVENT = "SessionStart"


def thread_id(value: Any, field: str = "thread_id") -> str:
    """A Codex thread id, checked; raises ValidationError naming `field`."""
    if not isinstance(value, str) or not THREAD_ID_RE.match(value):
        raise v.fail(
            field,
            f"is {value!r}; a Codex thread id is 1-128 characters of [A-Za-z0-9._:-], "
            "starting with a letter or digit",
            128,
        )
    return value


def thread_file(agent: str, target: str, palace: str | None) -> Path:
    """Where the agent's Codex thread id is recorded for the log at `target`."""
    return cursors.default_file(THREAD_DIR, agent, target, palace)


def cursor_file(state_file: str | None, agent: str, target: str, palace: str | None) -> Path | None:
    """The deliverer's cursor: `--state-file` as given (`""` = none), else its own file beside
    the other followers' (never the inbox hook's, `watch`'s or the channel's)."""
    if state_file is not None:
        return Path(state_file).expanduser() if state_file != "" else None
    return cursors.default_file(CURSOR_DIR, agent, target, palace)


def read_thread(path: Path) -> str | None:
    """The recorded thread id, or None (no file yet, or one that does not hold a valid id)."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    value = doc.get("thread_id") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and THREAD_ID_RE.match(value) else None


def write_thread(path: Path, thread: str, agent: str, source: str | None) -> None:
    """Atomically replace the record; raises OSError."""
    doc = {"thread_id": thread, "agent": agent, "source": source, "recorded_at": _now()}
    cursors.write_json(path, doc)


def record_from_hook(
    stdin_text: str, agent: str, target: str, palace: str | None, note: Callable[[str], None]
) -> str | None:
    """On Codex's SessionStart hook: record its `session_id` (the thread id `codex queue
    --thread` takes) for `agent` on this log; rewritten only when it changed. Never fails the
    hook: a missing or malformed id, or a write error, is one note on stderr. Returns the id
    recorded (or already there), else None."""
    try:
        doc = json.loads(stdin_text) if stdin_text.strip() else {}
    except ValueError:
        return None  # hook_event_name has refused it already
    if not isinstance(doc, dict) or doc.get("hook_event_name") != RECORDING_EVENT:
        return None
    try:
        thread = thread_id(doc.get("session_id"), "session_id")
    except errors.ValidationError as exc:
        note(f"warning: no Codex thread recorded for {agent}: {exc.message}")
        return None
    path = thread_file(agent, target, palace)
    if read_thread(path) == thread:
        return thread
    source = doc.get("source")
    try:
        write_thread(path, thread, agent, source if isinstance(source, str) else None)
    except OSError as exc:
        note(f"warning: could not record the Codex thread in {path} ({exc.strerror or exc})")
        return None
    return thread


def _now() -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
