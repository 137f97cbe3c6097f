"""Task history a peer brings that breaks the rules (issue 18, items 5 and 11), on a SQLite
file and on PostgreSQL: a hostile peer's unsigned, backdated claim cannot revert a completed
task whose moves were signed; delegation limits exceeded by a peer's history and a second
`task.request` on someone else's task are listed as task anomalies and by `doctor`; the same
second request written locally is refused naming the field.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, agents, doctor, errors, replication, sync, workflows
from mempalace_logstream.tasks import TaskSettings
from tests.conftest import ManualClock

HOSTILE_ORIGIN = "rep_" + "ab" * 16


@pytest.fixture
def honest(db_url: str, tmp_path: Path, clock: ManualClock) -> Iterator[LogStore]:
    """The replica under test (SQLite file or PostgreSQL) with its own keys directory."""
    with LogStore.open(db_url, clock=clock) as store:
        store.identity.keys_dir = tmp_path / "keys"
        store.identity.reload_keys()
        yield store


def create(store: LogStore, who: str, to: str = "*", **extra: Any) -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent=who,
        to_agent=to,
        goal="fix the login",
        branch="main",
        base_commit="abcdef1",
        done="tests pass",
        **extra,
    )
    return str(out["task"].correlation_id)


def move(store: LogStore, tid: str, action: str, who: str, **kw: Any) -> dict[str, Any]:
    return workflows.task_update(store, task_id=tid, action=action, from_agent=who, **kw)["task"]


def forged(template: Any, **values: Any) -> dict[str, Any]:
    """A wire event as a hostile replica would serve it: unsigned, from its own origin."""
    wire = template.to_dict()
    for key in ("seq", "verified", "redacted"):
        wire.pop(key, None)
    wire.update(
        id=f"evt_20270101T000000_{secrets.token_hex(10)}",
        origin_replica=HOSTILE_ORIGIN,
        origin_seq=1,
        sig=None,
        key_id=None,
        **values,
    )
    return wire


def served_by_a_hostile_peer(honest: LogStore, tmp_path: Path, wire: dict[str, Any]) -> None:
    """`wire` held by a hostile replica (it applies anything) and pulled from it by sync."""
    with LogStore.open(str(tmp_path / "hostile.sqlite3")) as hostile:
        res = replication.apply_remote_events(hostile, [wire], "mallory's laptop")
        assert res.applied_ids == [wire["id"]], res
        sync.sync_with_peer(honest, sync.LocalPeer(hostile), push=False)


def findings(store: LogStore, check: str) -> list[dict[str, Any]]:
    return [f for f in doctor.run(store).to_dict()["findings"] if f["check"] == check]


# ----------------------------------------------------------------------------- item 5


def test_a_hostile_peers_backdated_unsigned_claim_cannot_revert_a_completed_task(
    honest: LogStore, tmp_path: Path, clock: ManualClock
) -> None:
    agents.add(honest, "alice")
    agents.add(honest, "bob")
    tid = create(honest, "alice")
    clock.advance(1_000)
    move(honest, tid, "claim", "bob")
    clock.advance(1_000)
    move(honest, tid, "complete", "bob", result={"disposition": "no_artifact"})
    move(honest, tid, "accept", "alice")
    thread = honest.event_list(correlation_id=tid, order="asc").events
    assert all(e.verified for e in thread)
    claim = thread[1]
    # mallory (no key: her events read null) claims 1 ms before bob did, long after the fact.
    ms = int(claim.hlc[:13]) - 1
    wire = forged(
        claim, from_agent="mallory", hlc=f"{ms:013d}-000000-{HOSTILE_ORIGIN}", to_agent="alice"
    )
    served_by_a_hostile_peer(honest, tmp_path, wire)
    assert honest.event_get(wire["id"]).verified is None  # held, unverified
    t = honest.task_status(tid)["task"]
    assert (t["state"], t["assignee"], t["attempt"]) == ("completed", "bob", 1)
    assert t["conflicts"] == []
    assert [(a["event_id"], a["agent"], a["code"]) for a in t["anomalies"]] == [
        (wire["id"], "mallory", "overruled")
    ]
    with pytest.raises(errors.ConflictError, match="is completed; claim refused"):
        move(honest, tid, "claim", "mallory")
    found = findings(honest, "task_rules")
    assert len(found) == 1 and found[0]["ids"] == [wire["id"]]
    assert "unverified" in found[0]["message"] and "verified" in found[0]["message"]
    assert not findings(honest, "tasks")  # the projection is the fold of the log


def test_a_signed_claim_takes_a_task_an_unsigned_claim_holds(
    honest: LogStore, tmp_path: Path, clock: ManualClock
) -> None:
    """Locally too, an unverified move never beats a verified one: bob (signed) may claim a
    task that mallory's unsigned claim (from a peer) holds; mallory's claim is undone."""
    agents.add(honest, "alice")
    agents.add(honest, "bob")
    tid = create(honest, "alice")
    request = honest.event_list(correlation_id=tid).events[0]
    clock.advance(1_000)
    ms = int(request.hlc[:13]) + 10
    wire = forged(
        request,
        type="task.claim",
        status="claimed",
        from_agent="mallory",
        to_agent="alice",
        hlc=f"{ms:013d}-000000-{HOSTILE_ORIGIN}",
        metadata={"lease_ms": 600_000},
    )
    served_by_a_hostile_peer(honest, tmp_path, wire)
    assert honest.task_status(tid)["task"]["assignee"] == "mallory"
    t = move(honest, tid, "claim", "bob")
    assert (t["state"], t["assignee"], t["attempt"]) == ("claimed", "bob", 1)
    assert [a["code"] for a in honest.task_status(tid)["task"]["anomalies"]] == ["overruled"]


# ----------------------------------------------------------------------------- item 11


def test_delegation_limits_a_peers_history_exceeds_are_anomalies_and_doctor_findings(
    honest: LogStore, tmp_path: Path
) -> None:
    roomy = TaskSettings(max_depth=5, max_children=20)
    with LogStore.open(str(tmp_path / "peer.sqlite3"), task_settings=roomy) as peer:
        root = create(peer, "lead", to="worker")
        chain = [root]
        for _ in range(3):
            chain.append(create(peer, "lead", to="worker", parent_task_id=chain[-1]))
        children = [chain[1]] + [
            create(peer, "lead", to="worker", parent_task_id=root) for _ in range(10)
        ]
        sync.sync_with_peer(honest, sync.LocalPeer(peer), push=False)
    deep = honest.task_status(chain[3])["task"]
    assert deep["depth"] == 4
    assert [(a["code"], a["reason"]) for a in deep["anomalies"]] == [
        ("depth_limit", f"task depth 4 exceeds the limit of 3 (parent {chain[2]} is at depth 3)")
    ]
    parent = honest.task_status(root)["task"]
    over = [a for a in parent["anomalies"] if a["code"] == "children_limit"]
    request_of_last = honest.event_list(correlation_id=children[-1]).events[0].id
    assert [a["event_id"] for a in over] == [request_of_last]
    assert over[0]["reason"] == (
        f"task {root} has 11 open children; the limit is 10 ({children[-1]} is over it)"
    )
    listed = {t["task_id"]: t for t in honest.task_list(limit=50)["tasks"]}
    assert [a["code"] for a in listed[chain[3]]["anomalies"]] == ["depth_limit"]
    found = findings(honest, "task_rules")
    messages = " | ".join(f["message"] for f in found)
    assert "deeper than the limit of 3" in messages and "more than 10 open children" in messages
    ids = {i for f in found for i in f["ids"]}
    assert {chain[3], root} <= ids


def test_a_second_request_on_someone_elses_task_is_refused_here_and_an_anomaly_from_a_peer(
    honest: LogStore, tmp_path: Path
) -> None:
    tid = create(honest, "lead", to="worker")
    n = honest.stats()["events"]
    with pytest.raises(errors.ConflictError) as info:
        honest.event_append(
            type="task.request",
            stream="project/demo",
            room="delegation",
            from_agent="mallory",
            to_agent="mallory",
            correlation_id=tid,
            status="open",
            body="mine now",
        )
    assert info.value.field == "correlation_id"
    assert str(info.value) == (
        f"task {tid} already exists (requested by lead); a second task.request on it is "
        "refused (its requester is lead)"
    )
    assert honest.stats()["events"] == n
    request = honest.event_list(correlation_id=tid).events[0]
    ms = int(request.hlc[:13]) + 5
    wire = forged(
        request, from_agent="mallory", to_agent="mallory", hlc=f"{ms:013d}-000000-{HOSTILE_ORIGIN}"
    )
    served_by_a_hostile_peer(honest, tmp_path, wire)
    t = honest.task_status(tid)["task"]
    assert (t["requester"], t["to_agent"], t["state"]) == ("lead", "worker", "open")
    assert [(a["event_id"], a["code"]) for a in t["anomalies"]] == [(wire["id"], "second_request")]
    found = findings(honest, "task_rules")
    assert [f["ids"] for f in found] == [[wire["id"]]]
    assert "second task.request" in found[0]["message"]
