"""The task lifecycle's settings (RFC 0007): a frozen dataclass, named by tasks/model.py (and
the package) on first use, and made a dataclass on first need (lazy.py): a write that no loop
guard counts never loads it, one that a guard counts (an ack, a message to an agent) reads
the defaults of `lazy.instance(TaskSettings)` without `dataclasses` (issue 25)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mempalace_logstream.lazy import Record
from mempalace_logstream.tasks.model import DEFAULT_LEASE_MS

if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    from mempalace_logstream.lazy import dataclass


@dataclass(frozen=True, kw_only=True)
class TaskSettings(Record):
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
