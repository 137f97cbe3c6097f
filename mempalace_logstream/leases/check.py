"""`lease_check`'s rule on the rows (issue 22, RFC 0010): may an agent edit a path? Pure, so
that the store (store/lease_ops.py) and the hook's lean reader (store/lean_leases.py) decide
with the same code: refused while another agent's exclusive lease names the path, or while a
lease of the agent naming it lost a race."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mempalace_logstream.leases import globs, rules
from mempalace_logstream.leases.rules import Lease, TaskEnd


def lease_of(d: Mapping[str, Any]) -> Lease:
    """A lease from its row, by column name."""
    return Lease(
        lease_id=str(d["lease_id"]),
        project=str(d["project"]),
        agent=str(d["agent"]),
        paths=tuple(json.loads(d["paths_json"])),
        exclusive=bool(d["exclusive"]),
        reason=str(d["reason"]),
        task_id=d["task_id"],
        fence=int(d["fence"]),
        acquired_hlc=str(d["acquired_hlc"]),
        ttl_ms=int(d["ttl_ms"]),
        expires_ms=int(d["expires_ms"]),
        released_hlc=d["released_hlc"],
        released_by=d["released_by"],
        lost_to=d["lost_to"],
        lost_holder=d["lost_holder"],
    )


def ending_hlc(doc_json: str | None) -> str | None:
    """The HLC of the move that completed or cancelled a task (its stored document), or None
    while it runs or when there is no such task."""
    if doc_json is None:
        return None
    doc = json.loads(doc_json)
    if doc.get("state") in rules.ENDING_TASK_STATES:
        return str(doc["last_hlc"])
    return None


def decide(
    *,
    who: str,
    where: str,
    stream: str | None,
    now: int,
    held: Iterable[Lease],
    lost: Iterable[Lease],
    end: TaskEnd,
) -> dict[str, Any]:
    """{allowed, path, agent, held_by, own, lost, message} for `who` editing `where` in
    `stream` (None: every project) at wall time `now`, from the rows not lost nor released
    and unexpired (`held`) and `who`'s unexpired lost ones (`lost`)."""
    active = [x for x in held if x.state(now, end(x.task_id) if x.task_id else None) == "active"]
    index = globs.PrefixIndex((x.paths, x) for x in active)
    naming = [x for x in index.naming(where) if any(globs.matches(g, where) for g in x.paths)]
    others = [x for x in naming if x.agent != who and x.exclusive]
    own = [x for x in naming if x.agent == who]
    lost_here = [
        x
        for x in lost
        if (stream is None or x.project == stream) and any(globs.matches(g, where) for g in x.paths)
    ]
    message = _message(where, others, lost_here)
    return {
        "allowed": message is None,
        "path": where,
        "agent": who,
        "held_by": [x.to_dict(now, end) for x in others],
        "own": [x.to_dict(now, end) for x in own],
        "lost": [x.to_dict(now, end) for x in lost_here],
        "message": message,
    }


def _message(path: str, others: list[Lease], lost: list[Lease]) -> str | None:
    if lost:
        return rules.lost_message(lost[0], "check")
    if not others:
        return None
    holder = others[0]
    detail = ", ".join(
        x for x in (holder.reason, f"task {holder.task_id}" if holder.task_id else "") if x
    )
    return (
        f"{path} is leased to {holder.agent} until {rules.iso(holder.expires_ms)}"
        f"{f' ({detail})' if detail else ''} (lease {holder.lease_id}, fence {holder.fence}); "
        "ask them or wait"
    )
