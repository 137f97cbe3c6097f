"""LogStore semantics on both backends: reads, cursors, order, filters, acks, artifacts,
idempotence, group commit, append-only enforcement and error mapping.

Most tests share one store per backend and isolate themselves with a stream of their own and a
cursor taken at the tip, so the module stays fast.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import secrets
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors, workflows
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.schema import artifact_blobs, events
from tests.conftest import batched

_N = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])
def module_url(request, tmp_path_factory):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'logstream.sqlite3'}"
    base = request.getfixturevalue("pg_database")
    schema = f"s_{secrets.token_hex(6)}"
    eng = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_780_000_000_000

    def now_ms(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def wall() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def shared(module_url, wall):
    with LogStore.open(module_url, clock=wall) as s:
        yield s


@pytest.fixture
def store(shared):
    return shared


@pytest.fixture
def stream() -> str:
    return f"st{next(_N)}"


def add(store: LogStore, stream: str, **fields):
    base = {"type": "note.added", "room": "r", "from_agent": "a"}
    return store.event_append(**{**base, "stream": stream, **fields})


def mark(store: LogStore) -> str:
    """A cursor at the current tip (a marker event, so it exists even on an empty log)."""
    return store.event_append(type="marker", stream="markers", room="r", from_agent="m").id


def ids(page) -> list[str]:
    return [e.id for e in page.events]


# --------------------------------------------------------------------------- order and cursors


def test_order_is_desc_without_a_cursor_and_asc_with_one(store, stream):
    start = mark(store)
    e = [add(store, stream, body=str(i)) for i in range(3)]
    assert ids(store.event_list(stream=stream)) == [e[2].id, e[1].id, e[0].id]
    assert ids(store.event_list(stream=stream, since_event_id=start)) == [x.id for x in e]
    # An explicit order wins either way, case-insensitively.
    assert ids(store.event_list(stream=stream, order="ASC")) == [x.id for x in e]
    assert ids(store.event_list(stream=stream, since_event_id=e[0].id, order="desc")) == [
        e[2].id,
        e[1].id,
    ]


def test_since_and_before_are_exclusive_and_combine(store, stream):
    e = [add(store, stream, body=str(i)) for i in range(5)]
    page = store.event_list(stream=stream, since_event_id=e[0].id, before_event_id=e[4].id)
    assert ids(page) == [e[1].id, e[2].id, e[3].id]
    assert ids(store.event_list(stream=stream, before_event_id=e[2].id)) == [e[1].id, e[0].id]
    assert store.event_list(stream=stream, since_event_id=e[4].id).events == ()


def test_the_cursor_is_the_newest_examined_event_including_filtered_rows(store, stream):
    start = mark(store)
    mine = add(store, stream, to_agent="me")
    noise = [add(store, stream + "-noise") for _ in range(3)]
    page = store.event_list(stream=stream, since_event_id=start)
    assert ids(page) == [mine.id]
    assert page.cursor == noise[-1].id  # the reader never rescans the noise
    assert page.has_more is False
    again = store.event_list(stream=stream, since_event_id=page.cursor)
    assert again.events == () and again.cursor == noise[-1].id


def test_paging_with_has_more_and_cursor_visits_every_match_once(store, stream):
    start = mark(store)
    made = []
    for i in range(7):
        made.append(add(store, stream, body=str(i)))
        add(store, stream + "-other")
    seen, cursor, pages = [], start, 0
    while True:
        page = store.event_list(stream=stream, since_event_id=cursor, limit=3)
        seen += ids(page)
        cursor, pages = page.cursor, pages + 1
        if not page.has_more:
            break
    assert seen == [e.id for e in made]
    assert pages == 3


def test_tip_means_only_events_from_now_on(store, stream):
    add(store, stream)
    page = store.event_list(stream=stream, since_event_id="tip")
    assert page.events == () and page.cursor == store.tip()[1]
    later = add(store, stream)
    assert ids(store.event_list(stream=stream, since_event_id=page.cursor)) == [later.id]


def test_an_empty_log_has_no_cursor(tmp_path):
    with LogStore.open(str(tmp_path / "empty.sqlite3")) as s:
        page = s.event_list()
        assert (page.events, page.cursor, page.has_more) == ((), None, False)
        assert s.event_list(since_event_id="tip").cursor is None
        assert s.tip() == (0, None)


def test_has_more_is_reported_in_desc_order_too(store, stream):
    [add(store, stream) for _ in range(3)]
    assert store.event_list(stream=stream, limit=2).has_more is True
    assert store.event_list(stream=stream, limit=3).has_more is False


# --------------------------------------------------------------------------- filters


def test_to_agent_matches_the_name_and_broadcasts_but_not_unaddressed(store, stream):
    direct = add(store, stream, to_agent="bob")
    star = add(store, stream, to_agent="*")
    add(store, stream, to_agent="alice")
    add(store, stream)
    got = ids(store.event_list(stream=stream, to_agent="bob", order="asc"))
    assert got == [direct.id, star.id]
    assert ids(store.event_list(stream=stream, to_agent="*")) == [star.id]


def test_repeated_values_are_or_within_a_field_and_and_across(store, stream):
    a = add(store, stream, type="task.request", status="open")
    b = add(store, stream, type="task.reply", status="ready")
    add(store, stream, type="task.reply", status="failed")
    add(store, stream, type="chat", status="open")
    page = store.event_list(
        stream=stream, type=["task.request", "task.reply"], status=["open", "ready"], order="asc"
    )
    assert ids(page) == [a.id, b.id]


def test_writer_filters_by_author_and_exclude_writer_negates(store, stream):
    a = add(store, stream, from_agent="alice")
    b = add(store, stream, from_agent="bob")
    c = add(store, stream, from_agent="carol")
    assert ids(store.event_list(stream=stream, writer="bob")) == [b.id]
    assert ids(store.event_list(stream=stream, exclude_writer=["bob", "carol"])) == [a.id]
    assert ids(store.event_list(stream=stream, writer=["alice", "carol"], order="asc")) == [
        a.id,
        c.id,
    ]


def test_from_agent_on_a_read_is_identity_not_a_filter_and_says_so(store, stream):
    add(store, stream, from_agent="alice")
    add(store, stream, from_agent="bob")
    page = store.event_list(stream=stream, from_agent="alice")
    assert len(page.events) == 2
    assert page.note and "writer" in page.note
    assert page.to_dict()["note"] == page.note
    assert store.event_list(stream=stream, from_agent="alice", writer="alice").note is None


def test_every_filter_field_filters(store, stream):
    base = {"room": "r", "topic": "t", "correlation_id": "c", "status": "open", "to_agent": "x"}
    target = add(store, stream, **base)
    for field, other in base.items():
        add(store, stream, **{**base, field: other + "2" if field != "status" else "ready"})
    page = store.event_list(stream=stream, **base)
    assert ids(page) == [target.id]


def test_since_created_at_is_an_inclusive_window(store, wall, stream):
    wall.ms = int(datetime(2026, 9, 21, 13, 33, 20, tzinfo=UTC).timestamp() * 1000)
    old = add(store, stream)
    wall.ms += 1000
    at = add(store, stream)
    wall.ms += 1
    after = add(store, stream)
    page = store.event_list(stream=stream, since_created_at="2026-09-21T13:33:21Z", order="asc")
    assert at.created_at == "2026-09-21T13:33:21.000Z"
    assert ids(page) == [at.id, after.id]
    assert old.id not in ids(store.event_list(stream=stream, since_created_at="2026-09-22"))
    assert len(store.event_list(stream=stream, since_created_at="2026-09-21").events) == 3


def test_preview_cuts_bodies_to_200_characters_and_says_so(store, stream):
    long = add(store, stream, body="é" * 201)
    short = add(store, stream, body="x" * 200)
    out = {e["id"]: e for e in store.event_list(stream=stream, preview=True).to_dict()["events"]}
    assert out[long.id]["body"] == "é" * 200
    assert out[long.id]["body_truncated"] is True and out[long.id]["body_length"] == 201
    assert out[short.id]["body"] == "x" * 200 and "body_truncated" not in out[short.id]
    full = store.event_list(stream=stream).to_dict()["events"]
    assert {e["id"]: e["body"] for e in full}[long.id] == "é" * 201


# --------------------------------------------------------------------------- writes


def test_seq_and_origin_stamps_are_assigned_in_commit_order(store, stream):
    a, b = add(store, stream), add(store, stream)
    assert b.seq > a.seq and b.origin_seq > a.origin_seq
    assert a.origin_replica == b.origin_replica == store.replica_id
    assert a.hlc < b.hlc
    assert a.id.startswith("evt_") and len(a.id.rsplit("_", 1)[1]) == 20
    assert a.created_at.endswith("Z") and len(a.created_at) == len("2026-01-01T00:00:00.000Z")
    assert store.version_vector()[store.replica_id] >= b.origin_seq


def test_ack_appends_a_new_event_and_never_changes_the_target(store, stream):
    target = add(store, stream, from_agent="lead", to_agent="w", topic="t1", body="do it")
    ack = workflows.event_ack(
        store, event_id=target.id, from_agent="w", status="claimed", body="on it"
    )
    assert (ack.type, ack.stream, ack.room, ack.topic) == ("event.ack", stream, "r", "t1")
    assert ack.to_agent == "lead" and ack.correlation_id == target.id
    assert ack.metadata == {"ack_of": target.id} and ack.status == "claimed"
    assert store.event_get(target.id) == target
    with_corr = add(store, stream, correlation_id="corr-1")
    ack2 = workflows.event_ack(
        store, event_id=with_corr.id, from_agent="w", topic="override", metadata={"note": 1}
    )
    assert ack2.correlation_id == "corr-1" and ack2.topic == "override"
    assert list(ack2.metadata.items()) == [("ack_of", with_corr.id), ("note", 1)]
    with pytest.raises(errors.NotFoundError, match="evt_missing"):
        workflows.event_ack(store, event_id="evt_missing", from_agent="w")


def test_artifacts_are_stored_once_per_sha256_but_each_put_gets_an_id(store):
    content = f"shared content {secrets.token_hex(4)}\r\n".encode()
    a = store.artifact_put(kind="note", content=content, created_by="a")
    b = store.artifact_put(kind="file", content=content, created_by="b", metadata={"z": 1})
    assert a.id != b.id and a.sha256 == b.sha256
    with store.engine.connect() as conn:
        n = conn.execute(
            sa.select(sa.func.count()).where(artifact_blobs.c.sha256 == a.sha256)
        ).scalar()
    assert n == 1
    got = store.artifact_get(b.id)
    assert (got.kind, got.created_by, got.metadata, got.content) == ("file", "b", {"z": 1}, content)
    with pytest.raises(errors.NotFoundError, match="art_missing"):
        store.artifact_get("art_missing")


def test_event_artifact_links_keep_the_callers_order_and_drop_duplicates(store, stream):
    a = store.artifact_put(kind="note", content="a", created_by="x")
    b = store.artifact_put(kind="note", content="b", created_by="x")
    e = add(store, stream, artifact_ids=[b.id, a.id, b.id])
    assert e.artifact_ids == (b.id, a.id)
    assert store.event_get(e.id).artifact_ids == (b.id, a.id)
    assert store.event_list(stream=stream).events[0].artifact_ids == (b.id, a.id)


def test_patch_submit_is_idempotent_and_a_different_patch_under_the_key_conflicts(store, stream):
    key = f"patch-{next(_N)}"
    first = workflows.patch_submit(
        store, content="+a\n", from_agent="a", stream=stream, idempotency_key=key
    )
    again = workflows.patch_submit(
        store, content="+a\n", from_agent="a", stream=stream, idempotency_key=key
    )
    assert (again["artifact"].id, again["event"].id) == (first["artifact"].id, first["event"].id)
    with pytest.raises(errors.ConflictError, match="idempotency_key"):
        workflows.patch_submit(
            store, content="+b\n", from_agent="a", stream=stream, idempotency_key=key
        )
    with pytest.raises(errors.ConflictError, match="idempotency_key"):
        workflows.patch_submit(
            store, content="+a\n", from_agent="a", stream=stream, idempotency_key=key, body="other"
        )
    assert len(store.event_list(stream=stream).events) == 1


def test_idempotency_keys_are_per_writer(store, stream):
    a = add(store, stream, from_agent="alice", idempotency_key="k")
    b = add(store, stream, from_agent="bob", idempotency_key="k")
    assert a.id != b.id


def test_stats_count_per_stream_type_and_writer(store, stream):
    add(store, stream, type="x.one", from_agent="s-writer")
    out = store.stats()
    assert out["per_stream"][stream] == 1
    assert out["events"] >= 1 and out["replica_id"] == store.replica_id
    assert out["backend"] in ("sqlite", "postgresql")


# --------------------------------------------------------------------------- group commit


def test_a_failing_item_does_not_poison_its_group_commit(store, stream):
    add(store, stream, from_agent="idem", idempotency_key="used", body="original")

    def bad_sql():
        dup = "INSERT INTO logstream_meta (key, value) VALUES ('replica_id', 'dup')"
        return store.pipeline.write(lambda ex, st: ex.run("test.dup", lambda: sa.text(dup), {}))

    calls = [
        lambda: add(store, stream, body="ok-1"),
        lambda: add(store, stream, artifact_ids=["art_missing"]),
        lambda: add(store, stream, body="ok-2"),
        lambda: add(store, stream, from_agent="idem", idempotency_key="used", body="changed"),
        bad_sql,
        lambda: add(store, stream, body="ok-3"),
    ]
    results = batched(store, calls)
    assert isinstance(results[1], errors.NotFoundError)
    assert isinstance(results[3], errors.ConflictError)
    assert isinstance(results[4], errors.StorageError)
    oks = [results[i] for i in (0, 2, 5)]
    assert all(not isinstance(r, Exception) for r in oks), results
    bodies = [e.body for e in store.event_list(stream=stream, order="asc").events]
    assert sorted(bodies) == ["ok-1", "ok-2", "ok-3", "original"]
    seqs = sorted(r.seq for r in oks)
    assert len(set(seqs)) == 3  # failed items gave their seq back without gaps in order
    listed = store.event_list(stream=stream, order="asc").events
    assert all(a.seq < b.seq for a, b in itertools.pairwise(listed))


def test_eight_threads_appending_at_once_lose_nothing(store, stream):
    per_thread = 12
    errors_seen: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(per_thread):
                add(store, stream, from_agent=f"t{w}", body=f"{w}:{i}")
        except BaseException as exc:
            errors_seen.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors_seen == []
    got = store.event_list(stream=stream, order="asc", limit=500).events
    assert len(got) == 8 * per_thread
    assert all(a.seq < b.seq and a.hlc < b.hlc for a, b in itertools.pairwise(got))
    for w in range(8):
        mine = [int(e.body.split(":")[1]) for e in got if e.from_agent == f"t{w}"]
        assert mine == list(range(per_thread))


# --------------------------------------------------------------------------- enforcement


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET body='changed'",
        "DELETE FROM events",
        "UPDATE artifacts SET kind='x'",
        "DELETE FROM artifacts",
        "DELETE FROM event_artifacts",
        "UPDATE artifact_blobs SET size_bytes = 0",
        "DELETE FROM artifact_blobs",
    ],
)
def test_the_database_rejects_update_and_delete(store, stream, sql):
    art = store.artifact_put(kind="note", content="keep", created_by="a")
    e = add(store, stream, body="keep", artifact_ids=[art.id])  # a row in every table
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as conn:
        conn.execute(sa.text(sql))
    assert store.event_get(e.id).body == "keep"


LIFECYCLE = {"open", "close"}


def test_the_store_is_made_of_parts_not_mixins(tmp_path):
    """LogStore holds plain parts it constructs (issue 21 item 4); each public method but
    opening and closing is a short call into a part."""
    from mempalace_logstream.store import core, pipeline, reads, stats, task_reads, writes

    parts = {
        "pipeline": pipeline.CommitPipeline,
        "writes": writes.Writes,
        "reads": reads.Reads,
        "task_reads": task_reads.TaskReads,
        "counts": stats.Stats,
    }
    assert LogStore.__bases__ == (object,)
    assert all(cls.__bases__ == (object,) for cls in parts.values())
    tree = ast.parse(inspect.getsource(core.LogStore))
    for fn in tree.body[0].body:  # type: ignore[attr-defined]
        public = isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_")
        if public and fn.name not in LIFECYCLE:
            body = fn.body[1:] if ast.get_docstring(fn) else fn.body
            assert len(body) == 1, fn.name
    with LogStore.open(str(tmp_path / "parts.sqlite3")) as store:
        assert all(type(getattr(store, name)) is cls for name, cls in parts.items())


# `task_update` appends a move to a task's thread (RFC 0007); it changes no stored event.
APPENDS_NAMED_UPDATE = {"task_update"}


def test_the_api_has_no_update_or_delete(tmp_path):
    public = {n for n in dir(LogStore) if not n.startswith("_")} - APPENDS_NAMED_UPDATE
    assert not {n for n in public if any(w in n for w in ("update", "delete", "remove", "edit"))}
    with LogStore.open(str(tmp_path / "l.sqlite3")) as store:
        tid = workflows.task_create(
            store,
            project="p",
            from_agent="a",
            to_agent="b",
            goal="g",
            branch="main",
            base_commit="abcdef1",
            done="d",
        )["task"].correlation_id
        before = store.event_list(order="asc").events
        workflows.task_update(store, task_id=tid, action="claim", from_agent="b")
        after = store.event_list(order="asc").events
        assert after[: len(before)] == before and len(after) == len(before) + 1


# --------------------------------------------------------------------------- lifecycle, errors


def test_reopening_keeps_events_and_the_replica_id(tmp_path):
    path = str(tmp_path / "p" / "logstream.sqlite3")
    with LogStore.open(path) as s:
        e = s.event_append(type="x", stream="s", room="r", from_agent="a")
        rid = s.replica_id
    with LogStore.open(path) as s:
        assert s.replica_id == rid and rid.startswith("rep_") and len(rid) == 36
        assert s.event_get(e.id) == e
        nxt = s.event_append(type="x", stream="s", room="r", from_agent="a")
        assert nxt.seq > e.seq and nxt.hlc > e.hlc


def test_a_closed_store_refuses_writes_with_a_storage_error(tmp_path):
    s = LogStore.open(str(tmp_path / "c.sqlite3"))
    s.close()
    with pytest.raises(errors.StorageError, match="closed"):
        s.event_append(type="x", stream="s", room="r", from_agent="a")


def test_database_failures_surface_as_storage_errors(tmp_path):
    (tmp_path / "dir.sqlite3").mkdir()
    with pytest.raises(errors.StorageError):
        LogStore.open(str(tmp_path / "dir.sqlite3"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(errors.StorageError):
        LogStore.open(str(blocker / "sub" / "db.sqlite3"))
    with pytest.raises(errors.ValidationError, match="db"):
        LogStore.open("mysql://nope/x")


def test_a_busy_database_waits_then_reports_a_storage_error_not_a_raw_lock(tmp_path):
    path = tmp_path / "busy.sqlite3"
    url = engine_mod.sqlite_url(path)
    with LogStore(engine_mod.create_engine(url, busy_timeout_ms=300)) as s:
        s.event_append(type="x", stream="s", room="r", from_agent="a")
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.1, holder.execute, args=("COMMIT",))
        release.start()
        try:
            # Held for 0.1 s < the busy timeout: the append waits and succeeds.
            s.event_append(type="x", stream="s", room="r", from_agent="a")
        finally:
            release.join()
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(errors.StorageError, match="busy") as info:
                s.event_append(type="x", stream="s", room="r", from_agent="a")
            assert "retry" in str(info.value) and "database is locked" not in str(info.value)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert len(s.event_list().events) == 2


def test_the_store_file_is_created_with_missing_parent_directories(tmp_path):
    path = tmp_path / "a" / "b" / "logstream.sqlite3"
    with LogStore.open(str(path)) as s:
        s.event_append(type="x", stream="s", room="r", from_agent="a")
    assert Path(path).exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_durability_levels_are_validated():
    with pytest.raises(errors.ValidationError, match="durability"):
        engine_mod.create_engine("sqlite:////tmp/x.sqlite3", durability="sometimes")


def test_the_event_table_is_keyed_by_seq(store):
    assert [c.name for c in events.primary_key.columns] == ["seq"]
