"""What the reminder loop reads (issue 20 item 4, RFC 0007 "Reminders"): the open tasks that
were never claimed, and the reminders and stall the hub already wrote on a task's thread. The
state is read from the log every pass: nothing is counted in memory, so a restarted hub owes
exactly what the stopped one did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mempalace_logstream import hlc
from mempalace_logstream.backends.queries import tasks as sql
from mempalace_logstream.payload import read_metadata
from mempalace_logstream.store.tasks import from_doc
from mempalace_logstream.tasks import Task
from mempalace_logstream.tasks import guards as g

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore

MAX_TASKS_PER_PASS = 1_000


@dataclass(frozen=True, kw_only=True)
class Sent:
    """The reminders (`[(n, event id, wall ms)]`, oldest first) and stall already on a thread."""

    reminders: tuple[tuple[int, str, int], ...]
    stalled: bool

    @property
    def count(self) -> int:
        return len({n for n, _, _ in self.reminders})

    @property
    def last_ms(self) -> int | None:
        return self.reminders[-1][2] if self.reminders else None


def unclaimed(store: LogStore, limit: int = MAX_TASKS_PER_PASS) -> list[Task]:
    """Open tasks never claimed (attempt 0), oldest activity first."""
    with store.connect() as conn:
        docs = sql.docs_in_state(conn, "open", limit)
    found = [from_doc(doc) for doc in docs]
    return [task for task in found if task.attempt == 0]


def sent(store: LogStore, task_id: str) -> Sent:
    """The hub's reminders and stall on the thread of `task_id`, from the log."""
    with store.connect() as conn:
        rows = sql.notes_of(conn, task_id, g.HUB_WRITER, (g.REMINDER_TYPE, g.STALLED_TYPE))
    reminders: list[tuple[int, str, int]] = []
    stalled = False
    for ident, kind, stamp, meta_json in rows:
        if kind == g.STALLED_TYPE:
            stalled = True
            continue
        n = g.meta_int(_meta(meta_json), "reminder", 0, low=1)
        parsed = hlc.parse(stamp)
        if n and parsed is not None:
            reminders.append((n, str(ident), parsed.wall_ms))
    return Sent(reminders=tuple(reminders), stalled=stalled)


def _meta(text: str | None) -> dict[str, Any]:
    """A request's metadata object (`{}` when unreadable)."""
    return read_metadata(text or "{}")[0]
