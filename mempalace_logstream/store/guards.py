"""Loop guards in the write transaction (issue 20 item 5, RFC 0007 "Loop guards"): the budgets'
queries. The rules (what counts, the texts) are `tasks/guards.py`.

Cost: a write with no correlation id and no single-agent addressee reads nothing. Otherwise
the thread is read newest first, in pages, only back to its anchor (a person's event, the
request, a raise) or until the budget is exceeded, and each agent's writes only back to the
pair window's start: bounded by the budgets, never by the thread or the log. The pair's budget
is counted by the database (one row back); on PostgreSQL that count goes with the COMMIT as a
check, and only a used-up budget costs a second run of the transaction, which reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, tasks
from mempalace_logstream.backends.queries import guards as sql
from mempalace_logstream.identity import actor as actor_mod
from mempalace_logstream.models import Event
from mempalace_logstream.payload import read_metadata
from mempalace_logstream.store.ids import now_text
from mempalace_logstream.tasks import guards as g
from mempalace_logstream.tasks.model import ACTIONS, REQUEST_TYPE

if TYPE_CHECKING:
    import logging

    from mempalace_logstream.store.writes import Transaction, Writes
    from mempalace_logstream.tasks import Task


def _log() -> logging.Logger:
    """This module's logger, imported with the first warning: `logging` (~5 ms) is not
    loaded by a lean one-call write that warns nothing."""
    import logging

    return logging.getLogger(__name__)


FIRST_PAGE, MAX_PAGE = 16, 1024
# A thread's rows are `sql.GUARD_COLS`: seq, id, type, from_agent, metadata_json (row[0] ..
# row[4]).


def may_count(event: Event) -> bool:
    """Whether a budget could count `event`: it is on a thread, or addressed to one other
    agent (not to everyone, not to its writer). The task projection skips the others: none
    has a thread either."""
    peer = event.to_agent
    return bool(event.correlation_id) or not (
        peer is None or peer == "*" or peer == event.from_agent
    )


def check_local(tx: Transaction, event: Event) -> None:
    """Refuse `event` (BudgetExhausted, nothing written) when it would pass a loop guard."""
    if not may_count(event):
        return  # no thread and no other agent addressed: no budget could count it
    peer = event.to_agent
    settings = tx.store.task_settings
    humans = settings.humans
    if event.from_agent == g.HUB_WRITER or g.is_person(event.from_agent, humans):
        return
    actor = tx.actor
    if actor is not None and actor.admin:
        return
    task = _task(tx, event.correlation_id) if event.correlation_id else None
    if g.exempt(event.type, _changes_state(event, task)):
        return
    if event.correlation_id:
        _check_thread(tx, event, task)
    if peer and peer != "*" and peer != event.from_agent and not g.is_person(peer, humans):
        if peer != g.HUB_WRITER:
            _check_pair(tx, event, peer, task)


def _task(tx: Transaction, task_id: str) -> Task | None:
    from mempalace_logstream.store import tasks as task_rows  # it calls this module

    return task_rows.load(tx, task_id)


def _changes_state(event: Event, task: Task | None) -> bool:
    move = tasks.classify(event, task)
    if move is None:
        return False
    if move.action == "create" or task is None or move.action == "progress":
        return True
    return ACTIONS[move.action][2] != task.state


# Exempt rows never matter to a thread's count but its anchors do: filtered in SQL.
_SKIPPED = tuple(sorted(g.EXEMPT_TYPES - {REQUEST_TYPE, g.RAISE_TYPE}))


def _before(tx: Transaction, event: Event) -> int:
    """The guards read the rows before `event`: the one write path has inserted it already
    (its seq is set), so its own row is never counted."""
    return event.seq or tx.state.next_seq


def _thread_rows(tx: Transaction, thread: str, before: int) -> Any:
    """The thread's anchors and counted rows before seq `before`, newest first, a page at a
    time (16 rows, then growing), as long as the caller asks."""
    size = FIRST_PAGE
    while True:
        page = sql.thread_page(tx.ex, thread, before, size, _SKIPPED)
        yield from page
        if len(page) < size:
            return
        before, size = int(page[-1][0]), min(size * 4, MAX_PAGE)


def _meta(row: Any) -> dict[str, Any]:
    """A guard row's metadata object (`{}` when unreadable)."""
    return read_metadata(row[4] or "{}")[0]


# ----------------------------------------------------------------------------- thread


def _check_thread(tx: Transaction, event: Event, task: Task | None) -> None:
    thread = event.correlation_id
    assert thread is not None
    limit = tx.store.task_settings.thread_budget
    requester = task.requester if task is not None else None
    if task is not None:
        request = tx.find_event(task.request_event_id, field="correlation_id")
        limit = g.meta_int(request.metadata, "thread_budget", limit, low=1)
    used, limit, anchor, since = _scan_thread(tx, thread, limit, requester, _before(tx, event))
    if used < limit:
        return
    if anchor is None:  # more than the budget since an anchor the scan did not reach
        since = "its last person's event or its " + ("request" if task else "start")
    requester = requester or sql.first_writer(tx.ex, thread)
    message = g.thread_refusal(
        thread=thread, used=used, limit=limit, since=since, requester=requester
    )
    notice = _notice(event, requester, message, f"budget:{thread}:{anchor or 'start'}:{limit}")
    notice["metadata"] = {"budget": "thread", "limit": limit, "used": used, "since": anchor}
    raise g.BudgetExhausted(message, field="thread_budget", notice=notice)


