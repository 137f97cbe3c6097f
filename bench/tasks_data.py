"""The task log bench_tasks.py reads: its tasks, built through the store's write path (every
event drafted, checked by the lifecycle, the projection moved), cached as a SQLite file per
(size, schema), or built in a fresh PostgreSQL schema.

Never a test; must not be imported by the package.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench import common
from mempalace_logstream import tasks

LONG_TASK = "task_bench_long"
LEASE_MS = 7 * 24 * 3600 * 1000  # the longest lease: a cached log's held tasks stay held
FRESH_FOR_MS = 24 * 3600 * 1000  # rebuild the cached log when a lease ends within a day
LIST_AGENT = common.AGENTS[7]
# A task's stream and its end state both follow its index modulo 20: this stream's tasks are
# all working, and its listing of any state finds nothing in the eight other states' ranges.
LIST_STREAM = common.STREAMS[10]
# A parent with a child every 49 tasks (2,041 at 100,000), in every state (49 and 20 share no
# factor); the long task is a parent with none.
LIST_PARENT = "task_bench_parent"
CHILD_EVERY = 49
# The state each task ends in, by its index modulo 20: 8 open, 2 claimed, 5 working,
# 1 blocked, 2 completed, 1 cancelled, 1 failed (2.15 events per task).
PLAN: tuple[str, ...] = ("open",) * 8 + ("claimed",) * 2 + ("working",) * 5
PLAN += ("blocked", "completed", "completed", "cancelled", "failed")
MOVES: dict[str, tuple[str, ...]] = {
    "open": (),
    "claimed": ("claim",),
    "working": ("claim", "progress"),
    "blocked": ("claim", "block"),
    "completed": ("claim", "complete", "accept"),
    "cancelled": ("cancel",),
    "failed": ("claim", "fail"),
}


def request_fields(task_id: str, i: int, parent: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"lease_ms": LEASE_MS}
    if parent is not None:
        meta["parent_task_id"] = parent
    return dict(
        type="task.request",
        stream=common.STREAMS[i % len(common.STREAMS)],
        room="delegation",
        from_agent=f"lead-{i % 5}",
        to_agent=common.AGENTS[i % len(common.AGENTS)],
        correlation_id=task_id,
        status="open",
        body=f"Goal: bench task {i}.",
        metadata=meta,
    )


def move_fields(task_id: str, i: int, action: str, progress: float = 1.0) -> dict[str, Any]:
    """One move as a raw `event_append` (what `task_update` appends, without its reads)."""
    requester, assignee = f"lead-{i % 5}", common.AGENTS[i % len(common.AGENTS)]
    event_type, _starts, target = tasks.ACTIONS[action]
    by_requester = action in ("cancel", "accept")
    meta: dict[str, Any] = {}
    if action == "progress":
        meta["progress"] = progress
    elif action == "complete":
        meta["result"] = {"disposition": "no_artifact"}
    return dict(
        type=event_type,
        stream=common.STREAMS[i % len(common.STREAMS)],
        room="delegation",
        from_agent=requester if by_requester else assignee,
        to_agent=assignee if by_requester else requester,
        correlation_id=task_id,
        status=target,
        body=f"{action} of bench task {i}",
        metadata=meta or None,
    )


def task_fields(i: int) -> list[dict[str, Any]]:
    task_id = f"task_bench_{i:07d}"
    moves = MOVES[PLAN[i % len(PLAN)]]
    parent = LIST_PARENT if i % CHILD_EVERY == 3 else None
    return [request_fields(task_id, i, parent)] + [move_fields(task_id, i, a) for a in moves]


def append_all(store: Any, fields: list[dict[str, Any]]) -> None:
    """Append events in one store transaction (each still checked by the lifecycle)."""
    drafts = [store.draft_event(**f) for f in fields]
    store.transaction(lambda tx: [tx.insert_event(d) for d in drafts])


def build_settings() -> tasks.TaskSettings:
    """The task settings of a store that builds the log: the parent's open children are far
    more than the default limit (10)."""
    return tasks.TaskSettings(max_children=100_000)


def populate(store: Any, n_tasks: int, thread_events: int, batch: int = 500) -> None:
    """The long task and the parent, then `n_tasks` tasks: every event through the store's
    write path (drafted, checked by the lifecycle, the projection moved), `batch` tasks a
    transaction. The store is opened with `build_settings()`."""
    t0 = time.perf_counter()
    long = [request_fields(LONG_TASK, 0), move_fields(LONG_TASK, 0, "claim")]
    # Progress is a percentage (0-100): the moves climb to 100 over the thread.
    steps = thread_events - 2
    long += [move_fields(LONG_TASK, 0, "progress", 100.0 * (n + 1) / steps) for n in range(steps)]
    append_all(store, long + [request_fields(LIST_PARENT, 1)])
    events = len(long) + 1
    for start in range(0, n_tasks, batch):
        fields = [f for i in range(start, min(n_tasks, start + batch)) for f in task_fields(i)]
        append_all(store, fields)
        events += len(fields)
    seconds = time.perf_counter() - t0
    print(f"built {n_tasks:,} tasks ({events:,} events) in {seconds:.1f} s")


def schema_key() -> str:
    from bench import bench_store

    return bench_store.schema_fingerprint()


def stale(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (soonest,) = conn.execute("SELECT min(lease_expires_ms) FROM tasks").fetchone()
    finally:
        conn.close()
    return soonest is not None and soonest < time.time() * 1000 + FRESH_FOR_MS


def sqlite_log(n_tasks: int, thread_events: int, cache: Path, rebuild: bool) -> Path:
    """The SQLite task log, built through the store once per (size, schema) and cached; built
    again when a held task's lease would end within a day (it would read as open)."""
    prefix = f"tasks-{n_tasks}-{thread_events}"
    name = f"{prefix}-c{CHILD_EVERY}-{schema_key()}.sqlite3"  # (c: with the parent's children)
    path = cache / name
    with common.file_lock(cache / (name + ".lock")):
        if path.exists() and not rebuild and not stale(path):
            return path
        from mempalace_logstream.store import LogStore

        building = path.with_name(name + ".building")
        common.remove_sqlite(building)
        store = LogStore.open(str(building), durability="normal", task_settings=build_settings())
        try:
            populate(store, n_tasks, thread_events)
        finally:
            store.close()
        common.remove_sqlite(path)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{building}{suffix}", f"{path}{suffix}")
        os.replace(building, path)
        for old in cache.glob(f"{prefix}-*.sqlite3"):
            if old != path:
                common.remove_sqlite(old)
        return path


def pg_schema(admin_url: str) -> contextlib.AbstractContextManager[str]:
    """A fresh schema on the server, dropped afterwards; yields a URL whose search_path is it."""
    return common.pg_schema(admin_url, "bench_tasks")
