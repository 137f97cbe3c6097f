"""The reminders for unclaimed work (issue 20 item 4, RFC 0007 "Reminders"): the pure rule of
what the hub owes an open task. No SQL, no I/O, no clock: times are given. Named by
tasks/guards.py as well, where the rest of the issue's rules are.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ReminderPlan:
    """One open task's reminder rules: from the request (or the hub's defaults)."""

    requested_ms: int
    claim_timeout_ms: int
    max_reminders: int


@dataclass(frozen=True, kw_only=True)
class Due:
    """What the hub owes a task now: reminder `n` (1-based), or the stall (`n` = 0)."""

    n: int
    stall: bool = False


def next_reminder(
    plan: ReminderPlan, sent: int, last_ms: int | None, stalled: bool, now_ms: int
) -> Due | None:
    """Reminder n+1 is due `claim_timeout_ms` after the request or reminder n (so a hub that
    was down catches up one step per timeout, never in a burst); after `max_reminders`, one
    stall, due a timeout after the last reminder. `sent`, `last_ms` and `stalled` are read
    from the log, so a restarted hub owes exactly what the stopped one did."""
    if plan.claim_timeout_ms <= 0 or stalled:
        return None
    since = plan.requested_ms if last_ms is None or sent == 0 else last_ms
    if now_ms < since + plan.claim_timeout_ms:
        return None
    if sent < plan.max_reminders:
        return Due(n=sent + 1)
    return Due(n=0, stall=True)
