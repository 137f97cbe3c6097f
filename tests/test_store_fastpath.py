"""The SQLite fast paths of LogStore give exactly what the SQLAlchemy paths give.

On SQLite, `event_append`/`event_ack` batches run on the store's own DBAPI writer connection and
reads run precompiled SQL on a pooled DBAPI connection; any other batch item, PostgreSQL, or an
engine with cursor listeners takes the SQLAlchemy path. These tests write and read the same data
both ways and compare, check savepoint isolation and error mapping in batches that take the fast
path, batches that mix in a Core item, and many writers (threads and a second process).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import REPO, ManualClock, batched

from mempalace_logstream import LogStore, errors, workflows
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.schema import meta

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _noop_listener(*_args: Any) -> None:
    pass


@contextmanager
def sqlalchemy_path(store: LogStore) -> Iterator[None]:
    """Force the SQLAlchemy paths: a cursor listener on the engine turns the fast paths off."""
    sa.event.listen(store.engine, "before_cursor_execute", _noop_listener)
    try:
        assert not store._fast_path()
        yield
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", _noop_listener)


def _open(path: Path, clock: ManualClock | None = None) -> LogStore:
    return LogStore.open(str(path), durability="off", clock=clock)


def _script(store: LogStore) -> list[Any]:
    """One fixed sequence of writes touching every fast-path branch; returns what came back."""
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


def _normalized(value: Any) -> str:
    """A JSON dump with every generated id replaced by its order of first appearance."""

    def plain(v: Any) -> Any:
        if hasattr(v, "to_dict"):
            return v.to_dict()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    text = json.dumps(plain(value), sort_keys=True, ensure_ascii=False)
    seen: dict[str, str] = {}
    text = re.sub(
        r"\b(?:evt|art)_\d{8}T\d{6}_[0-9a-f]{20}\b",
        lambda m: seen.setdefault(m.group(0), f"<id{len(seen)}>"),
        text,
    )
    return re.sub(r"rep_[0-9a-f]{32}", "<replica>", text)


def _table_dump(path: Path) -> list[Any]:
    """Every row of the event tables with each value's SQLite storage type."""
    conn = sqlite3.connect(path)
    try:
        out = []
        for table, order in (("events", "seq"), ("event_artifacts", "rowid"), ("artifacts", "seq")):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            select = ", ".join(f"{c}, typeof({c})" for c in cols)
            out.append(
                [list(r) for r in conn.execute(f"SELECT {select} FROM {table} ORDER BY {order}")]
            )
        return out
    finally:
        conn.close()


def test_fast_and_sqlalchemy_writes_store_identical_rows_and_results(tmp_path: Path) -> None:
    fast_clock, slow_clock = ManualClock(), ManualClock()
    with _open(tmp_path / "fast.sqlite3", fast_clock) as fast:
        assert fast._fast_path()
        fast_out = _script(fast)
    with _open(tmp_path / "slow.sqlite3", slow_clock) as slow, sqlalchemy_path(slow):
        slow_out = _script(slow)
    assert _normalized(fast_out) == _normalized(slow_out)
    assert _normalized(_table_dump(tmp_path / "fast.sqlite3")) == _normalized(
        _table_dump(tmp_path / "slow.sqlite3")
    )
    assert [x[0] for x in fast_out if isinstance(x, tuple)] == [
        "ConflictError",
        "NotFoundError",
        "NotFoundError",
    ]
    assert fast_out[4].artifact_ids == (fast_out[2].id, fast_out[0].id, fast_out[1].id)
    assert fast_out[5] == fast_out[4]  # the idempotent retry returned the stored event


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


@pytest.mark.parametrize("req", READS, ids=[json.dumps(r)[:40] for r in READS])
def test_fast_reads_equal_sqlalchemy_reads_for_every_filter_shape(filled, req) -> None:
    store, ids = filled
    for cursor in (
        {},
        {"since_event_id": ids[20]},
        {"before_event_id": ids[70]},
        {"since_event_id": ids[10], "before_event_id": ids[60]},
        {"since_event_id": "tip"},
    ):
        args = {**req, **cursor}
        fast = store.event_list(**args)
        with sqlalchemy_path(store):
            slow = store.event_list(**args)
        assert _page_key(fast) == _page_key(slow), args
        resumed = store.read(store.read_request(**args), after_seq=fast.scanned_seq - 5)
        with sqlalchemy_path(store):
            again = store.read(store.read_request(**args), after_seq=fast.scanned_seq - 5)
        assert _page_key(resumed) == _page_key(again)


