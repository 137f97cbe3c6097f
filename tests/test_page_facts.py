"""Columns a page leaves out by the log's facts (issue 25, `plan.read_page`): the links
column while no event links an artifact, `sig` and `key_id` while no event is signed. The
read's tip asks the facts (one EXISTS each, `log.tip_facts_statement`); a read returns exactly
what a page of every column returns, and a commit that links an artifact or signs an event
(this store, another store or process on the file) is read at once. Left in on purpose:
origin_replica (one replica on the whole log is two index probes per read after a commit,
measured +4-5 µs on a read of ~85 µs: more than it saves)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import agents, schema, sync
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


def test_a_page_of_a_log_without_links_reads_as_a_page_of_every_column(
    store: Any, peer: Any
) -> None:
    for n in range(plan.TYPED_MIN_ROWS):
        store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
    events, columns = _columns(store, correlation_id="t")
    assert "artifact_links" not in columns and "event_artifacts" not in columns
    assert "origin_replica" in columns and "events.sig" not in columns
    assert "events.key_id" not in columns
    assert [_fields(e) for e in events] == _as_read_whole(_url(store), correlation_id="t")
    peer.event_append(**NOTE, body="from the peer", correlation_id="t")
    sync.sync_with_peer(store, sync.LocalPeer(peer))
    events, columns = _columns(store, correlation_id="t")
    assert "artifact_links" not in columns
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
        bad = plant_row(path, body=b"\xff blob")  # behind the API: read with its error
        events, columns = _columns(store, limit=2)
        assert "artifact_links" in columns and [e.id for e in events] == [bad, linked.id]
        assert "body" in events[0].to_dict()["row_error"]
        assert events[1].artifact_ids == (art.id,)


@pytest.mark.parametrize("rows", [2, plan.TYPED_MIN_ROWS + 1])
def test_a_row_of_the_wrong_type_reads_with_its_error_on_a_page_without_links(
    sqlite_store: Any, rows: int
) -> None:
    """A page tested at once (≥ `TYPED_MIN_ROWS` rows) or row by row, the links column left
    out: a row written behind the API reads with its error, the others exactly."""
    path = str(sqlite_store.engine.url.database)
    for n in range(rows - 1):
        sqlite_store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
    bad = plant_row(path, origin_seq="later", correlation_id="t")
    events, columns = _columns(sqlite_store, correlation_id="t", order="asc")
    assert "artifact_links" not in columns
    assert events[-1].id == bad and "origin_seq" in events[-1].to_dict()["row_error"]
    assert events[-1].artifact_ids == ()
    assert all("row_error" not in e.to_dict() for e in events[:-1])
    whole = _as_read_whole(f"sqlite:///{path}", correlation_id="t", order="asc")
    assert [_fields(e) for e in events] == whole


def test_the_fill_refuses_to_leave_out_what_the_page_rule_reads_by_position() -> None:
    for name in ("id", "seq", "origin_replica", "origin_seq"):
        with pytest.raises(ValueError, match="after id, seq and origin_seq"):
            plan.events_from_rows([("x",)], False, ((name,), ("x",)))


def test_a_signed_event_brings_sig_and_key_id_back_at_once(store: Any, tmp_path: Path) -> None:
    """The first signed event: the next read selects `sig` and `key_id` again, and the pages
    read before it (the same request, the same rows) read them as stored."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    for n in range(plan.TYPED_MIN_ROWS):
        store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
    before, columns = _columns(store, correlation_id="t", order="asc")
    assert "events.sig" not in columns and "events.key_id" not in columns
    assert all(e.sig is None and e.key_id is None for e in before)
    minted = agents.add(store, "alice")
    signed = store.event_append(**{**NOTE, "from_agent": "alice"}, body="s", correlation_id="t")
    assert signed.sig and signed.key_id == minted.key_id
    events, columns = _columns(store, correlation_id="t", order="asc")
    assert "events.sig" in columns and "events.key_id" in columns
    assert [_fields(e) for e in events[:-1]] == [_fields(e) for e in before]
    assert (events[-1].id, events[-1].sig, events[-1].key_id) == (
        signed.id,
        signed.sig,
        minted.key_id,
    )
    assert events[-1].verified is True
    assert [_fields(e) for e in events] == _as_read_whole(
        _url(store), correlation_id="t", order="asc"
    )


@pytest.mark.parametrize("column", ["sig", "key_id"])
def test_a_row_signed_behind_the_api_reads_its_signature(tmp_path: Path, column: str) -> None:
    """A row another process wrote with only `sig` or only `key_id` set (no key event): the
    fact is the index's predicate (either column set), so the next read selects both."""
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store:
        for n in range(plan.TYPED_MIN_ROWS + 1):
            store.event_append(**NOTE, body=f"b{n}", correlation_id="t")
        assert "events.sig" not in _columns(store, correlation_id="t")[1]
        planted = plant_row(path, correlation_id="t", **{column: "planted"})
        events, columns = _columns(store, correlation_id="t")
        assert "events.sig" in columns and "events.key_id" in columns
        assert events[0].id == planted and getattr(events[0], column) == "planted"
        whole = _as_read_whole(f"sqlite:///{path}", correlation_id="t")
        assert [_fields(e) for e in events] == whole


def test_the_signed_fact_is_one_probe_of_its_partial_index(sqlite_store: Any) -> None:
    """SQLite uses a partial index only where the query states its predicate: the tip's
    statement and the index say the same words (`schema.SIGNED_WHERE`)."""
    sqlite_store.event_append(**NOTE, body="b")
    sql = sqlite_store.reads._tip[0]
    assert schema.SIGNED_WHERE in sql
    db = sqlite_store.backend._writer()
    plan_rows = db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
    assert any("USING INDEX ix_events_signed" in row[-1] for row in plan_rows), plan_rows
