"""The lease operations (issue 22, RFC 0010): `lease_acquire`, `lease_renew`,
`lease_release` append a `lease.*` event (the lease projection, store/leases.py, checks it
under the write lock and refuses it by raising), `lease_list` and `lease_check` read the rows
as of the store's clock. Inputs are checked first (leases.inputs): nothing bad is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, leases
from mempalace_logstream import validation as v
from mempalace_logstream.backends.queries import leases as sql
from mempalace_logstream.identity import actor
from mempalace_logstream.leases import check as lease_rule
from mempalace_logstream.leases import globs, rules
from mempalace_logstream.leases import inputs as check
from mempalace_logstream.store.identity import check_writer
from mempalace_logstream.store.ids import project_stream
from mempalace_logstream.store.leases import from_row, task_ends

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore


def _scope(store: LogStore, project: Any, task_id: Any) -> tuple[str, str | None]:
    """(the project's stream, the task id): a task's lease is scoped by the task's stream."""
    stream = project_stream(project)
    task = v.routing("task_id", task_id)
    if task is not None:
        task_stream = str(store.task_brief(task)["stream"])
        if stream is not None and stream != task_stream:
            raise v.fail("project", f"{stream!r} is not the project of task {task} ({task_stream})")
        stream = task_stream
    if stream is None:
        raise v.fail("project", "is required (or task_id: the task's project)")
    return stream, task


def lease_acquire(
    store: LogStore,
    *,
    agent: Any,
    paths: Any,
    exclusive: Any = None,
    ttl_s: Any = None,
    reason: Any = None,
    task_id: Any = None,
    project: Any = None,
) -> dict[str, Any]:
    """Acquire a lease on `paths` for `agent`: {lease}. ConflictError naming the holder, the
    overlapping globs and the expiry when another agent's lease is in the way."""
    who = _writer(agent)
    globs_ = check.paths(paths)
    meta: dict[str, Any] = {
        "paths": list(globs_),
        "exclusive": v.boolean("exclusive", exclusive, default=True),
        "ttl_ms": check.ttl_ms(ttl_s),
    }
    why = check.reason(reason)
    stream, task = _scope(store, project, task_id)
    if why:
        meta["reason"] = why
    if task:
        meta["task_id"] = task
    event = store.event_append(
        type=leases.ACQUIRE, stream=stream, room=rules.ROOM, from_agent=who, body=why, metadata=meta
    )
    return {"lease": _lease(store, event.id)}


def lease_renew(store: LogStore, *, lease_id: Any, agent: Any, ttl_s: Any = None) -> dict[str, Any]:
    """Renew `lease_id` for `ttl_s` from now (default: its own ttl): {lease}."""
    ident = v.required_routing("lease_id", lease_id)
    who = _writer(agent)
    held = _row(store, ident)
    ttl = check.ttl_ms(ttl_s) if ttl_s is not None else held.ttl_ms
    meta = {"lease_id": ident, "ttl_ms": ttl}
    store.event_append(
        type=leases.RENEW, stream=held.project, room=rules.ROOM, from_agent=who, metadata=meta
    )
    return {"lease": _lease(store, ident)}


def lease_release(store: LogStore, *, lease_id: Any, agent: Any) -> dict[str, Any]:
    """Release `lease_id` (its holder, or the admin as `admin`): {lease}."""
    ident = v.required_routing("lease_id", lease_id)
    who = _writer(agent)
    held = _row(store, ident)
    store.event_append(
        type=leases.RELEASE,
        stream=held.project,
        room=rules.ROOM,
        from_agent=who,
        metadata={"lease_id": ident},
    )
    return {"lease": _lease(store, ident)}


def _writer(agent: Any) -> str:
    """The agent a lease move is written as: never `*`, and an agent's token moves its own
    leases only (ForbiddenError naming `agent`, the parameter, not the event's `from_agent`)."""
    who = v.writer("agent", agent)
    check_writer(actor.current(), "agent", who)
    return who


def _row(store: LogStore, lease_id: str) -> leases.Lease:
    with store.reads.snapshot() as snap:
        row = sql.by_id(snap, lease_id)
    if row is None:
        raise errors.NotFoundError(f"lease {lease_id} not found", field="lease_id", ident=lease_id)
    return from_row(row)


def _lease(store: LogStore, lease_id: str) -> dict[str, Any]:
    now = store.clock.wall_clock.now_ms()
    with store.reads.snapshot() as snap:
        row = sql.by_id(snap, lease_id)
        assert row is not None  # written in this call's transaction
        return from_row(row).to_dict(now, task_ends(snap))


def lease_list(
    store: LogStore,
    *,
    agent: Any = None,
    path: Any = None,
    active: Any = None,
    project: Any = None,
    limit: Any = None,
) -> dict[str, Any]:
    """Leases, newest first: {leases, count}; `active` (default true) only those that hold
    now, `path` those naming it, `agent` and `project` theirs."""
    who = v.routing("agent", agent)
    where = check.path(path) if path is not None else None
    only_active = v.boolean("active", active, default=True)
    n = v.limit(limit)
    now = store.clock.wall_clock.now_ms()
    with store.reads.snapshot() as snap:
        rows = sql.listing(
            snap,
            agent=who,
            project=project_stream(project),
            after_ms=now if only_active else None,
            limit=n if where is None else v.MAX_LIST_LIMIT,
        )
        end = task_ends(snap)
        found = [from_row(r) for r in rows]
        if only_active:
            found = [
                x for x in found if x.state(now, end(x.task_id) if x.task_id else None) == "active"
            ]
        if where is not None:
            found = [x for x in found if any(globs.matches(g, where) for g in x.paths)]
        out = [x.to_dict(now, end) for x in found[:n]]
    return {"leases": out, "count": len(out)}


def lease_check(store: LogStore, *, agent: Any, path: Any, project: Any = None) -> dict[str, Any]:
    """May `agent` edit `path`? {allowed, path, agent, held_by, own, lost, message}: refused
    while another agent holds an exclusive lease naming it, or while a lease of `agent`
    naming it lost a race (its next move is refused too). The rule: leases.check.decide."""
    who = v.required_routing("agent", agent)
    where = check.path(path)
    stream = project_stream(project)
    now = store.clock.wall_clock.now_ms()
    with store.reads.snapshot() as snap:
        return lease_rule.decide(
            who=who,
            where=where,
            stream=stream,
            now=now,
            held=[from_row(r) for r in sql.held(snap, stream, now)],
            lost=[from_row(r) for r in sql.lost_of(snap, who, now)],
            end=task_ends(snap),
        )