def test_fast_event_get_and_tip_equal_the_core_hydration(filled) -> None:
    store, ids = filled
    from mempalace_logstream.schema import events
    from mempalace_logstream.store import EVENT_COLS

    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(*EVENT_COLS).order_by(events.c.seq)).all()
        core = store._hydrate(conn, rows)
    assert [store.event_get(i) for i in ids] == core[-len(ids) :]
    assert [e.artifact_ids for e in core[-6:]] != [()] * 6  # links really exist
    with sqlalchemy_path(store):
        assert [store.event_get(i) for i in ids[:5]] == core[-len(ids) :][:5]
        slow_tip = store.tip()
    assert store.tip() == slow_tip == (core[-1].seq, core[-1].id)
    # every field, types included, is what a normally constructed Event holds
    for got in (store.event_get(ids[-1]), store.event_list(limit=1).events[0]):
        assert vars(got) == vars(type(got)(**vars(got)))
        assert type(got.seq) is int and type(got.origin_seq) is int
    with pytest.raises(errors.NotFoundError, match="event_id 'evt_nope' not found"):
        store.event_get("evt_nope")
    with pytest.raises(errors.NotFoundError, match="since_event_id"):
        store.event_list(since_event_id="evt_nope")


def test_an_empty_log_reads_the_same_on_both_paths(tmp_path: Path) -> None:
    with _open(tmp_path / "empty.sqlite3") as store:
        fast = (_page_key(store.event_list()), store.tip())
        with sqlalchemy_path(store):
            assert (_page_key(store.event_list()), store.tip()) == fast
        assert fast == (((), None, False, 0, None), (0, None))


# ----------------------------------------------------------------------- group commit


def _raw_sql_item(store: LogStore, sql: str) -> Callable[[], Any]:
    """A batch item with a DBAPI version (so the batch stays on the fast path)."""
    return lambda: store._submit(
        lambda conn, st: conn.exec_driver_sql(sql), lambda db, st: db.execute(sql)
    )


def test_savepoints_isolate_failing_items_in_a_fast_batch(tmp_path: Path) -> None:
    with _open(tmp_path / "batch.sqlite3") as store:
        add = store.event_append
        add(type="x", stream="s", room="r", from_agent="idem", idempotency_key="k", body="orig")
        target = add(type="x", stream="s", room="r", from_agent="lead", body="target")
        batches: list[str] = []
        real_raw = store._run_raw_batch
        store._run_raw_batch = lambda b: (batches.append("raw"), real_raw(b))[1]  # type: ignore
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
        assert batches == ["raw"]
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


def test_a_batch_with_a_core_item_runs_every_item_on_the_sqlalchemy_path(tmp_path: Path):
    with _open(tmp_path / "mixed.sqlite3") as store:
        add = store.event_append
        batches: list[str] = []
        real = store._run_batch
        store._run_batch = lambda b: (batches.append("core"), real(b))[1]  # type: ignore

        def core_item() -> Any:
            return store._submit(
                lambda conn, st: conn.execute(sa.insert(meta).values(key="note", value="v"))
            )

        calls = [
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="a"),
            core_item,
            lambda: add(type="x", stream="s", room="r", from_agent="w", artifact_ids=["art_x"]),
            lambda: add(type="x", stream="s", room="r", from_agent="w", body="b"),
        ]
        results = batched(store, calls)
        assert batches == ["core"]
        assert isinstance(results[2], errors.NotFoundError)
        assert sorted(e.body for e in store.event_list().events) == ["a", "b"]
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(meta.c.value).where(meta.c.key == "note")).scalar() == "v"


def test_sqlite_errors_on_the_fast_path_read_like_the_sqlalchemy_path(tmp_path: Path) -> None:
    with _open(tmp_path / "err.sqlite3") as store:
        bad = "INSERT INTO no_such_table VALUES (1)"
        with pytest.raises(errors.StorageError) as fast:
            store._submit(
                lambda conn, st: conn.exec_driver_sql(bad), lambda db, st: db.execute(bad)
            )
        with sqlalchemy_path(store), pytest.raises(errors.StorageError) as slow:
            store._submit(
                lambda conn, st: conn.exec_driver_sql(bad), lambda db, st: db.execute(bad)
            )
        assert str(fast.value) == str(slow.value) == "database error: no such table: no_such_table"
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
    """The fast path skips its seq/HLC state query while `PRAGMA data_version` says no other
    connection committed. Interleave every kind of other writer: a second store on the file
    (another connection, as another process would be), this store's own SQLAlchemy path
    (artifact_put, patch_submit) and a raw sqlite3 reader; seq stays gapless and unique."""
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
