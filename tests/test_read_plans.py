"""Inbox reads on SQLite: one index-ordered leg per to_agent value, merged by UNION ALL.

`to_agent=X` matches X and '*'. As one `IN (X, '*')` list SQLite collects every match and sorts
it (a temp B-tree: ~100k rows for one inbox on a 1M-event log); `Reads._page_plan` reads
one (to_agent, seq) index range per value instead. These tests prove the two shapes return the
same pages on random data and that the inbox plan has no sort step.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import LogStore
from mempalace_logstream.store import reads as store_mod

AGENTS = ("a", "b", "c")
TO_VALUES = (None, "*", "a", "b", "c")
TYPES = ("chat.message", "task.request", "status.update")
CORRS = ("task_1", "task_2", "task_3")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LogStore, list[str]]]:
    """A store with 240 random events (fixed seed), and their ids in append order."""
    path = tmp_path_factory.mktemp("plans") / "logstream.sqlite3"
    store = LogStore.open(str(path), durability="off")
    rnd = random.Random(7)
    ids = []
    for i in range(240):
        kind, stream, writer = rnd.choice(TYPES), rnd.choice(("s1", "s2")), rnd.choice(AGENTS)
        if kind == "task.request":
            writer = "a"  # one requester per task: anyone else's second request is refused
        event = store.event_append(
            type=kind,
            stream=stream,
            room="r",
            from_agent=writer,
            to_agent=rnd.choice(TO_VALUES),
            correlation_id=rnd.choice((None, *CORRS)),
            body=f"event {i}",
        )
        ids.append(event.id)
    yield store, ids
    store.close()


@contextlib.contextmanager
def in_list_shape() -> Iterator[None]:
    """The plain `to_agent IN (...)` query shape (the split disabled)."""
    saved = store_mod._SPLIT_TO_AGENT_MAX
    store_mod._SPLIT_TO_AGENT_MAX = 0
    try:
        yield
    finally:
        store_mod._SPLIT_TO_AGENT_MAX = saved


def _page(store: LogStore, req: dict[str, Any]) -> tuple:
    page = store.event_list(**req)
    return [e.id for e in page.events], page.cursor, page.has_more, page.scanned_seq


requests = st.fixed_dictionaries(
    {"to_agent": st.lists(st.sampled_from(("a", "b", "c", "*", "nobody")), min_size=1, max_size=4)},
    optional={
        "type": st.lists(st.sampled_from(TYPES), min_size=1, max_size=2),
        "correlation_id": st.sampled_from(CORRS),
        "writer": st.sampled_from(AGENTS),
        "exclude_writer": st.sampled_from(AGENTS),
        "stream": st.sampled_from(("s1", "s2")),
        "order": st.sampled_from(("asc", "desc")),
        "limit": st.integers(min_value=1, max_value=60),
        "since_index": st.integers(min_value=0, max_value=239),
        "before_index": st.integers(min_value=0, max_value=239),
    },
)


@given(raw=requests)
def test_split_inbox_query_returns_the_same_pages_as_one_in_list(
    filled: tuple[LogStore, list[str]], raw: dict[str, Any]
) -> None:
    store, ids = filled
    req = dict(raw)
    if "since_index" in req:
        req["since_event_id"] = ids[req.pop("since_index")]
    if "before_index" in req:
        req["before_event_id"] = ids[req.pop("before_index")]
    split = _page(store, req)
    with in_list_shape():
        plain = _page(store, req)
    assert split == plain


def test_split_inbox_query_pages_through_the_whole_inbox_like_the_in_list(
    filled: tuple[LogStore, list[str]],
) -> None:
    store, ids = filled

    def walk() -> list[str]:
        seen, cursor = [], ids[0]
        while True:
            page = store.event_list(to_agent="b", since_event_id=cursor, limit=7)
            seen += [e.id for e in page.events]
            if not page.has_more:
                return seen
            cursor = page.cursor

    split = walk()
    with in_list_shape():
        plain = walk()
    assert split == plain
    assert len(split) > 20  # the data really has an inbox to walk


def _plans(store: LogStore, **req: Any) -> list[tuple[str, list[str]]]:
    """EXPLAIN QUERY PLAN of every SELECT one event_list call issues on a warm reader (the
    first read of a reader connection also asks the log facts, the tip and the keyring's
    marks, which later reads of a quiet log take from it)."""
    store.event_list(**req)
    seen: list[tuple[str, Any]] = []

    def grab(statement: str, params: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, params))

    store.backend.statement_hooks.append(grab)
    try:
        store.event_list(**req)
    finally:
        store.backend.statement_hooks.remove(grab)
    raw = sqlite3.connect(str(store.engine.url.database))
    try:
        return [
            (stmt, [row[3] for row in raw.execute("EXPLAIN QUERY PLAN " + stmt, params)])
            for stmt, params in seen
        ]
    finally:
        raw.close()


@pytest.mark.parametrize(
    "extra",
    [{}, {"order": "asc"}, {"type": "chat.message"}, {"since": 10}, {"since": 200}],
    ids=["newest", "oldest", "with-type", "cursor-early", "cursor-recent"],
)
def test_inbox_plan_reads_index_order_without_a_temp_b_tree(
    filled: tuple[LogStore, list[str]], extra: dict[str, Any]
) -> None:
    store, ids = filled
    req = dict(extra)
    if "since" in req:
        req["since_event_id"] = ids[req.pop("since")]
    plans = _plans(store, to_agent="a", **req)
    page_plans = [plan for stmt, plan in plans if "UNION ALL" in stmt]
    assert len(page_plans) == 1, plans
    steps = page_plans[0]
    assert "MERGE (UNION ALL)" in steps
    assert sum("ix_events_to_agent_seq" in s for s in steps) == 2, steps
    for stmt, plan in plans:
        assert not any("USE TEMP B-TREE FOR ORDER BY" in s for s in plan), (stmt, plan)


def test_many_to_agent_values_fall_back_to_one_in_list(
    filled: tuple[LogStore, list[str]],
) -> None:
    store, _ = filled
    names = [f"x{i}" for i in range(store_mod._SPLIT_TO_AGENT_MAX)] + ["a"]
    plans = _plans(store, to_agent=names)
    assert not any("UNION ALL" in stmt for stmt, _ in plans)
    got = [e.id for e in store.event_list(to_agent=names, limit=500).events]
    want = [e.id for e in store.event_list(to_agent="a", limit=500).events]
    assert got == want


def test_a_correlation_page_reads_the_correlation_index_in_seq_order(
    filled: tuple[LogStore, list[str]],
) -> None:
    """Issue 25: the task-thread read (`correlation_id=X`, newest first) is one range of the
    (correlation_id, seq) index, already in seq order: no sort, no other index."""
    store, _ = filled
    plans = _plans(store, correlation_id="task_2")
    page = [plan for stmt, plan in plans if "events.body" in stmt]
    assert len(page) == 1, plans
    assert any("ix_events_correlation_id_seq (correlation_id=?" in s for s in page[0]), page
    for stmt, plan in plans:
        assert not any("TEMP B-TREE" in s for s in plan), (stmt, plan)


def _statements(store: LogStore, **req: Any) -> list[str]:
    seen: list[str] = []
    store.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
    try:
        store.event_list(**req)
    finally:
        store.backend.statement_hooks.pop()
    return seen


def test_a_page_costs_three_statements_and_a_cursor_one_more(
    filled: tuple[LogStore, list[str]],
) -> None:
    """Issue 25's per-layer budget: the tip, the page, the keyring's marks probe; a cursor
    adds its seq lookup; an empty page skips the marks probe. While nothing is committed,
    the tip, the marks and a cursor's seq (log facts) are answered from the reader's last
    read: the page is all a read runs once its cursor was looked up."""
    filled_store, ids = filled
    with LogStore.open(str(filled_store.engine.url.database), create=False) as store:
        store.event_list(type="chat.message")
        assert len(_statements(store, type="chat.message")) == 1
        assert len(_statements(store, to_agent="a", since_event_id=ids[100])) == 2
        assert len(_statements(store, to_agent="a", since_event_id=ids[100])) == 1
        assert len(_statements(store, type="no.such.type")) == 1


def test_a_commit_makes_the_next_read_ask_for_the_log_facts_again(tmp_path: Any) -> None:
    """The remembered tip and marks hold only while `PRAGMA data_version` is unchanged: an
    append by this store's writer or by another process's store is read at once."""
    path = str(tmp_path / "log.sqlite3")
    note = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    with LogStore.open(path) as store, LogStore.open(path) as other:
        first = store.event_append(**note, body="1")
        assert [e.id for e in store.event_list().events] == [first.id]
        assert len(_statements(store)) == 1  # tip and marks remembered
        second = store.event_append(**note, body="2")
        assert len(_statements(store)) == 3  # the writer committed: asked again
        assert store.event_list(limit=1).events[0].id == second.id
        third = other.event_append(**note, body="3")
        assert store.event_list(limit=1).events[0].id == third.id
        page = store.event_list(since_event_id=first.id)
        assert [e.id for e in page.events] == [second.id, third.id]
        assert page.cursor == third.id


def test_reads_run_on_one_kept_connection_and_close_gives_it_back(tmp_path: Any) -> None:
    """SQLite reads reuse the connection the last read used (its page cache is warm; no pool
    checkout or reset per read), and closing the store gives every kept reader back."""
    import sqlalchemy as sa

    store = LogStore.open(str(tmp_path / "log.sqlite3"))
    store.event_append(type="note", stream="s", room="r", from_agent="a", body="x")
    store.event_list()
    checkouts: list[object] = []
    sa.event.listen(store.engine, "checkout", lambda *args: checkouts.append(args))
    for _ in range(5):
        store.event_list()
    assert checkouts == []  # the kept reader, not the pool
    pool = store.engine.pool
    store.close()
    assert pool.checkedout() == 0  # type: ignore[attr-defined]


def test_artifact_links_are_read_only_once_the_log_links_some(tmp_path: Any) -> None:
    """Issue 25: while the log links no artifact (the tip's facts say so: one EXISTS, a log
    fact of the reader), a page statement selects no links column at all; the first link is
    read at once (the commit moves the reader's facts), and the links column's per-row
    lookup is guarded by one uncorrelated EXISTS (run once per statement)."""
    path = str(tmp_path / "log.sqlite3")
    note = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    with LogStore.open(path) as store:
        plain = store.event_append(**note, body="no links")
        assert store.event_list(limit=1).events[0].artifact_ids == ()
        page = [stmt for stmt, _ in _plans(store, limit=1) if "events.body" in stmt]
        assert page and "artifact_links" not in page[0] and "event_artifacts" not in page[0]
        art = store.artifact_put(kind="note", content="c", created_by="a")
        linked = store.event_append(**note, body="linked", artifact_ids=[art.id])
        plans = [(stmt, plan) for stmt, plan in _plans(store, limit=1) if "events.body" in stmt]
        assert "artifact_links" in plans[0][0], plans
        assert any(s.startswith("SCALAR SUBQUERY") for s in plans[0][1]), plans
        listed = store.event_list(order="asc").events
        assert [(e.id, e.artifact_ids) for e in listed] == [
            (plain.id, ()),
            (linked.id, (art.id,)),
        ]
        assert store.event_get(linked.id).artifact_ids == (art.id,)


def test_a_repeated_read_request_is_validated_once_and_types_stay_apart() -> None:
    """`read_request` gives a request validated before again (a pure function of plain
    arguments); the key holds each value's type, so `limit=True` is refused even after
    `limit=1` was read, and arguments that are not plain values are validated every time."""
    from mempalace_logstream import errors
    from mempalace_logstream.store.filters import read_request

    first = read_request(to_agent="b", limit=1)
    assert read_request(to_agent="b", limit=1) is first
    assert first.limit == 1 and first.filters.to_agent == ("b",)
    with pytest.raises(errors.ValidationError):
        read_request(to_agent="b", limit=True)
    assert read_request(to_agent="b", limit=1.0) == first  # validated, not remembered
    listed = read_request(to_agent=["b"], limit=1)
    assert listed == first and listed is not read_request(to_agent=["b"], limit=1)
    with pytest.raises(errors.ValidationError):
        read_request(to_agent="b", limit=1, bogus=1)
    # A bool remembered first: the int that equals it is still validated on its own.
    shown = read_request(to_agent="b", preview=True)
    assert read_request(to_agent="b", preview=True) is shown and shown.preview is True
    with pytest.raises(errors.ValidationError, match="preview"):
        read_request(to_agent="b", preview=1)
    assert read_request(to_agent="b", limit=1, preview=False) is not first


def test_rows_become_events_as_the_constructor_builds_them(
    filled: tuple[LogStore, list[str]],
) -> None:
    """Issue 25: `events_from_rows` fills a plain object that then becomes an `Event`; what
    a read returns is an ordinary Event: its type, fields, equality, hash and wire shape are
    those of the same Event built by its constructor, and it stays frozen."""
    import dataclasses

    from mempalace_logstream.models import Event

    store, _ = filled
    events = store.event_list(limit=60).events
    assert len(events) == 60
    for event in events:
        built = Event(**{f.name: getattr(event, f.name) for f in dataclasses.fields(Event)})
        assert type(event) is Event
        assert event == built and hash(event) == hash(built)
        assert event.__dict__ == built.__dict__
        assert event.to_dict() == built.to_dict()
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.body = "changed"  # type: ignore[misc]
