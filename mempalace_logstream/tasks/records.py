"""A task's derived state (RFC 0007): a frozen dataclass, named by tasks/model.py (and the
package) on first use, and made a dataclass on first need (lazy.py): the task commands and
the fold make, read and replace tasks through `lazy.instance`/`lazy.replace` and never load
`dataclasses` (issue 25)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream.lazy import Record
from mempalace_logstream.tasks.model import LEASE_RUNS, TERMINAL

if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    from mempalace_logstream.lazy import dataclass


@dataclass(frozen=True, kw_only=True)
class Task(Record):
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
    conflicts: tuple[dict[str, Any], ...] = ()
    anomalies: tuple[dict[str, Any], ...] = ()
    lost: tuple[dict[str, Any], ...] = ()
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
