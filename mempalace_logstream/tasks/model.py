"""The shapes of the task lifecycle (RFC 0007): states, actions, a move, a task, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

STATES = (
    "open",
    "claimed",
    "working",
    "blocked",
    "ready",
    "completed",
    "declined",
    "failed",
    "cancelled",
)
TERMINAL = frozenset({"completed", "declined", "failed", "cancelled"})
NON_TERMINAL = frozenset(STATES) - TERMINAL
HELD = frozenset({"claimed", "working", "blocked", "ready"})  # an assignee holds the task
LEASE_RUNS = frozenset({"claimed", "working"})  # blocked/ready wait on the requester
A2A_STATES = {
    "open": "submitted",
    "claimed": "working",
    "working": "working",
    "blocked": "input-required",
    "ready": "working",
    "completed": "completed",
    "declined": "rejected",
    "failed": "failed",
    "cancelled": "canceled",
}

# action -> (event type, the states it may start from, the state it moves to)
ACTIONS: dict[str, tuple[str, frozenset[str], str]] = {
    "claim": ("task.claim", frozenset({"open"}), "claimed"),
    "decline": ("task.decline", frozenset({"open"}), "declined"),
    "progress": ("task.progress", frozenset({"claimed", "working"}), "working"),
    "block": ("task.block", frozenset({"claimed", "working"}), "blocked"),
    "unblock": ("task.unblock", frozenset({"blocked"}), "working"),
    "complete": ("task.result", frozenset({"claimed", "working"}), "ready"),
    "fail": ("task.fail", frozenset({"claimed", "working", "blocked"}), "failed"),
    "cancel": ("task.cancel", NON_TERMINAL, "cancelled"),
    "accept": ("task.accept", frozenset({"ready"}), "completed"),
    "reject": ("task.reject", frozenset({"ready"}), "claimed"),
    "reopen": ("task.reopen", frozenset({"failed", "declined"}), "open"),
}
REQUESTER_ACTIONS = frozenset({"cancel", "accept", "reject", "unblock", "reopen"})
ASSIGNEE_ACTIONS = frozenset({"progress", "block", "complete", "fail"})
ADDRESSEE_ACTIONS = frozenset({"claim", "decline"})
TYPE_ACTIONS = {event_type: action for action, (event_type, _, _) in ACTIONS.items()}
REQUEST_TYPE = "task.request"

DISPOSITIONS = ("completed", "partial", "blocked", "failed", "no_artifact")
VERIFICATION_STATUSES = ("passed", "failed", "not_run")
MAX_PROGRESS = 100  # progress is a percentage: 0-100, strictly increasing
DEFAULT_LEASE_MS = 15 * 60 * 1000
MIN_LEASE_MS = 1_000
MAX_LEASE_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, kw_only=True)
class TaskSettings:
    """Per-hub limits: delegation depth and breadth, the default lease; the reminders for
    unclaimed work and the loop guards (issue 20: `tasks/guards.py`)."""

    max_depth: int = 3
    max_children: int = 10
    lease_ms: int = DEFAULT_LEASE_MS
    claim_timeout_ms: int = 10 * 60 * 1000  # 0: no reminders
    max_reminders: int = 3
    thread_budget: int = 60  # agent-written events per thread since a person or the request
    pair_budget: int = 30  # messages between two agents per window without a task move
    pair_window_ms: int = 10 * 60 * 1000
    humans: tuple[str, ...] = ()  # names that count as a person (the admin always does)


class Move(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """One lifecycle move, read from one event of the task's thread."""

    task_id: str
    event_id: str
    action: str  # "create" or a key of ACTIONS
    agent: str  # the writer
    hlc: str
    at_ms: int  # the HLC's wall time: leases are measured on event times only
    to_agent: str | None = None
    progress: float | None = None
    lease_ms: int | None = None
    retryable: bool = False
    result: dict[str, Any] | None = None
    parent_task_id: str | None = None
    stream: str = ""
    body: str = ""
    problem: str | None = None  # a malformed payload (peer mode records it as an anomaly)
    problem_field: str | None = None
    # Its event is signed: a stored signature was verified before it was stored (RFC 0008),
    # so this is the event's verdict, the same on every replica that holds the event.
    verified: bool = False


@dataclass(frozen=True, kw_only=True)
class Task:
    """A task's derived state: what `fold(thread)` says, and what the projection row holds."""

    task_id: str
    state: str
    requester: str
    to_agent: str | None
    stream: str
    request_event_id: str
    created_ms: int
    request_hlc: str = ""  # the request's HLC: the log's order of requests (RFC 0001)
    assignee: str | None = None
    attempt: int = 0
    request_lease_ms: int | None = None  # the lease the request asked for (None: the default)
    lease_ms: int | None = None  # the length of the current attempt's lease
    lease_expires_ms: int | None = None  # None while no lease runs (open, blocked, ready, ends)
    progress: float | None = None
    parent_task_id: str | None = None
    depth: int = 1  # in the delegation chain: set by the store from the parent (not the thread)
    result: dict[str, Any] | None = None
    result_event_id: str | None = None
    question_event_id: str | None = None  # the move that blocked it (its body is the question)
    retryable: bool | None = None
    conflicts: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    anomalies: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    lost: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    last_hlc: str = ""
    last_event_id: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def lease_passed(self, now_ms: int) -> bool:
        return (
            self.state in LEASE_RUNS
            and self.lease_expires_ms is not None
            and now_ms >= self.lease_expires_ms
        )

    def state_at(self, now_ms: int) -> str:
        """The state a reader sees: a held task whose lease has passed reads as `open`."""
        return "open" if self.lease_passed(now_ms) else self.state
