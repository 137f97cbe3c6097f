"""Convergence under chaos (S-7.5): a hypothesis state machine over 3–4 SQLite replicas.

Random appends, acks and patches; random pulls/pushes between replicas through a peer that
duplicates and reorders batch items, replays stale batches, and crashes after k calls; random
partitions; a replica's database recreated from scratch (a new generation); a hostile peer
handing a replica a valid event that claims another replica's origin at a far-ahead origin_seq
(issue 9, item 9). Pulls go through reference-shaped pages, compact rows, or compact rows with
the threaded prefetch pipeline. After a full honest round every replica holds the same honest
events and artifacts in the same HLC order (forged positions never stop them), and a second
round changes nothing.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mempalace_logstream import LogStore, errors, replication, schema, sync, workflows
from tests.conftest import new_pg_log
from tests.logfiles import new_log  # replicas are copies of one migrated file (not per step)

BODIES = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20)


class ChaosPeer:
    """A LocalPeer seen through a bad network: duplicated, reordered and stale batches, and a
    connection that drops after `crash_after` calls."""

    def __init__(
        self,
        inner: sync.LocalPeer,
        rnd: random.Random,
        crash_after: int | None,
        blocked: bool,
        mode: str = "ops",
    ) -> None:
        self.inner, self.rnd = inner, rnd
        self.name, self.url = inner.name, inner.url
        self.crash_after, self.blocked = crash_after, blocked
        self.calls = 0
        self.last: list[Any] = []
        self.rows_limit = sync.ROWS_BATCH if mode != "ops" else 0
        self.prefetch = mode == "rows-prefetch"  # the threaded fetch/validate pipeline

    def _tick(self) -> None:
        self.calls += 1
        if self.blocked or (self.crash_after is not None and self.calls > self.crash_after):
            raise errors.PeerUnavailableError("chaos: connection lost", peer_id=self.name)

    def version_vector(self) -> dict[str, Any]:
        self._tick()
        return self.inner.version_vector()

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        return self._chaos(self.inner.ops, origin, after, limit)

    def rows(self, origin: str, after: int, limit: int) -> list[Any]:
        return self._chaos(self.inner.rows, origin, after, limit)

    def _chaos(self, fetch: Any, origin: str, after: int, limit: int) -> list[Any]:
        self._tick()
        if self.last and self.rnd.random() < 0.2:
            return list(self.last)  # a stale, replayed batch
        batch = fetch(origin, after, self.rnd.choice([1, 2, 3, limit]))
        if batch and self.rnd.random() < 0.5:  # duplicates, within the limit asked
            batch = (batch + self.rnd.sample(batch, k=min(len(batch), 2)))[:limit]
        self.rnd.shuffle(batch)
        self.last = batch
        return batch

    def artifacts(self, ids: Any) -> list[dict[str, Any]]:
        self._tick()
        out = self.inner.artifacts(ids)
        self.rnd.shuffle(out)
        return out + out[:1]

    def count(self, origin: str, upto: int) -> int:
        self._tick()
        return self.inner.count(origin, upto)

    def push(self, artifacts: Any, events: Any, sender: str) -> dict[str, Any]:
        self._tick()
        items = list(events) + list(events)[:1]
        self.rnd.shuffle(items)
        return self.inner.push(artifacts, items, sender)

    def close(self) -> None:
        return None


def snapshot(store: LogStore, skip: set[str] = frozenset()) -> tuple[list[tuple], list[tuple]]:
    """(events in HLC order, artifacts), leaving out the events whose id is in `skip`."""
    evs: list[Any] = []
    cursor = None
    while True:
        page = store.event_list(since_event_id=cursor, limit=500, order="asc")
        evs += page.events
        if not page.has_more:
            break
        cursor = page.cursor
    with store.engine.connect() as conn:
        arts = sorted((r.id, r.sha256) for r in conn.execute(schema.artifacts.select()))
    kept = sorted((e for e in evs if e.id not in skip), key=lambda e: e.hlc)
    return [(e.hlc, e.content_key()) for e in kept], arts


class SyncMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sync-sm-"))
        self.stores: list[LogStore] = []
        self.partitioned: set[frozenset[int]] = set()
        self.forged: set[str] = set()  # ids of the forged events
        self.forged_seqs: set[int] = set()

    @initialize(n=st.integers(3, 4))
    def open_replicas(self, n: int) -> None:
        for i in range(n):
            path = new_log(self.dir / f"r{i}.sqlite3")
            self.stores.append(LogStore.open(path, durability="normal"))

    def _pick(self, data: st.DataObject, label: str) -> int:
        return data.draw(st.integers(0, len(self.stores) - 1), label=label)

    @rule(data=st.data(), body=BODIES)
    def append(self, data: st.DataObject, body: str) -> None:
        s = self.stores[self._pick(data, "replica")]
        s.event_append(type="note", stream="s", room="r", from_agent="agent", body=body)

    @rule(data=st.data(), status=st.sampled_from([None, "claimed", "applied"]))
    def ack(self, data: st.DataObject, status: str | None) -> None:
        s = self.stores[self._pick(data, "replica")]
        evs = s.event_list(limit=20).events
        if evs:
            target = data.draw(st.sampled_from(evs), label="target")
            workflows.event_ack(s, event_id=target.id, from_agent="acker", status=status)

    @rule(data=st.data(), content=st.binary(min_size=1, max_size=40))
    def patch(self, data: st.DataObject, content: bytes) -> None:
        s = self.stores[self._pick(data, "replica")]
        workflows.patch_submit(s, content=content, from_agent="dev", stream="s")

    @rule(data=st.data())
    def partition(self, data: st.DataObject) -> None:
        i, j = self._pick(data, "a"), self._pick(data, "b")
        if i != j:
            self.partitioned.add(frozenset((i, j)))

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        """A replica's database is recreated (new replica id, empty): a new generation."""
        i = self._pick(data, "replica")
        self.stores[i].close()
        path = self.dir / f"r{i}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        self.stores[i] = LogStore.open(new_log(path), durability="normal")

    @rule(data=st.data(), far=st.integers(10**6, 2**62))
    def forge(self, data: st.DataObject, far: int) -> None:
        """A hostile peer hands replica i one valid event claiming replica j's origin at a
        far-ahead origin_seq (each forgery at its own position, so two never conflict)."""
        i, j = self._pick(data, "victim"), self._pick(data, "claimed author")
        if i == j or far in self.forged_seqs:
            return
        origin = self.stores[j].replica_id
        ms = int(time.time() * 1000) - 1000
        event = {
            "id": f"evt_20260101T000000_forged{far:016x}",
            "origin_replica": origin,
            "origin_seq": far,
            "hlc": f"{ms:013d}-000000-{origin}",
            "type": "note",
            "stream": "s",
            "room": "r",
            "from_agent": "mallory",
            "body": "forged",
            "created_at": "2026-01-01T00:00:00Z",
            "metadata": {},
            "artifact_ids": [],
        }
        assert replication.apply_remote_events(self.stores[i], [event], "mallory").applied_events
        self.forged.add(event["id"])
        self.forged_seqs.add(far)

    @precondition(lambda self: bool(self.partitioned))
    @rule()
    def heal(self) -> None:
        self.partitioned.clear()

    @rule(
        data=st.data(),
        push=st.booleans(),
        crash_after=st.one_of(st.none(), st.integers(0, 6)),
        seed=st.integers(0, 2**16),
        mode=st.sampled_from(["ops", "rows", "rows-prefetch"]),
    )
    def sync(
        self, data: st.DataObject, push: bool, crash_after: int | None, seed: int, mode: str
    ) -> None:
        i, j = self._pick(data, "puller"), self._pick(data, "peer")
        if i == j:
            return
        blocked = frozenset((i, j)) in self.partitioned
        peer = ChaosPeer(
            sync.LocalPeer(self.stores[j]), random.Random(seed), crash_after, blocked, mode
        )
        try:
            result = sync.sync_with_peer(self.stores[i], peer, push=push)
        except errors.PeerUnavailableError:
            return
        assert result["conflict_count"] == 0 and result["rejected_count"] == 0, result

    @invariant()
    def seq_is_dense_and_nothing_is_refused(self) -> None:
        import sqlalchemy as sa

        refusals = [schema.sync_conflicts, schema.sync_rejections, schema.sync_clock_anomalies]
        for s in self.stores:
            with s.engine.connect() as conn:
                n, top = conn.execute(
                    sa.select(sa.func.count(), sa.func.max(schema.events.c.seq))
                ).one()
                assert (top or 0) == n
                for table in refusals:
                    q = sa.select(sa.func.count()).select_from(table)
                    if table is schema.sync_rejections:  # forgeries seen by their author
                        q = q.where(table.c.kind != "sequence")
                    assert conn.execute(q).scalar() == 0

    def full_round(self) -> list[dict[str, Any]]:
        hub = sync.LocalPeer(self.stores[0])
        out = [sync.sync_with_peer(s, hub, push=True) for s in self.stores[1:]]
        out += [sync.sync_with_peer(s, hub, push=True) for s in self.stores[1:]]
        return out

    @rule()
    def converge(self) -> None:
        self.full_round()
        first = snapshot(self.stores[0], self.forged)
        for s in self.stores[1:]:
            assert snapshot(s, self.forged) == first
        if not self.forged:  # an author never stores a forgery of itself: its entry differs
            vectors = {tuple(sorted(s.version_vector().items())) for s in self.stores}
            assert len(vectors) == 1
        again = self.full_round()
        assert all(r["pulled_events"] == r["pushed_events"] == 0 for r in again)
        assert all(r["pulled_artifacts"] == r["pushed_artifacts"] == 0 for r in again)
        assert [snapshot(s, self.forged) for s in self.stores] == [first] * len(self.stores)

    def teardown(self) -> None:
        if self.stores:
            self.converge()
        for s in self.stores:
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


