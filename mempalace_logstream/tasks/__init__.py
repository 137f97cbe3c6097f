"""The task lifecycle (RFC 0007): states, moves and the fold that derives a task's state from
its thread. Pure: no SQL, no I/O, no clock (times come from the events' HLC stamps).

    classify(event, task) -> Move | None     which move an event is, if any
    check(task, move, settings) -> Task      a local move: the next state, or a refusal
    advance(task, move, settings) -> Task    a peer's move: the next state, illegal moves recorded
    fold(events, settings) -> Task | None    a whole thread, in HLC order (identity's rules too)
    needs_thread(task, move, settings)       whether the row alone cannot decide a move
"""

from mempalace_logstream.tasks.fold import advance, check
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
from mempalace_logstream.tasks.thread import Folder, FoldState, fold, needs_thread

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
