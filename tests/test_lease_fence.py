"""Fencing tokens of file leases (issue 22, RFC 0010): a lease that lost a race across
replicas takes no fence, so the winners' fences stay 1, 2, ... in HLC order on every replica
(a guard that keeps the highest fence it has seen never sees a number taken by a lease that
never held), and a local acquire after the sync takes the next one."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore, sync
from mempalace_logstream.leases import rules
from mempalace_logstream.store import lease_ops
from tests.conftest import ManualClock


def _sync(a: LogStore, b: LogStore) -> None:
    sync.sync_with_peer(a, sync.LocalPeer(b), push=True)


def test_a_lease_lost_across_replicas_takes_no_fence(tmp_path: Path, clock: ManualClock) -> None:
    r1 = LogStore.open(str(tmp_path / "r1.sqlite3"), clock=clock)
    r2 = LogStore.open(str(tmp_path / "r2.sqlite3"), clock=clock)
    try:

        def acquire(store: LogStore, agent: str, glob: str) -> dict[str, object]:
            clock.advance(10)
            out = lease_ops.lease_acquire(store, agent=agent, paths=[glob], project="demo")
            return dict(out["lease"])

        won = acquire(r1, "claude", "src/**")
        lost = acquire(r2, "codex", "src/**")
        docs = acquire(r2, "codex", "docs/**")
        lib = acquire(r1, "claude", "lib/**")
        # apart, each replica numbers its own: r2 gave its two leases 1 and 2
        assert [won["fence"], lost["fence"], docs["fence"], lib["fence"]] == [1, 1, 2, 2]
        _sync(r1, r2)
        _sync(r2, r1)
        views = [lease_ops.lease_list(s, active=False)["leases"] for s in (r1, r2)]
        assert views[0] == views[1]
        by_id = {x["lease_id"]: x for x in views[0]}
        fences = [by_id[x["lease_id"]]["fence"] for x in (won, lost, docs, lib)]
        assert fences == [1, rules.NO_FENCE, 2, 3]  # the loser took none: 1, 2, 3 for winners
        assert by_id[lost["lease_id"]]["state"] == "lost"
        # the next acquire, on either replica, takes the next fence after the winners'
        assert acquire(r2, "gemini", "tests/**")["fence"] == 4
    finally:
        r1.close()
        r2.close()


PATHS = st.sampled_from(["src/**", "src/a.py", "*.py", "docs/**", "lib/", "docs/x.md"])
MOVES = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), PATHS, st.booleans()), min_size=1, max_size=12
)


@settings(max_examples=200, deadline=None)
@given(MOVES)
def test_fold_numbers_the_winners_densely_in_hlc_order(made: list[tuple[str, str, bool]]) -> None:
    moves = [
        rules.Move(
            kind="acquire",
            event_id=f"evt_{i:03d}",
            agent=agent,
            project="project/p",
            stamp=f"{1_000_000 + i:013d}-000000-r",
            wall_ms=1_000_000 + i,
            target=f"evt_{i:03d}",
            paths=(glob,),
            exclusive=exclusive,
            ttl_ms=60_000,
        )
        for i, (agent, glob, exclusive) in enumerate(made)
    ]
    leases = rules.fold(moves, lambda _task: None)
    in_order = [leases[m.event_id] for m in moves]
    winners = [x.fence for x in in_order if x.lost_to is None]
    assert winners == list(range(1, len(winners) + 1))
    assert all(x.fence == rules.NO_FENCE for x in in_order if x.lost_to is not None)
