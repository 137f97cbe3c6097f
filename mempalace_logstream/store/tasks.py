"""The task projection (RFC 0007): one row per task, kept in the same transaction as the events
that move it, so `task_status` and `task_list` never fold a thread on read.

Local events are checked (`tasks.check`): an illegal move raises before anything is written.
Events applied from a peer or imported are never refused: the projection advances with
`tasks.advance` when they come in HLC order, and the task is re-folded when one arrives late
(from a checkpoint before it: store/task_cache.py). Either way the row equals
`tasks.fold(thread)`; `rebuild_tasks` recomputes every row from the log alone.
"""

import functools
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from mempalace_logstream import errors, lazy, tasks
from mempalace_logstream.backends.queries import tasks as sql
from mempalace_logstream.models import Event
from mempalace_logstream.store import guards
from mempalace_logstream.store.projections import Refusal
from mempalace_logstream.store.rows import events_from_rows
from mempalace_logstream.tasks.model import NON_TERMINAL, REQUEST_TYPE

if TYPE_CHECKING:
    from dataclasses import replace

    from mempalace_logstream.store.writes import Transaction
    from mempalace_logstream.tasks import Task, TaskSettings
else:  # a task replaced without making the dataclass (lazy.py, issue 25)
    from mempalace_logstream.lazy import replace

# ----------------------------------------------------------------------------- rows


def to_row(task: "Task", seq: int) -> dict[str, Any]:
    doc = {name: getattr(task, name) for name in _shape().fields}
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


def from_doc(doc_json: str) -> "Task":
    return _task(json.loads(doc_json), _shape())


def from_docs(docs: Sequence[str]) -> "list[Task]":
    """The tasks of stored documents, decoded in one JSON parse (a `task_list` page: ~30 %
    cheaper than one parse per document)."""
    if not docs:
        return []
    shape = _shape()
    return [_task(doc, shape) for doc in json.loads("[" + ",".join(docs) + "]")]


_TUPLE_FIELDS = ("conflicts", "anomalies", "lost")


class _Shape(NamedTuple):
    fields: tuple[str, ...]  # a document's fields: the Task's, in order
    names: frozenset[str]
    required: frozenset[str]
    defaults: dict[str, Any]  # each defaulted field's value
    cls: type  # the Task class


@functools.cache
def _shape() -> _Shape:
    """The Task's fields as declared, read when the first task row is written or read
    without making the dataclass (lazy.py, issue 25)."""
    fields = lazy.declared(tasks.Task)
    required = frozenset(name for name, default, _ in fields if default is lazy.MISSING)
    defaults = {name: default for name, default, _ in fields if name not in required}
    names = tuple(name for name, _, _ in fields)
    return _Shape(names, frozenset(names), required, defaults, tasks.Task)


def _task(doc: dict[str, Any], shape: _Shape) -> "Task":
    """A Task from its decoded document. Filled through `__dict__`, as rows become Events
    (store/plan.py): the frozen dataclass's `__init__` sets its 25 fields one
    `object.__setattr__` at a time (~4 µs a task, half of a `task_list` page's decoding). A
    document of every field (what `to_row` writes) becomes the task's `__dict__` itself; one
    missing a defaulted field gets its default; one missing a required field, or with one
    this version does not know, goes through `__init__` (which refuses the first, and the
    second is left out as before)."""
    for name in _TUPLE_FIELDS:
        value = doc.get(name)
        doc[name] = tuple(value) if value else ()
    task: Task = object.__new__(shape.cls)
    if doc.keys() == shape.names:
        object.__setattr__(task, "__dict__", doc)
    elif shape.required <= doc.keys() <= shape.names:
        task.__dict__.update(shape.defaults)
        task.__dict__.update(doc)
    else:
        return tasks.Task(**{k: doc[k] for k in shape.fields if k in doc})
    return task


def load(tx: "Transaction", task_id: str) -> "Task | None":
    doc = sql.doc(tx.ex, task_id)
    return from_doc(doc) if doc is not None else None


def save(tx: "Transaction", task: "Task", seq: int, *, existed: bool) -> None:
    row = to_row(task, seq)
    if existed:
        sql.update(tx.ex, row)
    else:
        sql.insert(tx.ex, row)


def thread(tx: "Transaction", task_id: str) -> list[Event]:
    """Every event of a task's thread (its correlation id), in log order."""
    return events_from_rows(sql.thread(tx.ex, tx.store.event_select, task_id))


# ----------------------------------------------------------------------------- writes


def on_local_event(tx: "Transaction", event: Event) -> Event:
    """Check a local event (inserted in `tx` already) against its task's lifecycle and move
    the projection; returns the event, unchanged. Raises the refusal: the transaction (or
    the item's savepoint) rolls back, nothing is written. The loop guards (issue 20,
    store/guards.py) run first: a write past a budget is refused the same way."""
    guards.check_local(tx, event)
    if not event.correlation_id:
        return event
    # The settings read here: a store's are made on first use (a plain write never does).
    settings = tx.store.task_settings
    task = load(tx, event.correlation_id)
    move = tasks.classify(event, task)
    if move is None:
        return event
    depth = 1
    if move.action == "create" and task is None and not move.problem:
        depth = _checked_depth(tx, move.parent_task_id, settings)
    if task is not None and tasks.needs_thread(task, move, settings):
        after = _decided_by_thread(tx, task, move, event, settings)
    else:
        after = tasks.check(task, move, settings)
    if task is None:
        after = replace(after, depth=depth)
    save(tx, after, event.seq, existed=task is not None)
    return event


