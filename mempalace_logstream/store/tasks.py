"""The task projection (RFC 0007): one row per task, kept in the same transaction as the events
that move it, so `task_status` and `task_list` never fold a thread on read.

Local events are checked (`tasks.check`): an illegal move raises before anything is written.
Events applied from a peer or imported are never refused: the projection advances with
`tasks.advance` when they come in HLC order, and the task is re-folded from its thread when one
arrives late. Either way the row equals `tasks.fold(thread)`; `rebuild_tasks` recomputes every
row from the log alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mempalace_logstream import errors, tasks
from mempalace_logstream import validation as v
from mempalace_logstream.models import Event
from mempalace_logstream.schema import event_artifacts, events
from mempalace_logstream.schema import tasks as tasks_table
from mempalace_logstream.store.pipeline import CommitPipeline
from mempalace_logstream.store.rows import events_from_rows
from mempalace_logstream.tasks import Task, TaskSettings
from mempalace_logstream.tasks.model import HELD, NON_TERMINAL, REQUEST_TYPE

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction

DOC_FIELDS = tuple(f.name for f in dataclasses.fields(Task))


# ----------------------------------------------------------------------------- rows


def to_row(task: Task, seq: int) -> dict[str, Any]:
    doc = {name: getattr(task, name) for name in DOC_FIELDS}
    return {
        "task_id": task.task_id,
        "state": task.state,
        "requester": task.requester,
        "to_agent": task.to_agent,
        "assignee": task.assignee,
        "stream": task.stream,
        "parent_task_id": task.parent_task_id,
        "lease_expires_ms": task.lease_expires_ms,
        "updated_seq": seq,
        "doc_json": json.dumps(doc, ensure_ascii=False, separators=(",", ":")),
    }


def from_doc(doc_json: str) -> Task:
    doc = json.loads(doc_json)
    for name in ("conflicts", "anomalies", "lost"):
        doc[name] = tuple(doc.get(name) or ())
    return Task(**{k: doc[k] for k in DOC_FIELDS if k in doc})


def _select_doc() -> sa.Select[Any]:
    return sa.select(tasks_table.c.doc_json).where(tasks_table.c.task_id == sa.bindparam("id"))


def _update() -> sa.Update:
    t = tasks_table.c
    values: dict[str, Any] = {c: sa.bindparam(f"new_{c}") for c in to_row_keys() if c != "task_id"}
    return tasks_table.update().where(t.task_id == sa.bindparam("id")).values(**values)


def to_row_keys() -> tuple[str, ...]:
    return tuple(c.name for c in tasks_table.c)


def load(tx: Transaction, task_id: str) -> Task | None:
    rows = tx.rows("task-doc", _select_doc, {"id": task_id})
    return from_doc(rows[0][0]) if rows else None


def save(tx: Transaction, task: Task, seq: int, *, existed: bool) -> None:
    row = to_row(task, seq)
    if not existed:
        tx.ex.insert("task-insert", tasks_table, [row])
        return
    params = {f"new_{k}": val for k, val in row.items() if k != "task_id"}
    tx.ex.run("task-update", _update, {"id": task.task_id, **params})


def thread(tx: Transaction, task_id: str) -> list[Event]:
    """Every event of a task's thread (its correlation id), in log order."""

    def build() -> sa.Select[Any]:
        where = events.c.correlation_id == sa.bindparam("cid")
        return tx.store.event_select(where).order_by(events.c.seq)

    return events_from_rows(tx.rows("task-thread", build, {"cid": task_id}))


# ----------------------------------------------------------------------------- writes


def on_local_event(tx: Transaction, event: Event, settings: TaskSettings) -> Event:
    """Check a local event against its task's lifecycle and move the projection; returns the
    event to store, unchanged. Raises the refusal, writing nothing."""
    if not event.correlation_id:
        return event
    task = load(tx, event.correlation_id)
    move = tasks.classify(event, task)
    if move is None:
        return event
    depth = 1
    if move.action == "create" and task is None and not move.problem:
        depth = _checked_depth(tx, move.parent_task_id, settings)
    after = tasks.check(task, move, settings)
    if task is None:
        after = dataclasses.replace(after, depth=depth)
    save(tx, after, event.seq, existed=task is not None)
    return event


def _checked_depth(tx: Transaction, parent_id: str | None, settings: TaskSettings) -> int:
    """A new task's depth in the delegation chain, with the limits (depth, open children)
    checked. The depth is the projection's, derived from the parent's row: the event is stored
    exactly as it was sent."""
    if parent_id is None:
        return 1
    parent = load(tx, parent_id)
    if parent is None:
        raise errors.NotFoundError(
            f"parent task {parent_id} not found", field="parent_task_id", ident=parent_id
        )
    depth = parent.depth + 1
    if depth > settings.max_depth:
        raise errors.ValidationError(
            f"task depth {depth} exceeds the limit of {settings.max_depth} (parent "
            f"{parent_id} is at depth {parent.depth})",
            field="parent_task_id",
            limit=settings.max_depth,
        )
    open_children = _open_children(tx, parent_id)
    if open_children >= settings.max_children:
        raise errors.ValidationError(
            f"task {parent_id} already has {open_children} open children; the limit is "
            f"{settings.max_children}",
            field="parent_task_id",
            limit=settings.max_children,
        )
    return depth


