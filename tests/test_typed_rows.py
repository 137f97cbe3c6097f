"""Pages that need no type test (issue 25): PostgreSQL's column types, and the seqs a SQLite
reader connection scanned once (backends/sqlite_typed.py). A row of the wrong type written
behind the API afterwards, or a body a redaction turned into a BLOB, still reads with its
`row_error` (S-8.10)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from mempalace_logstream.backends import sqlite_typed
from mempalace_logstream.store import plan
from tests.test_stored_events import plant_row


class _CountingTypes(frozenset[type]):
    """`plan._PLAIN_TYPES`, counting the pages the row reader type-tests."""

    calls = 0

    def issuperset(self, other: Any) -> bool:
        type(self).calls += 1
        return super().issuperset(other)


@pytest.fixture
def tests_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_CountingTypes]]:
    _CountingTypes.calls = 0
    monkeypatch.setattr(plan, "_PLAIN_TYPES", _CountingTypes(plan._PLAIN_TYPES))
    yield _CountingTypes


def _append(store: Any, n: int, **kw: Any) -> list[str]:
    return [
        store.event_append(type="note", stream="s", room="r", from_agent="a", body=f"b{i}", **kw).id
        for i in range(n)
    ]


def test_a_page_of_known_typed_rows_is_not_tested(
    store: Any, tests_run: type[_CountingTypes]
) -> None:
    """PostgreSQL: never; SQLite: once per reader connection, which remembers the page."""
    ids = _append(store, plan.TYPED_MIN_ROWS)
    for _ in range(3):
        assert [e.id for e in store.event_list(order="asc").events] == ids
    assert tests_run.calls == (1 if store.backend.name == "sqlite" else 0)


def test_a_row_planted_behind_the_api_after_a_read_reads_with_its_error(
    sqlite_store: Any, tests_run: type[_CountingTypes]
) -> None:
    path = str(sqlite_store.engine.url.database)
    first = _append(sqlite_store, plan.TYPED_MIN_ROWS)
    sqlite_store.event_list()  # the reader's connection now knows these seqs
    bad = plant_row(path, body=b"\xff blob")
    last = _append(sqlite_store, 1)
    events = sqlite_store.event_list(order="asc").events
    assert [e.id for e in events] == [*first, bad, *last]
    at = len(first)
    assert "body" in events[at].to_dict()["row_error"]
    assert all("row_error" not in e.to_dict() for i, e in enumerate(events) if i != at)
    assert tests_run.calls > 0


def test_a_body_a_redaction_made_a_blob_reads_with_its_error(sqlite_store: Any) -> None:
    """The one change a stored row may see: a redaction's tombstone becomes its body. One
    written behind the API as a BLOB is caught though the row's seq was scanned before."""
    path = str(sqlite_store.engine.url.database)
    ids = _append(sqlite_store, plan.TYPED_MIN_ROWS + 2)
    assert all("row_error" not in e.to_dict() for e in sqlite_store.event_list().events)
    redact_behind_the_api(path, ids[1], "?", b"gone")
    events = {e.id: e for e in sqlite_store.event_list().events}
    assert "body" in events[ids[1]].to_dict()["row_error"]
    assert events[ids[1]].body == "gone"


def redact_behind_the_api(path: str, event_id: str, tombstone_sql: str, value: Any) -> None:
    """A body redacted by SQL, not the API: the redaction row and the tombstone written as
    `tombstone_sql` makes `value` (also tests/test_glance_reads.py)."""
    db = sqlite3.connect(path)
    try:
        db.execute(
            "INSERT INTO redactions (redaction_id, part, target_id, sha256, tombstone, "
            "redacted_by, redacted_at, reason) VALUES ('red_1', 'body', ?, 'x', "
            f"{tombstone_sql}, 'a', '2026-12-01T00:00:00.000Z', 'test')",
            (event_id, value),
        )
        db.execute(f"UPDATE events SET body = {tombstone_sql} WHERE id = ?", (value, event_id))
        db.commit()
    finally:
        db.close()


