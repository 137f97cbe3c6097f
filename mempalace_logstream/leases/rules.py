"""File leases (issue 22, RFC 0010): the moves (`lease.acquire`, `lease.renew`,
`lease.release` events), the lease they make, and the rules that decide one winner. Pure: the
store's projection (store/leases.py) runs these on the events in HLC order, so every replica
derives the same leases from the same events.

Time comes from the events (as task leases, RFC 0007): a lease expires at the wall time of
the HLC of the move that granted or renewed it plus its ttl; only reading compares with a
clock. A lease of a task ends when its task is completed or cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from mempalace_logstream.leases import ACQUIRE as ACQUIRE  # the package's: rules.ACQUIRE too
from mempalace_logstream.leases import RELEASE as RELEASE
from mempalace_logstream.leases import RENEW as RENEW
from mempalace_logstream.leases import TYPES as TYPES
from mempalace_logstream.leases import globs

ROOM = "leases"
ADMIN_NAME = "admin"  # identity's admin actor writes as this name (identity.actor.ADMIN_NAME)
# A lease of a task ends with the task's end (the task's row says when: its last move).
ENDING_TASK_STATES = frozenset({"completed", "cancelled"})

# The fence of a lease that lost a race across replicas: none (fences count the winners only,
# so a guard never sees a number taken by a lease that never held).
NO_FENCE = 0
MIN_TTL_MS, MAX_TTL_MS = 1000, 7 * 24 * 3600 * 1000  # leases.inputs' ttl_s bounds, in ms

TaskEnd = Callable[[str], str | None]  # task id -> HLC of the move that ended it, or None


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


# The records are NamedTuples: the PreToolUse hook, which reads them on every edit, then
# imports neither the dataclasses module nor inspect (tests/test_lease_lean.py).


class Lease(NamedTuple):
    """One lease as the log's moves leave it (a row of the `leases` projection)."""

    lease_id: str  # the id of its `lease.acquire` event
    project: str  # the stream it is scoped by ('project/<slug>')
    agent: str
    paths: tuple[str, ...]  # normalized globs
    exclusive: bool
    reason: str
    task_id: str | None
    fence: int  # 1, 2, ... per project over the leases granted, in HLC order; NO_FENCE if lost
    acquired_hlc: str
    ttl_ms: int
    expires_ms: int
    released_hlc: str | None = None
    released_by: str | None = None
    lost_to: str | None = None  # the lease that was there first (a race across replicas)
    lost_holder: str | None = None

    def held_at(self, stamp: str, wall_ms: int, task_end: TaskEnd) -> bool:
        """Whether the lease holds at HLC `stamp` (wall time `wall_ms`)."""
        if self.lost_to is not None or self.released_hlc is not None:
            return False
        if self.expires_ms <= wall_ms:
            return False
        ended = task_end(self.task_id) if self.task_id else None
        return ended is None or ended > stamp

    def to_dict(self, now_ms: int, task_end: TaskEnd) -> dict[str, Any]:
        ended = task_end(self.task_id) if self.task_id else None
        state = self.state(now_ms, ended)
        return {
            "lease_id": self.lease_id,
            "project": self.project,
            "agent": self.agent,
            "paths": list(self.paths),
            "exclusive": self.exclusive,
            "reason": self.reason,
            "task_id": self.task_id,
            "fence": self.fence,
            "state": state,
            "acquired_hlc": self.acquired_hlc,
            "expires_at": iso(self.expires_ms),
            "released_by": self.released_by or ("task" if ended else None),
            "lost_to": self.lost_to,
            "lost_holder": self.lost_holder,
        }

    def state(self, now_ms: int, task_ended: str | None) -> str:
        if self.lost_to is not None:
            return "lost"
        if self.released_hlc is not None or task_ended is not None:
            return "released"
        return "active" if self.expires_ms > now_ms else "expired"


