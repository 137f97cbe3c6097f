"""A list read on SQLite without BEGIN / ROLLBACK (issue 25, `SqliteBackend.glancing`): each
statement at its own snapshot, the log facts those of the read's `PRAGMA data_version`. What
a commit between its statements may change in the rows a page reads is a redaction's body:
the row reader tests every body's type, so a body a redaction behind the API made a BLOB reads
with its `row_error` even on a page whose rows the reader knows."""

from __future__ import annotations

from typing import Any

from mempalace_logstream.store import plan
from tests.test_typed_rows import redact_behind_the_api

NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}


def test_a_redaction_between_the_facts_and_the_page_reads_with_its_error(
    sqlite_store: Any,
) -> None:
    """The facts (and what the reader knows of its rows' types) are from before the commit,
    the page from after it: the BLOB body is caught by the row reader's body test."""
    path = str(sqlite_store.engine.url.database)
    ids = [
        sqlite_store.event_append(**NOTE, body=f"b{n}", correlation_id="t").id
        for n in range(plan.TYPED_MIN_ROWS + 2)
    ]
    for _ in range(2):  # the reader knows the page's rows, its facts are current
        assert all("row_error" not in e.to_dict() for e in sqlite_store.event_list().events)
    pages: list[str] = []

    def between(sql: str, params: Any) -> None:
        if "events.body" in sql and not pages:
            pages.append(sql)
            redact_behind_the_api(path, ids[1], "?", b"gone")

    sqlite_store.backend.statement_hooks.append(between)
    try:
        events = {e.id: e for e in sqlite_store.event_list().events}
    finally:
        sqlite_store.backend.statement_hooks.remove(between)
    assert pages  # the page ran after the redaction's commit, the facts before it
    assert events[ids[1]].body == "gone" and "body" in events[ids[1]].to_dict()["row_error"]
    assert all(type(e.body) is str for e in events.values())
    assert all("row_error" not in e.to_dict() for i, e in events.items() if i != ids[1])
    again = {e.id: e for e in sqlite_store.event_list().events}
    assert "body" in again[ids[1]].to_dict()["row_error"]


def test_a_list_read_holds_no_transaction_and_other_snapshots_do(sqlite_store: Any) -> None:
    """A list read's statements run outside a transaction; `snapshot()` (task reads, the
    doctor) stays one transaction."""
    sqlite_store.event_append(**NOTE, body="b")
    sqlite_store.event_list(limit=1)
    reader = sqlite_store.backend._readers[-1]  # the idle reader the next read takes
    seen: list[bool] = []
    hook = lambda sql, params: seen.append(reader.db.in_transaction)  # noqa: E731
    sqlite_store.backend.statement_hooks.append(hook)
    try:
        sqlite_store.event_list(limit=1, correlation_id="nothing-yet")
        listed = list(seen)
        seen.clear()
        with sqlite_store.snapshot() as ex:
            ex.query("SELECT count(*) FROM events", {})
    finally:
        sqlite_store.backend.statement_hooks.remove(hook)
    assert listed == [False]  # the page (the tip and marks: known facts, not run again)
    assert seen == [True]
    assert not reader.db.in_transaction
