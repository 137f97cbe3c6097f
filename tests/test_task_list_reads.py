"""`task_list` as one read of two statements (issue 25), on a SQLite file and on PostgreSQL:
the page (index-ordered legs), then the texts of its requests and questions as one JSON array
of ids (one statement shape for any page). Its pages, walked with any filter and limit, are the
tasks a plain reading of the projection finds, in the same order, each summary as a read of
that one task (its texts cut to the same length) would show it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore, workflows
from mempalace_logstream.store import task_reads
from mempalace_logstream.store.tasks import from_doc
from tests.conftest import ManualClock

AGENTS = ("w0", "w1", "w2")
REQUESTERS = ("lead-a", "lead-b")
LONG_GOAL = "g" * (task_reads.LIST_TEXT_CAP + 20)  # cut in a listing, whole in task_status


@pytest.fixture
def log(log_url: str, clock: ManualClock) -> Iterator[LogStore]:
    with LogStore.open(log_url, clock=clock) as store:
        yield store


def create(store: LogStore, i: int, **extra: Any) -> str:
    out = workflows.task_create(
        store,
        project=f"p{i % 2}",
        from_agent=REQUESTERS[i % 2],
        to_agent=AGENTS[i % 3],
        goal=LONG_GOAL if i % 5 == 0 else f"goal {i}",
        branch="main",
        base_commit="abcdef1",
        done=f"done {i}",
        **extra,
    )
    return str(out["task"].correlation_id)


def move(store: LogStore, tid: str, action: str, agent: str, **kw: Any) -> None:
    workflows.task_update(store, task_id=tid, action=action, from_agent=agent, **kw)


def build(store: LogStore, clock: ManualClock) -> list[str]:
    """Tasks in every listed shape: open, claimed and working (some with a lease that passes),
    blocked with a question (one cut), completed, cancelled, and children of a parent."""
    ids = [create(store, i) for i in range(14)]
    ids += [create(store, 14 + i, parent_task_id=ids[1]) for i in range(2)]
    for i, tid in enumerate(ids):
        agent = AGENTS[i % 3]
        kind = i % 7
        if kind in (1, 2, 3, 4):
            move(store, tid, "claim", agent, lease_ms=1_000 if i % 2 else None)
        if kind == 2:
            move(store, tid, "progress", agent, progress=10)
        if kind == 3:
            move(store, tid, "block", agent, body="which one?" * (300 if i % 2 else 1))
        if kind == 4:
            move(store, tid, "complete", agent, result={"disposition": "no_artifact"})
            move(store, tid, "accept", REQUESTERS[i % 2])
        if kind == 5:
            move(store, tid, "cancel", REQUESTERS[i % 2])
    clock.advance(5_000)  # the 1-second leases pass: those tasks read as open
    return ids


def expected(
    store: LogStore, now: int, state: str | None, filters: dict[str, str]
) -> list[dict[str, Any]]:
    """The listing by a plain reading: every row of the projection, filtered in Python, newest
    move first, each summary with the texts a one-task read gives (cut to the list's cap)."""
    import sqlalchemy as sa

    from mempalace_logstream.schema import tasks as table

    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.updated_seq, table.c.doc_json)).all()
    found = []
    with store.task_reads.reads.snapshot() as snap:
        for _seq, doc in sorted(rows, reverse=True):
            task = from_doc(doc)
            if state is not None and task.state_at(now) != state:
                continue
            if any(getattr(task, column) != value for column, value in filters.items()):
                continue
            found.append((task, task_reads.texts_of(snap, task, cap=task_reads.LIST_TEXT_CAP)))
    return [task_reads.summary(task, now, store.task_settings, texts) for task, texts in found]


FILTERS = st.fixed_dictionaries(
    {},
    optional={
        "to_agent": st.sampled_from(AGENTS),
        "requester": st.sampled_from(REQUESTERS),
        "stream": st.sampled_from(("project/p0", "project/p1")),
    },
)


def test_pages_are_the_projection_read_plainly(log: LogStore, clock: ManualClock) -> None:
    ids = build(log, clock)
    now = clock.now_ms()
    parent_filter = {"parent_task_id": ids[1]}
    assert len(expected(log, now, None, parent_filter)) == 2
    every = expected(log, now, None, {})
    assert len(every) == len(ids)
    assert any(t["question"] and t["question"].endswith(task_reads.MORE) for t in every)
    assert any(t["goal"].endswith(task_reads.MORE) for t in every)
    assert {t["state"] for t in every} >= {"open", "claimed", "working", "blocked", "completed"}
    assert expected(log, now, "open", {}) != expected(log, now - 5_000, "open", {})  # leases
    states = st.sampled_from((None, "open", "claimed", "working", "blocked", "completed"))

    @settings(max_examples=25)
    @given(states, FILTERS | st.just(parent_filter), st.integers(1, 7))
    def walk(state: str | None, filters: dict[str, str], limit: int) -> None:
        args = {"from_agent" if k == "requester" else k: v for k, v in filters.items()}
        pages: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = log.task_list(state=state, limit=limit, cursor=cursor, **args)
            assert page["count"] == len(page["tasks"]) <= limit
            pages += page["tasks"]
            if not page["has_more"]:
                assert page["cursor"] is None
                break
            assert page["count"] == limit and page["cursor"] is not None
            cursor = page["cursor"]
        assert pages == expected(log, now, state, filters)

    walk()


def test_a_listing_is_two_statements_whatever_its_page(log: LogStore, clock: ManualClock) -> None:
    """The page, then its texts: the texts' statement is one shape for a page of any size,
    questions included (a JSON array of ids, not an IN list per length)."""
    build(log, clock)
    seen: list[str] = []
    log.backend.statement_hooks.append(lambda statement, params: seen.append(statement))
    try:
        shapes = set()
        for limit in (1, 3, 16):
            for state in (None, "blocked"):
                seen.clear()
                assert log.task_list(state=state, limit=limit)["count"]
                assert len(seen) == 2, seen
                assert "FROM tasks" in seen[0]
                shapes.add(seen[1])
    finally:
        log.backend.statement_hooks.clear()
    assert len(shapes) == 1, shapes


def test_a_document_decodes_to_its_task_whatever_fields_it_holds() -> None:
    """A whole document becomes the task's `__dict__` (issue 25); one missing a defaulted
    field gets the default, one with a field this version does not know leaves it out, and
    the task stays frozen either way."""
    import dataclasses
    import json

    from mempalace_logstream.store.tasks import from_docs, to_row
    from mempalace_logstream.tasks import Task

    base = {"task_id": "t", "state": "open", "requester": "r", "to_agent": None, "stream": "s"}
    task = Task(**base, request_event_id="e", created_ms=1, progress=5.0, conflicts=({"a": 1},))
    whole = json.loads(to_row(task, 1)["doc_json"])
    short = {k: v for k, v in whole.items() if k not in ("progress", "lost", "depth")}
    docs = [json.dumps(whole), json.dumps(short), json.dumps(whole | {"added_later": 1})]
    one, two, three = from_docs(docs)
    assert one == task == three
    assert two == dataclasses.replace(task, progress=None)
    assert one.__dict__ == task.__dict__ and two.depth == 1 and two.lost == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.state = "claimed"  # type: ignore[misc]