class Move(NamedTuple):
    """A lease event read as a move (malformed ones, from a peer, are no move)."""

    kind: str  # acquire | renew | release
    event_id: str
    agent: str
    project: str
    stamp: str
    wall_ms: int
    target: str  # the lease it moves: its own id for an acquire
    paths: tuple[str, ...] = ()
    exclusive: bool = True
    ttl_ms: int = 0
    reason: str = ""
    task_id: str | None = None


def classify(
    *, event_id: str, type: str, stream: str, agent: str, stamp: str, meta: dict[str, Any]
) -> Move | None:
    """The move an event makes, or None (not a lease event, or one no rule can read)."""
    if type not in TYPES:
        return None
    from mempalace_logstream import hlc  # here: the hook's check classifies no event

    parsed = hlc.parse(stamp)
    if parsed is None:
        return None
    ttl = meta.get("ttl_ms")
    if type != RELEASE and not (isinstance(ttl, int) and MIN_TTL_MS <= ttl <= MAX_TTL_MS):
        return None  # the bounds of leases.inputs, also for a raw event or a peer's
    if type == ACQUIRE and not (isinstance(meta.get("paths"), list) and meta["paths"]):
        return None
    try:
        if type == ACQUIRE:
            return Move(
                kind="acquire",
                event_id=event_id,
                agent=agent,
                project=stream,
                stamp=stamp,
                wall_ms=parsed.wall_ms,
                target=event_id,
                paths=tuple(globs.normalize(str(p)) for p in meta["paths"]),
                exclusive=bool(meta.get("exclusive", True)),
                ttl_ms=int(meta["ttl_ms"]),
                reason=str(meta.get("reason") or ""),
                task_id=str(meta["task_id"]) if meta.get("task_id") else None,
            )
        kind = "renew" if type == RENEW else "release"
        return Move(
            kind=kind,
            event_id=event_id,
            agent=agent,
            project=stream,
            stamp=stamp,
            wall_ms=parsed.wall_ms,
            target=str(meta["lease_id"]),
            ttl_ms=int(meta["ttl_ms"]) if kind == "renew" else 0,
        )
    except (KeyError, TypeError, ValueError, globs.GlobError):
        return None


# ----------------------------------------------------------------------------- the rules


class Refused(NamedTuple):
    """A move the rules refuse: raised as `kind` (conflict, forbidden, not_found) locally,
    no effect from a peer."""

    kind: str
    field: str
    message: str


def overlapping(mine: Iterable[str], theirs: Iterable[str]) -> list[tuple[str, str]]:
    """The (mine, theirs) glob pairs that can name a common path (the automata compared only
    for pairs whose literal prefixes allow it)."""
    theirs = tuple(theirs)
    return [
        (a, b) for a in mine for b in theirs if globs.may_overlap(a, b) and globs.overlaps(a, b)
    ]


def blockers(
    held: Iterable[Lease], move: Move, task_end: TaskEnd
) -> list[tuple[Lease, list[tuple[str, str]]]]:
    """The leases of other agents held at the move's time whose paths overlap its paths,
    one of the two exclusive (shared leases coexist), with the overlapping pairs, in the
    order of `held`. Only the leases a literal-prefix index leaves are compared."""
    out: list[tuple[Lease, list[tuple[str, str]]]] = []
    index = globs.PrefixIndex((lease.paths, lease) for lease in held)
    for lease in index.candidates(move.paths):  # no other lease can overlap the move
        if lease.agent == move.agent or lease.project != move.project:
            continue
        if not (lease.exclusive or move.exclusive):
            continue
        if not lease.held_at(move.stamp, move.wall_ms, task_end):
            continue
        pairs = overlapping(move.paths, lease.paths)
        if pairs:
            out.append((lease, pairs))
    return out


