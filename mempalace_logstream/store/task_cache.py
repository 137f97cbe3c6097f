"""Checkpoints of the task fold (RFC 0007 "One winner", issue 18 item 15): a task whose events
arrive out of HLC order is re-folded from a checkpoint before them, not from its request, so a
long thread that a peer extends page by page costs each page its own events, not the thread.

A checkpoint is the fold's state (`tasks.FoldState`) after the thread's events up to a key
(hlc, id), with how many events the thread held up to that key. It is kept in this process
only, and only ever covers committed events (those before the current transaction's first
insert), so a transaction that rolls back cannot leave a checkpoint behind it. Events are
never deleted, so the same count up to the key means the same events: a checkpoint whose count
no longer matches (a later event sorted before it, from any process) is dropped and the task
folded from its request, as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mempalace_logstream import tasks
from mempalace_logstream.backends.queries import tasks as sql
from mempalace_logstream.models import Event
from mempalace_logstream.store.rows import events_from_rows
from mempalace_logstream.tasks import FoldState, Task, TaskSettings

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction


@dataclass(frozen=True)
class Checkpoint:
    hlc: str
    event_id: str
    count: int  # the thread's events up to (hlc, event_id), that one included
    state: FoldState


class FoldCache:
    """The newest checkpoint of up to `size` tasks (least recently used dropped first)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.folded = 0  # events fed to the fold by `refold` (a measure for tests and benches)
        self._points: OrderedDict[str, Checkpoint] = OrderedDict()

    def checkpoint(self, task_id: str) -> Checkpoint | None:
        """The task's checkpoint, if this process keeps one (for tests and `doctor`-like
        inspection; `refold` validates it before use)."""
        return self._points.get(task_id)

    def forget(self, task_id: str | None = None) -> None:
        """Drop one task's checkpoint (all with None): its thread changed in place."""
        if task_id is None:
            self._points.clear()
        else:
            self._points.pop(task_id, None)

    def refold(
        self, tx: Transaction, task_id: str, settings: TaskSettings, stored: Sequence[Event] = ()
    ) -> Task | None:
        """The fold of the task's thread as this transaction sees it (depth not set).
        `stored`: events of the thread this transaction stored, if the caller holds them; when
        they are the whole thread (as many as it holds: a peer's page that brings a new task
        whole), they are folded without reading the thread back."""
        point = self._valid(tx, task_id)
        if point is not None:
            suffix = _after(tx, task_id, point)
            if not point.state.tracked and any(e.sig is not None for e in suffix):
                point = None  # the first verified event: fold from the request, tracking
        if point is None:
            whole = stored and sql.thread_count(tx.ex, task_id) == len(stored)
            suffix = list(stored) if whole else _thread(tx, task_id)
            start = FoldState(tracked=any(e.sig is not None for e in suffix))
            count = 0
        else:
            start, count = point.state, point.count
        ordered = sorted(suffix, key=lambda e: (e.hlc, e.id))
        # The first seq of this transaction: its events are appended in seq order (a rollback
        # drops a suffix), so the first one's (not a walk of a page's thousands per task).
        appended = tx.state.appended
        fresh = appended[0].seq if appended else None
        folder = tasks.Folder(settings, start)
        for k, event in enumerate(ordered):
            if fresh is not None and event.seq >= fresh:
                # Not committed yet: the checkpoint stops before this transaction's events.
                self._keep(task_id, ordered[:k], count + k, folder, point)
                fresh = None
            folder.feed(event)
        if fresh is not None:
            self._keep(task_id, ordered, count + len(ordered), folder, point)
        self.folded += len(ordered)
        return folder.task

    def _valid(self, tx: Transaction, task_id: str) -> Checkpoint | None:
        point = self._points.get(task_id)
        if point is None:
            return None
        if sql.fold_count(tx.ex, task_id, point.hlc, point.event_id) != point.count:
            self.forget(task_id)
            return None
        self._points.move_to_end(task_id)
        return point

    def _keep(
        self,
        task_id: str,
        fed: list[Event],
        count: int,
        folder: tasks.Folder,
        point: Checkpoint | None,
    ) -> None:
        if not fed:
            return  # nothing new before the fresh events: the old checkpoint (if any) stays
        last = fed[-1]
        self._points[task_id] = Checkpoint(last.hlc, last.id, count, folder.state())
        self._points.move_to_end(task_id)
        while len(self._points) > self.size:
            self._points.popitem(last=False)


def _after(tx: Transaction, task_id: str, point: Checkpoint) -> list[Event]:
    rows = sql.fold_after(tx.ex, tx.store.event_select, task_id, point.hlc, point.event_id)
    return events_from_rows(rows)


def _thread(tx: Transaction, task_id: str) -> list[Event]:
    return events_from_rows(sql.fold_thread(tx.ex, tx.store.event_select, task_id))
