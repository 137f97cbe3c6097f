"""File leases across replicas (issue 22, RFC 0010) as a property: random acquires, renews and
releases by random agents on three replicas, with random partial syncs and clock steps, then
full sync: every replica lists the same leases (the same winners, the same lost ones, the same
fences), each equal to the fold of its log, and no two leases that hold at once conflict."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore, errors, leases, sync
from mempalace_logstream.leases import rules
from mempalace_logstream.store import lease_ops
from tests.conftest import ManualClock
from tests.logfiles import new_log

AGENTS = ("claude", "codex", "gemini")
GLOBS = ("src/**", "src/a.py", "*.md", "docs/", "src/[ab].py", "tests/**")

move = st.one_of(
    st.tuples(
        st.just("acquire"),
        st.integers(0, 2),  # replica
        st.integers(0, 2),  # agent
        st.sampled_from(GLOBS),
        st.booleans(),  # exclusive
    ),
    st.tuples(st.sampled_from(["renew", "release"]), st.integers(0, 2), st.integers(0, 50)),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("tick"), st.integers(1, 40_000)),
)


def _sync(a: LogStore, b: LogStore) -> None:
    sync.sync_with_peer(a, sync.LocalPeer(b), push=True)


def _apply(r: list[LogStore], clock: ManualClock, step: tuple[Any, ...]) -> None:
    kind = step[0]
    try:
        if kind == "acquire":
            _, i, a, glob, exclusive = step
            lease_ops.lease_acquire(
                r[int(i)],
                agent=AGENTS[int(a)],
                paths=[glob],
                exclusive=exclusive,
                ttl_s=60,
                project="p",
            )
        elif kind in ("renew", "release"):
            _, i, n = step
            held = lease_ops.lease_list(r[int(i)], active=False, limit=500)["leases"]
            if held:
                lease = held[int(n) % len(held)]
                call = lease_ops.lease_renew if kind == "renew" else lease_ops.lease_release
                call(r[int(i)], lease_id=lease["lease_id"], agent=lease["agent"])
        elif kind == "sync":
            _, i, j = step
            if i != j:
                _sync(r[int(i)], r[int(j)])
        else:
            clock.advance(int(step[1]))
    except (errors.ConflictError, errors.ForbiddenError):
        pass  # refused locally: nothing written


def _folded(store: LogStore) -> dict[str, leases.Lease]:
    moves = []
    for e in store.event_list(type=list(leases.TYPES), order="asc", limit=500).events:
        m = leases.classify(
            event_id=e.id,
            type=e.type,
            stream=e.stream,
            agent=e.from_agent,
            stamp=e.hlc,
            meta=json.loads(e.metadata_json),
        )
        assert m is not None
        moves.append(m)
    moves.sort(key=lambda m: (m.stamp, m.event_id))
    return leases.fold(moves, lambda _t: None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(move, min_size=1, max_size=25))
def test_replicas_converge_on_the_same_leases_and_winners(steps: list[tuple[Any, ...]]) -> None:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp:
        r = [LogStore.open(new_log(Path(tmp) / f"r{i}.sqlite3"), clock=clock) for i in range(3)]
        try:
            for step in steps:
                _apply(r, clock, step)
            for _ in range(2):
                for i, j in itertools.permutations(range(3), 2):
                    _sync(r[i], r[j])
            views = [lease_ops.lease_list(s, active=False, limit=500)["leases"] for s in r]
            assert views[0] == views[1] == views[2]
            folded = _folded(r[0])
            assert {x["lease_id"]: (x["fence"], x["lost_to"]) for x in views[0]} == {
                k: (v.fence, v.lost_to) for k, v in folded.items()
            }
            active = [x for x in views[0] if x["state"] == "active"]
            for a, b in itertools.combinations(active, 2):
                if a["agent"] != b["agent"] and (a["exclusive"] or b["exclusive"]):
                    assert not rules.overlapping(a["paths"], b["paths"]), (a, b)
        finally:
            for s in r:
                s.close()
