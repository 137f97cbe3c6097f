"""Which lifecycle move an event is (RFC 0007, "Reference threads"), and its payload's rules.

The rules apply to an event by its type, whichever operation wrote it; on a task's thread the
reference's conventions count too (`patch.ready` offers a result, an `event.ack` of that result
with status `applied` accepts it, a status of `claimed`/`blocked`/`failed`/`cancelled` on any
other event is that move). A payload that breaks a rule gives a `Move` with `problem` set: a local
write refuses it, a peer's event is recorded as an anomaly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mempalace_logstream import hlc
from mempalace_logstream.models import Event
from mempalace_logstream.tasks.model import (
    DISPOSITIONS,
    MAX_LEASE_MS,
    MAX_PROGRESS,
    MIN_LEASE_MS,
    REQUEST_TYPE,
    TYPE_ACTIONS,
    VERIFICATION_STATUSES,
    Move,
)

if TYPE_CHECKING:  # an ack reads moves without a Task generated (issue 25)
    from mempalace_logstream.tasks.records import Task

MAX_VERIFICATION_ITEMS = 50
MAX_VERIFICATION_NAME = 200
MAX_VERIFICATION_DETAIL = 2_000
STATUS_ACTIONS = {"claimed": "claim", "blocked": "block", "failed": "fail", "cancelled": "cancel"}
ACCEPT_STATUSES = frozenset({"applied", "completed"})


class PayloadError(ValueError):
    """A move's payload breaks a rule; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def classify(event: Event, task: Task | None) -> Move | None:
    """The move `event` makes on `task` (None: no task on that id yet), or None for an event
    that is part of the thread without moving it."""
    if not event.correlation_id:
        return None
    action = _action_of(event, task)
    if action is None:
        return None
    meta = event.metadata
    base: dict[str, Any] = {
        "task_id": event.correlation_id,
        "event_id": event.id,
        "action": action,
        "agent": event.from_agent,
        "hlc": event.hlc,
        "at_ms": _wall_ms(event.hlc),
        "to_agent": event.to_agent,
        "stream": event.stream,
        "body": event.body,
        "verified": event.sig is not None,
    }
    try:
        base.update(_payload(action, event, meta))
    except PayloadError as exc:
        return Move(**base, problem=str(exc), problem_field=exc.field)
    return Move(**base)


def _action_of(event: Event, task: Task | None) -> str | None:
    if event.type == REQUEST_TYPE:
        # A second request by the task's requester is part of its thread, not a move (the
        # reference and old logs hold such threads; refusing them would break their writers).
        # Anyone else's is a create on an existing task: refused, or an anomaly from a peer.
        return "create" if task is None or event.from_agent != task.requester else None
    if event.type in TYPE_ACTIONS:
        return TYPE_ACTIONS[event.type]
    if task is None:  # the reference's conventions count on a task's thread only
        return None
    if event.type == "patch.ready":
        return "complete"
    if event.type == "event.ack" and event.metadata.get("ack_of") == task.result_event_id:
        return "accept" if event.status in ACCEPT_STATUSES else None
    return STATUS_ACTIONS.get(event.status or "")


def _wall_ms(stamp: str) -> int:
    parsed = hlc.parse(stamp)
    return parsed.wall_ms if parsed else 0


def _payload(action: str, event: Event, meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "lease_ms" in meta and action in ("create", "claim"):
        out["lease_ms"] = lease_ms(meta["lease_ms"])
    if action == "create":
        parent = meta.get("parent_task_id") or meta.get("parent_correlation_id")
        if parent is not None and not isinstance(parent, str):
            raise PayloadError("parent_task_id", "parent_task_id must be a task id")
        out["parent_task_id"] = parent or None
    elif action == "progress":
        out["progress"] = progress(meta.get("progress"))
    elif action in ("block", "reject") and not event.body.strip():
        what = "the question" if action == "block" else "what to rework"
        raise PayloadError("body", f"a {action} needs a body saying {what}")
    elif action == "fail":
        retry = meta.get("retryable", False)
        if not isinstance(retry, bool):
            raise PayloadError("retryable", "retryable must be true or false")
        out["retryable"] = retry
    elif action == "complete":
        raw = meta.get("result")
        if event.type == "patch.ready" and raw is None:
            raw = {"disposition": "completed"}
        out["result"] = result(raw, event.artifact_ids, event.body)
    return out


def lease_ms(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError("lease_ms", "lease_ms must be a whole number of milliseconds")
    if not MIN_LEASE_MS <= value <= MAX_LEASE_MS:
        raise PayloadError(
            "lease_ms", f"lease_ms {value} must be between {MIN_LEASE_MS} and {MAX_LEASE_MS:,}"
        )
    return value


def progress(value: Any) -> float:
    if value is None:
        raise PayloadError("progress", "progress needs a number (it must strictly increase)")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PayloadError("progress", f"progress must be a finite number, not {value!r}")
    if not 0 <= value <= MAX_PROGRESS:
        raise PayloadError(
            "progress",
            f"progress {value:g} is out of range; it must be between 0 and {MAX_PROGRESS} "
            "(percent)",
        )
    return float(value)


def result(raw: Any, artifact_ids: tuple[str, ...], body: str) -> dict[str, Any]:
    """`{disposition, artifact_ids, verification}` with the cross-field rules of RFC 0007."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PayloadError("result", "result must be an object {disposition, verification}")
    unknown = sorted(set(raw) - {"disposition", "verification"})
    if unknown:
        raise PayloadError("result", f"{unknown[0]} is not a field of result")
    disposition = raw.get("disposition", "completed" if artifact_ids else "no_artifact")
    if disposition not in DISPOSITIONS:
        raise PayloadError(
            "disposition", f"disposition {disposition!r} is not one of {', '.join(DISPOSITIONS)}"
        )
    if disposition == "completed" and not artifact_ids:
        raise PayloadError("artifact_ids", "a completed result needs at least one artifact")
    if disposition == "no_artifact" and artifact_ids:
        raise PayloadError("artifact_ids", "a no_artifact result must not carry artifacts")
    if disposition == "blocked" and not body.strip():
        raise PayloadError("body", "a blocked result needs a body saying what blocks it")
    return {
        "disposition": disposition,
        "artifact_ids": list(artifact_ids),
        "verification": verification(raw.get("verification")),
    }


def verification(raw: Any) -> list[dict[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PayloadError("verification", "verification must be a list of {name, status}")
    if len(raw) > MAX_VERIFICATION_ITEMS:
        raise PayloadError("verification", f"verification has {len(raw)} items; the limit is 50")
    return [_check_item(i, item) for i, item in enumerate(raw)]


def _check_item(i: int, item: Any) -> dict[str, str]:
    where = f"verification[{i}]"
    if not isinstance(item, dict) or set(item) - {"name", "status", "detail"}:
        raise PayloadError(where, f"{where} must be an object with name, status and detail")
    name, status, detail = item.get("name"), item.get("status"), item.get("detail", "")
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= MAX_VERIFICATION_NAME:
        raise PayloadError(f"{where}.name", f"{where}.name must be 1-200 characters")
    if status not in VERIFICATION_STATUSES:
        raise PayloadError(
            f"{where}.status",
            f"{where}.status {status!r} is not one of {', '.join(VERIFICATION_STATUSES)}",
        )
    if not isinstance(detail, str) or len(detail) > MAX_VERIFICATION_DETAIL:
        raise PayloadError(f"{where}.detail", f"{where}.detail must be text of at most 2,000 chars")
    out = {"name": name.strip(), "status": status}
    if detail:
        out["detail"] = detail
    return out
