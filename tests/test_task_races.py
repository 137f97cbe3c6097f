"""One winner (RFC 0007): eight processes claim one task at once on one store (a SQLite file,
PostgreSQL): exactly one wins, seven get a clear refusal naming the holder, nothing half
written. Across replicas: claims made on two replicas while apart both survive sync in any
order, every replica derives the same winner (the earliest claim), and the loser's next move is
refused saying it lost."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mempalace_logstream import LogStore, errors, sync, tasks, workflows
from tests.conftest import REPO, ManualClock

pytestmark = pytest.mark.slow

CLAIMER = r"""
import json, sys
from mempalace_logstream import LogStore, errors
url, agent, tid = sys.argv[1], sys.argv[2], sys.argv[3]
store = LogStore.open(url)
print("ready", flush=True)
sys.stdin.readline()
try:
    out = workflows.task_update(store, task_id=tid, action="claim", from_agent=agent)
    print(json.dumps({"won": True, "attempt": out["task"]["attempt"]}), flush=True)
except errors.LogstreamError as exc:
    print(json.dumps({"won": False, "kind": type(exc).__name__, "error": exc.message}), flush=True)
store.close()
"""


def new_task(store: LogStore, to: str = "*") -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent="lead",
        to_agent=to,
        goal="one winner",
        branch="main",
        base_commit="abcdef1",
        done="exactly one claim",
    )
    return str(out["task"].correlation_id)


def test_eight_processes_claim_one_task_and_exactly_one_wins(db_url: str) -> None:
    with LogStore.open(db_url) as store:
        tid = new_task(store)
        before = store.stats()["events"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, db_url, f"worker-{i}", tid],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(8)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # all eight are open and waiting: release them together
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        answers = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    winners = [a for a in answers if a["won"]]
    losers = [a for a in answers if not a["won"]]
    assert len(winners) == 1 and winners[0]["attempt"] == 1
    with LogStore.open(db_url) as store:
        status = store.task_status(tid)["task"]
        holder = status["assignee"]
        assert (status["state"], status["attempt"]) == ("claimed", 1)
        assert store.stats()["events"] == before + 1  # one claim written, no half of another
        claims = store.event_list(correlation_id=tid, type="task.claim").events
        assert [e.from_agent for e in claims] == [holder]
    assert len(losers) == 7
    for loser in losers:
        assert loser["kind"] == "ConflictError"
        assert (
            loser["error"]
            == f"task {tid} is already claimed by {holder} (attempt 1); claim refused"
        )


def _replicas(tmp_path: Path, clock: ManualClock) -> list[LogStore]:
    return [LogStore.open(str(tmp_path / f"r{i}.sqlite3"), clock=clock) for i in range(3)]


def _sync(a: LogStore, b: LogStore) -> None:
    sync.sync_with_peer(a, sync.LocalPeer(b), push=True)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3)))[:4])
def test_claims_made_apart_converge_on_the_earliest(
    tmp_path: Path, clock: ManualClock, order: tuple[int, ...]
) -> None:
    r = _replicas(tmp_path, clock)
    try:
        tid = new_task(r[0])
        for other in (r[1], r[2]):
            _sync(other, r[0])
        # apart: r1's claim comes first by the clock, r2's later; r2 even reports progress
        clock.advance(10)
        workflows.task_update(r[1], task_id=tid, action="claim", from_agent="gemini")
        clock.advance(10)
        workflows.task_update(r[2], task_id=tid, action="claim", from_agent="codex")
        workflows.task_update(r[2], task_id=tid, action="progress", from_agent="codex", progress=5)
        assert r[2].task_status(tid)["task"]["assignee"] == "codex"  # as far as r2 knows
        # together again, pairwise rounds in a given order, twice (anti-entropy)
        for _ in range(2):
            for i, j in itertools.permutations(order, 2):
                _sync(r[i], r[j])
        views = [s.task_status(tid)["task"] for s in r]
        for view in views:
            assert (view["state"], view["assignee"], view["attempt"]) == ("claimed", "gemini", 1)
            assert [(c["agent"], c["lost_to"]) for c in view["conflicts"]] == [("codex", "gemini")]
            assert [(a["agent"], a["action"]) for a in view["anomalies"]] == [("codex", "progress")]
        assert views[0] == views[1] == views[2]
        for s in r:
            thread = s.event_list(correlation_id=tid, order="asc").events
            assert tasks.fold(thread, s.task_settings).conflicts == tuple(views[0]["conflicts"])
        with pytest.raises(errors.ConflictError) as info:
            workflows.task_update(
                r[2], task_id=tid, action="progress", from_agent="codex", progress=6
            )
        assert str(info.value) == (
            f"task {tid} was claimed first by gemini (attempt 1); your claim lost; progress refused"
        )
        workflows.task_update(r[0], task_id=tid, action="progress", from_agent="gemini", progress=1)
    finally:
        for s in r:
            s.close()