SyncMachine.TestCase.settings = settings(
    settings(),  # the active profile (dev/ci) decides max_examples
    stateful_step_count=20,
)
TestSyncConvergence = SyncMachine.TestCase


# ----------------------------------------------------------------------------- PostgreSQL
# The same machine with every replica a schema of the session's PostgreSQL database (a reset
# drops the schema and replays the worker's migrated template into a new one, as `log_url` does).
# Fewer examples: each replica is a schema of its own.
PG_EXAMPLES = 6


class PgSyncMachine(SyncMachine):
    database = ""
    template: tuple[str, str] | None = None  # the worker's migrated schema, replayed per replica

    def __init__(self) -> None:
        super().__init__()
        self.schemas: dict[int, str] = {}

    def _admin(self, sql: str) -> None:
        import sqlalchemy as sa

        eng = sa.create_engine(self.database, isolation_level="AUTOCOMMIT")
        try:
            with eng.connect() as conn:
                conn.execute(sa.text(sql))
        finally:
            eng.dispose()

    def _open(self, i: int) -> LogStore:
        url = new_pg_log(self.database, self.template)
        self.schemas[i] = url.rsplit("%3D", 1)[1]
        return LogStore.open(url, durability="normal")

    @initialize(n=st.integers(3, 4))
    def open_replicas(self, n: int) -> None:
        self.stores = [self._open(i) for i in range(n)]

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        """A replica's database is recreated (new replica id, empty): a new generation."""
        i = self._pick(data, "replica")
        self.stores[i].close()
        self._admin(f"DROP SCHEMA {self.schemas[i]} CASCADE")
        self.stores[i] = self._open(i)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            for schema in self.schemas.values():
                self._admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_sync_convergence_on_postgresql(
    pg_database: str, pg_template: tuple[str, str] | None
) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    PgSyncMachine.database, PgSyncMachine.template = pg_database, pg_template
    run_state_machine_as_test(
        PgSyncMachine,
        settings=settings(settings(), max_examples=PG_EXAMPLES, stateful_step_count=20),
    )
