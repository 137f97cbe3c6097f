"""Where a follower keeps its cursor by default (issue 19, item 4): one file per log and agent,
`<palace>/<kind>/<log key>/<agent>.json`, for `inbox`, `watch` and channel mode alike. The log
key is a short hash of the log's target (its database URL, or the hub's URL), so the same agent
on two logs keeps two cursors and never replays one log's inbox with the other's.

Earlier versions kept `watch`'s and channel mode's cursors per agent only
(`~/.mempalace/<kind>/<agent>.json`); such a file is adopted once, by rename, by the first log
that holds its cursor (`adopt`; the check is the follower's: watch.Watcher.start).
Pure paths and one rename: must not import typer, the store or the servers (the hook path).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from mempalace_logstream import config
from mempalace_logstream import validation as v

# The followers that keep a cursor (or, for `codex-thread`, the Codex session) per log and agent.
KINDS = ("inbox", "watch", "channel", "codex-thread", "codex-deliver", "monitor")
LEGACY_KINDS = ("watch", "channel")  # the per-agent files of before issue 19


def state_basename(agent: str) -> str:
    """The file name for an agent: `_` doubled first, then `:` `/` `\\` mapped to `_`, so that
    `a:b_c` and `a_b:c` stay distinct."""
    base = agent.strip().replace("_", "__")
    for ch in ":/\\":
        base = base.replace(ch, "_")
    if base in ("", ".", ".."):
        raise v.fail("agent", f"{agent!r} cannot name a state file")
    return base


def log_target(db: str | None, palace: str | None, hub: str | None) -> str:
    """What names a log for its cursors: the hub's URL with `--hub`, else the database URL
    (`--db`, or the palace's file) as the CLI resolves it."""
    return hub.rstrip("/") if hub else config.resolve_db(db, palace)


def log_key(target: str) -> str:
    """The short hash of a log's target that names its cursor directory."""
    return hashlib.sha256(target.encode()).hexdigest()[:12]


def default_file(kind: str, agent: str, target: str, palace: str | None) -> Path:
    """`<palace>/<kind>/<log key>/<agent>.json`."""
    if kind not in KINDS:
        raise v.fail("kind", f"is {kind!r}; it must be one of {', '.join(KINDS)}")
    key = log_key(target)
    return config.palace_dir(palace) / kind / key / f"{state_basename(agent)}.json"


def legacy_file(kind: str, agent: str, home: Path | None = None) -> Path:
    """The per-agent file an earlier version kept: `~/.mempalace/<kind>/<agent>.json`."""
    root = home if home is not None else Path.home()
    return root / ".mempalace" / kind / f"{state_basename(agent)}.json"


def adopt(legacy: Path, path: Path) -> bool:
    """Move `legacy` to `path` in one rename (atomic: a reader sees one of the two, and of two
    logs racing for the file one wins); False when it is gone (another log took it). Across
    filesystems (a palace elsewhere) it is copied in whole, synced, then removed.

    Raises OSError when it can be neither renamed nor copied."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(legacy, path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return _copy_then_remove(legacy, path)
    _sync_dir(path.parent)
    return True


def _copy_then_remove(legacy: Path, path: Path) -> bool:
    try:
        raw = legacy.read_bytes()
    except FileNotFoundError:
        return False
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _sync_dir(path.parent)
    with contextlib.suppress(FileNotFoundError):
        legacy.unlink()
    return True


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Atomically replace the small JSON file `path` (tmp + fsync + rename + directory fsync):
    a reader sees the old file or the new one, never a torn write. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(doc, ensure_ascii=False).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _sync_dir(path.parent)


def _sync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
