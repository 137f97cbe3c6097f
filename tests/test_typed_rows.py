"""Pages that need no type test (issue 25): PostgreSQL's column types, and the seqs a SQLite
reader connection scanned once (backends/sqlite_typed.py). A row of the wrong type written
behind the API afterwards, or a body a redaction turned into a BLOB, still reads with its
`row_error` (S-8.10)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore
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
    """PostgreSQL: never; SQLite: once the reader connection scanned the page's seqs."""
    ids = _append(store, 3)
    for _ in range(3):
        assert [e.id for e in store.event_list(order="asc").events] == ids
    assert tests_run.calls == 0


def test_a_row_planted_behind_the_api_after_a_scan_reads_with_its_error(
    sqlite_store: Any, tests_run: type[_CountingTypes]
) -> None:
    path = str(sqlite_store.engine.url.database)
    first = _append(sqlite_store, 2)
    sqlite_store.event_list()  # the reader's connection now knows seqs 1-2
    bad = plant_row(path, body=b"\xff blob")
    last = _append(sqlite_store, 1)
    events = sqlite_store.event_list(order="asc").events
    assert [e.id for e in events] == [*first, bad, *last]
    assert "body" in events[2].to_dict()["row_error"]
    assert all("row_error" not in e.to_dict() for i, e in enumerate(events) if i != 2)
    assert tests_run.calls > 0


def test_a_body_a_redaction_made_a_blob_reads_with_its_error(sqlite_store: Any) -> None:
    """The one change a stored row may see: a redaction's tombstone becomes its body. One
    written behind the API as a BLOB is caught though the row's seq was scanned before."""
    path = str(sqlite_store.engine.url.database)
    ids = _append(sqlite_store, 3)
    assert all("row_error" not in e.to_dict() for e in sqlite_store.event_list().events)
    db = sqlite3.connect(path)
    try:
        db.execute(
            "INSERT INTO redactions (redaction_id, part, target_id, sha256, tombstone, "
            "redacted_by, redacted_at, reason) VALUES ('red_1', 'body', ?, 'x', ?, 'a', "
            "'2026-12-01T00:00:00.000Z', 'test')",
            (ids[1], b"gone"),
        )
        db.execute("UPDATE events SET body = ? WHERE id = ?", (b"gone", ids[1]))
        db.commit()
    finally:
        db.close()
    events = {e.id: e for e in sqlite_store.event_list().events}
    assert "body" in events[ids[1]].to_dict()["row_error"]
    assert events[ids[1]].body == "gone"


def test_text_that_is_not_utf8_reads_with_its_error_after_a_scan(sqlite_store: Any) -> None:
    """typeof() calls it text: the lenient fetch's rows are tested, not trusted."""
    path = str(sqlite_store.engine.url.database)
    _append(sqlite_store, 2)
    sqlite_store.event_list()
    bad = plant_row(path, {"body": "CAST(? AS TEXT)"}, body=b"caf\xe9")
    events = {e.id: e for e in sqlite_store.event_list().events}
    assert "body" in events[bad].to_dict()["row_error"]


def test_the_typed_range_scans_only_what_it_does_not_know(tmp_path: Path) -> None:
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store:
        _append(store, 10)
    db = sqlite3.connect(path)
    scans: list[str] = []
    db.set_trace_callback(lambda sql: scans.append(sql) if "typeof(body)" in sql else None)
    cur = db.cursor()
    typed = sqlite_typed.TypedRange()
    assert typed.covers(cur, [], 3, 5, 0) and (typed.lo, typed.hi) == (3, 5)
    assert typed.covers(cur, [], 4, 5, 0) and len(scans) == 1
    assert typed.covers(cur, [], 1, 8, 0) and (typed.lo, typed.hi) == (1, 8) and len(scans) == 3
    assert not typed.covers(cur, (), 1, 2, 0)  # not a plain list: the lenient fetch's
    wide = [(20 + sqlite_typed.SCAN_MAX,), (20,)]
    assert not typed.covers(cur, wide, 20, 20 + sqlite_typed.SCAN_MAX, 0)  # too wide to scan
    assert not typed.broken and typed.covers(cur, [], 1, 10, 0) and len(scans) == 4
    assert not typed.covers(cur, [], 9, 12, 0) and typed.broken  # seqs 11-12 do not exist (a gap)
    db.close()


def test_a_sparse_page_is_tested_once_per_reader(tmp_path: Path) -> None:
    """A page spread over more seqs than a reader scans is tested by the row reader, whose
    verdict the connection remembers for those seqs."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE redactions (tombstone TEXT)")
    typed = sqlite_typed.TypedRange()
    far = 10 + sqlite_typed.SCAN_MAX
    rows = [(far,), (5,)]
    assert not typed.covers(db.cursor(), rows, 5, far, 0)
    typed.learn(rows, 0)
    assert typed.covers(db.cursor(), rows, 5, far, 0)
    assert not typed.covers(db.cursor(), [(far + 1,), (5,)], 5, far + 1, 0)
    db.execute("INSERT INTO redactions VALUES (x'00')")  # a redaction's body: not text
    typed.stale = True
    assert not typed.covers(db.cursor(), rows, 5, far, 0) and typed.broken


def test_a_sparse_page_is_tested_on_its_first_read_only(
    sqlite_store: Any, tests_run: type[_CountingTypes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_typed, "SCAN_MAX", 2)
    ids = _append(sqlite_store, 2, correlation_id="t")
    _append(sqlite_store, 3)
    ids += _append(sqlite_store, 1, correlation_id="t")
    for _ in range(3):
        assert [e.id for e in sqlite_store.event_list(correlation_id="t").events] == ids[::-1]
    assert tests_run.calls == 1


def test_a_column_the_filter_fixes_is_not_read_but_filled_in(store: Any) -> None:
    """A filter of one value (an "in" rule) fixes its column: the page statement selects NULL
    there and each event takes the request's value (issue 25)."""
    seen: list[str] = []
    store.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
    ids = _append(store, 2, correlation_id="task_1")
    _append(store, 1, correlation_id="task_2")
    events = store.event_list(correlation_id="task_1", order="asc").events
    assert [e.id for e in events] == ids and {e.correlation_id for e in events} == {"task_1"}
    page = next(sql for sql in seen if "events.body" in sql and "correlation_id_0" in sql)
    assert "events.correlation_id," not in page and "NULL AS correlation_id" in page


def test_a_fixed_column_is_filled_in_on_a_page_that_is_tested(sqlite_store: Any) -> None:
    path = str(sqlite_store.engine.url.database)
    _append(sqlite_store, 1, correlation_id="task_1")
    bad = plant_row(path, body=b"\xff", correlation_id="task_1")
    events = sqlite_store.event_list(correlation_id="task_1", order="asc").events
    assert [e.correlation_id for e in events] == ["task_1", "task_1"]
    assert events[1].id == bad and "body" in events[1].to_dict()["row_error"]
    assert "correlation_id" not in events[1].to_dict()["row_error"]
