"""One winner for file leases (issue 22, RFC 0010). On one store (a SQLite file, PostgreSQL,
a real `logstream serve` hub in front of a file), eight processes acquire overlapping globs at
once, twenty rounds: exactly one holds each round, the seven others are refused naming it.
Across replicas: two leases of `src/**` made apart both survive sync, both replicas derive the
same winner (the earliest HLC), and the loser's next move and check are refused as lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mempalace_logstream import LogStore, errors, operations, sync
from mempalace_logstream.hub_client import HubClient
from mempalace_logstream.store import lease_ops
from tests.conftest import REPO, ManualClock
from tests.hubproc import HubProcess

pytestmark = pytest.mark.slow

# Eight globs that all name src/a.py (so any two overlap), each worker its own.
GLOBS = ["src/**", "src/*.py", "*.py", "src/a.py", "src/", "**/a.py", "src/[a-z].py", "src/?.py"]
ROUNDS = 20

WORKER = r"""
import json, sys
from mempalace_logstream import LogStore, errors, operations
from mempalace_logstream.hub_client import HubClient
mode, target, agent, glob = sys.argv[1:5]
client = HubClient(target) if mode == "hub" else operations.LocalClient(LogStore.open(target))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "stop":
        break
    try:
        out = client.call("lease_acquire", agent=agent, paths=[glob], project="race", ttl_s=600)
        print(json.dumps({"won": True, "lease_id": out["lease"]["lease_id"]}), flush=True)
    except errors.LogstreamError as exc:
        print(json.dumps({"won": False, "kind": type(exc).__name__, "error": exc.message}),
              flush=True)
client.close()
"""


def _race(mode: str, target: str, admin: operations.LocalClient | HubClient) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, mode, target, f"worker-{i}", GLOBS[i]],
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
        for _round in range(ROUNDS):
            for p in procs:  # all eight wait on stdin: release them together
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            answers = [json.loads(p.stdout.readline()) for p in procs if p.stdout]
            _one_winner(answers, admin)
        for p in procs:
            p.communicate("stop\n", timeout=60)  # closes the pipes
            assert p.returncode == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _one_winner(answers: list[dict[str, str]], admin: operations.LocalClient | HubClient) -> None:
    winners = [i for i, a in enumerate(answers) if a["won"]]
    assert len(winners) == 1, answers
    holder = f"worker-{winners[0]}"
    lease_id = answers[winners[0]]["lease_id"]
    held = admin.call("lease_list", project="race")["leases"]
    assert [(x["agent"], x["lease_id"]) for x in held] == [(holder, lease_id)]
    for i, a in enumerate(answers):
        if i == winners[0]:
            continue
        assert a["kind"] == "ConflictError", a
        assert f"leased exclusively to {holder} until " in a["error"], a
        assert f"(lease {lease_id}, fence " in a["error"] and a["error"].endswith("acquire refused")
    out = admin.call("lease_release", lease_id=lease_id, agent="admin")["lease"]
    assert (out["state"], out["released_by"]) == ("released", "admin")


def test_eight_processes_race_for_overlapping_globs_one_holder_per_round(db_url: str) -> None:
    with LogStore.open(db_url) as store:
        admin = operations.LocalClient(store)
        _race("local", db_url, admin)
        fences = [x["fence"] for x in admin.call("lease_list", active=False, limit=500)["leases"]]
        assert sorted(fences) == list(range(1, ROUNDS + 1))  # only winners were written


def test_eight_processes_race_through_one_hub(tmp_path: Path) -> None:
    hub = HubProcess(tmp_path / "hub.sqlite3", tmp_path)
    hub.start()
    try:
        admin = HubClient(hub.url)
        _race("hub", hub.url, admin)
        admin.close()
    finally:
        hub.close()


# ----------------------------------------------------------------------------- replicas


def _sync(a: LogStore, b: LogStore) -> None:
    sync.sync_with_peer(a, sync.LocalPeer(b), push=True)


def test_two_replicas_lease_the_same_tree_apart_and_agree_on_the_earliest(
    tmp_path: Path, clock: ManualClock
) -> None:
    r1 = LogStore.open(str(tmp_path / "r1.sqlite3"), clock=clock)
    r2 = LogStore.open(str(tmp_path / "r2.sqlite3"), clock=clock)
    try:
        first = lease_ops.lease_acquire(r1, agent="claude", paths=["src/**"], project="demo")
        clock.advance(10)
        second = lease_ops.lease_acquire(r2, agent="codex", paths=["src/**"], project="demo")
        won, lost = first["lease"]["lease_id"], second["lease"]["lease_id"]
        # apart, each replica holds its own lease
        assert lease_ops.lease_check(r2, agent="codex", path="src/a.py")["allowed"]
        _sync(r1, r2)
        _sync(r2, r1)
        views = [lease_ops.lease_list(s, active=False)["leases"] for s in (r1, r2)]
        assert views[0] == views[1]
        by_id = {x["lease_id"]: x for x in views[0]}
        assert by_id[won]["state"] == "active" and by_id[won]["fence"] == 1
        assert (by_id[lost]["state"], by_id[lost]["lost_to"], by_id[lost]["lost_holder"]) == (
            "lost",
            won,
            "claude",
        )
        message = (
            f"lease {lost} (codex) lost the race to claude's lease {won}, acquired first; "
            "{} refused; acquire again once it is free"
        )
        for s in (r1, r2):
            check = lease_ops.lease_check(s, agent="codex", path="src/a.py", project="demo")
            assert not check["allowed"] and check["message"] == message.format("check")
            assert lease_ops.lease_check(s, agent="claude", path="src/a.py")["allowed"]
        with pytest.raises(errors.ConflictError) as info:
            lease_ops.lease_renew(r2, lease_id=lost, agent="codex")
        assert str(info.value) == message.format("renew")
        with pytest.raises(errors.ConflictError) as info:
            lease_ops.lease_release(r1, lease_id=lost, agent="codex")
        assert str(info.value) == message.format("release")
        # a third party trying to take it on either replica is refused naming the winner
        with pytest.raises(errors.ConflictError, match=f"leased exclusively to claude .*{won}"):
            lease_ops.lease_acquire(r2, agent="gemini", paths=["src/x.py"], project="demo")
    finally:
        r1.close()
        r2.close()
