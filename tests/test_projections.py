"""One write path (issue 21): a local write, the peer apply and the importer all append through
`Transaction.append`, which runs every projection registered on the store
(`store.projections`). A projection registered once is fed by all three, on SQLite and
PostgreSQL; each store has its own registry."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import agents, errors, importer, replication, sync
from mempalace_logstream.models import Event
from mempalace_logstream.store import LogStore, Transaction, projections
from mempalace_logstream.store.projections import Refusal
from tests import idsynckit


class Recorder:
    """A test projection: what it was fed, by origin, with the seq each event was stored at
    (read back in the same transaction, so it runs after the insert)."""

    name = "test-recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, int]] = []  # (store, origin, event id, seq)

    def apply(self, tx: Transaction, events: Sequence[Event], origin: str) -> list[Refusal]:
        for e in events:
            held = tx.find_event(e.id, field="event_id")
            assert held.seq == e.seq and e.seq > 0
            self.seen.append((tx.store.replica_id, origin, e.id, e.seq))
        return []

    def fed(self, store: LogStore, origin: str) -> list[str]:
        return [i for s, o, i, _ in self.seen if s == store.replica_id and o == origin]


@pytest.fixture
def recorder(store: LogStore) -> Iterator[Recorder]:
    rec = Recorder()
    store.projections.register(rec)
    yield rec
    store.projections.unregister(rec.name)
    assert store.projections.names() == ["tasks", "redactions", "leases"]


def test_a_registered_projection_is_fed_by_local_writes_the_peer_apply_and_the_importer(
    store: LogStore, tmp_path: Path, recorder: Recorder
) -> None:
    assert store.projections.names() == ["tasks", "redactions", "leases", "test-recorder"]
    # Local: each write once, in seq order, after the built-in projections.
    local = [
        store.event_append(type="note", stream="s", room="r", from_agent="a", body=f"n{i}")
        for i in range(3)
    ]
    request = store.event_append(
        type="task.request",
        stream="s",
        room="r",
        from_agent="a",
        to_agent="b",
        correlation_id="t-proj-1",
    )
    local.append(request)
    assert recorder.fed(store, "local") == [e.id for e in local]
    # A local move the task rules refuse (checked by the task projection, after the insert)
    # is rolled back whole: nothing is stored, and the recorder after it was never reached.
    with pytest.raises(errors.ForbiddenError, match="only b may claim"):
        store.event_append(
            type="task.claim", stream="s", room="r", from_agent="z", correlation_id="t-proj-1"
        )
    assert store.tip()[0] == 4 and len(recorder.fed(store, "local")) == 4

    # Peer: the same events applied on a second replica, with fresh local seqs there (this
    # store is given its projections when it opens: the defaults and the recorder).
    given = [*projections.defaults(), recorder]
    peer = LogStore.open(f"sqlite:///{tmp_path / 'peer.sqlite3'}", projections=given)
    try:
        sync.sync_with_peer(peer, sync.LocalPeer(store))
        assert recorder.fed(peer, "peer") == [e.id for e in local]
        assert peer.task_status(task_id="t-proj-1")["task"]["state"] == "open"
        # And one more by the public single-event apply.
        extra = store.event_append(type="note", stream="s", room="r", from_agent="a")
        assert replication.apply_remote_event(peer, extra.to_dict(), peer="test") is True
        assert recorder.fed(peer, "peer")[-1] == extra.id
        local.append(extra)
    finally:
        peer.close()

    # Import: the whole log copied into a third store, seq kept.
    copy_url = f"sqlite:///{tmp_path / 'copy.sqlite3'}"
    with LogStore.open(copy_url) as copy:
        copy.projections.register(recorder)
        importer.import_log(store, copy, batch_size=2)
        assert recorder.fed(copy, "import") == [e.id for e in local]
        seqs = [q for s, o, _, q in recorder.seen if s == copy.replica_id]
        assert seqs == [e.seq for e in local]
        assert copy.task_status(task_id="t-proj-1")["task"]["state"] == "open"


def test_each_store_runs_its_own_projections(store: LogStore, tmp_path: Path) -> None:
    """A projection registered on one store is fed by that store's appends only; names are
    unique per store; a store given its own list runs exactly that list."""
    rec, other_rec = Recorder(), Recorder()
    store.projections.register(rec)
    with pytest.raises(ValueError, match="test-recorder"):
        store.projections.register(other_rec)
    other = LogStore.open(f"sqlite:///{tmp_path / 'other.sqlite3'}")
    try:
        assert other.projections.names() == ["tasks", "redactions", "leases"]
        mine = store.event_append(type="note", stream="s", room="r", from_agent="a")
        other.event_append(type="note", stream="s", room="r", from_agent="a")
        assert [i for _s, _o, i, _q in rec.seen] == [mine.id]
    finally:
        other.close()
    store.projections.unregister(rec.name)
    store.event_append(type="note", stream="s", room="r", from_agent="a")
    assert len(rec.seen) == 1
    bare_url = f"sqlite:///{tmp_path / 'bare.sqlite3'}"
    with LogStore.open(bare_url, projections=[other_rec]) as bare:
        assert bare.projections.names() == ["test-recorder"]
        event = bare.event_append(type="note", stream="s", room="r", from_agent="a")
        assert other_rec.seen == [(bare.replica_id, "local", event.id, event.seq)]


def test_a_key_event_a_peer_brings_is_in_force_for_the_next_local_write(tmp_path: Path) -> None:
    """The keyring the write transactions reuse (identity's one cache) moves with key events
    from any origin: before, only a local key event dropped it, so a store whose last write
    was its own kept judging with a keyring that lacked the peer's new key."""
    a, b = idsynckit.replica(tmp_path, "a"), idsynckit.replica(tmp_path, "b")
    try:
        agents.trust(b, agents.ensure_admin(a))
        idsynckit.note(b, "carol")  # b's own write: its keyring is cached
        agents.add(a, "alice")
        sync.sync_with_peer(b, sync.LocalPeer(a))  # alice's key arrives at b
        with pytest.raises(errors.ForbiddenError):
            idsynckit.note(b, "alice", "unsigned under a name that signs")
    finally:
        a.close()
        b.close()


def _one_batch_in_order(store: LogStore, calls: list[Any]) -> list[Any]:
    """Run `calls` in threads queued in this order, all in ONE group commit."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = []
    with store.pipeline._commit_lock:  # hold the leader seat until every caller has queued
        for i in range(len(calls)):
            threads.append(threading.Thread(target=run, args=(i,)))
            threads[-1].start()
            deadline = time.monotonic() + 10
            while len(store.pipeline._queue) <= i:
                assert time.monotonic() < deadline, "a caller did not queue"
                time.sleep(0.001)
    for t in threads:
        t.join(10)
    return results


def test_an_unpin_is_in_force_for_the_next_write_even_after_a_shared_commit(
    tmp_path: Path,
) -> None:
    """A pin change moves the keyring the write transactions reuse: a batch whose first item
    read the keyring (pin held) and whose second unpins the admin must not leave that keyring
    for the next write, which, nobody else having committed, would reuse it."""
    a, b = idsynckit.replica(tmp_path, "a"), idsynckit.replica(tmp_path, "b")
    try:
        admin = agents.ensure_admin(a)
        agents.add(a, "alice")
        agents.trust(b, admin)
        sync.sync_with_peer(b, sync.LocalPeer(a))
        with pytest.raises(errors.ForbiddenError):
            idsynckit.note(b, "alice", "unsigned under a name that signs")
        first, unpinned = _one_batch_in_order(
            b, [lambda: idsynckit.note(b, "w"), lambda: b.pin_admin(admin, pinned=False)]
        )
        assert unpinned is True and first.from_agent == "w"
        # alice's key no longer roots in a trusted admin: her unsigned write is taken
        assert idsynckit.note(b, "alice", "unsigned, admin unpinned").from_agent == "alice"
    finally:
        a.close()
        b.close()
