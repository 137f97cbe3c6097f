"""The task lifecycle (RFC 0007): states, moves and the fold that derives a task's state from
its thread. Pure: no SQL, no I/O, no clock (times come from the events' HLC stamps).

    classify(event, task) -> Move | None     which move an event is, if any
    check(task, move, settings) -> Task      a local move: the next state, or a refusal
    advance(task, move, settings) -> Task    a peer's move: the next state, illegal moves recorded
    fold(events, settings) -> Task | None    a whole thread, in HLC order (identity's rules too)
    needs_thread(task, move, settings)       whether the row alone cannot decide a move
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mempalace_logstream.tasks.fold import DEFAULT_SETTINGS, advance, check, needs_thread
from mempalace_logstream.tasks.model import (
    A2A_STATES,
    ACTIONS,
    NON_TERMINAL,
    STATES,
    TERMINAL,
    Move,
    Task,
    TaskSettings,
)
from mempalace_logstream.tasks.moves import classify

if TYPE_CHECKING:
    from mempalace_logstream.models import Event
    from mempalace_logstream.tasks.thread import Folder, FoldState


# The thread's fold (tasks/thread.py) is imported on first use: a write that the task row
# decides (every plain write, most moves) never loads it (issue 25).
def fold(events: Iterable[Event], settings: TaskSettings = DEFAULT_SETTINGS) -> Task | None:
    """`thread.fold`: a thread's task, derived from its events alone, in HLC order. (Defined
    after the submodule `tasks.fold` is imported: this name is the function.)"""
    from mempalace_logstream.tasks import thread

    return thread.fold(events, settings)


_THREAD = frozenset({"Folder", "FoldState"})


def __getattr__(name: str) -> object:
    """`Folder`, `FoldState` from tasks/thread.py, on first use (PEP 562)."""
    if name not in _THREAD:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mempalace_logstream.tasks import thread

    value = getattr(thread, name)
    globals()[name] = value
    return value


__all__ = [
    "A2A_STATES",
    "ACTIONS",
    "NON_TERMINAL",
    "STATES",
    "TERMINAL",
    "FoldState",
    "Folder",
    "Move",
    "Task",
    "TaskSettings",
    "advance",
    "check",
    "classify",
    "fold",
    "needs_thread",
]
