"""Origin positions: pull positions, per-origin fingerprints of held positions and the version
vector holes they reveal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mempalace_logstream import validation as v
from mempalace_logstream.backends.queries import sync
from mempalace_logstream.replication.wire import REPORT_CAP, seq_int
from mempalace_logstream.store import LogStore


def pull_after(store: LogStore, origin: str, vector_top: int) -> int:
    """Where to resume pulling `origin`: our vector entry, or just before the oldest deferred
    event of that origin (a deferred event left a hole the vector cannot see; a held event
    whose position was filled since, by another event at it, pins nothing)."""
    with store.connect() as conn:
        floor = sync.oldest_retried(conn, origin)
    return vector_top if floor is None else min(vector_top, floor - 1)


def origin_top(store: LogStore, origin: str) -> int:
    """Our version-vector entry for one origin (0 if we hold none of its events)."""
    with store.connect() as conn:
        return sync.highest_held(conn, origin)


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
    with store.connect() as conn:
        row = sync.position_sums(conn, clean, bound, FP_P1, FP_P2)
        return fp_sum(fp_row(row), fp_of(sync.refused_positions(conn, clean, bound)))


def fp_row(row: Sequence[Any]) -> Fingerprint:
    return int(row[0] or 0), int(row[1] or 0) % FP_P1, int(row[2] or 0) % FP_P2


def fp_of(positions: Iterable[int]) -> Fingerprint:
    n = s1 = s2 = 0
    for p in positions:
        n, s1, s2 = n + 1, s1 + p % FP_P1, s2 + (p % FP_P2) ** 2 % FP_P2
    return n, s1 % FP_P1, s2 % FP_P2


def fp_span(first: int, last: int) -> Fingerprint:
    """The fingerprint of every position in [first, last] (none when last < first), in closed
    form: a peer may claim a far-ahead top."""
    if last < first:
        return NO_POSITIONS

    def squares(n: int) -> int:  # 1² + … + n²
        return n * (n + 1) * (2 * n + 1) // 6

    total = (last * (last + 1) - (first - 1) * first) // 2
    return last - first + 1, total % FP_P1, (squares(last) - squares(first - 1)) % FP_P2


def fp_between(lower: Fingerprint, upper: Fingerprint) -> Fingerprint:
    """The fingerprint of the positions in (a, b] from the prefix fingerprints at a and b."""
    return upper[0] - lower[0], (upper[1] - lower[1]) % FP_P1, (upper[2] - lower[2]) % FP_P2


def held_fingerprint(store: LogStore, origin: str, upto: int) -> Fingerprint:
    """The fingerprint of the positions of `origin` <= upto held back for a later round (a
    rejection still retried: a key not known yet) at which no event is held. `pull_after`
    already resumes below them, so a peer that accounts for exactly these more than we do
    shows no hole, only the catch-up a round makes anyway."""
    with store.connect() as conn:
        return fp_of(sync.retried_positions(conn, origin, upto))


def fp_sum(a: Fingerprint, b: Fingerprint) -> Fingerprint:
    """The fingerprint of two disjoint sets of positions together."""
    return a[0] + b[0], (a[1] + b[1]) % FP_P1, (a[2] + b[2]) % FP_P2


def origin_positions(store: LogStore) -> dict[str, tuple[int, Fingerprint]]:
    """{origin: (top, fingerprint)}: our version-vector entry and `fingerprint_upto(origin,
    top)`, for every origin we hold events of. One scan, like `version_vector()`; served to our
    peers as `origin_fingerprints` next to the vector, so that a round sees a hole below equal
    tops."""
    with store.connect() as conn:
        rows = sync.origin_position_sums(conn, FP_P1, FP_P2)
        out = {r[0]: (int(r[1]), fp_row(r[2:])) for r in rows}
        for origin in sync.refused_origins(conn):
            if origin in out:
                top, fp = out[origin]
                refused = sync.refused_positions(conn, origin, top)
                out[origin] = (top, fp_sum(fp, fp_of(refused)))
    return out


def highest_held(store: LogStore, origin: str, upto: int) -> int:
    """The highest origin_seq of `origin` <= upto that we hold (0 if none): one index seek."""
    bound = seq_int("upto", upto)
    with store.connect() as conn:
        return sync.highest_held(conn, origin, bound)


def held_above(
    store: LogStore, origin: str, above: int, limit: int = REPORT_CAP
) -> list[tuple[str, int]]:
    """(id, origin_seq) of the first `limit` events of `origin` held above `above`."""
    with store.connect() as conn:
        return sync.held_above(conn, origin, above, limit)
