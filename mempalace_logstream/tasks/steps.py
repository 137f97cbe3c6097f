"""Moving a task: `check` for a local write (refuse an illegal move), `advance` for a peer's event
(record an illegal move, never refuse it). Both go through one `_transition`, so a local move
and a replayed one can never disagree. A whole thread is folded in `tasks/thread.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, lazy
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

if TYPE_CHECKING:  # the type checker sees dataclasses' (tasks/records.py)
    from dataclasses import replace
else:  # a task replaced without making the dataclass (issue 25)
    from mempalace_logstream.lazy import replace

DEFAULT_SETTINGS = lazy.instance(TaskSettings)


def check(task: Task | None, move: Move, settings: TaskSettings = DEFAULT_SETTINGS) -> Task:
    """The task after a local move, or the refusal (`ValidationError`, `NotFoundError`,
    `ForbiddenError`, `ConflictError`) naming the task, its state and the action."""
    if move.problem:
        raise errors.ValidationError(move.problem, field=move.problem_field)
    if task is None:
        if move.action == "create":
            return created(move)
        raise errors.NotFoundError(
            f"task {move.task_id} not found; {move.action} refused", field="task_id"
        )
    if move.action == "create":
        raise second_request(task, move)
    return _transition(_expired(task, move.at_ms), move, settings)


def advance(task: Task | None, move: Move, settings: TaskSettings = DEFAULT_SETTINGS) -> Task:
    """The task after a peer's move: an illegal move changes nothing but is listed under
    `anomalies`, a claim that lost a race under `conflicts`. `task` must exist unless `move`
    creates it (a thread without its request is not a task yet: see `fold`)."""
    if task is None:
        if move.action != "create" or move.problem:
            raise ValueError("advance needs a task, or a valid move that creates one")
        return created(move)
    after, entry, kind = outcome(task, move, settings)
    if entry is not None:
        after = seen(record(after, kind, entry), move)
    return after


def outcome(
    task: Task, move: Move, settings: TaskSettings
) -> tuple[Task, dict[str, Any] | None, str]:
    """(the task after `move`, None, "") for a legal move; for an illegal one (the task as
    it stood, its lease expiry applied; the entry that records the move; "anomalies" or
    "conflicts": a claim that lost a race)."""
    task = _expired(task, move.at_ms)
    if move.action == "claim" and task.state in HELD and move.agent != task.assignee:
        entry = {
            "event_id": move.event_id,
            "agent": move.agent,
            "attempt": task.attempt,
            "lost_to": task.assignee,
        }
        return task, entry, "conflicts"
    try:
        if move.problem:
            raise errors.ValidationError(move.problem, field=move.problem_field)
        if move.action == "create":
            raise second_request(task, move)
        return _transition(task, move, settings), None, ""
    except (errors.ValidationError, errors.ForbiddenError, errors.ConflictError) as exc:
        return task, anomaly(move, exc.message, code=_code(move)), "anomalies"


def anomaly(move: Move, reason: str, *, code: str | None = None) -> dict[str, Any]:
    """The `anomalies` entry that records `move` (with a `code` for the kinds doctor lists)."""
    entry = {"event_id": move.event_id, "action": move.action, "agent": move.agent}
    entry["reason"] = reason
    if code is not None:
        entry["code"] = code
    return entry


def _code(move: Move) -> str | None:
    return "second_request" if move.action == "create" and not move.problem else None


def record(task: Task, kind: str, entry: dict[str, Any]) -> Task:
    """`task` with `entry` appended to its `anomalies` or `conflicts`."""
    if kind == "conflicts":
        return replace(task, conflicts=(*task.conflicts, entry))
    return replace(task, anomalies=(*task.anomalies, entry))


def second_request(task: Task, move: Move) -> errors.ConflictError:
    """The refusal of a `task.request` on an existing task by someone other than its
    requester (the requester's own repeat is part of the thread, not a move)."""
    return errors.ConflictError(
        f"task {task.task_id} already exists (requested by {task.requester}); a second "
        f"task.request on it is refused (its requester is {task.requester})",
        field="correlation_id",
        ident=task.task_id,
    )


def created(move: Move) -> Task:
    """The task a request creates."""
    return lazy.instance(
        Task,
        task_id=move.task_id,
        state="open",
        requester=move.agent,
        to_agent=move.to_agent,
        stream=move.stream,
        request_event_id=move.event_id,
        created_ms=move.at_ms,
        request_hlc=move.hlc,
        request_lease_ms=move.lease_ms,
        parent_task_id=move.parent_task_id,
        last_hlc=move.hlc,
        last_event_id=move.event_id,
    )


def seen(task: Task, move: Move) -> Task:
    """`task` with `move` as the last event the fold saw."""
    return replace(task, **_seen(move))


def _seen(move: Move) -> dict[str, Any]:
    """The fields that record `move` as the last event the fold saw."""
    return {"last_hlc": move.hlc, "last_event_id": move.event_id}


def _expired(task: Task, at_ms: int) -> Task:
    """A held task whose lease passed before `at_ms` is open again, the attempt listed as lost."""
    if not task.lease_passed(at_ms):
        return task
    entry = {
        "attempt": task.attempt,
        "assignee": task.assignee,
        "expired_at": _iso(task.lease_expires_ms or 0),
    }
    return replace(
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
    question = move.event_id if target == "blocked" else None  # its body is the question
    # One copy of the task per move (a pulled thread moves it at every event): the action's
    # changes, the state it moves to and the move as the last one seen.
    changes = _changes(task, move, settings)
    return replace(task, **changes, state=target, question_event_id=question, **_seen(move))


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


def _changes(task: Task, move: Move, settings: TaskSettings) -> dict[str, Any]:
    """The fields of `task` that `move` changes, with their new values (the state is set by
    the caller)."""
    action, at = move.action, move.at_ms
    renewed = at + (task.lease_ms or 0)
    if action == "claim":
        length = move.lease_ms or task.request_lease_ms or settings.lease_ms
        return {
            "assignee": move.agent,
            "attempt": task.attempt + 1,
            "lease_ms": length,
            "lease_expires_ms": at + length,
            "progress": None,
            "result": None,
            "result_event_id": None,
            "retryable": None,
        }
    if action == "progress":
        if task.progress is not None and (move.progress or 0.0) <= task.progress:
            raise errors.ValidationError(
                f"progress {_num(move.progress)} must be greater than the last reported "
                f"progress {_num(task.progress)}",
                field="progress",
            )
        return {"progress": move.progress, "lease_expires_ms": renewed}
    if action == "unblock":
        return {"lease_expires_ms": renewed}
    if action == "reject":  # rework in the same attempt; the rejected result stays in the thread
        return {"lease_expires_ms": renewed, "result": None, "result_event_id": None}
    if action == "complete":
        return {"lease_expires_ms": None, "result": move.result, "result_event_id": move.event_id}
    if action == "fail":
        return {"lease_expires_ms": None, "retryable": move.retryable}
    if action == "reopen":
        return {"assignee": None, "lease_expires_ms": None, "retryable": None}
    return {"lease_expires_ms": None}  # block, accept, decline, cancel


def _num(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if value == int(value) else str(value)


# Here, not in thread.py: a move the row decides never loads the fold of a thread (issue 25).
def needs_thread(task: Task, move: Move, settings: TaskSettings = DEFAULT_SETTINGS) -> bool:
    """Whether the task row alone cannot decide `move`, so the thread must be folded: a
    verified move the row refuses may undo unverified moves before it, and an unverified
    reopen may meet an end a verified move set (the row does not say which moves were
    verified). Both are rare; every other move is decided by `check` or `advance`."""
    if move.verified:
        return not _legal(task, move, settings)
    return move.action == "reopen" and task.terminal and _legal(task, move, settings)


def _legal(task: Task, move: Move, settings: TaskSettings) -> bool:
    try:
        check(task, move, settings)
    except (errors.ValidationError, errors.ForbiddenError, errors.ConflictError):
        return False
    return True
