"""`task_list`'s plan on SQLite, as built and after ANALYZE (issue 25): the listing of any
state walks `ix_tasks_any_state` (one range, newest first); a stream's listing walks
`(stream, state, updated_seq)`, one range per state when no state is given, and a parent's
`(parent_task_id, state, updated_seq)` likewise, whatever else it filters; a listing of
several legs reads each leg's keys from its index alone (COVERING) and only the page's rows
from the table, by rowid; no listing scans the table.

The projection is filled by SQL (20,000 rows, seven streams, the bench's proportions of
states, a third of the rows children of 25 parents) for the planner's sake: what is listed
is checked by test_task_list_reads.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore
from tests.conftest import ManualClock
from tests.test_task_list_plans import (
    AS_BUILT_AND_ANALYZED,
    PARENT,
    PARENT_KEYS,
    analyze,
    copy_task,
    one_task,
)

ROWS = 20_000
STATES = "'open','open','open','open','open','open','open','open','claimed','claimed',"
STATES += "'working','working','working','working','working','blocked','completed',"
STATES += "'completed','cancelled','failed'"
# A task's state by its number modulo 20 (bench/bench_tasks.py's PLAN), its stream modulo 7,
# its parent as test_task_list_plans.py's FILL.
FILL = f"""
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
INSERT INTO tasks (task_id, state, requester, to_agent, assignee, stream, parent_task_id,
                   lease_expires_ms, updated_seq, doc_json)
SELECT 'task_fill_' || i, json_extract(json_array({STATES}), '$[' || (i % 20) || ']'),
       'lead-' || (i % 5), 'agent-' || (i % 10), NULL, 'stream-' || (i % 7),
       CASE WHEN i % 3 = 0 THEN 'task_fill_p' || (i / 60 % 25) END,
       CASE WHEN i % 20 BETWEEN 8 AND 15 THEN :lease END, 1000 + i, :doc
FROM n
"""
STREAM = "stream-3"
KEYS = "ix_tasks_stream_state_updated_seq"
# shape -> (task_list arguments, the indexes its plan walks, whether it merges legs)
SHAPES: dict[str, tuple[dict[str, Any], set[str], bool]] = {
    "any state": ({}, {"ix_tasks_any_state"}, False),
    "a stream's, any state": ({"stream": STREAM}, {KEYS}, True),
    "a stream's working": ({"stream": STREAM, "state": "working"}, {KEYS}, False),
    "a stream's open": (
        {"stream": STREAM, "state": "open"},
        {KEYS, "ix_tasks_state_lease_expires_ms"},
        True,
    ),
    "open": (
        {"state": "open"},
        {"ix_tasks_state_updated_seq", "ix_tasks_state_lease_expires_ms"},
        True,
    ),
    "working": ({"state": "working"}, {"ix_tasks_state_updated_seq"}, False),
    "a parent's, any state": ({"parent_task_id": PARENT}, {PARENT_KEYS}, True),
    "a parent's working": ({"parent_task_id": PARENT, "state": "working"}, {PARENT_KEYS}, False),
    "a parent's open": (
        {"parent_task_id": PARENT, "state": "open"},
        {PARENT_KEYS, "ix_tasks_state_lease_expires_ms"},
        True,
    ),
}
# A parent's listing with other filters too: its own index still (each other filter tested on
# the parent's rows, so a leg reads them from the table: not a COVERING index).
WITH_PARENT: dict[str, dict[str, Any]] = {
    "an agent's": {"to_agent": "agent-7"},
    "an agent's open": {"to_agent": "agent-7", "state": "open"},
    "a requester's completed": {"from_agent": "lead-2", "state": "completed"},
    "a stream's": {"stream": STREAM},
    "a stream's working": {"stream": STREAM, "state": "working"},
}
SEARCH = re.compile(r"SEARCH tasks USING (COVERING )?INDEX (\w+)")


@pytest.fixture
def filled(tmp_path: Path, clock: ManualClock) -> Iterator[LogStore]:
    """A SQLite store whose projection holds one real task and `ROWS` copies of its document."""
    with LogStore.open(str(tmp_path / "log.sqlite3"), clock=clock) as store:
        one_task(store)
        copy_task(store, clock, FILL)
        yield store


def plan(store: LogStore, kwargs: dict[str, Any]) -> str:
    """EXPLAIN QUERY PLAN of the page statement `task_list(**kwargs)` sends."""
    seen: list[tuple[str, Any]] = []
    store.backend.statement_hooks.append(lambda sql, params: seen.append((sql, params)))
    try:
        store.task_list(**kwargs)
    finally:
        store.backend.statement_hooks.clear()
    sql, params = next(s for s in seen if "FROM tasks" in s[0])
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
    return "\n".join(str(r[-1]) for r in rows)


@AS_BUILT_AND_ANALYZED
def test_each_listing_walks_its_index_and_merged_legs_read_keys_only(
    filled: LogStore, analyzed: bool
) -> None:
    analyze(filled, analyzed)
    for what, (kwargs, indexes, merged) in SHAPES.items():
        text = plan(filled, kwargs)
        used = SEARCH.findall(text)
        assert {name for _covering, name in used} == indexes, (what, text)
        assert "SCAN tasks" not in text, (what, text)
        by_rowid = "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)" in text
        assert by_rowid == merged, (what, text)
        if merged:  # each leg on the page's order reads its index alone
            ordered = [c for c, name in used if name != "ix_tasks_state_lease_expires_ms"]
            assert ordered and all(ordered), (what, text)
    # The listing of any state is one range, newest first: no leg, no sort.
    assert "TEMP B-TREE" not in plan(filled, {}), plan(filled, {})
    assert filled.task_list(stream=STREAM, limit=5)["count"] == 5


@AS_BUILT_AND_ANALYZED
def test_a_parents_listing_walks_the_parents_index_whatever_else_it_filters(
    filled: LogStore, analyzed: bool
) -> None:
    analyze(filled, analyzed)
    lease = {"ix_tasks_state_lease_expires_ms"}
    for what, kwargs in WITH_PARENT.items():
        text = plan(filled, {"parent_task_id": PARENT, **kwargs})
        used = {name for _covering, name in SEARCH.findall(text)}
        assert used - lease == {PARENT_KEYS}, (what, text)
        assert "SCAN tasks" not in text, (what, text)
        assert filled.task_list(parent_task_id=PARENT, **kwargs)["count"] > 0, what
