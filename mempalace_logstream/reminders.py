"""Reminders for unclaimed work (issue 20 item 4, RFC 0007 "Reminders"): `remind_once` writes
what the hub owes every open, never-claimed task now (a `task.reminder` to its assignee, or,
after the last one, one `task.stalled` to its requester); `ReminderLoop` runs it in the hub's
background, like the sync loop; `logstream task remind` runs it once without a hub.

Durable and idempotent: what was sent is read from the log each pass (store/reminders.py) and
each notice carries an idempotency key per (task, n), so a restart neither loses nor doubles
one, and two processes on one log write each once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mempalace_logstream import deliveries, errors
from mempalace_logstream.identity import actor as actor_mod
from mempalace_logstream.store import reminders as reads
from mempalace_logstream.store.ids import now_text
from mempalace_logstream.tasks import Task
from mempalace_logstream.tasks import guards as g

if TYPE_CHECKING:
    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 15.0


@dataclass(frozen=True, kw_only=True)
class Written:
    """One notice a pass wrote: `kind` is `reminder` (with its `n`) or `stalled`."""

    task_id: str
    kind: str
    n: int
    event_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "kind": self.kind, "n": self.n, "event_id": self.event_id}


def remind_once(store: LogStore, presence: Registry | None = None) -> list[Written]:
    """One pass over the open, never-claimed tasks: at most one notice per task (the next
    reminder, or the stall), at the store's clock. Returns what it wrote."""
    settings = store.task_settings
    now = store.clock.wall_clock.now_ms()
    out: list[Written] = []
    for task in reads.unclaimed(store):
        request = store.event_get(task.request_event_id)
        plan = g.ReminderPlan(
            requested_ms=task.created_ms,
            claim_timeout_ms=g.meta_int(
                request.metadata, "claim_timeout_ms", settings.claim_timeout_ms
            ),
            max_reminders=g.meta_int(request.metadata, "max_reminders", settings.max_reminders),
        )
        already = reads.sent(store, task.task_id)
        due = g.next_reminder(plan, already.count, already.last_ms, already.stalled, now)
        if due is None:
            continue
        try:
            if due.stall:
                details = stalled_details(store, task, already, presence, plan)
                event_id = _stall(store, task, details)
                out.append(Written(task_id=task.task_id, kind="stalled", n=0, event_id=event_id))
            else:
                event_id = _remind(store, task, due.n, plan)
                out.append(
                    Written(task_id=task.task_id, kind="reminder", n=due.n, event_id=event_id)
                )
        except errors.ConflictError:
            continue  # another process wrote this one first (its idempotency key)
    return out


def _remind(store: LogStore, task: Task, n: int, plan: g.ReminderPlan) -> str:
    """Reminder `n`: to the assignee, on the task's thread; its text and metadata depend on
    (task, n) only, so a retried write is the same event (its idempotency key)."""
    to = task.to_agent or "*"
    body = (
        f"Reminder {n} of {plan.max_reminders}: task {task.task_id} from {task.requester} is "
        f"still unclaimed (requested {now_text(task.created_ms)}). Claim it "
        f"(`logstream task claim {task.task_id} --from-agent {to}` or mempalace_task_update "
        "action=claim), or decline it."
    )
    metadata = {
        "reminder_of": task.request_event_id,
        "reminder": n,
        "max_reminders": plan.max_reminders,
        "claim_timeout_ms": plan.claim_timeout_ms,
    }
    return _write(store, task, g.REMINDER_TYPE, to, body, metadata, g.reminder_key(task.task_id, n))


def _stall(store: LogStore, task: Task, details: dict[str, Any]) -> str:
    sent = len(details["reminders"])
    body = (
        f"Task {task.task_id} to {task.to_agent} is stalled: unclaimed after {sent} "
        f"reminder(s). Live delivery paths of {task.to_agent} now: "
        f"{_paths_line(details['presence'])}. Reassign, cancel or wake it another way."
    )
    return _write(
        store, task, g.STALLED_TYPE, task.requester, body, details, g.stalled_key(task.task_id)
    )


def _write(
    store: LogStore, task: Task, kind: str, to: str, body: str, meta: dict[str, Any], key: str
) -> str:
    with actor_mod.acting_as(None):  # the hub writes as itself, whoever runs the pass
        event = store.event_append(
            type=kind,
            stream=task.stream,
            room="delegation",
            from_agent=g.HUB_WRITER,
            to_agent=to,
            correlation_id=task.task_id,
            body=body,
            metadata=meta,
            idempotency_key=key,
        )
    return event.id


def stalled_details(
    store: LogStore,
    task: Task,
    already: reads.Sent,
    presence: Registry | None,
    plan: g.ReminderPlan,
) -> dict[str, Any]:
    """What `task.stalled` tells the requester (its metadata): the task, the reminders sent
    and what is known of delivery to the assignee now (the hub's presence entries; `known`
    false without a hub), and the delivery ledger's rows of the request."""
    return {
        "task_id": task.task_id,
        "goal": store.task_brief(task.task_id).get("goal"),
        "request_event_id": task.request_event_id,
        "requester": task.requester,
        "to_agent": task.to_agent,
        "requested_at": now_text(task.created_ms),
        "claim_timeout_ms": plan.claim_timeout_ms,
        "reminders": [
            {"n": n, "event_id": ident, "at": now_text(ms)} for n, ident, ms in already.reminders
        ],
        "presence": _presence(task.to_agent, presence),
        # The delivery ledger of the request (issue 20 item 3): pushed, seen, acked by whom.
        "delivery": deliveries.status_of(store, task.request_event_id)["recipients"],
    }


def _presence(agent: str | None, presence: Registry | None) -> dict[str, Any]:
    if presence is None:
        return {"known": False, "live": []}
    live = [p.to_dict() for p in presence.present() if agent in (None, "*", p.agent)]
    return {"known": True, "live": live}


def _paths_line(info: dict[str, Any]) -> str:
    if not info["known"]:
        return "unknown (no hub presence here)"
    if not info["live"]:
        return "none"
    return ", ".join(f"{p['agent']} {p['state']} until {p['expires_at']}" for p in info["live"])


class ReminderLoop:
    """`remind_once` every `interval_s` seconds in a thread, for the hub's lifetime;
    `start()` is a no-op when interval_s <= 0; `stop()` wakes the thread and joins it."""

    def __init__(
        self,
        store: LogStore,
        presence: Registry | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_pass: Callable[[list[Written]], None] | None = None,
        leads: Callable[[], bool] | None = None,
    ) -> None:
        self.store, self.presence, self.interval_s = store, presence, float(interval_s)
        self.on_pass = on_pass
        self.leads = leads  # with several hubs on one log, only the leading one reminds
        self.passes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="logstream-remind", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                leading = self.leads is None or self.leads()
                written = remind_once(self.store, self.presence) if leading else []
            except errors.LogstreamError as exc:  # a closed or unreachable store: next pass
                log.warning("reminder pass failed: %s", exc.message)
                written = []
            self.passes += 1
            if self.on_pass is not None:
                self.on_pass(written)
            self._stop.wait(self.interval_s)