def acquire(held: Iterable[Lease], move: Move, fence: int, task_end: TaskEnd) -> Lease:
    """The lease an acquire makes, with `fence`: lost to the first holder when any overlaps
    (`blockers`), and then with NO_FENCE (the next winner takes `fence`)."""
    lease = Lease(
        lease_id=move.event_id,
        project=move.project,
        agent=move.agent,
        paths=move.paths,
        exclusive=move.exclusive,
        reason=move.reason,
        task_id=move.task_id,
        fence=fence,
        acquired_hlc=move.stamp,
        ttl_ms=move.ttl_ms,
        expires_ms=move.wall_ms + move.ttl_ms,
    )
    found = blockers(held, move, task_end)
    if not found:
        return lease
    first = min((b for b, _ in found), key=lambda b: (b.acquired_hlc, b.lease_id))
    return lease._replace(fence=NO_FENCE, lost_to=first.lease_id, lost_holder=first.agent)


def refusal_of_conflict(found: list[tuple[Lease, list[tuple[str, str]]]]) -> Refused:
    parts = []
    for lease, pairs in found:
        overlaps = ", ".join(f"{mine} overlaps {theirs}" for mine, theirs in pairs)
        how = "exclusively" if lease.exclusive else "shared"
        why = f": {lease.reason}" if lease.reason else ""
        task = f", task {lease.task_id}" if lease.task_id else ""
        parts.append(
            f"{overlaps}, leased {how} to {lease.agent} until {iso(lease.expires_ms)} "
            f"(lease {lease.lease_id}, fence {lease.fence}{task}{why})"
        )
    return Refused("conflict", "paths", "; ".join(parts) + "; acquire refused")


def lost_message(lease: Lease, action: str) -> str:
    return (
        f"lease {lease.lease_id} ({lease.agent}) lost the race to {lease.lost_holder}'s lease "
        f"{lease.lost_to}, acquired first; {action} refused; acquire again once it is free"
    )


def move_on(lease: Lease | None, move: Move, task_end: TaskEnd) -> Lease | Refused:
    """A renew or release of `lease` (None: unknown here): the lease after it, or why not."""
    if lease is None:
        return Refused("not_found", "lease_id", f"lease {move.target} not found")
    admin = move.agent == ADMIN_NAME and move.kind == "release"
    if move.agent != lease.agent and not admin:
        return Refused(
            "forbidden",
            "agent",
            f"lease {lease.lease_id} is held by {lease.agent}; only its holder (or the admin "
            f"for a release) may {move.kind} it",
        )
    if lease.lost_to is not None:
        return Refused("conflict", "lease_id", lost_message(lease, move.kind))
    if lease.released_hlc is not None:
        return Refused(
            "conflict",
            "lease_id",
            f"lease {lease.lease_id} was released by {lease.released_by}; {move.kind} refused",
        )
    ended = task_end(lease.task_id) if lease.task_id else None
    if ended is not None and ended <= move.stamp:
        return Refused(
            "conflict",
            "lease_id",
            f"lease {lease.lease_id} ended with its task {lease.task_id}; {move.kind} refused",
        )
    if move.kind == "release":
        return lease._replace(released_hlc=move.stamp, released_by=move.agent)
    if lease.expires_ms <= move.wall_ms:
        return Refused(
            "conflict",
            "lease_id",
            f"lease {lease.lease_id} expired at {iso(lease.expires_ms)}; renew refused; "
            "acquire again",
        )
    return lease._replace(ttl_ms=move.ttl_ms, expires_ms=move.wall_ms + move.ttl_ms)


def fold(moves: Iterable[Move], task_end: TaskEnd) -> dict[str, Lease]:
    """Every lease of `moves` (in HLC order), as the log leaves them: the same on every
    replica that holds the same events. Refused moves take no effect; a lost acquire takes
    no fence, so the winners' fences are 1, 2, ... in HLC order."""
    leases: dict[str, Lease] = {}
    fence = 0
    for move in moves:
        if move.kind == "acquire":
            if move.event_id in leases:
                continue
            lease = acquire(leases.values(), move, fence + 1, task_end)
            fence = max(fence, lease.fence)
            leases[move.event_id] = lease
            continue
        after = move_on(leases.get(move.target), move, task_end)
        if isinstance(after, Lease):
            leases[after.lease_id] = after
    return leases
