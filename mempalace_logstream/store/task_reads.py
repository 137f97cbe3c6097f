"""Reading the task projection (RFC 0007): `task_status` and `task_list`, a part of
`LogStore`. A summary is the row's task as of now (a lease that passed reads as open),
with what the row does not hold read beside it: the goal and definition of done from the
request's body, a blocked task's question from the block's body, and the delegation limits
this store enforces, checked against history a peer brought (listed under `anomalies`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mempalace_logstream import errors, hlc, tasks
from mempalace_logstream import validation as v
from mempalace_logstream.backends.queries import tasks as sql
from mempalace_logstream.payload import TOMBSTONE_PREFIX
from mempalace_logstream.store.reads import Reads
from mempalace_logstream.store.tasks import from_doc, from_docs
from mempalace_logstream.tasks import Task, TaskSettings
from mempalace_logstream.tasks.model import HELD

# ----------------------------------------------------------------------------- reads


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def summary(
    task: Task, now_ms: int, settings: TaskSettings, texts: dict[str, str] | None = None
) -> dict[str, Any]:
    """What `task_list` shows of a task; `task_status` adds the thread. `texts`: bodies (or
    their beginnings) of the task's request and question events, by event id."""
    state = task.state_at(now_ms)
    lost = list(task.lost)
    if state != task.state:  # the lease has passed: the attempt is lost as of now
        lost.append(
            {
                "attempt": task.attempt,
                "assignee": task.assignee,
                "expired_at": iso(task.lease_expires_ms),
            }
        )
    held = state in HELD
    texts = texts or {}
    goal, done = goal_and_done(texts.get(task.request_event_id))
    question = texts.get(task.question_event_id or "") if state == "blocked" else None
    return {
        "task_id": task.task_id,
        "state": state,
        "a2a_state": tasks.A2A_STATES[state],
        "requester": task.requester,
        "to_agent": task.to_agent,
        "assignee": task.assignee if state != "open" else None,  # who holds or held it
        "attempt": task.attempt,
        "lease_expires_at": iso(task.lease_expires_ms) if held else None,
        "lease_ms": task.lease_ms if held else task.request_lease_ms,
        "progress": task.progress,
        "goal": goal,
        "done": done,
        "question": None if question is None or is_tombstone(question) else question,
        "parent_task_id": task.parent_task_id,
        "depth": task.depth,
        "stream": task.stream,
        "result": task.result,
        "retryable": task.retryable,
        "conflicts": list(task.conflicts),
        "anomalies": list(task.anomalies) + depth_anomalies(task, settings),
        "lost": lost,
        "updated_hlc": task.last_hlc,
    }


GOAL, DONE, DELIVERY = "Goal:\n", "\n\nDefinition of done:\n", "\n\nDelivery:\n"
MORE = "\u2026"  # what a shortened text ends with


def goal_and_done(body: str | None) -> tuple[str | None, str | None]:
    """The goal and definition of done a request's body states (`task_create` writes them
    under "Goal:" and "Definition of done:"); another request's body is its goal. None for a
    redacted body."""
    if body is None or is_tombstone(body):
        return None, None
    if not body.startswith(GOAL):
        return body.strip() or None, None
    goal, sep, rest = body[len(GOAL) :].partition(DONE)
    if not sep:
        return goal, None
    done, _sep, _delivery = rest.partition(DELIVERY)
    return goal, done


def is_tombstone(text: str) -> bool:
    return text.startswith(TOMBSTONE_PREFIX)


def depth_anomalies(task: Task, settings: TaskSettings) -> list[dict[str, Any]]:
    """The delegation depth limit, checked against a chain a peer's history built (a local
    create over the limit is refused before anything is written)."""
    if task.depth <= settings.max_depth:
        return []
    reason = (
        f"task depth {task.depth} exceeds the limit of {settings.max_depth} (parent "
        f"{task.parent_task_id} is at depth {task.depth - 1})"
    )
    return [_create_anomaly(task, reason, "depth_limit")]


def children_anomalies(
    parent_id: str, children: list[Task], now_ms: int, settings: TaskSettings
) -> list[dict[str, Any]]:
    """The open children beyond the limit, by request order (the first ones fit)."""
    still_open = [c for c in children if c.state_at(now_ms) in tasks.NON_TERMINAL]
    if len(still_open) <= settings.max_children:
        return []
    still_open.sort(key=lambda c: (c.request_hlc, c.request_event_id))  # the log's order
    n, limit = len(still_open), settings.max_children
    return [
        _create_anomaly(
            child,
            f"task {parent_id} has {n} open children; the limit is {limit} "
            f"({child.task_id} is over it)",
            "children_limit",
        )
        for child in still_open[limit:]
    ]


def _create_anomaly(task: Task, reason: str, code: str) -> dict[str, Any]:
    return {
        "event_id": task.request_event_id,
        "action": "create",
        "agent": task.requester,
        "reason": reason,
        "code": code,
    }


