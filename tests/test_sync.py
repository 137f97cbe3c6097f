"""Sync rounds over LocalPeer (S-7.4, S-7.5): convergence, crashes, refusals, peers.json, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors, migrate, operations, replication, schema, sync
from mempalace_logstream.backends import engine as engine_mod
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A migrated, never-opened file: copies skip Alembic and mint their own replica id."""
    path = tmp_path_factory.mktemp("tpl") / "template.sqlite3"
    eng = engine_mod.create_engine(f"sqlite:///{path}")
    migrate.upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def make(tmp_path: Path, template: Path):
    opened: list[LogStore] = []

    def factory(name: str) -> LogStore:
        path = tmp_path / f"{name}.sqlite3"
        if not path.exists():
            shutil.copy(template, path)
        s = LogStore.open(str(path), durability="normal")
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


def note(store: LogStore, body: str = "hi", **kw: Any):
    return store.event_append(type="note", stream="s", room="r", from_agent="a", body=body, **kw)


FAKE_ORIGIN = "rep_" + "f" * 32


def synth_events(n: int, origin: str = FAKE_ORIGIN, arts: list[str] | None = None) -> list[dict]:
    """n valid wire events of one origin (fast bulk loading through the remote apply path)."""
    out = []
    for i in range(1, n + 1):
        ms = 1_780_000_000_000 + i
        out.append(
            {
                "id": f"evt_20260101T000000_{i:020x}",
                "origin_replica": origin,
                "origin_seq": i,
                "hlc": f"{ms:013d}-000000-{origin}",
                "type": "note",
                "stream": "s",
                "room": "r",
                "from_agent": "bulk",
                "body": f"bulk {i}",
                "created_at": "2026-01-01T00:00:00.000Z",
                "metadata": {},
                "artifact_ids": [arts[i - 1]] if arts else [],
            }
        )
    return out


def synth_artifacts(n: int, origin: str = FAKE_ORIGIN) -> list[dict]:
    import hashlib

    return [
        {
            "id": f"art_20260101T000000_{i:020x}",
            "kind": "note",
            "content": f"c{i}",
            "sha256": hashlib.sha256(f"c{i}".encode()).hexdigest(),
            "created_by": "bulk",
            "created_at": "2026-01-01T00:00:00Z",
            "origin_replica": origin,
            "metadata": {},
        }
        for i in range(1, n + 1)
    ]


def load(store: LogStore, events: list[dict], artifacts: list[dict] | None = None) -> None:
    if artifacts:
        replication.apply_remote_artifacts(store, artifacts)
    for i in range(0, len(events), 500):
        assert replication.apply_remote_events(store, events[i : i + 500]).applied_events


def snapshot(store: LogStore) -> tuple[list[tuple], set[tuple]]:
    """(events in HLC order as content keys, artifacts as (id, sha256))."""
    evs = store.event_list(limit=500, order="asc").events
    keyed = sorted((e.hlc, e.content_key()) for e in evs)
    with store.engine.connect() as conn:
        arts = {(r[0], r[1]) for r in conn.execute(schema.artifacts.select())}
    return keyed, arts


class CountingPeer:
    """Wraps a peer, counts calls and batch sizes, and can crash after k ops calls."""

    def __init__(self, inner: sync.Peer, crash_after: int | None = None) -> None:
        self.inner, self.crash_after = inner, crash_after
        self.name, self.url = inner.name, inner.url
        self.ops_calls = 0
        self.max_limit = 0
        self.artifact_batches: list[int] = []

    def version_vector(self) -> dict[str, Any]:
        return self.inner.version_vector()

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        self.ops_calls += 1
        self.max_limit = max(self.max_limit, limit)
        if self.crash_after is not None and self.ops_calls > self.crash_after:
            raise errors.PeerUnavailableError("connection lost", peer_id=self.name)
        return self.inner.ops(origin, after, limit)

    def artifacts(self, ids: Any) -> list[dict[str, Any]]:
        self.artifact_batches.append(len(ids))
        return self.inner.artifacts(ids)

    def push(self, artifacts: Any, events: Any, sender: str) -> dict[str, Any]:
        return self.inner.push(artifacts, events, sender)

    def close(self) -> None:
        self.inner.close()


