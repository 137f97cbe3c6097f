"""The shapes of the task lifecycle (RFC 0007): states, actions, a move, a task, settings.

`Task` and `TaskSettings` are dataclasses, defined in tasks/records.py and tasks/settings.py
and named here on first use (PEP 562): the loop guards and a plain append read the states and
actions without generating them (issue 25)."""

from typing import TYPE_CHECKING, Any, NamedTuple

from mempalace_logstream import lazy

if TYPE_CHECKING:
    from mempalace_logstream.tasks.records import Task as Task
    from mempalace_logstream.tasks.settings import TaskSettings as TaskSettings

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


_RECORDS = {"Task": "records", "TaskSettings": "settings"}


# `Task` from tasks/records.py, `TaskSettings` from tasks/settings.py, on first use (PEP 562).
__getattr__ = lazy.attributes(__name__, _RECORDS, globals(), "mempalace_logstream.tasks")