def _decided_by_thread(
    tx: "Transaction", task: "Task", move: tasks.Move, event: Event, settings: "TaskSettings"
) -> "Task":
    """A local move the row alone cannot decide (identity, RFC 0007): the thread with it is
    folded; the move stands if the fold applies it, else it is refused as `check` refuses
    it (or, for an unverified reopen of a verified end, as the fold records it)."""
    # The event is inserted already (the projection runs after the insert): folded once.
    held = [e for e in thread(tx, task.task_id) if e.id != event.id]
    after = tasks.fold([*held, event], settings)
    assert after is not None
    after = _depth(tx, after)
    recorded = next((a for a in after.anomalies if a["event_id"] == event.id), None)
    lost = any(c["event_id"] == event.id for c in after.conflicts)
    if recorded is None and not lost:
        return after
    tasks.check(task, move, settings)  # raises the refusal a reader expects
    reason = recorded["reason"] if recorded else f"task {task.task_id}: {move.action} refused"
    raise errors.ConflictError(reason, field="from_agent", ident=task.task_id)


def _checked_depth(tx: "Transaction", parent_id: str | None, settings: "TaskSettings") -> int:
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


def refold(tx: "Transaction", task_id: str) -> "tuple[Task | None, int]":
    """The task folded from its thread as it is stored now, with its depth, and the seq of
    its newest event (redaction re-folds a task; doctor compares with the stored row)."""
    tx.store.task_folds.forget(task_id)  # its thread changed in place (a redaction)
    thread_events = thread(tx, task_id)
    task = tasks.fold(thread_events, tx.store.task_settings)
    if task is None:
        return None, 0
    return _depth(tx, task), max(e.seq for e in thread_events)


def _depth(tx: "Transaction", task: "Task") -> "Task":
    """`task` with its depth from its parent's row (peer events, rebuilds: no limits)."""
    if task.parent_task_id is None:
        return task
    parent = load(tx, task.parent_task_id)
    return replace(task, depth=(parent.depth if parent else 0) + 1)


def _open_children(tx: "Transaction", parent_id: str) -> int:
    return sql.open_children(tx.ex, parent_id, _OPEN_STATES)


_OPEN_STATES = tuple(sorted(NON_TERMINAL))


class TaskProjection:
    """The task rows (RFC 0007) as a registered projection (store/projections.py): a local
    event is checked against its task's lifecycle (refused by raising), a peer's or an
    imported one is followed, never refused."""

    name = "tasks"

    def apply(self, tx: "Transaction", events: Sequence[Event], origin: str) -> Sequence[Refusal]:
        if origin == "local":
            for event in events:
                if guards.may_count(event):  # else no thread, no budget: nothing to do
                    on_local_event(tx, event)
        else:
            on_applied_events(tx, events, tx.store.task_settings)
        return ()  # (never refuses: no list made per append)


def on_applied_events(
    tx: "Transaction", applied: Iterable[Event], settings: "TaskSettings"
) -> None:
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
        after = _advanced(task, batch, settings) if task is not None else None
        if after is None:
            # Late (or undecidable by the row): folded again from a checkpoint before the batch;
            # a new task from its batch when that is its whole thread (not read back).
            stored = batch if task is None else ()
            after = tx.store.task_folds.refold(tx, task_id, settings, stored)
            after = _depth(tx, after) if after is not None else None
        if after is not None:
            save(tx, after, max(seq, 0), existed=task is not None)


def _advanced(task: "Task", batch: list[Event], settings: "TaskSettings") -> "Task | None":
    """`task` moved by a batch that sorts after everything it has seen, one step per event;
    None when the thread must be folded instead (an event arrived late, or a move the row
    alone cannot decide)."""
    if batch[0].hlc <= task.last_hlc:
        return None
    after = task
    for event in batch:
        move = tasks.classify(event, after)
        if move is None:
            continue
        if tasks.needs_thread(after, move, settings):
            return None
        after = tasks.advance(after, move, settings)
    return after


# The version of the fold's rules the rows were written with (in `logstream_meta`): a store
# that opens a log whose rows an older fold wrote rebuilds them. 2: issue 18 (identity's
# rules, second requests, progress 0-100, the question's event).
FOLD_VERSION_KEY = "tasks_fold"
FOLD_VERSION = "3"  # 3: rows carry the request's HLC


def mark_fold_version(tx: "Transaction") -> None:
    sql.set_meta(tx.ex, FOLD_VERSION_KEY, FOLD_VERSION)


def rebuild(tx: "Transaction", settings: "TaskSettings") -> int:
    """Recompute every task row from the log alone (and record the fold's version); returns
    the number of tasks."""
    sql.clear(tx.ex)
    tx.store.task_folds.forget()
    count = 0
    seen: set[str] = set()
    # In HLC order: parents before children, so that depth follows.
    for task_id in sql.request_ids(tx.ex, REQUEST_TYPE):
        if task_id in seen:
            continue
        seen.add(task_id)
        thread_events = thread(tx, task_id)
        task = tasks.fold(thread_events, settings)
        if task is not None:
            save(tx, _depth(tx, task), max(e.seq for e in thread_events), existed=False)
            count += 1
    mark_fold_version(tx)
    return count
