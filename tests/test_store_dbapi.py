"""The store on SQLite's own DBAPI connections: every write transaction runs on the writer's
connection (`Backend.transaction`) and every read on a pooled one (`Backend.reading`), with
precompiled SQL. These tests check what a script of writes stores (each value's storage type)
and returns, every filter shape's page against the page rule evaluated in Python, savepoint
isolation and error mapping in group-committed batches (writes of any kind in one batch), the
busy lock, and many writers (threads and a second process).
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import REPO, ManualClock, batched

from mempalace_logstream import LogStore, errors, workflows
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.schema import meta

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _open(path: Path, clock: ManualClock | None = None) -> LogStore:
    return LogStore.open(str(path), durability="off", clock=clock)


def _script(store: LogStore) -> list[Any]:
    """One fixed sequence of writes touching every write branch; returns what came back."""
    a1 = store.artifact_put(kind="note", content="one", created_by="w")
    a2 = store.artifact_put(kind="note", content="two", created_by="w")
    a3 = store.artifact_put(kind="note", content="three", created_by="w")
    out: list[Any] = [a1, a2, a3]
    out.append(store.event_append(type="chat.message", stream="s", room="r", from_agent="w"))
    full = dict(
        type="task.request",
        stream="s",
        room="r2",
        from_agent="lead",
        topic="t",
        to_agent="w",
        correlation_id="c1",
        branch="main",
        base_commit="abc1234",
        status="open",
        body="héllo\nworld ✓",
        metadata={"k": [1, 2], "z": None},
        artifact_ids=[a3.id, a1.id, a2.id],
        idempotency_key="k1",
    )
    out.append(store.event_append(**full))
    # the same key and content: the earlier event, nothing new written
    out.append(store.event_append(**full))
    for bad in (
        lambda: store.event_append(
            type="x", stream="s", room="r", from_agent="lead", body="other", idempotency_key="k1"
        ),
        lambda: store.event_append(
            type="x", stream="s", room="r", from_agent="w", artifact_ids=[a1.id, "art_missing"]
        ),
        lambda: workflows.event_ack(store, event_id="evt_missing", from_agent="w"),
    ):
        try:
            bad()
        except errors.LogstreamError as exc:
            out.append((type(exc).__name__, exc.field, str(exc)))
    target = out[4]
    out.append(
        workflows.event_ack(
            store,
            event_id=target.id,
            from_agent="w",
            status="applied",
            body="ok",
            metadata={"note": "x"},
        )
    )
    out.append(
        workflows.event_ack(store, event_id=target.id, from_agent="w2", idempotency_key="a1")
    )
    out.append(
        workflows.event_ack(store, event_id=target.id, from_agent="w2", idempotency_key="a1")
    )
    out.append(workflows.patch_submit(store, content="--- a\n+++ b\n", from_agent="w", stream="s"))
    return out


# The storage types a column may hold (SQLite stores what the driver binds, whatever the
# declared type): an integer bound as a float or text bound as a BLOB would show here.
_STORED = {"INTEGER": {"integer"}, "BIGINT": {"integer"}, "TEXT": {"text"}, "BLOB": {"blob"}}


def test_writes_store_typed_rows_and_return_what_they_stored(tmp_path: Path) -> None:
    with _open(tmp_path / "w.sqlite3", ManualClock()) as store:
        out = _script(store)
        events = [x for x in out if hasattr(x, "seq") and hasattr(x, "body")]
        assert [store.event_get(e.id) for e in events] == events
        listed = {e.id: e for e in store.event_list(order="asc", limit=100).events}
        assert all(listed[e.id] == e for e in events)
    assert [x[0] for x in out if isinstance(x, tuple)] == [
        "ConflictError",
        "NotFoundError",
        "NotFoundError",
    ]
    assert out[4].artifact_ids == (out[2].id, out[0].id, out[1].id)
    assert out[5] == out[4]  # the idempotent retry returned the stored event
    conn = sqlite3.connect(tmp_path / "w.sqlite3")
    try:
        for table in ("events", "event_artifacts", "artifacts"):
            for _, col, decl, *_rest in conn.execute(f"PRAGMA table_info({table})"):
                kinds = {r[0] for r in conn.execute(f"SELECT DISTINCT typeof({col}) FROM {table}")}
                assert kinds - {"null"} <= _STORED[decl.upper()], (table, col, kinds)
    finally:
        conn.close()


READS: list[dict[str, Any]] = [
    {},
    {"order": "asc"},
    {"limit": 3},
    {"to_agent": "a"},
    {"to_agent": ["a", "b"], "order": "asc", "limit": 4},
    {"to_agent": [f"x{i}" for i in range(9)] + ["a"]},  # more values than the split handles
    {"type": ["chat.message", "task.request"], "writer": "b"},
    {"exclude_writer": ["a", "c"], "stream": "s1"},
    {"correlation_id": "c2", "status": "open"},
    {"topic": "t1", "room": "r"},
    {"since_created_at": "2026-05-29T08:26:41Z"},
    {"preview": True, "slim": True},
]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogStore, list[str]]]:
    clock = ManualClock()
    store = _open(tmp_path_factory.mktemp("fast") / "reads.sqlite3", clock)
    arts = [store.artifact_put(kind="note", content=f"c{i}", created_by="a").id for i in range(4)]
    ids = []
    for i in range(90):
        clock.advance(997)
        links = [arts[(i + k) % 4] for k in range(i % 3)][::-1]
        e = store.event_append(
            type=("chat.message", "task.request", "status.update")[i % 3],
            stream=("s1", "s2")[i % 2],
            room="r",
            from_agent="abc"[i % 3],
            to_agent=(None, "*", "a", "b", "c")[i % 5],
            topic=("t1", None)[i % 2],
            correlation_id=(None, "c1", "c2")[i % 3],
            status=(None, "open")[i % 2],
            body=f"event {i} " + "y" * (i * 7),
            artifact_ids=links,
        )
        ids.append(e.id)
    yield store, ids
    store.close()


def _page_key(page: Any) -> tuple:
    return (page.events, page.cursor, page.has_more, page.scanned_seq, page.note)


def _expected(everything: list[Any], req: Any, after_seq: int | None = None) -> tuple:
    """(ids, has_more) of a page by the page rule (`store/plan.py` `read_page`) in Python:
    the filters by `Filters.matches`, the cursors by seq, the order and the limit."""
    seq_of = {e.id: e.seq for e in everything}
    hi = seq_of[req.before_event_id] if req.before_event_id else None
    below = [e for e in everything if hi is None or e.seq < hi]
    lo = after_seq or 0
    if after_seq is None and req.since_event_id == "tip":
        lo = below[-1].seq if below else 0
    elif after_seq is None and req.since_event_id is not None:
        lo = seq_of[req.since_event_id]
    since = req.since_created_at
    picked = [
        e
        for e in below
        if e.seq > lo and req.filters.matches(e) and (since is None or e.created_at >= since)
    ]
    has_cursor = req.since_event_id is not None or after_seq is not None
    if (req.order or ("asc" if has_cursor else "desc")) == "desc":
        picked.reverse()
    return [e.id for e in picked[: req.limit]], len(picked) > req.limit


@pytest.mark.parametrize("req", READS, ids=[json.dumps(r)[:40] for r in READS])
def test_every_filter_shape_reads_the_page_rule(filled, req) -> None:
    store, ids = filled
    everything = list(store.event_list(order="asc", limit=500).events)
    assert len(everything) == len(ids)
    for cursor in (
        {},
        {"since_event_id": ids[20]},
        {"before_event_id": ids[70]},
        {"since_event_id": ids[10], "before_event_id": ids[60]},
        {"since_event_id": "tip"},
    ):
        args = {**req, **cursor}
        request = store.read_request(**args)
        page = store.event_list(**args)
        assert ([e.id for e in page.events], page.has_more) == _expected(everything, request)
        after = page.scanned_seq - 5
        resumed = store.read(request, after_seq=after)
        got = ([e.id for e in resumed.events], resumed.has_more)
        assert got == _expected(everything, request, after), args


def test_event_get_tip_and_pages_read_the_same_events(filled) -> None:
    store, ids = filled
    listed = list(store.event_list(order="asc", limit=500).events)
    assert [store.event_get(i) for i in ids] == listed
    assert [e.artifact_ids for e in listed[-6:]] != [()] * 6  # links really exist
    assert store.tip() == (listed[-1].seq, listed[-1].id)
    # every field, types included, is what a normally constructed Event holds
    for got in (store.event_get(ids[-1]), store.event_list(limit=1).events[0]):
        assert vars(got) == vars(type(got)(**vars(got)))
        assert type(got.seq) is int and type(got.origin_seq) is int
    with pytest.raises(errors.NotFoundError, match="event_id 'evt_nope' not found"):
        store.event_get("evt_nope")
    with pytest.raises(errors.NotFoundError, match="since_event_id"):
        store.event_list(since_event_id="evt_nope")


def test_an_empty_log_reads_as_empty(tmp_path: Path) -> None:
    with _open(tmp_path / "empty.sqlite3") as store:
        got = (_page_key(store.event_list()), store.tip())
        assert got == (((), None, False, 0, None), (0, None))


# ----------------------------------------------------------------------- group commit


def _run_sql(store: LogStore, sql: str) -> Any:
    """Run the SQL text `sql` as one write of the store."""
    return store.pipeline.write(lambda ex, st: ex.run("test.sql", lambda: sa.text(sql), {}))


def _raw_sql_item(store: LogStore, sql: str) -> Callable[[], Any]:
    """A batch item that runs raw SQL text."""
    return lambda: _run_sql(store, sql)


def test_savepoints_isolate_failing_items_in_a_batch(tmp_path: Path) -> None:
    with _open(tmp_path / "batch.sqlite3") as store:
        add = store.event_append
        add(type="x", stream="s", room="r", from_agent="idem", idempotency_key="k", body="orig")
        target = add(type="x", stream="s", room="r", from_agent="lead", body="target")
        batches: list[str] = []
        real = store.pipeline._run_batch
        store.pipeline._run_batch = lambda b: (batches.append("one"), real(b))[1]  # type: ignore
        dup = "INSERT INTO logstream_meta (key, value) VALUES ('replica_id', 'dup')"
        calls = [
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="ok-1"),
            lambda: add(type="x", stream="s", room="r", from_agent="w", artifact_ids=["art_x"]),
            lambda: workflows.event_ack(store, event_id=target.id, from_agent="w", body="ok-ack"),
            lambda: add(
                type="x",
                stream="s",
                room="r",
                from_agent="idem",
                idempotency_key="k",
                body="changed",
            ),
            _raw_sql_item(store, dup),
            lambda: workflows.event_ack(store, event_id="evt_gone", from_agent="w"),
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="ok-2"),
        ]
        results = batched(store, calls)
        assert batches == ["one"]
        assert isinstance(results[1], errors.NotFoundError)
        assert isinstance(results[3], errors.ConflictError)
        assert isinstance(results[4], errors.StorageError)
        assert str(results[4]).startswith("database error: UNIQUE constraint failed")
        assert isinstance(results[4].__cause__, sqlite3.IntegrityError)
        assert isinstance(results[5], errors.NotFoundError) and results[5].field == "event_id"
        oks = [results[i] for i in (0, 2, 6)]
        assert not any(isinstance(r, Exception) for r in oks), results
        listed = store.event_list(order="asc").events
        assert [e.body for e in listed] == ["orig", "target", *(r.body for r in oks)]
        # the failed items gave their seq back: the survivors are contiguous after the target
        assert [e.seq for e in listed] == list(range(1, len(listed) + 1))
        assert all(a.hlc < b.hlc for a, b in itertools.pairwise(listed))


def test_a_batch_mixing_appends_and_other_writes_commits_them_in_one_transaction(
    tmp_path: Path,
) -> None:
    with _open(tmp_path / "mixed.sqlite3") as store:
        add = store.event_append
        batches: list[str] = []
        real = store.pipeline._run_batch
        store.pipeline._run_batch = lambda b: (batches.append("one"), real(b))[1]  # type: ignore

        def core_item() -> Any:
            row = {"key": "note", "value": "v"}
            return store.pipeline.write(lambda ex, st: ex.insert("test.meta", meta.name, [row]))

        calls = [
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="a"),
            core_item,
            lambda: add(type="x", stream="s", room="r", from_agent="w", artifact_ids=["art_x"]),
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="b"),
        ]
        results = batched(store, calls)
        assert batches == ["one"]
        assert isinstance(results[2], errors.NotFoundError)
        assert sorted(e.body for e in store.event_list().events) == ["a", "b"]
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(meta.c.value).where(meta.c.key == "note")).scalar() == "v"


def test_sqlite_errors_read_as_storage_errors_with_the_driver_text(tmp_path: Path) -> None:
    with _open(tmp_path / "err.sqlite3") as store:
        bad = "INSERT INTO no_such_table VALUES (1)"
        with pytest.raises(errors.StorageError) as got:
            _run_sql(store, bad)
        assert str(got.value) == "database error: no such table: no_such_table"
        assert isinstance(got.value.__cause__, sqlite3.OperationalError)
        # the writer connection is usable again: nothing was left open
        assert store.event_append(type="x", stream="s", room="r", from_agent="w").seq == 1


def test_a_held_lock_is_waited_for_then_reported_as_busy_never_as_locked(tmp_path: Path) -> None:
    path = tmp_path / "busy.sqlite3"
    with LogStore(engine_mod.create_engine(engine_mod.sqlite_url(path), busy_timeout_ms=400)) as s:
        s.event_append(type="x", stream="s", room="r", from_agent="a")
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            holder.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.15, holder.execute, args=("COMMIT",))
            release.start()
            s.event_append(type="x", stream="s", room="r", from_agent="a")  # waits, succeeds
            release.join()
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(errors.StorageError, match="busy") as info:
                workflows.event_ack(s, event_id=s.tip()[1], from_agent="a")
            assert "locked" not in str(info.value)
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert [e.type for e in s.event_list(order="asc").events] == ["x", "x"]


# ----------------------------------------------------------------------- many writers

WRITER = r"""
import sys
from mempalace_logstream import LogStore
path, writer, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = LogStore.open(path, durability="normal")
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    store.event_append(type="load", stream="load", room="r", from_agent=writer,
                       body=f"{writer}:{i}")
