"""Columns a page leaves out by the log's facts (issue 25, `plan.read_page`): the links
column while no event links an artifact (an EXISTS in the read's tip, a log fact of the
reader), origin_replica while one replica wrote every event up to the tip (what the store
knows up to a seq; the events after it looked at). A read returns exactly what a page of
every column returns, and a commit that changes a fact (a link, a peer's event, a row written
behind the API, by this store or another process) is read at once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import sync
from mempalace_logstream.store import LogStore, plan, reads
from tests.test_stored_events import plant_row

NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}


def _columns(store: Any, **args: Any) -> tuple[list[Any], str]:
    """The events of `event_list(**args)` and the columns its page statement selects."""
    seen: list[str] = []
    hook = lambda sql, params: seen.append(sql)  # noqa: E731
    store.backend.statement_hooks.append(hook)
    try:
        events = list(store.event_list(**args).events)
    finally:
        store.backend.statement_hooks.remove(hook)
    page = next(s for s in seen if "events.body" in s)
    return events, re.split(r"FROM events\s+WHERE", page)[0]


def _as_read_whole(url: str, **args: Any) -> list[dict[str, Any]]:
    """Each event's fields (with their types) as a store whose pages select every column
    reads them."""
    with reads.no_log_facts(), LogStore.open(url, create=False) as whole:
        return [_fields(e) for e in whole.event_list(**args).events]


def _fields(event: Any) -> dict[str, Any]:
    return {k: (type(v), v) for k, v in event.__dict__.items()}


def _url(store: Any) -> str:
    return str(store.engine.url.render_as_string(hide_password=False))


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Any]:
    with LogStore.open(str(tmp_path / "peer.sqlite3")) as other:
        yield other


def test_facts_leave_columns_out_and_a_peer_event_brings_origin_replica_back(
    store: Any, peer: Any
) -> None:
    for n in range(plan.TYPED_MIN_ROWS):
        store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
    events, columns = _columns(store, correlation_id="t")
    assert "origin_replica" not in columns and "artifact_links" not in columns
    assert "origin_seq" in columns and "events.sig" in columns
    assert {e.origin_replica for e in events} == {store.replica_id}
    assert [_fields(e) for e in events] == _as_read_whole(_url(store), correlation_id="t")

    peer.event_append(**NOTE, body="from the peer", correlation_id="t")
    sync.sync_with_peer(store, sync.LocalPeer(peer))
    events, columns = _columns(store, correlation_id="t")
    assert "origin_replica" in columns and "artifact_links" not in columns
    assert [e.origin_replica for e in events[:2]] == [peer.replica_id, store.replica_id]
    assert [_fields(e) for e in events] == _as_read_whole(_url(store), correlation_id="t")


def test_a_link_brings_the_links_column_back_at_once(store: Any) -> None:
    plain = store.event_append(**NOTE, body="plain")
    assert "artifact_links" not in _columns(store)[1]
    art = store.artifact_put(kind="note", content="c", created_by="a")
    linked = store.event_append(**NOTE, body="linked", artifact_ids=[art.id])
    events, columns = _columns(store, order="asc")
    assert "artifact_links" in columns
    assert [(e.id, e.artifact_ids) for e in events] == [(plain.id, ()), (linked.id, (art.id,))]
    assert [_fields(e) for e in events] == _as_read_whole(_url(store), order="asc")


def test_another_process_writing_the_file_moves_the_facts(tmp_path: Path) -> None:
    """The facts are the reader's log facts: any commit to the file (another store, another
    process) makes the next read ask them again (`PRAGMA data_version`)."""
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store, LogStore.open(path) as other:
        store.event_append(**NOTE, body="mine")
        assert "artifact_links" not in _columns(store)[1]
        art = other.artifact_put(kind="note", content="c", created_by="a")
        linked = other.event_append(**NOTE, body="linked", artifact_ids=[art.id])
        events, columns = _columns(store, limit=1)
        assert "artifact_links" in columns and events[0].id == linked.id
        assert events[0].artifact_ids == (art.id,)
        bad = plant_row(path, origin_replica=b"rep_blob")
        events, columns = _columns(store, limit=1)
        assert "origin_replica" in columns and events[0].id == bad
        assert "origin_replica" in events[0].to_dict()["row_error"]


@pytest.mark.parametrize("rows", [2, plan.TYPED_MIN_ROWS + 1])
def test_an_origin_seq_of_the_wrong_type_is_found_without_origin_replica(
    sqlite_store: Any, rows: int
) -> None:
    """The type test finds origin_seq one place earlier in a row without origin_replica: a
    row written behind the API by the log's one replica with a text origin_seq reads with its
    error, on a page tested at once (≥ `TYPED_MIN_ROWS` rows) or row by row."""
    path = str(sqlite_store.engine.url.database)
    for n in range(rows - 1):
        sqlite_store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
    bad = plant_row(path, origin_seq="later", correlation_id="t")
    events, columns = _columns(sqlite_store, correlation_id="t", order="asc")
    assert "origin_replica" not in columns
    assert events[-1].id == bad and "origin_seq" in events[-1].to_dict()["row_error"]
    assert events[-1].origin_replica == sqlite_store.replica_id
    assert all("row_error" not in e.to_dict() for e in events[:-1])
    whole = _as_read_whole(f"sqlite:///{path}", correlation_id="t", order="asc")
    assert [_fields(e) for e in events] == whole


def test_the_fill_refuses_to_leave_out_what_the_page_rule_reads_by_position() -> None:
    for name in ("id", "seq", "origin_seq"):
        with pytest.raises(ValueError, match="by position"):
            plan.events_from_rows([("x",)], False, ((name,), ("x",)))


def test_what_the_store_knows_of_its_replicas_costs_no_statement(
    sqlite_store: Any, peer: Any
) -> None:
    """The index's ends are probed by the first read; after a commit the tip looks only at
    the events after the seq the store knows (no statement of its own); a log of several
    replicas is known so for good and its tip reads no replica."""
    seen: list[str] = []
    sqlite_store.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
    sqlite_store.event_append(**NOTE, body="1")
    sqlite_store.event_list()
    tips = [s for s in seen if "linked" in s]
    assert len(tips) == 1 and "min(x.origin_replica)" in tips[0] and "!=" not in tips[0]
    sqlite_store.event_append(**NOTE, body="2")
    seen.clear()
    assert sqlite_store.event_list().events[0].origin_replica == sqlite_store.replica_id
    tips = [s for s in seen if "linked" in s]
    assert len(tips) == 1 and "o.origin_replica !=" in tips[0]
    assert sqlite_store.reads.one_replica == (2, sqlite_store.replica_id)
    peer.event_append(**NOTE, body="from the peer")
    sync.sync_with_peer(sqlite_store, sync.LocalPeer(peer))
    assert sqlite_store.event_list(limit=1).events[0].origin_replica == peer.replica_id
    assert sqlite_store.reads.one_replica is None and sqlite_store.reads.replicas
    sqlite_store.event_append(**NOTE, body="3")
    seen.clear()
    sqlite_store.event_list()
    assert not any("origin_replica)" in s or "origin_replica !=" in s for s in seen)


@pytest.mark.parametrize("scan_max", [2, 1024])
def test_the_events_after_what_the_store_knows_are_looked_at_or_the_index_probed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scan_max: int
) -> None:
    """Up to `REPLICA_SCAN_MAX` events after the known seq the tip looks at each, further
    behind it probes the index's ends: the same answer, a peer's event found either way."""
    from mempalace_logstream.backends.queries import log as log_queries

    monkeypatch.setattr(log_queries, "REPLICA_SCAN_MAX", scan_max)
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store:
        store.event_append(**NOTE, body="0")
        assert store.event_list().events[0].origin_replica == store.replica_id
        assert store.reads.one_replica == (1, store.replica_id)
        for _ in range(4):
            store.event_append(**NOTE, body="n")
        plant_row(path, origin_replica="rep_" + "f" * 32, origin_seq=1)
        store.event_append(**NOTE, body="last")
        events, columns = _columns(store, order="asc")
        assert "origin_replica" in columns
        assert [e.origin_replica for e in events].count("rep_" + "f" * 32) == 1
        assert store.reads.replicas and store.reads.one_replica is None
