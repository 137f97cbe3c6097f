"""A whole thread folded into its task (RFC 0007), in HLC order, with identity's two rules
(RFC 0007 "Identity"): a verified move is never refused because of unverified moves made
since the previous verified one (it undoes them, each listed as an anomaly), and on a task whose
request is verified, an end a verified move set is never left by an unverified move.

`fold(events)` is a pure function of the thread as stored: an event's verdict is whether it
carries a signature (a stored signature was verified before it was stored, RFC 0008), so
every replica holding the same events derives the same task. `Folder` is the same fold fed
one event at a time, resumable from a `FoldState` (the store keeps checkpoints of it, so a
late event re-folds from a point before it rather than from the request).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mempalace_logstream.models import Event
from mempalace_logstream.tasks.model import Move, Task, TaskSettings
from mempalace_logstream.tasks.moves import classify
from mempalace_logstream.tasks.steps import (
    DEFAULT_SETTINGS,
    advance,
    anomaly,
    created,
    outcome,
    record,
    seen,
)

if TYPE_CHECKING:  # the type checker sees dataclasses' (tasks/records.py)
    from dataclasses import replace
else:  # a task replaced as tasks/steps.py replaces it
    from mempalace_logstream.lazy import replace

EARLY = "it came before the task's request"


@dataclass(frozen=True, kw_only=True)
class FoldState:
    """Where a fold stands after some prefix of a thread (a checkpoint: immutable).

    `base` is the task as its last verified move left it (None before a verified request),
    `pending` the unverified moves that changed it since, in order: a verified move may undo
    a suffix of them. `tracked` is False for a fold that never saw a verified event and so
    kept no `pending` (a thread without identity pays nothing for it)."""

    task: Task | None = None
    orphans: tuple[Move, ...] = ()  # moves before the request, listed once it comes
    base: Task | None = None
    pending: tuple[Move, ...] = ()
    tracked: bool = True
    signed_request: bool = False  # the task's request is verified (its requester signs)


def fold(events: Iterable[Event], settings: TaskSettings = DEFAULT_SETTINGS) -> Task | None:
    """A thread's task, derived from its events alone, in HLC order (the same on every
    replica). Moves that sort before the request are anomalies of the task once it exists."""
    ordered = sorted(events, key=lambda e: (e.hlc, e.id))
    folder = Folder(settings, FoldState(tracked=any(e.sig is not None for e in ordered)))
    for event in ordered:
        folder.feed(event)
    return folder.task


class Folder:
    """The fold, one event at a time (in HLC order), from `start` (a checkpoint)."""

    def __init__(self, settings: TaskSettings, start: FoldState | None = None) -> None:
        start = start or FoldState()
        self.settings = settings
        self.task = start.task
        self.orphans = list(start.orphans)
        self.base = start.base
        self.pending = list(start.pending)
        self.tracked = start.tracked
        self.signed_request = start.signed_request

    def state(self) -> FoldState:
        return FoldState(
            task=self.task,
            orphans=tuple(self.orphans),
            base=self.base,
            pending=tuple(self.pending),
            tracked=self.tracked,
            signed_request=self.signed_request,
        )

    def feed(self, event: Event) -> None:
        move = classify(event, self.task)
        if move is None:
            return
        if self.task is None:
            self._create(move)
            return
        after, entry, kind = outcome(self.task, move, self.settings)
        if entry is None:
            if not move.verified and self._verified_end():
                reason = (
                    f"task {self.task.task_id} is {self.task.state} by a verified move; an "
                    f"unverified {move.action} cannot move it"
                )
                entry = anomaly(move, reason, code=_END)
                self._keep(move, record(self.task, "anomalies", entry))
                return
            self._applied(move, after)
            return
        if move.verified and self.pending and self._overrule(move):
            return
        self._keep(move, record(after, kind, entry))

    def _verified_end(self) -> bool:
        """The task ended by a verified move (nothing unverified since) and its requester
        signs: an unverified move (a reopen) cannot be its requester's own."""
        task = self.task
        ended = task is not None and task.terminal and self.tracked and not self.pending
        return ended and self.signed_request

    def _create(self, move: Move) -> None:
        if move.action != "create" or move.problem:
            self.orphans.append(move)
            return
        task = created(move)
        if self.orphans:
            early = tuple(anomaly(m, EARLY) for m in self.orphans)
            task = replace(task, anomalies=early + task.anomalies)
            self.orphans = []
        self.task = task
        self.signed_request = move.verified
        self._track(move, None)

    def _applied(self, move: Move, after: Task) -> None:
        before = self.task
        self.task = after
        self._track(move, before)

    def _track(self, move: Move, before: Task | None) -> None:
        if not self.tracked:
            return
        if move.verified:
            self.base, self.pending = self.task, []
        else:
            if not self.pending:
                self.base = before
            self.pending.append(move)

    def _keep(self, move: Move, after: Task) -> None:
        """A move that changed nothing but the record."""
        self.task = seen(after, move)

    def _overrule(self, move: Move) -> bool:
        """Undo the shortest suffix of the pending unverified moves after which the verified
        `move` is legal, list each undone move as an anomaly and apply `move`. False (nothing
        changed) when it is illegal even before all of them."""
        states: list[Task | None] = [self.base]
        for pending in self.pending:
            prior = states[-1]
            states.append(created(pending) if prior is None else advance(prior, pending))
        for i in range(len(self.pending) - 1, -1, -1):
            after = _try(states[i], move, self.settings)
            if after is None:
                continue
            current = self.task
            assert current is not None
            undone = tuple(
                anomaly(
                    m,
                    f"an unverified {m.action} undone by the verified {move.action} "
                    f"{move.event_id} of {move.agent}",
                    code=_OVERRULED,
                )
                for m in self.pending[i:]
            )
            self.task = replace(
                after, anomalies=current.anomalies + undone, conflicts=current.conflicts
            )
            self.base, self.pending = self.task, []
            if move.action == "create":
                self.signed_request = True
            return True
        return False


_OVERRULED = "overruled"
_END = "verified_end"


def _try(task: Task | None, move: Move, settings: TaskSettings) -> Task | None:
    """The task after `move` if it is legal on `task` (None: before the request), else None."""
    if task is None:
        return created(move) if move.action == "create" and not move.problem else None
    after, entry, _kind = outcome(task, move, settings)
    return after if entry is None else None