def test_a_known_body_a_redaction_made_text_that_is_not_utf8_reads_with_its_error(
    sqlite_store: Any,
) -> None:
    """SQL calls such a tombstone text: the lenient fetch's rows are never trusted."""
    path = str(sqlite_store.engine.url.database)
    ids = _append(sqlite_store, plan.TYPED_MIN_ROWS)
    sqlite_store.event_list()
    sqlite_store.event_list()
    redact_behind_the_api(path, ids[2], "CAST(? AS TEXT)", b"caf\xe9")
    events = {e.id: e for e in sqlite_store.event_list().events}
    assert "body" in events[ids[2]].to_dict()["row_error"]


def test_what_a_reader_learns() -> None:
    """Consecutive seqs extend the known range, others are kept one by one; nothing is
    trusted before the redactions were looked at after a commit, nor after a BLOB
    tombstone."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE redactions (tombstone TEXT)")
    ran: list[str] = []
    db.set_trace_callback(ran.append)
    cur = db.cursor()
    typed = sqlite_typed.TypedRange()
    run = [(seq,) for seq in range(10, 20)]
    assert not typed.covers(cur, run, 10, 19, 0) and ran == []  # unknown: no statement
    typed.learn(run, 10, 19, 0)
    assert (typed.lo, typed.hi) == (10, 19) and not typed.seqs
    typed.learn([(20,), (21,)], 20, 21, 0)  # meets the range
    typed.learn([(40,), (30,)], 30, 40, 0)  # not consecutive: one by one
    assert (typed.lo, typed.hi) == (10, 21) and typed.seqs == {30, 40}
    few = [(12,), (13,)]
    assert typed.covers(cur, run, 10, 19, 0) and len(ran) == 1  # the redactions, once
    assert typed.covers(cur, few, 12, 13, 0) and typed.covers(cur, [(40,), (30,)], 30, 40, 0)
    assert not typed.covers(cur, [(40,), (31,)], 31, 40, 0)
    assert not typed.covers(cur, tuple(run), 10, 19, 0)  # not a plain list: a lenient fetch
    db.execute("INSERT INTO redactions VALUES (x'00')")  # a body made a BLOB
    typed.stale = True
    assert not typed.covers(cur, run, 10, 19, 0) and typed.broken
    typed.learn([(50,)], 50, 50, 0)
    assert 50 not in typed.seqs and typed.hi == 21


def test_a_reader_knows_a_page_statement_by_its_count_and_ends() -> None:
    """A page statement read again (the same SQL and parameters) is known by one lookup, not
    one per seq, while it reads as many rows with the same lowest and highest seq: a row
    planted behind the API into a gap of seqs inside the page changes one of them."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE redactions (tombstone TEXT)")
    cur = db.cursor()
    typed = sqlite_typed.TypedRange()
    page, statement = [(30,), (20,), (10,)], ("SELECT seq", (0, 30, 4))
    assert not typed.covers(cur, page, 10, 30, 0, statement)
    typed.learn(page, 10, 30, 0, statement)
    typed.seqs.clear()  # known by the statement alone from now on
    assert typed.covers(cur, list(page), 10, 30, 0, statement)
    assert not typed.covers(cur, list(page), 10, 30, 0, ("SELECT seq", (0, 30, 5)))
    assert not typed.covers(cur, [(30,), (25,), (20,), (10,)], 10, 30, 0, statement)  # count
    assert not typed.covers(cur, [(30,), (25,), (20,)], 20, 30, 0, statement)  # an end moved
    assert not typed.covers(cur, page, 10, 30, 0)  # no statement: its seqs


def test_a_row_planted_into_a_gap_of_a_known_page_reads_with_its_error(
    sqlite_store: Any, tests_run: type[_CountingTypes]
) -> None:
    """The same page statement (same bounds) read after a row of the wrong type was planted
    behind the API into a gap of seqs it spans: the page is tested, the row has its error."""
    path = str(sqlite_store.engine.url.database)
    ids = _append(sqlite_store, plan.TYPED_MIN_ROWS)
    top = plant_row(path, seq=plan.TYPED_MIN_ROWS + 10)  # seqs 9..17 left free
    assert [e.id for e in sqlite_store.event_list(order="asc").events] == [*ids, top]
    tested = tests_run.calls
    sqlite_store.event_list(order="asc")
    assert tests_run.calls == tested  # known: not tested again
    bad = plant_row(path, seq=plan.TYPED_MIN_ROWS + 5, body=b"\xff blob")
    events = sqlite_store.event_list(order="asc").events
    assert [e.id for e in events] == [*ids, bad, top]
    assert "body" in events[-2].to_dict()["row_error"]
    assert all("row_error" not in e.to_dict() for e in (*events[:-2], events[-1]))