class TamperingPeer(CountingPeer):
    """Serves one artifact with altered content."""

    def __init__(self, inner: sync.Peer, bad_id: str) -> None:
        super().__init__(inner)
        self.bad_id = bad_id

    def artifacts(self, ids: Any) -> list[dict[str, Any]]:
        out = super().artifacts(ids)
        return [{**a, "content": "evil\n"} if a["id"] == self.bad_id else a for a in out]


def test_two_replicas_converge_in_both_directions_and_a_second_round_is_empty(make) -> None:
    a, b = make("a"), make("b")
    art = a.artifact_put(kind="patch", content="diff\n", created_by="x")
    note(a, "a1")
    note(a, "a2", artifact_ids=[art.id])
    note(b, "b1")
    r1 = sync.sync_with_peer(b, sync.LocalPeer(a), push=True)
    assert (r1["pulled_events"], r1["pulled_artifacts"], r1["pushed_events"]) == (2, 1, 1)
    assert r1["per_origin"] == {a.replica_id: 2}
    assert a.version_vector() == b.version_vector()
    assert snapshot(a) == snapshot(b)
    r2 = sync.sync_with_peer(b, sync.LocalPeer(a), push=True)
    assert (r2["pulled_events"], r2["pulled_artifacts"], r2["pushed_events"]) == (0, 0, 0)
    assert r2["duplicates"] == 0  # nothing is even re-fetched


def test_gossip_reaches_replicas_that_never_met(make) -> None:
    a, hub, c = make("a"), make("hub"), make("c")
    note(a, "from a")
    note(c, "from c")
    for s in (a, c, a):
        sync.sync_with_peer(s, sync.LocalPeer(hub), push=True)
    assert snapshot(a) == snapshot(c) == snapshot(hub)
    est = sync.estate(a)
    assert c.replica_id in est["unnamed_origins"]


def test_a_round_crashed_midway_resumes_and_converges(make) -> None:
    a, b = make("a"), make("b")
    load(a, synth_events(1200))
    peer = CountingPeer(sync.LocalPeer(a), crash_after=1)
    with pytest.raises(errors.PeerUnavailableError):
        sync.sync_with_peer(b, peer)
    assert b.stats()["events"] == 500  # the first batch is durable
    again = CountingPeer(sync.LocalPeer(a))
    result = sync.sync_with_peer(b, again)
    assert result["pulled_events"] == 700 and result["duplicates"] == 0
    assert again.ops_calls == 2 and again.max_limit <= sync.BATCH
    assert snapshot(a) == snapshot(b)


def test_artifacts_are_fetched_in_bounded_batches_before_their_events(make) -> None:
    a, b = make("a"), make("b")
    arts = synth_artifacts(250)
    load(a, synth_events(250, arts=[x["id"] for x in arts]), arts)
    peer = CountingPeer(sync.LocalPeer(a))
    result = sync.sync_with_peer(b, peer)
    assert result["pulled_artifacts"] == 250 and result["pulled_events"] == 250
    assert max(peer.artifact_batches) <= sync.ARTIFACT_BATCH
    assert len(peer.artifact_batches) == 3


