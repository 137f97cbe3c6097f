"""The storage seam's contract (backends/): one suite, run on a SQLite file and on PostgreSQL.

Every backend must give the store the same behaviour: seq in commit order, group commit with
isolated failures, idempotent appends, artifact links read back in order, the filter rules
equal in SQL and in memory, a cross-store change signal, mapped storage errors, append-only
tables, the public transaction API, and replication apply (duplicates, conflicts).
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors, replication, workflows
from mempalace_logstream.store import Filters, Transaction
from tests.conftest import batched


def _second_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Another, empty log on the same backend (a replica)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'replica.sqlite3'}"
    database = str(request.getfixturevalue("pg_database"))
    schema = f"t_{secrets.token_hex(6)}"
    eng = sa.create_engine(database, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    sep = "&" if "?" in database else "?"
    return f"{database}{sep}options=-csearch_path%3D{schema}"


def add(store: LogStore, **fields: Any) -> Any:
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    return store.event_append(**{**base, **fields})


def test_the_backend_is_the_engines(store: LogStore, backend: str) -> None:
    assert store.backend.name == backend == store.stats()["backend"]
    assert (store.stats()["db_size_bytes"] or 0) > 0


def test_seq_is_contiguous_in_commit_order_and_group_commit_isolates_failures(store):
    first = add(store, body="first")
    calls = [
        lambda: add(store, body="ok-1"),
        lambda: add(store, artifact_ids=["art_missing"]),
        lambda: add(store, body="ok-2"),
        lambda: workflows.event_ack(store, event_id="evt_gone", from_agent="w"),
        lambda: add(store, body="ok-3"),
    ]
    results = batched(store, calls)
    assert isinstance(results[1], errors.NotFoundError)
    assert isinstance(results[3], errors.NotFoundError) and results[3].field == "event_id"
    listed = store.event_list(order="asc").events
    assert [e.body for e in listed] == ["first", "ok-1", "ok-2", "ok-3"]
    assert [e.seq for e in listed] == [first.seq, first.seq + 1, first.seq + 2, first.seq + 3]
    assert all(a.hlc < b.hlc for a, b in zip(listed, listed[1:], strict=False))


def test_idempotent_appends_replay_and_conflict(store: LogStore) -> None:
    one = add(store, idempotency_key="k", body="x")
    assert add(store, idempotency_key="k", body="x") == one
    with pytest.raises(errors.ConflictError):
        add(store, idempotency_key="k", body="other")
    assert store.tip() == (one.seq, one.id)


def test_artifact_links_read_back_in_position_order(store: LogStore) -> None:
    ids = [store.artifact_put(kind="note", content=f"c{i}", created_by="a").id for i in range(12)]
    order = ids[::-1][:11]
    event = add(store, artifact_ids=order)
    assert store.event_get(event.id).artifact_ids == tuple(order)
    assert store.event_list(limit=1).events[0].artifact_ids == tuple(order)
    assert store.artifact_get(ids[3]).content == b"c3"


@pytest.mark.parametrize(
    "filters",
    [
        {"to_agent": ["b"]},
        {"to_agent": ["b", "c"]},
        {"to_agent": ["b", "c"], "writer": ["a"]},
        {"exclude_writer": ["a"], "room": ["r", "q"]},
        {"type": ["note"], "status": ["open"]},
    ],
)
def test_the_filter_rules_agree_in_sql_and_in_memory(store: LogStore, filters) -> None:
    for i in range(40):
        add(
            store,
            from_agent="abc"[i % 3],
            to_agent=["b", "c", "*", None, "d"][i % 5],
            room="rq"[i % 2],
            status=["open", None][i % 2],
        )
    everything = store.event_list(limit=500, order="asc").events
    want = [e.id for e in everything if Filters.parse(**filters).matches(e)]
    got = store.event_list(limit=500, order="asc", **filters).events
    assert [e.id for e in got] == want and want


def test_a_second_store_on_the_same_log_wakes_a_waiter(db_url: str, store: LogStore) -> None:
    before = add(store, body="before")
    other = LogStore.open(db_url)
    try:
        woke: list[Any] = []
        # An explicit cursor: "tip" would be resolved whenever the thread gets to run, which
        # may be after the other store's append (then the wait rightly times out).
        waiter = threading.Thread(
            target=lambda: woke.append(store.event_wait(since_event_id=before.id, timeout_ms=20000))
        )
        waiter.start()
        add(other, body="from the other store")
        waiter.join(30)
        assert woke and [e.body for e in woke[0].events] == ["from the other store"]
    finally:
        other.close()


def test_database_errors_are_storage_errors_with_their_cause(store: LogStore) -> None:
    def work(tx: Transaction) -> None:
        tx.ex.run("contract-bad", lambda: sa.text("SELECT * FROM no_such_table"), {})

    with pytest.raises(errors.StorageError, match="no_such_table") as info:
        store.transaction(work)
    assert info.value.__cause__ is not None
    assert add(store).seq == 1  # the writer is usable again


def test_statement_hooks_see_every_statement_of_writes_and_reads(store: LogStore) -> None:
    """`backend.statement_hooks` is the documented way to observe the store's statements:
    the insert of an append (one row, and a page of rows), a local row, a page read, and
    nothing once the hook is removed."""
    seen: list[tuple[str, Any]] = []

    def hook(sql: str, params: Any) -> None:
        seen.append((" ".join(sql.split()).upper(), params))

    store.backend.statement_hooks.append(hook)
    try:
        event = add(store, body="seen")
        store.set_agent_token("alice", "hash-1")
        page = store.event_list(limit=5)
    finally:
        store.backend.statement_hooks.remove(hook)
    inserts = [p for sql, p in seen if sql.startswith("INSERT INTO EVENTS")]
    assert len(inserts) == 1 and event.id in inserts[0]
    assert any(sql.startswith("INSERT INTO AGENT_TOKENS") for sql, _ in seen), seen
    # A page read binds `lim` by name, or by position (SQLite: `Reads._page_entry`).
    reads = [
        p
        for sql, p in seen
        if sql.startswith(("SELECT", "WITH"))
        and ("lim" in p if isinstance(p, dict) else "LIMIT ?" in sql)
    ]
    assert page.events[0].id == event.id and reads, seen
    count = len(seen)
    add(store, body="unseen")
    store.event_list(limit=5)
    assert len(seen) == count


def test_the_tables_are_append_only(store: LogStore) -> None:
    add(store)
    for sql in ("UPDATE events SET body = 'x'", "DELETE FROM events"):
        with pytest.raises(sa.exc.DBAPIError), store.engine.begin() as conn:
            conn.execute(sa.text(sql))
    assert store.event_list().events[0].body == ""


def test_a_failed_transaction_writes_nothing_and_gives_its_seq_back(store: LogStore) -> None:
    draft = store.draft_event(type="note", stream="s", room="r", from_agent="a")

    def work(tx: Transaction) -> None:
        tx.insert_event(draft)
        raise errors.ConflictError("changed my mind")

    with pytest.raises(errors.ConflictError):
        store.transaction(work)
    assert store.tip() == (0, None)
    assert store.transaction(lambda tx: tx.insert_event(draft)).seq == 1
    with store.snapshot() as ex:
        found = ex.held_ids([store.tip()[1] or "", "evt_nope"])
    assert found == {store.tip()[1]}


def test_replication_apply_on_the_backend(store, backend, tmp_path, request) -> None:
    art = store.artifact_put(kind="note", content="payload", created_by="a")
    sent = [add(store, body=f"e{i}", artifact_ids=[art.id] if i == 2 else None) for i in range(5)]
    page = replication.ops_page(store, store.replica_id)
    arts, _, _ = replication.get_artifacts(store, [art.id])
    with LogStore.open(_second_url(backend, tmp_path, request)) as replica:
        parsed = replication.parse_events(replica, page["events"], peer="p")
        res = replication.apply_remote_batch(replica, [a.to_dict() for a in arts], parsed, "p")
        assert (res.applied_events, res.applied_artifacts, res.rejected) == (5, 1, [])
        held = replica.event_list(order="asc").events
        assert [(e.id, e.hlc, e.artifact_ids) for e in held] == [
            (e.id, e.hlc, e.artifact_ids) for e in sent
        ]
        assert replica.version_vector() == {store.replica_id: sent[-1].origin_seq}
        again = replication.apply_remote_batch(
            replica, [], replication.parse_events(replica, page["events"], peer="p"), "p"
        )
        assert (again.applied_events, again.duplicates) == (0, 5)
        changed = [{**page["events"][0], "body": "tampered"}]
        clash = replication.apply_remote_events(replica, changed, peer="p")
        assert len(clash.conflicts) == 1
        assert replication.list_conflicts(replica)[0]["event_id"] == sent[0].id
        assert replica.artifact_get(art.id).content == b"payload"