store.close()
"""


@pytest.mark.slow
def test_threads_and_a_second_process_lose_and_reorder_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    per_thread, per_proc, n_threads = 30, 120, 4
    store = LogStore.open(str(path), durability="normal")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "proc", str(per_proc)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    failures: list[BaseException] = []
    seen_seqs: list[int] = []

    def writer(w: int) -> None:
        try:
            for i in range(per_thread):
                store.event_append(
                    type="load", stream="load", room="r", from_agent=f"t{w}", body=f"t{w}:{i}"
                )
                seen_seqs.append(store.tip()[0])
        except BaseException as exc:
            failures.append(exc)

    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == b"ready\n", proc.stderr.read().decode()  # type: ignore
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_threads)]
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert proc.wait(120) == 0, proc.stderr.read().decode()  # type: ignore
        assert failures == []
        got, cursor = [], None
        while True:
            page = store.event_list(since_event_id=cursor, order="asc", limit=500)
            got += page.events
            if not page.has_more:
                break
            cursor = page.cursor
        assert len(got) == n_threads * per_thread + per_proc
        assert len({e.id for e in got}) == len(got)
        assert [e.seq for e in got] == list(range(1, len(got) + 1))
        assert all(a.hlc < b.hlc for a, b in itertools.pairwise(got))
        for w in [f"t{i}" for i in range(n_threads)] + ["proc"]:
            mine = [int(e.body.split(":")[1]) for e in got if e.from_agent == w]
            assert mine == list(range(per_proc if w == "proc" else per_thread)), w
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        store.close()


def test_skipped_state_query_never_reuses_a_seq_taken_by_another_writer(tmp_path: Path) -> None:
    """A write transaction skips its seq/HLC state query while `PRAGMA data_version` says no
    other connection committed. Interleave every kind of writer: a second store on the file
    (another connection, as another process would be), this store's artifact puts and patch
    submissions, and a raw sqlite3 reader; seq stays gapless and unique."""
    path = tmp_path / "shared.sqlite3"
    with LogStore.open(str(path)) as a, LogStore.open(str(path)) as b:
        writers: list[Callable[[int], Any]] = [
            lambda i: a.event_append(type="n", stream="s", room="r", from_agent="a", body=str(i)),
            lambda i: b.event_append(type="n", stream="s", room="r", from_agent="b", body=str(i)),
            lambda i: a.artifact_put(kind="note", content=f"note {i}", created_by="a"),
            lambda i: workflows.patch_submit(
                a, content=f"--- a\n+++ b\n{i}\n", from_agent="a", stream="s"
            ),
            lambda i: workflows.event_ack(a, event_id=a.tip()[1], from_agent="b"),
        ]
        order = [0, 0, 1, 0, 2, 0, 3, 0, 0, 4, 0, 1, 1, 0, 3, 4, 0]
        for i, w in enumerate(order):
            writers[w](i)
        with sqlite3.connect(path) as raw:
            seqs = [r[0] for r in raw.execute("SELECT seq FROM events ORDER BY seq")]
            hlcs = [r[0] for r in raw.execute("SELECT hlc FROM events ORDER BY seq")]
            art_seqs = [r[0] for r in raw.execute("SELECT seq FROM artifacts ORDER BY seq")]
    assert seqs == list(range(1, len(order) - order.count(2) + 1))  # artifact_put: no event
    assert hlcs == sorted(hlcs) and len(set(hlcs)) == len(hlcs)
    assert art_seqs == list(range(1, len(art_seqs) + 1)) and len(art_seqs) == 3
