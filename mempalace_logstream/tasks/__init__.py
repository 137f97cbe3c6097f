"""The task lifecycle (RFC 0007): states, moves and the fold that derives a task's state from
its thread. Pure: no SQL, no I/O, no clock (times come from the events' HLC stamps).

    classify(event, task) -> Move | None     which move an event is, if any
    check(task, move, settings) -> Task      a local move: the next state, or a refusal
    advance(task, move, settings) -> Task    a peer's move: the next state, illegal moves recorded
    fold(events, settings) -> Task | None    a whole thread, in HLC order (identity's rules too)
    needs_thread(task, move, settings)       whether the row alone cannot decide a move

The names are their modules' (model.py: the states and actions, a move; records.py: a task;
settings.py: the settings; steps.py: one move; moves.py: reading a move; thread.py: the fold), each
imported on first use (PEP 562): importing a submodule (`tasks.guards`, `tasks.model`) loads
none of the others, and a write that moves no task never loads the lifecycle (issue 25).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mempalace_logstream import lazy

if TYPE_CHECKING:
    from mempalace_logstream.models import Event
    from mempalace_logstream.tasks.model import (
        A2A_STATES,
        ACTIONS,
        NON_TERMINAL,
        STATES,
        TERMINAL,
        Move,
    )
    from mempalace_logstream.tasks.moves import classify
    from mempalace_logstream.tasks.records import Task
    from mempalace_logstream.tasks.settings import TaskSettings
    from mempalace_logstream.tasks.steps import DEFAULT_SETTINGS as DEFAULT_SETTINGS
    from mempalace_logstream.tasks.steps import advance, check, needs_thread
    from mempalace_logstream.tasks.thread import Folder, FoldState


def fold(events: Iterable[Event], settings: TaskSettings | None = None) -> Task | None:
    """`thread.fold`: a thread's task, derived from its events alone, in HLC order (the
    default settings when none are given)."""
    from mempalace_logstream.tasks import thread

    if settings is None:
        return thread.fold(events)
    return thread.fold(events, settings)


# name -> the submodule that defines it
_WHERE = {
    "A2A_STATES": "model",
    "ACTIONS": "model",
    "NON_TERMINAL": "model",
    "STATES": "model",
    "TERMINAL": "model",
    "Move": "model",
    "Task": "records",
    "TaskSettings": "settings",
    "classify": "moves",
    "DEFAULT_SETTINGS": "steps",
    "advance": "steps",
    "check": "steps",
    "needs_thread": "steps",
    "Folder": "thread",
    "FoldState": "thread",
}


# A name of `__all__` from its submodule, on first use (PEP 562).
__getattr__ = lazy.attributes(__name__, _WHERE, globals())


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