def test_a_page_of_few_rows_is_tested_without_asking(
    sqlite_store: Any, tests_run: type[_CountingTypes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait or a feed reading the events just committed: testing a few rows is cheaper than
    asking whether they are known."""
    asked: list[int] = []
    monkeypatch.setattr(sqlite_typed.TypedRange, "covers", lambda *a: asked.append(1) or False)
    _append(sqlite_store, plan.TYPED_MIN_ROWS - 1)
    sqlite_store.event_list()
    assert asked == [] and tests_run.calls == 1
    _append(sqlite_store, 1)
    sqlite_store.event_list()
    assert asked == [1]


def test_a_column_the_filter_fixes_is_not_read_but_filled_in(store: Any) -> None:
    """A filter of one value (an "in" rule) fixes its column: the page statement does not
    select it (not even as NULL: each column is a step of the driver) and each event takes
    the request's value (issue 25)."""
    seen: list[str] = []
    store.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
    ids = _append(store, 2, correlation_id="task_1")
    _append(store, 1, correlation_id="task_2")
    events = store.event_list(correlation_id="task_1", order="asc").events
    assert [e.id for e in events] == ids and {e.correlation_id for e in events} == {"task_1"}
    page = next(sql for sql in seen if "events.body" in sql and "correlation_id =" in sql)
    columns = re.split(r"FROM events\s+WHERE", page)[0]
    assert "correlation_id" not in columns and "NULL" not in columns and "events.body" in columns


def test_fixed_columns_are_put_back_in_their_places_on_a_tested_page(sqlite_store: Any) -> None:
    """Two fixed columns on both sides of others: a page that is type-tested (it holds a row
    stored behind the API) reads every field in its place."""
    path = str(sqlite_store.engine.url.database)
    _append(sqlite_store, 1, correlation_id="task_1")
    bad = plant_row(path, body=b"\xff", correlation_id="task_1")
    kind = sqlite_store.event_get(bad).type
    page = sqlite_store.event_list(correlation_id="task_1", type=kind, order="asc")
    good = sqlite_store.event_list(order="asc").events
    assert [e.id for e in page.events] == [e.id for e in good]
    assert page.events[0] == good[0] and "row_error" not in page.events[0].to_dict()
    assert {(e.correlation_id, e.type) for e in page.events} == {("task_1", kind)}
    assert "body" in page.events[1].to_dict()["row_error"]
    assert page.events[1].to_dict()["stream"] == good[1].to_dict()["stream"]


def test_a_fixed_column_is_filled_in_on_a_page_that_is_tested(sqlite_store: Any) -> None:
    path = str(sqlite_store.engine.url.database)
    _append(sqlite_store, 1, correlation_id="task_1")
    bad = plant_row(path, body=b"\xff", correlation_id="task_1")
    events = sqlite_store.event_list(correlation_id="task_1", order="asc").events
    assert [e.correlation_id for e in events] == ["task_1", "task_1"]
    assert events[1].id == bad and "body" in events[1].to_dict()["row_error"]
    assert "correlation_id" not in events[1].to_dict()["row_error"]


def test_no_filter_can_fix_a_column_the_page_rule_reads_by_position() -> None:
    """A page row leaves out the columns a filter fixes (`ReadRequest.fixed_columns`), so the
    page rule finds `id`, `seq` and `origin_seq` at their places (`plan.ID_AT`, `SEQ_AT`,
    `_OSEQ_AT`) only while every fixable column comes after them."""
    from mempalace_logstream.store.filters import FILTER_RULES

    fixable = [column for column, rule in FILTER_RULES.values() if rule == "in"]
    last_read = max(plan.ID_AT, plan.SEQ_AT, plan.EVENT_FIELDS.index("origin_seq"))
    assert fixable
    assert all(plan.EVENT_FIELDS.index(column) > last_read for column in fixable), fixable