def texts_of(query: Any, task: Task, *, cap: int | None) -> dict[str, str]:
    """The bodies (the first `cap` characters, `MORE` marking a cut) of a task's request and
    question events, read in `query`'s snapshot."""
    rows = sql.texts(query, task.request_event_id, task.question_event_id or "", cap)
    return {str(i): _cut(str(b), cap) for i, b in rows}


def _cut(text: str, cap: int | None) -> str:
    return text[:cap] + MORE if cap and len(text) > cap else text


LIST_TEXT_CAP = 1_000  # characters of a request's body a task_list summary reads


def thread_ids(query: Any, task_id: str) -> tuple[list[str], list[str]]:
    """(event ids of the thread, artifact ids its events reference), in HLC order: the fold's
    order, the same on every replica."""
    ids, arts = sql.thread_ids(query, task_id)
    return ids, list(dict.fromkeys(arts))


# ----------------------------------------------------------------------------- the store's part

LIST_STATES = frozenset(tasks.STATES)


class TaskReads:
    """`task_status`, `task_brief` and `task_list` (a part of `LogStore`): the projection's
    rows read in one snapshot of `reads`, judged as of `clock`'s now."""

    def __init__(self, reads: Reads, clock: hlc.HybridClock, settings: TaskSettings) -> None:
        self.reads, self.clock, self.settings = reads, clock, settings

    def task_status(self, task_id: Any) -> dict[str, Any]:
        """{task: …}: the derived state, children, the thread's event and artifact ids."""
        return {"task": self._task(task_id, whole=True)}

    def task_brief(self, task_id: Any) -> dict[str, Any]:
        """The derived state alone (no children, no thread): what a move needs and returns."""
        return self._task(task_id, whole=False)

    def _task(self, task_id: Any, *, whole: bool) -> dict[str, Any]:
        ident = v.required_routing("task_id", task_id)
        with self.reads.snapshot() as snap:
            doc = sql.doc(snap, ident)
            if doc is None:
                raise errors.NotFoundError(f"task {ident} not found", field="task_id", ident=ident)
            task = from_doc(doc)
            texts = texts_of(snap, task, cap=None)
            if whole:
                children = sql.children(snap, ident)
                event_ids, artifact_ids = thread_ids(snap, ident)
        now = self.clock.wall_clock.now_ms()
        out = summary(task, now, self.settings, texts)
        if whole:
            kids = [from_doc(doc) for _cid, doc in children]
            out["children"] = [{"task_id": c.task_id, "state": c.state_at(now)} for c in kids]
            out["anomalies"] += children_anomalies(ident, kids, now, self.settings)
            out["events"] = event_ids
            out["artifacts"] = artifact_ids
        return out

    def task_list(
        self,
        *,
        state: Any = None,
        to_agent: Any = None,
        from_agent: Any = None,
        stream: Any = None,
        parent_task_id: Any = None,
        limit: Any = None,
        cursor: Any = None,
    ) -> dict[str, Any]:
        """Tasks, most recently moved first: {tasks, count, cursor, has_more}. `from_agent`
        is the requester; `state=open` includes tasks whose lease has passed."""
        if state is not None and state not in LIST_STATES:
            raise v.fail("state", f"{state!r} is not one of {', '.join(tasks.STATES)}")
        args = {
            "to_agent": v.routing("to_agent", to_agent),
            "requester": v.routing("from_agent", from_agent),
            "stream": v.routing("stream", stream),
            "parent_task_id": v.routing("parent_task_id", parent_task_id),
        }
        n = v.limit(limit)
        before = _cursor(cursor)
        now = self.clock.wall_clock.now_ms()
        given = {k: val for k, val in args.items() if val is not None}
        with self.reads.snapshot() as snap:
            rows = sql.listing(
                snap, state, given, now_ms=now, before=before, n=page_rows(n), states=STORED
            )
            page = from_docs([doc for _seq, doc in rows[:n]])
            texts = _page_texts(snap, page)
        found = [summary(task, now, self.settings, texts) for task in page]
        return {
            "tasks": found,
            "count": len(found),
            "cursor": str(rows[n - 1][0]) if len(rows) > n else None,
            "has_more": len(rows) > n,
        }


def page_rows(n: int) -> int:
    """The rows a listing of `n` tasks reads (one more tells `has_more`): a literal of its
    statement (queries/tasks.py), so `n` + 1 for the default page, else the next power of
    two above `n`: a store compiles a few shapes per filter set, not one per page size."""
    return n + 1 if n == v.DEFAULT_LIST_LIMIT else 1 << n.bit_length()


STORED = tuple(tasks.STATES)  # the states a task row holds (a listing of any state)


def _page_texts(snap: Any, page: list[Task]) -> dict[str, str]:
    """The beginnings of the page's request and question bodies, in one read (one statement
    shape for any page)."""
    ids = [t.request_event_id for t in page] + [
        t.question_event_id for t in page if t.question_event_id
    ]
    if not ids:
        return {}
    rows = sql.page_texts(snap, ids, LIST_TEXT_CAP)
    return {str(i): _cut(str(b), LIST_TEXT_CAP) for i, b in rows}


def _cursor(raw: Any) -> int:
    if raw is None:
        return 2**62
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    raise v.fail("cursor", "must be the `cursor` a previous task_list returned")
