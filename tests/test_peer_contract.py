"""The peer protocol's contract (issue 10), one suite run against every kind of peer.

`local` is a `LocalPeer` over another file, `http` our `HttpPeer` against a live hub of ours,
and `reference` our `HttpPeer` against the reference hub (`mempalace serve`, from its own
venv). Each peer's replica authors the same three events, the first with one artifact. The
contract: who the peer is (identity, stable), pull after a position, limits, artifacts, a
round that pulls everything and re-applies nothing, push and its idempotence, fingerprints.
Where a peer's own `Capabilities` say it lacks a feature, the case checks that the peer indeed
refuses it (the reference hub offers no compact pages, no fingerprints and no push): no skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors, replication, sync
from tests import hubkit, refpkg

KINDS = ("local", "http", pytest.param("reference", marks=[pytest.mark.ref, pytest.mark.slow]))
TOKEN = "contract-token"
PATCH = "diff --git a/x b/x\n"
BODIES = ("first", "second", "third")


@dataclass
class Side:
    """A peer and what its replica authored: origin_seq 1..3, the first using `artifact_id`."""

    peer: sync.Peer
    origin: str
    artifact_id: str
    event_ids: list[str]
    fresh: bool  # a new replica for this test (push may write to it)

    def again(self) -> sync.Peer:
        """A second peer object on the same replica."""
        if isinstance(self.peer, sync.HttpPeer):
            token = "ref-token" if not self.fresh else TOKEN
            return sync.HttpPeer(self.peer.url, token)
        assert isinstance(self.peer, sync.LocalPeer)
        return sync.LocalPeer(self.peer.store)


def seed(store: LogStore) -> tuple[str, list[str]]:
    art = store.artifact_put(kind="patch", content=PATCH, created_by="dev")
    ids = []
    for i, body in enumerate(BODIES):
        extra: dict[str, Any] = {"artifact_ids": [art.id]} if i == 0 else {}
        ev = store.event_append(
            type="patch.ready", stream="s", room="r", from_agent="dev", body=body, **extra
        )
        ids.append(ev.id)
    return art.id, ids


@pytest.fixture(scope="module")
def reference_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """The reference hub serving a palace whose replica wrote the three events (read-only)."""
    refpkg.require_ref_or_skip(full=True)
    palace = tmp_path_factory.mktemp("ref-contract")
    put = "artifact put --kind patch --created-by dev --content".split()
    art = refpkg.ref_cli_json(*put, PATCH, palace=palace)
    append = "logstream append --type patch.ready --stream s --room r --from-agent dev".split()
    for i, body in enumerate(BODIES):
        more = ["--artifact-id", art["id"]] if i == 0 else []
        refpkg.ref_cli(*append, "--body", body, *more, palace=palace, check=True)
    events = refpkg.ref_cli_json("logstream", "list", "--order", "asc", palace=palace)["events"]
    with refpkg.ref_hub(palace) as url:
        peer = sync.HttpPeer(url, "ref-token")
        try:
            origin = events[0]["origin_replica"]
            yield Side(peer, origin, art["id"], [e["id"] for e in events], fresh=False)
        finally:
            peer.close()


@pytest.fixture(params=KINDS)
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    if request.param == "reference":
        yield request.getfixturevalue("reference_side")
        return
    if request.param == "local":
        store = LogStore.open(str(tmp_path / "peer.sqlite3"))
        try:
            art, ids = seed(store)
            yield Side(sync.LocalPeer(store), store.replica_id, art, ids, fresh=True)
        finally:
            store.close()
        return
    with hubkit.live_hub(tmp_path, token=TOKEN) as hub:
        art, ids = seed(hub.store)
        peer = sync.HttpPeer(hub.url, TOKEN)
        try:
            yield Side(peer, hub.store.replica_id, art, ids, fresh=True)
        finally:
            peer.close()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[LogStore]:
    store = LogStore.open(str(tmp_path / "client.sqlite3"))
    try:
        yield store
    finally:
        store.close()


def caps(side: Side) -> sync.Capabilities:
    """The peer's capabilities once it has shown its version vector."""
    side.peer.version_vector()
    return sync.capabilities_of(side.peer)


# ----------------------------------------------------------------------------- identity


def test_the_peer_names_one_stable_replica_that_authored_its_events(side: Side) -> None:
    rid, rvv, _fps = sync.parse_vector(side.peer.version_vector(), side.peer)
    assert rid == side.origin and rvv[side.origin] == len(BODIES)
    other = side.again()
    try:
        assert sync.parse_vector(other.version_vector(), other)[0] == rid  # the same replica
    finally:
        other.close()
    evs = side.peer.ops(side.origin, 0, sync.BATCH)
    assert {e["origin_replica"] for e in evs} == {rid}


def test_a_new_database_is_a_new_replica(side: Side, tmp_path: Path) -> None:
    """A recreated database starts a new epoch under a new id: pulls from it start over."""
    with LogStore.open(str(tmp_path / "recreated.sqlite3")) as store:
        peer = sync.LocalPeer(store)
        assert sync.parse_vector(peer.version_vector(), peer)[0] != side.origin


def test_capabilities_say_what_the_peer_offers(side: Side) -> None:
    found = caps(side)
    if isinstance(side.peer, sync.LocalPeer) or side.fresh:  # ours, in-process or over HTTP
        assert found.rows_limit > 0 and found.fingerprints and found.push
        assert not found.reference_only
    else:
        assert found.reference_only and found.rows_limit == 0
        assert not found.push and not found.fingerprints


# ----------------------------------------------------------------------------- pull


