"""Replication primitives (S-7.1–S-7.3): list_ops, remote apply, refusals, conflicts, HLC."""

from __future__ import annotations

import base64
import hashlib
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors, migrate, replication
from mempalace_logstream.backends import engine as engine_mod


def _note(store: LogStore, body: str = "hi", **kw: Any):
    return store.event_append(type="note", stream="s", room="r", from_agent="a", body=body, **kw)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A migrated but never-opened file: copies of it skip Alembic and mint their own replica."""
    path = tmp_path_factory.mktemp("tpl") / "template.sqlite3"
    eng = engine_mod.create_engine(f"sqlite:///{path}")
    migrate.upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def other(tmp_path, template):
    shutil.copy(template, tmp_path / "other.sqlite3")
    s = LogStore.open(str(tmp_path / "other.sqlite3"))
    yield s
    s.close()


def _wire(store: LogStore, origin: str | None = None) -> list[dict[str, Any]]:
    return replication.ops_page(store, origin or store.replica_id, 0, 500)["events"]


def test_list_ops_pages_in_origin_seq_order_with_artifact_ids(store: LogStore) -> None:
    art = store.artifact_put(kind="note", content="x", created_by="a")
    first = [_note(store, f"b{i}") for i in range(5)]
    with_art = _note(store, "ref", artifact_ids=[art.id])
    page1 = replication.list_ops(store, store.replica_id, 0, 3)
    page2 = replication.list_ops(store, store.replica_id, page1[-1].origin_seq, 500)
    ids = [e.id for e in page1 + page2]
    assert ids == [e.id for e in first] + [with_art.id]
    assert page2[-1].artifact_ids == (art.id,)
    assert [e.origin_seq for e in page1 + page2] == sorted(e.origin_seq for e in page1 + page2)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", 0, 10), "origin"),
        (("rep_x", -1, 10), "after"),
        (("rep_x", 0, 0), "limit"),
        (("rep_x", "x", 10), "after"),
    ],
)
def test_list_ops_rejects_bad_arguments(sqlite_store: LogStore, args: tuple, field: str) -> None:
    with pytest.raises(errors.ValidationError) as info:
        replication.list_ops(sqlite_store, *args)
    assert info.value.field == field


def test_list_ops_clamps_limit_to_500(sqlite_store: LogStore) -> None:
    for i in range(3):
        _note(sqlite_store, str(i))
    assert len(replication.list_ops(sqlite_store, sqlite_store.replica_id, 0, 10_000)) == 3


def test_remote_event_is_applied_verbatim_with_a_fresh_local_seq(store: LogStore, other) -> None:
    _note(store, "local first")
    src = _note(other, "remote body", topic="t", metadata={"z": 1, "a": [1, 2]})
    wire = _wire(other)[0]
    assert replication.apply_remote_event(store, wire) is True
    got = store.event_get(src.id)
    for key in (
        "id",
        "origin_replica",
        "origin_seq",
        "hlc",
        "type",
        "stream",
        "room",
        "topic",
        "from_agent",
        "body",
        "created_at",
        "metadata",
        "artifact_ids",
    ):
        assert got.to_dict()[key] == src.to_dict()[key], key
    assert got.seq == 2
    assert list(got.metadata) == ["z", "a"]  # key order kept


def test_apply_is_idempotent(store: LogStore, other) -> None:
    _note(other)
    wire = _wire(other)[0]
    assert replication.apply_remote_event(store, wire) is True
    assert replication.apply_remote_event(store, wire) is False
    assert store.stats()["events"] == 1


def test_same_content_with_reordered_metadata_keys_is_a_duplicate(
    sqlite_store: LogStore, other
) -> None:
    _note(other, metadata={"b": 1, "a": 2})
    wire = _wire(other)[0]
    replication.apply_remote_event(sqlite_store, wire)
    sorted_wire = {**wire, "metadata": {"a": 2, "b": 1}}  # how the reference re-serializes it
    assert replication.apply_remote_event(sqlite_store, sorted_wire) is False
    assert replication.list_conflicts(sqlite_store) == []


def test_own_echo_is_skipped(sqlite_store: LogStore) -> None:
    _note(sqlite_store)
    assert replication.apply_remote_event(sqlite_store, _wire(sqlite_store)[0]) is False


def test_same_id_with_different_content_is_a_recorded_conflict(store: LogStore, other) -> None:
    _note(other, "original")
    wire = _wire(other)[0]
    replication.apply_remote_event(store, wire)
    forged = {**wire, "body": "rewritten"}
    with pytest.raises(errors.ConflictError) as info:
        replication.apply_remote_event(store, forged, peer="evil")
    assert info.value.ident == wire["id"]
    assert store.event_get(wire["id"]).body == "original"
    conflicts = replication.list_conflicts(store)
    assert len(conflicts) == 1
    assert conflicts[0]["remote"]["body"] == "rewritten"
    assert conflicts[0]["peer"] == "evil" and conflicts[0]["reason"] == "different_content"
    replication.apply_remote_events(store, [forged])  # seen again: still one record
    assert len(replication.list_conflicts(store)) == 1


def test_a_taken_origin_position_with_another_id_is_a_conflict(
    sqlite_store: LogStore, other
) -> None:
    _note(other, "one")
    wire = _wire(other)[0]
    replication.apply_remote_event(sqlite_store, wire)
    twin = {**wire, "id": "evt_20260101T000000_" + "ab" * 10}
    res = replication.apply_remote_events(sqlite_store, [twin])
    assert res.applied_events == 0 and res.conflicts[0]["reason"] == "origin_seq_taken"


INVALID_CHANGES = [
    ({"type": "Not A Type"}, "type"),
    ({"body": "x" * (256 * 1024 + 1)}, "body"),
    ({"status": "done"}, "status"),
    ({"stream": "a\nb"}, "stream"),
    ({"from_agent": "*"}, "from_agent"),  # the broadcast address is no writer
    ({"id": "evt bad id"}, "id"),
    ({"hlc": "yesterday"}, "hlc"),
    ({"created_at": "2026-01-01 00:00:00"}, "created_at"),
    ({"origin_replica": "rep_nothex"}, "origin_replica"),
    ({"metadata": [1, 2]}, "metadata"),
    ({"origin_seq": 0}, "origin_seq"),
    ({"artifact_ids": "art_1"}, "artifact_ids"),
]


def test_invalid_remote_events_are_refused_and_nothing_else_is_lost(store: LogStore, other):
    for i in range(3 * len(INVALID_CHANGES)):
        _note(other, str(i))
    wires = _wire(other)
    for n, (change, field) in enumerate(INVALID_CHANGES):
        trio = wires[3 * n : 3 * n + 3]
        bad = {**trio[1], **change}
        res = replication.apply_remote_events(store, [trio[0], bad, trio[2]], peer="p")
        assert res.applied_events == 2, change
        assert [r["field"] for r in res.rejected] == [field]
        assert res.rejected[0]["reason"] == "invalid"
        with pytest.raises(errors.ValidationError):
            replication.apply_remote_event(store, bad)
    rows = replication.list_rejections(store)
    assert len(rows) == len(INVALID_CHANGES)
    assert all(r["retryable"] is False and r["reason"] == "invalid" for r in rows)
    assert store.stats()["events"] == 2 * len(INVALID_CHANGES)


def test_tampered_artifact_is_refused_and_reported(store: LogStore, other) -> None:
    art = other.artifact_put(kind="patch", content="diff --git a b\n", created_by="a")
    good = other.artifact_put(kind="note", content="fine", created_by="a")
    wire = other.artifact_get(art.id).to_dict()
    tampered = {**wire, "content": "rm -rf /\n"}
    res = replication.apply_remote_artifacts(
        store, [tampered, other.artifact_get(good.id).to_dict()], "p"
    )
    assert res.applied_artifacts == 1
    assert res.rejected[0]["reason"] == "tampered" and res.rejected[0]["ident"] == art.id
    with pytest.raises(errors.NotFoundError):
        store.artifact_get(art.id)
    with pytest.raises(errors.ValidationError, match="sha256"):
        replication.apply_remote_artifact(store, tampered)
    assert replication.apply_remote_artifact(store, wire) is True  # the genuine bytes later
    assert replication.apply_remote_artifact(store, wire) is False
    assert not [r for r in replication.list_rejections(store) if r["ident"] == art.id]


def test_artifact_with_a_lying_size_is_refused(sqlite_store: LogStore, other) -> None:
    art = other.artifact_put(kind="note", content="abc", created_by="a")
    wire = {**other.artifact_get(art.id).to_dict(), "size_bytes": 99}
    with pytest.raises(errors.ValidationError) as info:
        replication.apply_remote_artifact(sqlite_store, wire)
    assert info.value.field == "size_bytes"


def test_binary_artifact_travels_as_base64_and_keeps_its_bytes(store: LogStore, other) -> None:
    raw = bytes(range(256)) * 3
    art = other.artifact_put(kind="file", content=raw, created_by="a")
    wire = other.artifact_get(art.id).to_dict()
    assert wire["encoding"] == "base64"
    assert replication.apply_remote_artifact(store, wire) is True
    got = store.artifact_get(art.id)
    assert got.content == raw and got.sha256 == hashlib.sha256(raw).hexdigest()
    assert base64.b64decode(wire["content"]) == raw


def test_reference_shaped_artifact_without_encoding_is_text(sqlite_store: LogStore) -> None:
    content = "héllo\n"
    wire = {
        "id": "art_20260101T000000_0123456789ab",
        "kind": "note",
        "sha256": hashlib.sha256(content.encode()).hexdigest(),
        "size_bytes": 7,
        "content": content,
        "created_by": "a",
        "created_at": "2026-01-01T00:00:00Z",
        "origin_replica": "rep_0123456789ab",
        "metadata": {},
    }
    assert replication.apply_remote_artifact(sqlite_store, wire) is True
    assert sqlite_store.artifact_get(wire["id"]).content == content.encode()


def test_event_referencing_an_unknown_artifact_is_deferred_then_applied(
    store: LogStore, other
) -> None:
    art = other.artifact_put(kind="note", content="x", created_by="a")
    ev = _note(other, artifact_ids=[art.id])
    wire = _wire(other)[0]
    with pytest.raises(errors.NotFoundError):
        replication.apply_remote_event(store, wire)
    assert replication.pull_after(store, other.replica_id, 5) == ev.origin_seq - 1
    assert replication.counts(store)["deferred"] == 1
    replication.apply_remote_artifact(store, other.artifact_get(art.id).to_dict())
    assert replication.apply_remote_event(store, wire) is True
    assert replication.counts(store)["deferred"] == 0
    assert replication.pull_after(store, other.replica_id, 5) == 5


def test_deferred_event_stops_pinning_its_origin_after_max_retries(sqlite_store: LogStore, other):
    art = other.artifact_put(kind="note", content="x", created_by="a")
    _note(other, artifact_ids=[art.id])
    wire = _wire(other)[0]
    for _ in range(replication.MAX_RETRIES):
        replication.apply_remote_events(sqlite_store, [wire])
    assert replication.pull_after(sqlite_store, other.replica_id, 5) == 5
    assert replication.list_rejections(sqlite_store)[0]["attempts"] == replication.MAX_RETRIES


def _copy(template: Path, path: Path) -> str:
    shutil.copy(template, path)
    return str(path)


def test_remote_hlc_is_observed_so_the_next_local_stamp_is_greater(
    tmp_path, clock, template
) -> None:
    a = LogStore.open(_copy(template, tmp_path / "a.sqlite3"), clock=clock)
    ahead_clock = type(clock)(clock.ms + 30_000)
    b = LogStore.open(_copy(template, tmp_path / "b.sqlite3"), clock=ahead_clock)
    try:
        _note(b, "from the future, within drift")
        replication.apply_remote_event(a, _wire(b)[0])
        assert _note(a).hlc[:20] > _wire(b)[0]["hlc"][:20]
    finally:
        a.close()
        b.close()


def test_far_future_hlc_is_kept_but_not_adopted_and_recorded(tmp_path, clock, template) -> None:
    a = LogStore.open(_copy(template, tmp_path / "a.sqlite3"), clock=clock)
    b = LogStore.open(
        _copy(template, tmp_path / "b.sqlite3"), clock=type(clock)(clock.ms + 3_600_000)
    )
    try:
        _note(b)
        wire = _wire(b)[0]
        res = replication.apply_remote_events(a, [wire], "p")
        assert res.applied_events == 1 and len(res.clock_anomalies) == 1
        assert a.event_get(wire["id"]).hlc == wire["hlc"]
        assert int(_note(a).hlc[:13]) == clock.ms  # the clock did not jump an hour
        assert replication.list_clock_anomalies(a)[0]["event_id"] == wire["id"]
    finally:
        a.close()
        b.close()


def test_applied_remote_events_reach_waiters(sqlite_store: LogStore, other) -> None:
    mark = _note(sqlite_store, "mark")
    _note(other)
    got: list[Any] = []
    t = threading.Thread(
        target=lambda: got.append(
            sqlite_store.event_wait(since_event_id=mark.id, timeout_ms=20_000)
        )
    )
    t.start()
    replication.apply_remote_events(sqlite_store, _wire(other))
    t.join(30)
    assert got and [e.id for e in got[0].events] == [_wire(other)[0]["id"]]


def test_seq_order_is_commit_order_with_concurrent_local_appends(store: LogStore, other) -> None:
    for i in range(40):
        _note(other, str(i))
    wires = _wire(other)

    def local() -> None:
        for i in range(40):
            _note(store, f"l{i}")

    t = threading.Thread(target=local)
    t.start()
    for i in range(0, 40, 5):
        replication.apply_remote_events(store, wires[i : i + 5])
    t.join()
    page = store.event_list(limit=500, order="asc")
    seqs = [e.seq for e in page.events]
    assert seqs == list(range(1, 81))
    remote = [e.origin_seq for e in page.events if e.origin_replica == other.replica_id]
    assert remote == sorted(remote)


def test_origin_summary_counts_events_per_origin(sqlite_store: LogStore, other) -> None:
    for i in range(3):
        _note(other, str(i))
    replication.apply_remote_events(sqlite_store, _wire(other)[::2])  # a hole at origin_seq 2
    summary = replication.origin_summary(sqlite_store)[other.replica_id]
    assert summary == {"max": 3, "count": 2}


# ----------------------------------------------------------------------------- compact pages


def _rich_events(store: LogStore) -> list[Any]:
    """Events that stress the wire: several artifacts (unsorted ids), unicode, escapes, nested
    and numeric metadata, every optional field."""
    a1 = store.artifact_put(kind="note", content="one", created_by="x")
    a2 = store.artifact_put(kind="file", content=b"\x00\x01", created_by="x")
    out = [
        _note(
            store,
            'quotes " \\ and\nnew\tlines, café ✓ 🚀',
            artifact_ids=[a2.id, a1.id],
            metadata={
                "n": 1,
                "f": 1.5,
                "big": 2**70,
                "e": 1e20,
                "s": "é\u2028",
                "l": [1, {}],
                "z": None,
                "t": True,
            },
        ),
        store.event_append(
            type="task.request",
            stream="p/x",
            room="delegation",
            from_agent="a",
            to_agent="*",
            topic="t",
            correlation_id="c1",
            branch="main",
            base_commit="abc1234",
            status="open",
            body="",
        ),
    ]
    out += [_note(store, f"n{i}") for i in range(5)]
    return out


def test_ops_rows_carry_exactly_what_ops_page_carries(store: LogStore) -> None:
    _rich_events(store)
    events = _wire(store)
    page = replication.ops_rows(store, store.replica_id, 0, 100)
    assert page["columns"] == list(replication.ROW_COLUMNS) and page["format"] == "rows-v2"
    assert page["rows"] == [[e[c] for c in replication.ROW_COLUMNS] for e in events]
    assert page["count"] == len(events) and page["origin"] == store.replica_id
    assert page["rows"][0][replication.ROW_COLUMNS.index("artifact_ids")] == sorted(
        events[0]["artifact_ids"]
    )
    tail = replication.ops_rows(store, store.replica_id, events[2]["origin_seq"], 2)["rows"]
    assert [r[0] for r in tail] == [e["id"] for e in events[3:5]]


def test_ops_rows_json_is_the_same_rows_on_every_path(store: LogStore) -> None:
    import json

    _rich_events(store)
    want = replication.ops_rows(store, store.replica_id, 0, 100)["rows"]
    origin, text, count = replication.ops_rows_json(store, f" {store.replica_id} ", 0, 100)
    assert origin == store.replica_id and count == len(want) and isinstance(text, bytes)
    got = json.loads(text.decode("utf-8"))
    key = replication.ROW_COLUMNS.index("origin_seq")
    assert sorted(got, key=lambda r: r[key]) == want  # order inside a page is not promised
    _, text, count = replication.ops_rows_json(store, store.replica_id, want[-1][key], 10)
    assert (json.loads(text), count) == ([], 0)


def test_compact_pages_are_bounded_by_bytes_but_never_empty(sqlite_store: LogStore) -> None:
    for i in range(1200):
        _note(sqlite_store, "x" * 100 + str(i))
    rid = sqlite_store.replica_id
    page = replication.ops_rows(sqlite_store, rid, 0, 5000, max_bytes=1000)
    assert 1 <= page["count"] <= 11  # stops at the row that reaches the budget
    assert replication.ops_rows(sqlite_store, rid, 0, 5000, max_bytes=1)["count"] == 1
    # The SQLite JSON path stops at the first chunk that reaches the budget.
    _, _, n = replication.ops_rows_json(sqlite_store, rid, 0, 5000, max_bytes=1000)
    assert 1 <= n <= replication.READ_CHUNK
    assert replication.ops_rows_json(sqlite_store, rid, 0, 5000)[2] == 1200
    assert replication.ops_rows(sqlite_store, rid, 0, 10**6)["count"] == 1200  # clamped


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", 0, 10), "origin"),
        (("rep_x", -1, 10), "after"),
        (("rep_x", 0, 0), "limit"),
        (("rep_x", "x", 10), "after"),
        (("rep_x", 0, "many"), "limit"),
    ],
)
def test_ops_rows_rejects_bad_arguments(sqlite_store: LogStore, args: tuple, field: str) -> None:
    for fn in (replication.ops_rows, replication.ops_rows_json):
        with pytest.raises(errors.ValidationError) as exc:
            fn(sqlite_store, *args)
        assert exc.value.field == field


def test_rows_are_validated_like_event_objects(sqlite_store: LogStore, other) -> None:
    for i in range(4):
        _note(other, f"r{i}")
    rows = replication.ops_rows(other, other.replica_id, 0, 10)["rows"]
    at = replication.ROW_COLUMNS.index
    bad_type = [*rows[0]]
    bad_type[at("type")] = "NOT A TYPE"
    bad_hlc = [*rows[1]]
    bad_hlc[at("hlc")] = "yesterday"
    res = replication.apply_remote_batch(
        sqlite_store,
        (),
        replication.parse_events(
            sqlite_store, [bad_type, bad_hlc, rows[2][:5], rows[3]], "p", rows=True
        ),
        "p",
    )
    assert res.applied_events == 1
    assert sorted(r["field"] for r in res.rejected) == ["event", "hlc", "type"]
    assert {r["ident"] for r in res.rejected if r["field"] != "event"} == {
        rows[0][0],
        rows[1][0],
    }  # reported by id, as an event object would be
    assert replication.counts(sqlite_store)["rejections"] == 3


def test_a_conflicting_row_is_recorded_like_a_conflicting_event(
    sqlite_store: LogStore, other
) -> None:
    _note(other, "original")
    replication.apply_remote_events(sqlite_store, _wire(other))
    row = replication.ops_rows(other, other.replica_id, 0, 10)["rows"][0]
    forged = [*row]
    forged[replication.ROW_COLUMNS.index("body")] = "forged"
    parsed = replication.parse_events(sqlite_store, [forged], "p", rows=True)
    res = replication.apply_remote_batch(sqlite_store, (), parsed, "p")
    assert [c["reason"] for c in res.conflicts] == ["different_content"]
    recorded = replication.list_conflicts(sqlite_store)[0]["remote"]
    assert recorded["body"] == "forged" and recorded["metadata"] == {}


# An oracle for EventChecker: the historical parse_remote_event, built on store.draft_event.
def _oracle(store: LogStore, raw: Any) -> Any:
    from mempalace_logstream import hlc
    from mempalace_logstream import validation as v

    if not isinstance(raw, dict):
        raise v.fail("event", "must be a JSON object")
    draft = store.draft_event(
        type=raw.get("type"),
        stream=raw.get("stream"),
        room=raw.get("room"),
        from_agent=raw.get("from_agent"),
        topic=raw.get("topic"),
        to_agent=raw.get("to_agent"),
        correlation_id=raw.get("correlation_id"),
        branch=raw.get("branch"),
        base_commit=raw.get("base_commit"),
        status=raw.get("status"),
        body=raw.get("body"),
        metadata=raw.get("metadata"),
        artifact_ids=raw.get("artifact_ids"),
    )
    for i, aid in enumerate(draft["artifact_ids"]):
        v.remote_id(f"artifact_ids[{i}]", aid)
    origin = v.replica_id(raw.get("origin_replica"), "origin_replica")
    origin_seq = v.strict_int("origin_seq", raw.get("origin_seq"))
    if origin_seq < 1:
        raise v.fail("origin_seq", f"is {origin_seq}; it must be a positive integer")
    stamp = raw.get("hlc")
    if not isinstance(stamp, str) or hlc.parse(stamp) is None or len(stamp) > 200:
        raise v.fail("hlc", "bad")
    ident = v.remote_id("id", raw.get("id"))
    created = replication.check_created_at(raw.get("created_at"))
    fields = {
        k: draft[k]
        for k in (
            "type",
            "stream",
            "room",
            "topic",
            "from_agent",
            "to_agent",
            "correlation_id",
            "branch",
            "base_commit",
            "status",
            "artifact_ids",
            "body",
            "metadata_json",
        )
    }
    return {
        **fields,
        "id": ident,
        "origin_replica": origin,
        "origin_seq": origin_seq,
        "hlc": stamp,
        "created_at": created,
        "sig": raw.get("sig"),
        "key_id": raw.get("key_id"),
    }


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        out = fn(*args)
    except errors.ValidationError as exc:
        return ("refused", exc.field)
    if not isinstance(out, dict):
        out = {k: v for k, v in out.__dict__.items() if k != "seq"}
    return ("ok", out)


_ROUTING = [
    "s",
    " s ",
    "",
    "\t",
    "x" * 257,
    "a\nb",
    "nul\x00",
    7,
    None,
    ["s"],
    "task.done",
    "BAD TYPE",
    "open",
    "Open",
    "claimed ",
    "é",
]


def _remote_events() -> Any:
    from hypothesis import strategies as st

    rid = "rep_" + "a" * 32
    base = {
        "id": "evt_1",
        "origin_replica": rid,
        "origin_seq": 3,
        "hlc": f"1780000000000-00000a-{rid}",
        "type": "note",
        "stream": "s",
        "room": "r",
        "from_agent": "a",
        "body": "b",
        "created_at": "2026-01-01T00:00:00.000Z",
        "metadata": {},
        "artifact_ids": [],
    }
    values = {
        **{
            k: st.sampled_from(_ROUTING)
            for k in (
                "type",
                "stream",
                "room",
                "from_agent",
                "topic",
                "to_agent",
                "correlation_id",
                "branch",
                "base_commit",
                "status",
            )
        },
        "id": st.sampled_from(["evt_1", "evt 2", "", None, "x" * 129, "e:1.2_3-4"]),
        "origin_replica": st.sampled_from([rid, "rep_x", None, " " + rid, "rep_" + "b" * 12]),
        "origin_seq": st.sampled_from([1, 0, -3, "4", 2.0, 2.5, True, None, "x"]),
        "hlc": st.sampled_from(
            [
                base["hlc"],
                "1780000000000-00000A-r",
                "x",
                None,
                5,
                "1780000000000-00000a-" + "r" * 300,
            ]
        ),
        "body": st.sampled_from(["b", "", None, 3, "nul\x00", "\ud800", "x" * 300]),
        "created_at": st.sampled_from(
            [base["created_at"], "2026-01-01", None, "2026-01-01T00:00:00Z"]
        ),
        "metadata": st.sampled_from(
            [{}, {"a": 1}, '{"a": 1}', "[1]", "nope", None, {"k": "\x00"}, {"f": float("nan")}, []]
        ),
        "artifact_ids": st.sampled_from([[], ["art_1"], ["art 1"], "art_1", [3], ["a", "a"], None]),
    }
    return st.fixed_dictionaries({}, optional={k: s for k, s in values.items()}).map(
        lambda changes: {**base, **changes}
    )


def test_event_checker_is_the_local_write_rules_exactly(sqlite_store: LogStore) -> None:
    """EventChecker (memoized, one per batch) refuses and cleans exactly like draft_event plus
    the replication fields, value for value, whatever repeats across a batch."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(_remote_events(), min_size=1, max_size=6))
    def check(raws: list[dict[str, Any]]) -> None:
        checker = replication.EventChecker(sqlite_store)  # shared: memo hits across items
        for raw in raws:
            want = _outcome(_oracle, sqlite_store, raw)
            assert _outcome(checker.from_dict, raw) == want
            row = [raw.get(c) for c in replication.ROW_COLUMNS]
            assert _outcome(checker.from_row, row) == want

    check()


def test_unreadable_stored_metadata_travels_as_on_ops_page(sqlite_store: LogStore) -> None:
    """A row whose stored metadata is not a JSON object (written by hand, an old version) is
    served as `{}` on every page shape, as Event.metadata reads it; the page still serves."""
    import json

    import sqlalchemy as sa

    for i in range(3):
        _note(sqlite_store, f"m{i}", metadata={"i": i})
    with sqlite_store.engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER IF EXISTS events_no_update"))
        conn.execute(sa.text("UPDATE events SET metadata_json = 'not json' WHERE seq = 1"))
        conn.execute(sa.text("UPDATE events SET metadata_json = '[1, 2]' WHERE seq = 2"))
    rid = sqlite_store.replica_id
    want = [e["metadata"] for e in _wire(sqlite_store)]
    assert want == [{}, {}, {"i": 2}]
    at = replication.ROW_COLUMNS.index("metadata")
    assert [r[at] for r in replication.ops_rows(sqlite_store, rid, 0, 10)["rows"]] == want
    rows = json.loads(replication.ops_rows_json(sqlite_store, rid, 0, 10)[1])
    assert [r[at] for r in sorted(rows, key=lambda r: r[2])] == want