def refold(tx: Transaction, task_id: str) -> tuple[Task | None, int]:
    """The task folded from its thread as it is stored now, with its depth, and the seq of
    its newest event (redaction re-folds a task; doctor compares with the stored row)."""
    thread_events = thread(tx, task_id)
    task = tasks.fold(thread_events, tx.store.task_settings)
    if task is None:
        return None, 0
    return _depth(tx, task), max(e.seq for e in thread_events)


def _depth(tx: Transaction, task: Task) -> Task:
    """`task` with its depth from its parent's row (peer events, rebuilds: no limits)."""
    if task.parent_task_id is None:
        return task
    parent = load(tx, task.parent_task_id)
    return dataclasses.replace(task, depth=(parent.depth if parent else 0) + 1)


def _open_children(tx: Transaction, parent_id: str) -> int:
    def build() -> sa.Select[Any]:
        t = tasks_table.c
        # OR of equalities, not IN: the statement is compiled once, with no expanding list.
        still_open = sa.or_(*(t.state == state for state in sorted(NON_TERMINAL)))
        return (
            sa.select(sa.func.count())
            .select_from(tasks_table)
            .where(t.parent_task_id == sa.bindparam("pid"), still_open)
        )

    return int(tx.rows("task-open-children", build, {"pid": parent_id})[0][0])


def on_applied_events(tx: Transaction, applied: Iterable[Event], settings: TaskSettings) -> None:
    """Move the projection for events a peer (or an import) brought: never refused; advanced
    in HLC order, or the task re-folded from its thread when an event arrives late."""
    by_task: dict[str, list[Event]] = {}
    for event in applied:
        if event.correlation_id:
            by_task.setdefault(event.correlation_id, []).append(event)
    for task_id, batch in by_task.items():
        batch.sort(key=lambda e: (e.hlc, e.id))
        task = load(tx, task_id)
        if task is None and not any(e.type == REQUEST_TYPE for e in batch):
            continue  # not a task (yet): a late request re-folds the thread when it comes
        seq = max(e.seq for e in batch)
        if task is not None and batch[0].hlc > task.last_hlc:
            after: Task | None = task
            for event in batch:
                move = tasks.classify(event, after)
                if move is not None:
                    after = tasks.advance(after, move, settings)
        else:
            after = tasks.fold(thread(tx, task_id), settings)
            after = _depth(tx, after) if after is not None else None
        if after is not None:
            save(tx, after, max(seq, 0), existed=task is not None)


def rebuild(tx: Transaction, settings: TaskSettings) -> int:
    """Recompute every task row from the log alone; returns the number of tasks."""

    def ids() -> sa.Select[Any]:
        return (
            sa.select(events.c.correlation_id)
            .where(events.c.type == REQUEST_TYPE, events.c.correlation_id.is_not(None))
            .order_by(events.c.hlc, events.c.id)  # parents before children: depth follows
        )

    tx.ex.run("task-clear", lambda: tasks_table.delete(), {})
    count = 0
    seen: set[str] = set()
    for (task_id,) in tx.rows("task-request-ids", ids, {}):
        if task_id in seen:
            continue
        seen.add(task_id)
        thread_events = thread(tx, task_id)
        task = tasks.fold(thread_events, settings)
        if task is not None:
            save(tx, _depth(tx, task), max(e.seq for e in thread_events), existed=False)
            count += 1
    return count


# ----------------------------------------------------------------------------- reads


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def summary(task: Task, now_ms: int) -> dict[str, Any]:
    """What `task_list` shows of a task; `task_status` adds the thread."""
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
        "parent_task_id": task.parent_task_id,
        "depth": task.depth,
        "stream": task.stream,
        "result": task.result,
        "retryable": task.retryable,
        "conflicts": list(task.conflicts),
        "anomalies": list(task.anomalies),
        "lost": lost,
        "updated_hlc": task.last_hlc,
    }


def thread_ids(query: Any, task_id: str) -> tuple[list[str], list[str]]:
    """(event ids of the thread, artifact ids its events reference), in HLC order: the fold's
    order, the same on every replica."""

    def build_events() -> sa.Select[Any]:
        return (
            sa.select(events.c.id)
            .where(events.c.correlation_id == sa.bindparam("cid"))
            .order_by(events.c.hlc, events.c.id)
        )

    def build_artifacts() -> sa.Select[Any]:
        return (
            sa.select(event_artifacts.c.artifact_id)
            .join(events, events.c.id == event_artifacts.c.event_id)
            .where(events.c.correlation_id == sa.bindparam("cid"))
            .order_by(events.c.hlc, events.c.id, event_artifacts.c.position)
        )

    ids = [r[0] for r in query.rows("task-thread-ids", build_events, {"cid": task_id})]
    arts = [r[0] for r in query.rows("task-thread-arts", build_artifacts, {"cid": task_id})]
    return ids, list(dict.fromkeys(arts))