def test_ops_after_a_position_are_the_later_ones_in_order(side: Side) -> None:
    evs = side.peer.ops(side.origin, 1, sync.BATCH)
    assert [e["origin_seq"] for e in evs] == [2, 3]
    assert [e["id"] for e in evs] == side.event_ids[1:]
    assert [e["body"] for e in evs] == list(BODIES[1:])
    assert side.peer.ops(side.origin, len(BODIES), sync.BATCH) == []
    assert side.peer.ops("rep_" + "0" * 32, 0, sync.BATCH) == []


def test_a_page_holds_at_most_the_limit_asked(side: Side) -> None:
    assert [e["origin_seq"] for e in side.peer.ops(side.origin, 0, 1)] == [1]
    found = caps(side)
    if found.rows_limit:
        rows = side.peer.rows(side.origin, 0, 2)  # type: ignore[attr-defined]
        seq_at = replication.ROW_COLUMNS.index("origin_seq")
        assert [r[seq_at] for r in rows] == [1, 2]


def test_compact_rows_carry_the_same_events_as_ops(side: Side) -> None:
    if not caps(side).rows_limit:  # what the capability says, the peer does: it refuses
        with pytest.raises(sync.RowsRefused):
            side.peer.rows(side.origin, 0, sync.ROWS_BATCH)  # type: ignore[attr-defined]
        return
    rows = side.peer.rows(side.origin, 0, sync.ROWS_BATCH)  # type: ignore[attr-defined]
    id_at = replication.ROW_COLUMNS.index("id")
    assert [r[id_at] for r in rows] == side.event_ids


def test_artifacts_answer_the_ids_held_and_omit_the_rest(side: Side) -> None:
    unknown = "art_" + "0" * 32
    got = side.peer.artifacts([side.artifact_id, unknown])
    assert [a["id"] for a in got] == [side.artifact_id]


# ----------------------------------------------------------------------------- rounds


def test_a_round_pulls_everything_and_a_second_applies_nothing(
    side: Side, client: LogStore
) -> None:
    first = sync.sync_one(client, side.peer)
    assert "error" not in first, first
    assert (first["pulled_events"], first["pulled_artifacts"]) == (len(BODIES), 1)
    assert client.artifact_get(side.artifact_id).content == PATCH.encode()
    again = sync.sync_one(client, side.peer)
    assert "error" not in again and again["pulled_events"] == 0
    assert client.version_vector()[side.origin] == len(BODIES)


def test_re_applying_what_was_pulled_is_idempotent(side: Side, client: LogStore) -> None:
    evs = side.peer.ops(side.origin, 0, sync.BATCH)
    arts = side.peer.artifacts([side.artifact_id])
    replication.apply_remote_artifacts(client, arts, "contract")
    first = replication.apply_remote_events(client, evs, "contract")
    second = replication.apply_remote_events(client, evs, "contract")
    assert (first.applied_events, second.applied_events) == (len(BODIES), 0)
    assert second.duplicates == len(BODIES) and not second.conflicts and not second.rejected


def test_fingerprints_match_what_a_replica_holding_the_same_events_computes(
    side: Side, client: LogStore
) -> None:
    assert "error" not in sync.sync_one(client, side.peer)
    if not caps(side).fingerprints:  # what the capability says, the peer does: it refuses
        with pytest.raises(errors.SyncError, match="cannot be probed for holes"):
            side.peer.fingerprint(side.origin, 1)  # type: ignore[attr-defined]
        return
    for upto in (1, len(BODIES)):
        theirs = side.peer.fingerprint(side.origin, upto)  # type: ignore[attr-defined]
        assert theirs == replication.fingerprint_upto(client, side.origin, upto)
        assert side.peer.count(side.origin, upto) == upto


# ----------------------------------------------------------------------------- push


def test_a_pull_only_peer_reports_push_as_refused_and_the_pull_stands(
    side: Side, client: LogStore
) -> None:
    client.event_append(type="note", stream="s", room="r", from_agent="us", body="ours")
    result = sync.sync_one(client, side.peer, push=True)
    assert "error" not in result and result["pulled_events"] == len(BODIES)
    if sync.capabilities_of(side.peer).push:
        assert "push_error" not in result and result["pushed_events"] == 1
    else:
        assert "push_error" in result and result["pushed_events"] == 0


def test_push_applies_once_and_again_is_a_duplicate(side: Side, client: LogStore) -> None:
    if not caps(side).push:  # what the capability says, the peer does: it refuses
        with pytest.raises(sync.PushRefused):
            side.peer.push([], [], client.replica_id)
        return
    for body in ("p1", "p2"):
        client.event_append(type="note", stream="s", room="r", from_agent="us", body=body)
    wire = [e.to_dict() for e in replication.list_ops(client, client.replica_id, 0, sync.BATCH)]
    first = side.peer.push([], wire, client.replica_id)
    second = side.peer.push([], wire, client.replica_id)
    assert (first["applied_events"], second["applied_events"]) == (2, 0)
    assert second["duplicates"] == 2
    assert side.peer.version_vector()["version_vector"][client.replica_id] == 2


def test_a_push_over_the_batch_limit_is_refused_whole(side: Side, client: LogStore) -> None:
    if not caps(side).push:  # a pull-only peer refuses every push, a big one too
        with pytest.raises(sync.PushRefused):
            side.peer.push([], [{}] * (sync.BATCH + 1), client.replica_id)
        return
    with pytest.raises(errors.LogstreamError, match=str(sync.BATCH)):
        side.peer.push([], [{}] * (sync.BATCH + 1), client.replica_id)
    assert client.replica_id not in side.peer.version_vector()["version_vector"]
