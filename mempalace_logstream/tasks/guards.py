"""Reminders for unclaimed work and loop guards (issue 20 items 4-5, RFC 0007 "Reminders" and
"Loop guards"): the pure rules. No SQL, no I/O, no clock: times are given.

    task_options(claim_timeout_ms, max_reminders, thread_budget) -> dict   for `task_create`
    next_reminder(plan, sent, last_ms, stalled, now_ms) -> Due | None      what the hub owes
    exempt(event_type, ...) / counted(row)                                 what the budgets count
    thread_refusal(...), pair_refusal(...)                                 the errors, one text
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.identity.actor import ADMIN_NAME
from mempalace_logstream.tasks.model import ACTIONS, REQUEST_TYPE

if TYPE_CHECKING:
    from mempalace_logstream.tasks.reminders import Due as Due
    from mempalace_logstream.tasks.reminders import ReminderPlan as ReminderPlan
    from mempalace_logstream.tasks.reminders import next_reminder as next_reminder

# The hub writes reminders, stalls and budget notices under this name (never counted, never
# refused); an idempotency key per (task, n) makes each one exactly once in the log.
HUB_WRITER = "logstream"
REMINDER_TYPE = "task.reminder"
STALLED_TYPE = "task.stalled"
EXHAUSTED_TYPE = "thread.budget_exhausted"
RAISE_TYPE = "thread.budget"  # the requester (or a person) raises a thread's budget
NOTICE_TYPES = frozenset({REMINDER_TYPE, STALLED_TYPE, EXHAUSTED_TYPE})

# The hub's defaults are `TaskSettings`'s (10 min, 3 reminders, 60 per thread, 30 per pair
# per 10 min); these are the bounds of a setting.
MAX_CLAIM_TIMEOUT_MS = 7 * 24 * 3600 * 1000
MAX_REMINDERS = 20
MAX_BUDGET = 100_000

# Never counted and never refused: acks, the lifecycle's moves (a local one is stored only when
# the lifecycle allows it; `task.progress` too: a guard that counts status updates blocks
# useful work, and progress is bounded by its own rule, strictly increasing to 100), the hub's
# notices and a raise of the budget.
_MOVE_TYPES = frozenset(t for (t, _, _) in ACTIONS.values())
EXEMPT_TYPES = frozenset({"event.ack", REQUEST_TYPE, "patch.ready", RAISE_TYPE}) | (
    _MOVE_TYPES | NOTICE_TYPES
)


# ----------------------------------------------------------------------------- options


def _bounded(field: str, value: Any, low: int, high: int, unit: str) -> int:
    n = v.strict_int(field, value)
    if not low <= n <= high:
        raise v.fail(field, f"is {n}; it must be between {low} and {high:,}{unit}", high)
    return n


def claim_timeout_ms(value: Any) -> int:
    return _bounded("claim_timeout_ms", value, 0, MAX_CLAIM_TIMEOUT_MS, " ms (0: no reminders)")


def max_reminders(value: Any) -> int:
    return _bounded("max_reminders", value, 0, MAX_REMINDERS, "")


def pair_window_ms(value: Any) -> int:
    return _bounded("pair_window_ms", value, 1_000, MAX_CLAIM_TIMEOUT_MS, " ms")


def budget(field: str, value: Any) -> int:
    return _bounded(field, value, 1, MAX_BUDGET, " events")


def task_options(
    claim_timeout: Any = None, reminders: Any = None, thread_budget: Any = None
) -> dict[str, int]:
    """The per-task overrides `task_create` writes into the request's metadata, validated
    (ValidationError naming the field and the limit); absent ones are left out."""
    out: dict[str, int] = {}
    if claim_timeout is not None:
        out["claim_timeout_ms"] = claim_timeout_ms(claim_timeout)
    if reminders is not None:
        out["max_reminders"] = max_reminders(reminders)
    if thread_budget is not None:
        out["thread_budget"] = budget("thread_budget", thread_budget)
    return out


def meta_int(meta: dict[str, Any], key: str, default: int, low: int = 0) -> int:
    """An override read back from an event's metadata (a peer may have written anything: a
    value that is not a whole number at least `low` falls back to the default)."""
    raw = meta.get(key)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low:
        return default
    return raw


# ----------------------------------------------------------------------------- reminders
# ReminderPlan, Due and next_reminder are tasks/reminders.py's (only the hub's reminder loop
# reads them: a write's loop guards never load their dataclasses, issue 25), named here too.
_REMINDERS = frozenset({"ReminderPlan", "Due", "next_reminder"})


def __getattr__(name: str) -> object:
    """`ReminderPlan`, `Due`, `next_reminder` from tasks/reminders.py, on first use (PEP 562)."""
    if name not in _REMINDERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mempalace_logstream.tasks import reminders

    value = getattr(reminders, name)
    globals()[name] = value
    return value


def reminder_key(task_id: str, n: int) -> str:
    return f"reminder:{task_id}:{n}"


def stalled_key(task_id: str) -> str:
    return f"stalled:{task_id}"


# ----------------------------------------------------------------------------- budgets


def is_person(name: str | None, humans: tuple[str, ...]) -> bool:
    return name is not None and (name == ADMIN_NAME or name in humans)


def exempt(event_type: str, changes_state: bool) -> bool:
    """Whether a write is never refused by a budget: an ack, a cancel, a lifecycle move (by
    type, or an event whose status moves the task), the hub's notices."""
    return event_type in EXEMPT_TYPES or changes_state


def counted(event_type: str, writer: str, humans: tuple[str, ...]) -> bool:
    """Whether a stored event counts against a budget: written by an agent, not exempt by type."""
    if writer == HUB_WRITER or is_person(writer, humans):
        return False
    return event_type not in EXEMPT_TYPES


class BudgetExhausted(errors.ConflictError):
    """A loop guard refused a write; `notice` is the `thread.budget_exhausted` to send."""

    def __init__(self, message: str, *, field: str, notice: dict[str, Any]) -> None:
        super().__init__(message, field=field)
        self.notice = notice


def thread_refusal(*, thread: str, used: int, limit: int, since: str, requester: str | None) -> str:
    who = f"the requester ({requester})" if requester else "the thread's first writer"
    return (
        f"thread {thread} has used its budget of {limit} agent-written events since {since} "
        f"({used} written); write refused. A person writing in the thread lifts it, or {who} "
        f"raises it with an event of type {RAISE_TYPE} on the thread, metadata "
        '{"thread_budget": N}'
    )


def pair_refusal(*, a: str, b: str, used: int, limit: int, window_ms: int) -> str:
    return (
        f"agents {a} and {b} have exchanged {used} messages in the last {window_ms // 1000} s "
        f"without a task move (pair budget {limit} per {window_ms // 1000} s); write refused. "
        "A task move between them lifts it, or the window passing; the hub's operator raises "
        "it with `logstream serve --pair-budget N`"
    )