# ----------------------------------------------------------------------------- the store's part

LIST_STATES = frozenset(tasks.STATES)


class TaskReads(CommitPipeline):
    """`task_status`, `task_list` and `rebuild_tasks` (a base of `LogStore`)."""

    task_settings: TaskSettings

    def task_status(self, task_id: Any) -> dict[str, Any]:
        """{task: …}: the derived state, children, the thread's event and artifact ids."""
        return {"task": self._task(task_id, whole=True)}

    def task_brief(self, task_id: Any) -> dict[str, Any]:
        """The derived state alone (no children, no thread): what a move needs and returns."""
        return self._task(task_id, whole=False)

    def _task(self, task_id: Any, *, whole: bool) -> dict[str, Any]:
        ident = v.required_routing("task_id", task_id)
        store: Any = self
        with store.snapshot() as snap:
            rows = snap.rows("task-doc", _select_doc, {"id": ident})
            if not rows:
                raise errors.NotFoundError(f"task {ident} not found", field="task_id", ident=ident)
            task = from_doc(rows[0][0])
            if whole:
                children = snap.rows("task-children", _select_children, {"pid": ident})
                event_ids, artifact_ids = thread_ids(snap, ident)
        now = store.clock.wall_clock.now_ms()
        out = summary(task, now)
        if whole:
            out["children"] = [
                {"task_id": cid, "state": from_doc(doc).state_at(now)} for cid, doc in children
            ]
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
        store: Any = self
        now = store.clock.wall_clock.now_ms()
        query = _list_query(state, tuple(k for k, val in args.items() if val is not None))
        params: dict[str, Any] = {k: val for k, val in args.items() if val is not None}
        params |= {"now": now, "before": before, "n": n + 1}
        with self._storage_errors(), self.engine.connect() as conn:
            rows = conn.execute(query, params).all()
        page = rows[:n]
        found = [summary(from_doc(doc), now) for _seq, doc in page]
        return {
            "tasks": found,
            "count": len(found),
            "cursor": str(page[-1][0]) if len(rows) > n else None,
            "has_more": len(rows) > n,
        }

    def rebuild_tasks(self) -> int:
        """Recompute the task projection from the log alone; returns how many tasks."""
        store: Any = self
        result: int = store.transaction(lambda tx: rebuild(tx, self.task_settings))
        return result


def _select_children() -> sa.Select[Any]:
    t = tasks_table.c
    return (
        sa.select(t.task_id, t.doc_json)
        .where(t.parent_task_id == sa.bindparam("pid"))
        .order_by(t.updated_seq)
    )


def _cursor(raw: Any) -> int:
    if raw is None:
        return 2**62
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    raise v.fail("cursor", "must be the `cursor` a previous task_list returned")


@functools.lru_cache(maxsize=256)
def _list_query(state: str | None, given: tuple[str, ...]) -> sa.Select[Any]:
    """Newest activity first. `state=open` also holds claimed/working tasks whose lease has
    passed: one index-ordered leg per stored state (state, updated_seq), each cut at the page,
    merged (an OR would sort every live task)."""
    t = tasks_table.c
    given_filters = [t[name] == sa.bindparam(name) for name in given]
    passed = sa.and_(t.lease_expires_ms.is_not(None), t.lease_expires_ms <= sa.bindparam("now"))

    def leg(*where: sa.ColumnElement[bool], by_lease: bool = False) -> sa.Select[Any]:
        # `by_lease`: the few held tasks whose lease passed are found through (state,
        # lease_expires_ms); `updated_seq + 0` keeps a planner without statistics from walking
        # every held task in (state, updated_seq) order instead.
        seq = t.updated_seq + 0 if by_lease else t.updated_seq
        return (
            sa.select(t.updated_seq, t.doc_json)
            .where(seq < sa.bindparam("before"), *given_filters, *where)
            .order_by(seq.desc())
            .limit(sa.bindparam("n"))
        )

    if state == "open":
        legs = [leg(t.state == "open")]
        legs += [leg(t.state == held, passed, by_lease=True) for held in LEASED]
        merged = sa.union_all(*(x.subquery().select() for x in legs)).subquery()
        return (
            sa.select(merged.c.updated_seq, merged.c.doc_json)
            .order_by(merged.c.updated_seq.desc())
            .limit(sa.bindparam("n"))
        )
    if state in LEASED:
        return leg(t.state == state, sa.not_(passed))
    if state is not None:
        return leg(t.state == state)
    return leg()


LEASED = ("claimed", "working")  # the states whose lease runs: past it they read as open