def test_tampered_artifact_is_rejected_and_the_rest_of_the_round_continues(make) -> None:
    a, b, honest = make("a"), make("b"), make("honest")
    good = a.artifact_put(kind="note", content="fine", created_by="x")
    bad = a.artifact_put(kind="patch", content="diff\n", created_by="x")
    note(a, "before")
    user = note(a, "uses the bad one", artifact_ids=[bad.id])
    note(a, "after", artifact_ids=[good.id])
    sync.sync_with_peer(honest, sync.LocalPeer(a))
    result = sync.sync_with_peer(b, TamperingPeer(sync.LocalPeer(a), bad.id))
    assert result["pulled_events"] == 2 and result["pulled_artifacts"] == 1
    reasons = sorted(r["reason"] for r in result["rejected"])
    assert reasons == ["missing_artifact", "tampered"]
    with pytest.raises(errors.NotFoundError):
        b.event_get(user.id)
    # The hole is remembered: a round with an honest peer fills it.
    healed = sync.sync_with_peer(b, sync.LocalPeer(honest))
    assert healed["pulled_events"] == 1 and healed["pulled_artifacts"] == 1
    assert snapshot(a) == snapshot(b)
    assert replication.counts(b)["deferred"] == 0


def test_conflicting_event_is_reported_in_the_round_and_recorded(make) -> None:
    a, b = make("a"), make("b")
    note(a, "one")
    sync.sync_with_peer(b, sync.LocalPeer(a))

    class Forger(CountingPeer):
        def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
            evs = replication.ops_page(a, origin, 0, limit)["events"]
            return [{**e, "body": "forged"} for e in evs]

    vv = {a.replica_id: 2}

    class ForgerAhead(Forger):
        def version_vector(self) -> dict[str, Any]:
            return {"replica_id": a.replica_id, "version_vector": vv}

    result = sync.sync_with_peer(b, ForgerAhead(sync.LocalPeer(a)))
    assert result["conflict_count"] == 1
    assert result["conflicts"][0]["reason"] == "different_content"
    assert replication.list_conflicts(b)[0]["remote"]["body"] == "forged"
    assert b.event_list(limit=10).events[0].body == "one"


def test_a_peer_serving_another_origin_cannot_inject_events(make) -> None:
    a, b, c = make("a"), make("b"), make("c")
    note(a, "a")
    note(c, "c")

    class Liar(CountingPeer):
        def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
            return replication.ops_page(c, c.replica_id, 0, limit)["events"]

    result = sync.sync_with_peer(b, Liar(sync.LocalPeer(a)))
    assert result["pulled_events"] == 1  # valid, whatever the route said; then the pull stops
    assert b.version_vector() == {c.replica_id: 1}


def test_push_sends_only_what_the_peer_lacks(make) -> None:
    a, b = make("a"), make("b")
    art = b.artifact_put(kind="note", content="x", created_by="x")
    note(b, "mine", artifact_ids=[art.id])
    result = sync.sync_with_peer(b, sync.LocalPeer(a), push=True)
    assert result["pushed_events"] == 1 and result["pushed_artifacts"] == 1
    assert a.artifact_get(art.id).content == b"x"


def test_push_receiver_validates_like_a_pull(make) -> None:
    a = make("a")
    bad = {"id": "evt_x", "type": "BAD"}
    out = sync.apply_push(a, [], [bad], "rep_0123456789ab")
    assert out["applied_events"] == 0 and out["rejected_count"] == 1
    with pytest.raises(errors.ValidationError):
        sync.apply_push(a, [], [{}] * (sync.BATCH + 1), "x")


def test_sync_all_reads_peers_json_each_round_and_reports_dead_peers(make, tmp_path) -> None:
    b = make("b")
    palace = tmp_path / "palace"
    palace.mkdir()
    assert sync.sync_all(b, palace) == []
    (palace / "peers.json").write_text(
        json.dumps({"peers": [{"name": "dead", "url": "http://127.0.0.1:9", "token": "s3"}]})
    )
    results = sync.sync_all(b, palace)
    assert results[0]["peer_name"] == "dead" and "error" in results[0]
    est = sync.estate(b, palace)
    assert est["peers"][0]["reachable"] is False and est["peers"][0]["last_error"]
    assert "s3" not in json.dumps(est)