def _scan_thread(
    tx: Transaction, thread: str, limit: int, requester: str | None, before: int
) -> tuple[int, int, str | None, str]:
    """(counted events since the anchor, the budget, the anchor's id, its description), read
    newest first and no further than the anchor, or twice the budget of counted events (an
    exhausted thread's anchor names its episode: one notice each)."""
    humans = tx.store.task_settings.humans
    used, cap, full = 0, limit, False
    for row in _thread_rows(tx, thread, before):
        writer, kind, ident = row[3], row[2], row[1]
        if kind == g.RAISE_TYPE and (writer == requester or g.is_person(writer, humans)):
            raised = max(limit, g.meta_int(_meta(row), "thread_budget", limit, low=1))
            return used, raised, ident, f"{writer}'s raise {ident}"
        if kind == REQUEST_TYPE or g.is_person(writer, humans):
            return used, cap if full else limit, ident, _since(kind, writer, ident)
        if not g.counted(kind, writer, humans):
            continue
        used += 1
        if full and used > 2 * cap:
            break  # far past the budget: the anchor does not matter any more
        if used >= cap and not full:
            # Used up, unless a raise further back allows more: the rare path looks it up.
            raised_to = _raised(tx, thread, requester) if cap == limit else None
            if raised_to is None or raised_to <= used:
                full = True
            else:
                cap = raised_to
    return used, cap if full else limit, None, ""


def _raised(tx: Transaction, thread: str, requester: str | None) -> int | None:
    """The budget of the newest raise on the thread (by its requester), if any."""
    if requester is None:
        return None
    row = sql.newest_of_type(tx.ex, thread, g.RAISE_TYPE, requester)
    return g.meta_int(_meta(row), "thread_budget", 0) or None if row is not None else None


def _since(kind: str, writer: str, ident: str) -> str:
    return "the task request" if kind == REQUEST_TYPE else f"{writer}'s event {ident}"


# ----------------------------------------------------------------------------- pair


def _check_pair(tx: Transaction, event: Event, peer: str, task: Task | None) -> None:
    settings = tx.store.task_settings
    now = tx.store.clock.wall_clock.now_ms()
    cutoff = now_text(now - settings.pair_window_ms)
    a, b = event.from_agent, peer
    n = settings.pair_budget
    # The newest n messages (or moves) between them in the window, either way: the database
    # counts them and decides (`sql.pair_count`). Sent with the COMMIT where the executor can
    # (PostgreSQL: no round trip of its own; a refusal runs the batch again, reading, for
    # the refusal's text and notice), else read.
    before = _before(tx, event)
    if tx.state.checks and sql.pair_check(tx.ex, a, b, cutoff, before, n, _NOT_PAIRED, _MOVES):
        return
    refused, found, oldest_seq = sql.pair_count(tx.ex, a, b, cutoff, before, n, _NOT_PAIRED, _MOVES)
    if not refused or oldest_seq is None:
        return
    oldest = sql.event_id_at(tx.ex, int(oldest_seq))
    x, y = sorted((a, b))
    message = g.pair_refusal(
        a=x, b=y, used=found, limit=settings.pair_budget, window_ms=settings.pair_window_ms
    )
    to = (task.requester if task is not None else None) or (
        sql.first_writer(tx.ex, event.correlation_id) if event.correlation_id else None
    )
    notice = _notice(event, to or peer, message, f"pair:{x}|{y}:{oldest}")
    notice["metadata"] = {"budget": "pair", "limit": settings.pair_budget, "agents": [x, y]}
    raise g.BudgetExhausted(message, field="pair_budget", notice=notice)


_MOVES = tuple(sorted(g.EXEMPT_TYPES - {"event.ack", g.RAISE_TYPE}))
# Acks and raises are no exchange between a pair: left out of its rows.
_NOT_PAIRED = ("event.ack", g.RAISE_TYPE)


# ----------------------------------------------------------------------------- notice


def _notice(event: Event, to: str | None, message: str, key: str) -> dict[str, Any]:
    return {
        "type": g.EXHAUSTED_TYPE,
        "stream": event.stream,
        "room": event.room,
        "from_agent": g.HUB_WRITER,
        "to_agent": to or "*",
        "correlation_id": event.correlation_id,
        "body": f"{message}\n\nRefused writer: {event.from_agent} ({event.type}).",
        "idempotency_key": key,
    }


def send_notice(store: Writes, exc: g.BudgetExhausted) -> None:
    """The one `thread.budget_exhausted` of a refusal, in its own transaction (the refused
    one wrote nothing); its idempotency key makes repeated refusals send it once. Written as
    the hub itself, whoever the refused caller was."""
    fields = dict(exc.notice)
    fields["metadata"] = {**fields.get("metadata", {}), "refusal": exc.message}
    try:
        draft = store.draft_event(**fields)
        with actor_mod.acting_as(None):
            store.transaction(lambda tx: tx.insert_event(draft))
    except errors.ConflictError:
        pass  # its key holds the notice of an earlier refusal of this episode: sent once
    except errors.LogstreamError as exc:  # the refusal still stands; the notice is a courtesy
        _log().warning("could not send %s: %s", g.EXHAUSTED_TYPE, exc.message)
