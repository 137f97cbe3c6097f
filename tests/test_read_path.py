"""The read path's fixed work (issue 25): what a read does besides its page statement.

A small page (a correlation id's few events) costs the statement plus a fixed part; these tests
hold the fixed part's rules: a `Page` made without its dataclass `__init__` is the same page, a
log without key events never asks for the keyring, the SQLite reader snapshot maps a database
error and drops the connection that met it.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors
from mempalace_logstream.models import Page
from mempalace_logstream.store import marks, plan

NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}


def test_new_page_is_the_page_the_dataclass_makes() -> None:
    """`plan.new_page` fills a Page like a read row fills an Event: every field, the ones it
    is not given at their defaults; equal, hashable, replaceable as the dataclass's own."""
    made = plan.new_page(("e",), "c", True, "n", 7, True, False)  # type: ignore[arg-type]
    own = Page(
        events=("e",),  # type: ignore[arg-type]
        cursor="c",
        has_more=True,
        note="n",
        scanned_seq=7,
        preview=True,
        slim=False,
    )
    assert type(made) is Page
    assert made == own and hash(made) == hash(own) and repr(made) == repr(own)
    assert [f.name for f in dataclasses.fields(Page)] == list(vars(made))
    assert made.replace(timed_out=True).timed_out is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.cursor = "x"  # type: ignore[misc]


def test_a_log_without_key_events_never_asks_for_the_keyring(tmp_path: Path) -> None:
    """The marks row says the log holds no key event: nothing can read unverified, so no read
    builds or even looks up the keyring (`marks.judge`, the lean reader's rule too)."""
    asked: list[int] = []
    with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
        sent = store.event_append(**NOTE, body="x")
        keyring = store.identity.keyring

        def counted(*args: Any, **kwargs: Any) -> Any:
            asked.append(1)
            return keyring(*args, **kwargs)

        store.identity.keyring = counted  # type: ignore[method-assign]
        assert [e.id for e in store.event_list().events] == [sent.id]
        assert store.event_get(sent.id).id == sent.id
    assert asked == []


def test_judge_asks_for_the_keyring_only_with_key_events() -> None:
    asked: list[int] = []

    class Ring:
        def records(self) -> tuple[()]:
            asked.append(1)
            return ()

    def keyring() -> Any:
        return Ring()

    assert marks.judge((None, "identity.pin.k"), (), keyring) == ()
    assert asked == []
    assert marks.judge(("evt_key", None), (), keyring) == ()
    assert asked == [1]


def test_a_database_error_in_a_read_is_a_storage_error_and_drops_its_connection(
    tmp_path: Path,
) -> None:
    """A read that meets a database error raises StorageError (its cause the driver's), and
    the connection it ran on goes back to the pool instead of being kept for the next read;
    a read that raises anything else keeps its connection; reads go on working."""
    with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
        store.event_append(**NOTE, body="x")
        store.event_list()
        kept = list(store.backend._readers)  # type: ignore[attr-defined]
        assert len(kept) == 1
        with pytest.raises(errors.StorageError) as got, store.snapshot() as ex:
            ex.query("SELECT * FROM no_such_table", {})
        assert isinstance(got.value.__cause__, sqlite3.OperationalError)
        assert store.backend._readers == []  # type: ignore[attr-defined]
        with pytest.raises(errors.NotFoundError):
            store.event_list(since_event_id="evt_missing")
        assert len(store.backend._readers) == 1  # type: ignore[attr-defined]
        assert [e.body for e in store.event_list().events] == ["x"]


def test_a_cursor_is_looked_up_again_after_a_commit_and_stays_exact(tmp_path: Path) -> None:
    """A cursor's seq is a log fact (an event's seq never changes): a read repeated on a quiet
    log runs only its page, any commit makes the next read look the cursor up again, and an
    unknown cursor is refused every time."""
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store, LogStore.open(path) as other:
        first = store.event_append(**NOTE, body="1")
        assert store.event_list(since_event_id=first.id).events == ()
        seen: list[str] = []
        store.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
        assert store.event_list(since_event_id=first.id).events == ()
        # no cursor lookup: only the id of the empty page's cursor, by its seq
        assert len(seen) == 1 and "WHERE events.seq = " in seen[0]
        second = other.event_append(**NOTE, body="2")
        seen.clear()
        page = store.event_list(since_event_id=first.id)
        assert [e.id for e in page.events] == [second.id]
        assert len(seen) == 4  # after the commit: the cursor, the tip, the page, the marks
        for _ in range(2):
            with pytest.raises(errors.NotFoundError):
                store.event_list(since_event_id="evt_missing")


def test_a_page_statement_is_remembered_per_request_and_only_for_it(tmp_path: Path) -> None:
    """`Reads._page_statement` keeps a request's page statement (text and parameters but the
    bounds) by the request object: a repeated read compiles nothing, and another request, even
    one made after the first was dropped (its id free again), reads its own page."""
    with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
        a = store.event_append(**NOTE, body="a", correlation_id="c1")
        b = store.event_append(**NOTE, body="b", correlation_id="c2")
        assert [e.id for e in store.event_list(correlation_id="c1").events] == [a.id]
        compiled = dict(store.pipeline.sql.cache)  # type: ignore[attr-defined]
        assert [e.id for e in store.event_list(correlation_id="c1").events] == [a.id]
        assert store.pipeline.sql.cache == compiled  # type: ignore[attr-defined]
        for i in range(300):  # past the memory's bound, each request made and dropped
            cid, want = (("c1", a.id), ("c2", b.id))[i % 2]
            req = store.read_request(correlation_id=[cid])  # a list: not remembered
            assert [e.id for e in store.read(req).events] == [want]
            del req
        req = store.read_request(correlation_id="c1", order="asc")
        assert [e.id for e in store.read(req).events] == [a.id]
        assert len(store.reads._pages) <= 256  # type: ignore[attr-defined]