def test_malformed_peers_json_is_a_clear_error(tmp_path) -> None:
    (tmp_path / "peers.json").write_text('{"peers": [{"name": "x"}]}')
    with pytest.raises(errors.ValidationError, match="no url"):
        sync.load_peers(tmp_path)
    (tmp_path / "peers.json").write_text("{nope")
    with pytest.raises(errors.ValidationError, match="not valid JSON"):
        sync.load_peers(tmp_path)


def test_stats_carries_the_sync_estate(make) -> None:
    a, b = make("a"), make("b")
    note(a)
    sync.sync_one(b, sync.LocalPeer(a, name="alpha"))
    out = operations.call(b, "stats", {})
    peer = out["estate"]["peers"][0]
    assert peer["name"] == "alpha" and peer["reachable"] is True
    assert peer["last_pulled_events"] == 1 and out["estate"]["conflicts"] == 0


def test_cli_sync_with_peer_db_pushes_and_reports_json(tmp_path, template) -> None:
    for name in ("a", "b"):
        shutil.copy(template, tmp_path / f"{name}.sqlite3")
        with LogStore.open(str(tmp_path / f"{name}.sqlite3")) as s:
            note(s, f"from {name}")
    a, b = str(tmp_path / "a.sqlite3"), str(tmp_path / "b.sqlite3")
    proc = run_cli("sync", "--db", b, "--peer-db", a, "--push", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out[0]["pulled_events"] == 1 and out[0]["pushed_events"] == 1
    proc = run_cli("peers", "--db", b, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["peers"][0]["reachable"] is True
    human = run_cli("sync", "--db", b, "--peer-db", a)
    assert b"+0 events" in human.stdout


def test_cli_sync_exits_1_when_a_peer_fails_and_2_on_usage(tmp_path) -> None:
    db = str(tmp_path / "x.sqlite3")
    proc = run_cli("sync", "--db", db, "--peer", "http://127.0.0.1:9")
    assert proc.returncode == 1 and b"ERROR" in proc.stdout
    proc = run_cli("sync", "--db", db, "--palace", str(tmp_path))
    assert proc.returncode == 1 and b"no peers configured" in proc.stderr
    proc = run_cli("sync", "--db", db, "--peer", "http://x", "--peer-db", db)
    assert proc.returncode == 2


class NoCounts(sync.LocalPeer):
    """A peer whose version vector carries no `origin_fingerprints` (as the reference hub's)."""

    def version_vector(self) -> dict[str, Any]:
        out = super().version_vector()
        del out["origin_fingerprints"]
        return out


def test_a_round_repairs_holes_below_equal_tops_from_the_peer_counts(make) -> None:
    a, b = make("a"), make("b")
    evs = synth_events(40)
    load(a, evs)
    replication.apply_remote_events(b, evs[:3] + evs[4:30] + evs[31:])  # holes at 4 and 31
    assert b.version_vector() == a.version_vector()
    result = sync.sync_with_peer(b, sync.LocalPeer(a))
    assert result["pulled_events"] == 2 and result["duplicates"] == 35
    [hole] = result["sequence_anomalies"]
    assert (hole["reason"], hole["resume_after"]) == ("hole", 3)
    assert snapshot(b) == snapshot(a)
    assert sync.sync_with_peer(b, sync.LocalPeer(a))["sequence_anomaly_count"] == 0


def test_holes_the_version_vector_cannot_see_are_found_and_repaired(make) -> None:
    a, b, c = make("a"), make("b"), make("c")
    evs = synth_events(40)
    load(a, evs)
    replication.apply_remote_events(b, evs[:3] + evs[4:30] + evs[31:])  # holes at 4 and 31
    assert b.version_vector() == a.version_vector()
    assert sync.sync_with_peer(b, NoCounts(a))["pulled_events"] == 0  # invisible
    sync.sync_with_peer(c, NoCounts(b))  # holes travel by gossip
    holes = sync.find_holes(c, sync.LocalPeer(a))
    assert [(h["first_missing_origin_seq"], h["side"]) for h in holes] == [(4, "local")]
    assert sync.find_holes(a, sync.LocalPeer(b))[0]["side"] == "peer"
    fixed = sync.sync_one(c, NoCounts(a), repair=True)
    assert fixed["repair"]["pulled_events"] == 2
    assert snapshot(c) == snapshot(a)
    assert sync.find_holes(c, sync.LocalPeer(a)) == []


def test_loop_interval_comes_from_the_environment() -> None:
    assert sync.interval_from_env({}) == 15
    assert sync.interval_from_env({"MEMPALACE_SYNC_INTERVAL": "0"}) == 0
    env = {"MEMPALACE_LOGSTREAM_SYNC_INTERVAL": "2.5", "MEMPALACE_SYNC_INTERVAL": "9"}
    assert sync.interval_from_env(env) == 2.5
    with pytest.raises(errors.ValidationError, match="MEMPALACE_SYNC_INTERVAL"):
        sync.interval_from_env({"MEMPALACE_SYNC_INTERVAL": "soon"})


def test_sqlite_and_the_parametrized_backend_converge(make, store: LogStore) -> None:
    a, c = make("a"), make("c")
    art = a.artifact_put(kind="file", content=b"\x00\xffbinary", created_by="x")
    note(a, "from sqlite", artifact_ids=[art.id])
    note(store, "from the backend under test")
    sync.sync_with_peer(store, sync.LocalPeer(a), push=True)
    sync.sync_with_peer(c, sync.LocalPeer(store))
    assert snapshot(a) == snapshot(store) == snapshot(c)
    assert store.artifact_get(art.id).content == b"\x00\xffbinary"
    again = sync.sync_with_peer(store, sync.LocalPeer(a), push=True)
    assert again["pulled_events"] == again["pushed_events"] == 0


class PipelinedPeer(sync.LocalPeer):
    """A LocalPeer pulled through the threaded pipeline (as HttpPeer is), with small compact
    pages; it records how far the fetches ran ahead of what the puller has applied."""

    prefetch = True

    def __init__(
        self, store: LogStore, puller: LogStore, page: int, fail_at: int | None = None
    ) -> None:
        super().__init__(store)
        self.puller, self.rows_limit, self.fail_at = puller, page, fail_at
        self.served = self.calls = self.max_ahead = 0

    def rows(self, origin: str, after: int, limit: int) -> list[Any]:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise errors.PeerUnavailableError("connection lost", peer_id=self.name)
        applied = replication.count_upto(self.puller, origin, 10**12)
        self.max_ahead = max(self.max_ahead, self.served - applied)
        out = super().rows(origin, after, limit)
        self.served += len(out)
        return out


def test_the_pipeline_holds_at_most_three_pages_and_restores_the_collector(make) -> None:
    import gc

    a, b = make("a"), make("b")
    arts = synth_artifacts(60)
    load(a, synth_events(60, arts=[x["id"] for x in arts]), arts)
    peer = PipelinedPeer(a, b, page=5)
    result = sync.sync_with_peer(b, peer)
    assert (result["pulled_events"], result["pulled_artifacts"]) == (60, 60)
    assert result["duplicates"] == 0 and peer.calls == 12
    # Fetched but not yet applied: the page being applied, the one being validated, and the
    # one requested ahead; never more.
    assert 0 < peer.max_ahead <= 3 * 5
    assert gc.isenabled()
    assert snapshot(a) == snapshot(b)


def test_a_pipelined_pull_that_fails_keeps_its_pages_and_resumes(make) -> None:
    import gc

    a, b = make("a"), make("b")
    load(a, synth_events(40))
    with pytest.raises(errors.PeerUnavailableError):
        sync.sync_with_peer(b, PipelinedPeer(a, b, page=8, fail_at=4))
    assert gc.isenabled()
    assert b.stats()["events"] == 24  # the three pages served before the drop are durable
    again = sync.sync_with_peer(b, PipelinedPeer(a, b, page=8))
    assert again["duplicates"] == 0 and snapshot(a) == snapshot(b)
