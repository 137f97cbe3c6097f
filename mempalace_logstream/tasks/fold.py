"""Moving a task: `check` for a local write (refuse an illegal move), `advance` for a peer's event
(record an illegal move, never refuse it), `fold` for a whole thread in HLC order. Both paths go
through one `_transition`, so a local move and a replayed one can never disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import UTC, datetime

from mempalace_logstream import errors
from mempalace_logstream.models import Event
from mempalace_logstream.tasks.model import (
    ACTIONS,
    ADDRESSEE_ACTIONS,
    ASSIGNEE_ACTIONS,
    HELD,
    REQUESTER_ACTIONS,
    Move,
    Task,
    TaskSettings,
)
from mempalace_logstream.tasks.moves import classify

DEFAULT_SETTINGS = TaskSettings()


def check(task: Task | None, move: Move, settings: TaskSettings = DEFAULT_SETTINGS) -> Task:
    """The task after a local move, or the refusal (`ValidationError`, `NotFoundError`,
    `ForbiddenError`, `ConflictError`) naming the task, its state and the action."""
    if move.problem:
        raise errors.ValidationError(move.problem, field=move.problem_field)
    if task is None:
        if move.action == "create":
            return _created(move)
        raise errors.NotFoundError(
            f"task {move.task_id} not found; {move.action} refused", field="task_id"
        )
    if move.action == "create":
        raise errors.ConflictError(
            f"task {task.task_id} already exists", field="correlation_id", ident=task.task_id
        )
    return _transition(_expired(task, move.at_ms), move, settings)


def advance(task: Task | None, move: Move, settings: TaskSettings = DEFAULT_SETTINGS) -> Task:
    """The task after a peer's move: an illegal move changes nothing but is listed under
    `anomalies`, a claim that lost a race under `conflicts`. `task` must exist unless `move`
    creates it (a thread without its request is not a task yet: see `fold`)."""
    if task is None:
        if move.action != "create" or move.problem:
            raise ValueError("advance needs a task, or a valid move that creates one")
        return _created(move)
    task = _expired(task, move.at_ms)
    if move.action == "claim" and task.state in HELD and move.agent != task.assignee:
        entry = {
            "event_id": move.event_id,
            "agent": move.agent,
            "attempt": task.attempt,
            "lost_to": task.assignee,
        }
        return _seen(dataclasses.replace(task, conflicts=(*task.conflicts, entry)), move)
    try:
        if move.problem:
            raise errors.ValidationError(move.problem, field=move.problem_field)
        if move.action == "create":
            raise errors.ConflictError(f"task {task.task_id} already exists")
        return _transition(task, move, settings)
    except (errors.ValidationError, errors.ForbiddenError, errors.ConflictError) as exc:
        entry = {
            "event_id": move.event_id,
            "action": move.action,
            "agent": move.agent,
            "reason": exc.message,
        }
        return _seen(dataclasses.replace(task, anomalies=(*task.anomalies, entry)), move)


def fold(events: Iterable[Event], settings: TaskSettings = DEFAULT_SETTINGS) -> Task | None:
    """A thread's task, derived from its events alone, in HLC order (the same on every
    replica). Moves that sort before the request are anomalies of the task once it exists."""
    task: Task | None = None
    orphans: list[Move] = []
    for event in sorted(events, key=lambda e: (e.hlc, e.id)):
        move = classify(event, task)
        if move is None:
            continue
        if task is None and (move.action != "create" or move.problem):
            orphans.append(move)
            continue
        task = advance(task, move, settings)
        if orphans:
            early = tuple(
                {
                    "event_id": m.event_id,
                    "action": m.action,
                    "agent": m.agent,
                    "reason": "it came before the task's request",
                }
                for m in orphans
            )
            task = dataclasses.replace(task, anomalies=early + task.anomalies)
            orphans = []
    return task


def _created(move: Move) -> Task:
    return Task(
        task_id=move.task_id,
        state="open",
        requester=move.agent,
        to_agent=move.to_agent,
        stream=move.stream,
        request_event_id=move.event_id,
        created_ms=move.at_ms,
        request_lease_ms=move.lease_ms,
        parent_task_id=move.parent_task_id,
        last_hlc=move.hlc,
        last_event_id=move.event_id,
    )


def _seen(task: Task, move: Move) -> Task:
    return dataclasses.replace(task, last_hlc=move.hlc, last_event_id=move.event_id)


def _expired(task: Task, at_ms: int) -> Task:
    """A held task whose lease passed before `at_ms` is open again, the attempt listed as lost."""
    if not task.lease_passed(at_ms):
        return task
    entry = {
        "attempt": task.attempt,
        "assignee": task.assignee,
        "expired_at": _iso(task.lease_expires_ms or 0),
    }
    return dataclasses.replace(
        task, state="open", assignee=None, lease_expires_ms=None, lost=(*task.lost, entry)
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _transition(task: Task, move: Move, settings: TaskSettings) -> Task:
    _allowed(task, move)
    _event_type, starts, target = ACTIONS[move.action]
    if task.state not in starts:
        raise errors.ConflictError(
            f"task {task.task_id} is {task.state}; {move.action} refused",
            field="action",
            ident=task.task_id,
        )
    return _seen(dataclasses.replace(_changes(task, move, settings), state=target), move)


def _allowed(task: Task, move: Move) -> None:
    """Refusals that name who may act, in the order a reader needs them: an end state first,
    then a holder, then the role."""
    tid, action, agent = task.task_id, move.action, move.agent
    if task.terminal and action != "reopen":
        raise errors.ConflictError(f"task {tid} is {task.state}; {action} refused", ident=tid)
    if action == "claim" and task.state in HELD:
        raise errors.ConflictError(
            f"task {tid} is already claimed by {task.assignee} (attempt {task.attempt}); "
            "claim refused",
            field="action",
            ident=tid,
        )
    if action in REQUESTER_ACTIONS and agent != task.requester:
        raise errors.ForbiddenError(
            f"only the requester ({task.requester}) may {action} task {tid}",
            field="from_agent",
            ident=tid,
        )
    if action in ADDRESSEE_ACTIONS:
        _addressee(task, move)
    if action in ASSIGNEE_ACTIONS:
        _assignee(task, move)


def _addressee(task: Task, move: Move) -> None:
    tid = task.task_id
    if task.to_agent in (None, "*"):
        if move.action == "decline":
            raise errors.ForbiddenError(
                f"task {tid} is addressed to everyone; nobody can decline it (cancel is the "
                "requester's)",
                field="from_agent",
                ident=tid,
            )
        return
    if move.agent != task.to_agent:
        raise errors.ForbiddenError(
            f"task {tid} is addressed to {task.to_agent}; only {task.to_agent} may "
            f"{move.action} it",
            field="from_agent",
            ident=tid,
        )


def _assignee(task: Task, move: Move) -> None:
    tid, agent, action = task.task_id, move.agent, move.action
    if agent == task.assignee:
        return
    lost_race = [c for c in task.conflicts if c["agent"] == agent]
    if lost_race and task.assignee is not None:
        raise errors.ConflictError(
            f"task {tid} was claimed first by {lost_race[-1]['lost_to']} (attempt "
            f"{lost_race[-1]['attempt']}); your claim lost; {action} refused",
            field="from_agent",
            ident=tid,
        )
    lost_lease = [entry for entry in task.lost if entry["assignee"] == agent]
    if lost_lease and task.assignee is None:
        last = lost_lease[-1]
        raise errors.ConflictError(
            f"task {tid}: the lease of attempt {last['attempt']} ({agent}) expired at "
            f"{last['expired_at']}; {action} refused; claim it again",
            field="from_agent",
            ident=tid,
        )
    if task.assignee is None:
        raise errors.ConflictError(f"task {tid} is {task.state}; {action} refused", ident=tid)
    raise errors.ForbiddenError(
        f"task {tid} is held by {task.assignee}; only the assignee may {action}",
        field="from_agent",
        ident=tid,
    )


def _changes(task: Task, move: Move, settings: TaskSettings) -> Task:
    """`task` with the fields `move` changes (the state is set by the caller)."""
    action, at, replace = move.action, move.at_ms, dataclasses.replace
    renewed = at + (task.lease_ms or 0)
    if action == "claim":
        length = move.lease_ms or task.request_lease_ms or settings.lease_ms
        return replace(
            task,
            assignee=move.agent,
            attempt=task.attempt + 1,
            lease_ms=length,
            lease_expires_ms=at + length,
            progress=None,
            result=None,
            result_event_id=None,
            retryable=None,
        )
    if action == "progress":
        if task.progress is not None and (move.progress or 0.0) <= task.progress:
            raise errors.ValidationError(
                f"progress {_num(move.progress)} must be greater than the last reported "
                f"progress {_num(task.progress)}",
                field="progress",
            )
        return replace(task, progress=move.progress, lease_expires_ms=renewed)
    if action == "unblock":
        return replace(task, lease_expires_ms=renewed)
    if action == "reject":  # rework in the same attempt; the rejected result stays in the thread
        return replace(task, lease_expires_ms=renewed, result=None, result_event_id=None)
    if action == "complete":
        return replace(
            task, lease_expires_ms=None, result=move.result, result_event_id=move.event_id
        )
    if action == "fail":
        return replace(task, lease_expires_ms=None, retryable=move.retryable)
    if action == "reopen":
        return replace(task, assignee=None, lease_expires_ms=None, retryable=None)
    return replace(task, lease_expires_ms=None)  # block, accept, decline, cancel


def _num(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if value == int(value) else str(value)
