"""Origin positions: pull positions, per-origin fingerprints of held positions and the version
vector holes they reveal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import validation as v
from mempalace_logstream.replication.wire import REPORT_CAP, seq_int
from mempalace_logstream.schema import (
    events,
    sync_conflicts,
    sync_rejections,
)
from mempalace_logstream.store import (
    LogStore,
)


def pull_after(store: LogStore, origin: str, vector_top: int) -> int:
    """Where to resume pulling `origin`: our vector entry, or just before the oldest deferred
    event of that origin (a deferred event left a hole the vector cannot see)."""
    r = sync_rejections.c
    # A held event whose position was filled since (another event at it) pins nothing.
    held = sa.exists().where(
        events.c.origin_replica == r.origin_replica, events.c.origin_seq == r.origin_seq
    )
    with store.connect() as conn:
        floor = conn.execute(
            sa.select(sa.func.min(r.origin_seq)).where(
                r.kind == "event",
                r.origin_replica == origin,
                r.retryable.is_(True),
                ~held,
            )
        ).scalar()
    return vector_top if floor is None else min(vector_top, int(floor) - 1)


def origin_top(store: LogStore, origin: str) -> int:
    """Our version-vector entry for one origin (0 if we hold none of its events)."""
    with store.connect() as conn:
        top = conn.execute(
            sa.select(sa.func.max(events.c.origin_seq)).where(events.c.origin_replica == origin)
        ).scalar()
    return int(top or 0)


Fingerprint = tuple[int, int, int]


FP_P1, FP_P2 = 2_147_483_647, 1_000_000_007  # two primes: sums stay well inside 64 bits


NO_POSITIONS: Fingerprint = (0, 0, 0)


def count_upto(store: LogStore, origin: Any, upto: Any) -> int:
    """How many positions of `origin` up to `upto` this replica accounts for (hole probes):
    the events it holds plus the positions it refused for good (invalid, conflicting, deferred
    past MAX_RETRIES) and does not hold. Two replicas that account for the same positions
    agree, so an event one of them refuses is not a hole to re-pull every round."""
    return fingerprint_upto(store, origin, upto)[0]


def fingerprint_upto(store: LogStore, origin: Any, upto: Any) -> Fingerprint:
    """(count, sum of seq mod FP_P1, sum of seq² mod FP_P2) over the positions of `origin` up
    to `upto` that this replica accounts for (as `count_upto`). Equal fingerprints mean the
    same set of positions, short of a deliberate collision; a count alone does not (two
    replicas may each hold a position the other lacks). An index-only range scan."""
    clean = v.required_routing("origin", origin)
    bound = seq_int("upto", upto)
    c = events.c
    with store.connect() as conn:
        row = conn.execute(
            sa.select(*_fp_aggregates(c.origin_seq)).where(
                c.origin_replica == clean, c.origin_seq <= bound
            )
        ).one()
        return _fp_add(_fp_row(row), _fp_of(_refused_positions(conn, clean, bound)))


def _fp_aggregates(col: Any) -> list[Any]:
    return [
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(col % FP_P1), 0),
        sa.func.coalesce(sa.func.sum((col % FP_P2) * (col % FP_P2) % FP_P2), 0),
    ]


def _fp_row(row: Sequence[Any]) -> Fingerprint:
    return int(row[0] or 0), int(row[1] or 0) % FP_P1, int(row[2] or 0) % FP_P2


def _fp_of(positions: Iterable[int]) -> Fingerprint:
    n = s1 = s2 = 0
    for p in positions:
        n, s1, s2 = n + 1, s1 + p % FP_P1, s2 + (p % FP_P2) ** 2 % FP_P2
    return n, s1 % FP_P1, s2 % FP_P2


def _fp_add(a: Fingerprint, b: Fingerprint) -> Fingerprint:
    return a[0] + b[0], (a[1] + b[1]) % FP_P1, (a[2] + b[2]) % FP_P2


def fp_between(lower: Fingerprint, upper: Fingerprint) -> Fingerprint:
    """The fingerprint of the positions in (a, b] from the prefix fingerprints at a and b."""
    return upper[0] - lower[0], (upper[1] - lower[1]) % FP_P1, (upper[2] - lower[2]) % FP_P2


def _refused_union() -> sa.Subquery:
    r, c = sync_rejections.c, sync_conflicts.c
    return sa.union(
        sa.select(r.origin_replica, r.origin_seq).where(
            r.kind == "event", r.retryable.is_(False), r.origin_seq.is_not(None)
        ),
        sa.select(c.origin_replica, c.origin_seq).where(c.origin_seq.is_not(None)),
    ).subquery()


def _refused_positions(conn: sa.Connection, origin: str, upto: int) -> list[int]:
    """Distinct positions of `origin` <= upto refused for good (rejections that are no longer
    retried, conflicts) at which no event is held. Both tables are empty on a healthy log."""
    u = _refused_union()
    held = sa.exists().where(
        events.c.origin_replica == u.c.origin_replica, events.c.origin_seq == u.c.origin_seq
    )
    q = sa.select(u.c.origin_seq).where(u.c.origin_replica == origin, u.c.origin_seq <= upto, ~held)
    return [int(r[0]) for r in conn.execute(q)]


def held_fingerprint(store: LogStore, origin: str, upto: int) -> Fingerprint:
    """The fingerprint of the positions of `origin` <= upto held back for a later round (a
    rejection still retried: a key not known yet) at which no event is held. `pull_after`
    already resumes below them, so a peer that accounts for exactly these more than we do
    shows no hole, only the catch-up a round makes anyway."""
    r = sync_rejections.c
    held = sa.exists().where(
        events.c.origin_replica == r.origin_replica, events.c.origin_seq == r.origin_seq
    )
    q = sa.select(r.origin_seq).where(
        r.kind == "event",
        r.origin_replica == origin,
        r.retryable.is_(True),
        r.origin_seq.is_not(None),
        r.origin_seq <= upto,
        ~held,
    )
    with store.connect() as conn:
        return _fp_of({int(row[0]) for row in conn.execute(q)})


def fp_sum(a: Fingerprint, b: Fingerprint) -> Fingerprint:
    """The fingerprint of two disjoint sets of positions together."""
    return _fp_add(a, b)


def origin_positions(store: LogStore) -> dict[str, tuple[int, Fingerprint]]:
    """{origin: (top, fingerprint)}: our version-vector entry and `fingerprint_upto(origin,
    top)`, for every origin we hold events of. One scan, like `version_vector()`; served to our
    peers as `origin_fingerprints` next to the vector, so that a round sees a hole below equal
    tops."""
    c = events.c
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(
                c.origin_replica, sa.func.max(c.origin_seq), *_fp_aggregates(c.origin_seq)
            ).group_by(c.origin_replica)
        ).all()
        out = {r[0]: (int(r[1]), _fp_row(r[2:])) for r in rows}
        u = _refused_union()
        refused = [r[0] for r in conn.execute(sa.select(u.c.origin_replica).distinct())]
        for origin in refused:
            if origin in out:
                top, fp = out[origin]
                out[origin] = (top, _fp_add(fp, _fp_of(_refused_positions(conn, origin, top))))
    return out


def highest_held(store: LogStore, origin: str, upto: int) -> int:
    """The highest origin_seq of `origin` <= upto that we hold (0 if none): one index seek."""
    with store.connect() as conn:
        top = conn.execute(
            sa.select(sa.func.max(events.c.origin_seq)).where(
                events.c.origin_replica == origin, events.c.origin_seq <= seq_int("upto", upto)
            )
        ).scalar()
    return int(top or 0)


def held_above(
    store: LogStore, origin: str, above: int, limit: int = REPORT_CAP
) -> list[tuple[str, int]]:
    """(id, origin_seq) of the first `limit` events of `origin` held above `above`."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(events.c.id, events.c.origin_seq)
            .where(events.c.origin_replica == origin, events.c.origin_seq > above)
            .order_by(events.c.origin_seq)
            .limit(limit)
        ).all()
    return [(r[0], int(r[1])) for r in rows]
