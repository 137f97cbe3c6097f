"""Task events that arrive out of HLC order (issue 18, item 15), on a SQLite file and on
PostgreSQL: the task is re-folded from a checkpoint before them, not from its request, so a
thread a peer extends page by page costs each page about its own events; and whatever the
order, the interleaving of writers and processes, or a transaction that rolls back, the
projection stays the fold of the log.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, replication, tasks, workflows
from tests.conftest import ManualClock

LEASE_MS = 7 * 24 * 3600 * 1000


def new_task(store: LogStore, to: str = "worker") -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent="lead",
        to_agent=to,
        goal="late moves",
        branch="main",
        base_commit="abcdef1",
        done="applied",
        lease_ms=LEASE_MS,
    )
    return str(out["task"].correlation_id)


def wire_of(store: LogStore, tid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = store.event_list(correlation_id=tid, order="asc", limit=500, since_event_id=cursor)
        if not page.events:
            return out
        out += [e.to_dict() for e in page.events]
        cursor = page.events[-1].id


def projection_is_the_fold(store: LogStore, tid: str) -> None:
    import sqlalchemy as sa

    from mempalace_logstream.schema import tasks as table
    from mempalace_logstream.store.tasks import from_doc

    with store.engine.connect() as conn:
        doc = conn.execute(sa.select(table.c.doc_json).where(table.c.task_id == tid)).scalar()
    thread = [LogStore.event_get(store, w["id"]) for w in wire_of(store, tid)]
    want = tasks.fold(thread, store.task_settings)
    assert want is not None and from_doc(doc) == want


def progress_on_a_copy(tmp_path: Path, source: LogStore, tid: str, n: int) -> list[dict]:
    """`n` progress moves written on another replica (after the task's request and claim)."""
    clock = ManualClock()
    with LogStore.open(str(tmp_path / "b.sqlite3"), clock=clock) as b:
        replication.apply_remote_events(b, wire_of(source, tid), "a")
        for i in range(n):
            clock.advance(1)
            b.event_append(
                type="task.progress",
                stream="project/demo",
                room="delegation",
                from_agent="worker",
                correlation_id=tid,
                metadata={"progress": round((i + 1) * 90 / n, 4)},
            )
        return wire_of(b, tid)[2:]


def test_late_moves_are_folded_from_a_checkpoint_not_from_the_request(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with LogStore.open(db_url, clock=clock) as a:
        tid = new_task(a)
        workflows.task_update(a, task_id=tid, action="claim", from_agent="worker")
        moves = progress_on_a_copy(tmp_path, a, tid, 200)
        clock.advance(3_600_000)  # the holder reports on A, later than everything B wrote
        workflows.task_update(a, task_id=tid, action="progress", from_agent="worker", progress=99)
        before = a.task_folds.folded
        for i in range(0, len(moves), 10):  # 20 pages, each sorting before A's progress
            replication.apply_remote_events(a, moves[i : i + 10], "b")
        folded = a.task_folds.folded - before
        # From the request each page would fold the whole thread (about 2,200 events in all);
        # from a checkpoint, the previous page, its own and the one later move.
        assert folded <= 20 * 21 + 3, folded
        t = a.task_status(tid)["task"]
        assert (t["progress"], t["anomalies"]) == (99, [])
        projection_is_the_fold(a, tid)


def peer_event(template: dict, origin: str, seq: int, ms: int, **values: Any) -> dict:
    """A wire event another replica wrote (never checked there: any move, legal or not)."""
    wire = {k: v for k, v in template.items() if k not in ("seq", "verified", "redacted")}
    wire.update(
        id=f"evt_20270101T000000_{origin[4:12]}{seq:012x}",
        origin_replica=origin,
        origin_seq=seq,
        hlc=f"{ms:013d}-000000-{origin}",
        status=None,
        metadata={},
    )
    wire.update(values)
    return wire


@pytest.mark.parametrize("seed", range(4))
def test_any_arrival_order_from_any_process_keeps_the_projection_the_fold(
    db_url: str, seed: int
) -> None:
    rnd = random.Random(seed)
    clock = ManualClock()
    with LogStore.open(db_url, clock=clock) as a, LogStore.open(db_url, clock=clock) as other:
        tid = new_task(a, to="*")
        request = wire_of(a, tid)[0]
        pages: list[list[dict]] = []
        for name in "bcd":  # three replicas, apart: claims, progress, notes
            origin = "rep_" + name * 12
            ms = int(request["hlc"][:13]) + rnd.randrange(50)
            mine = []
            for i in range(1, rnd.randrange(20, 40)):
                ms += rnd.randrange(1, 5)
                kind = rnd.choice(["task.progress", "task.progress", "note", "task.claim"])
                extra = {"metadata": {"progress": i}} if kind == "task.progress" else {}
                mine.append(
                    peer_event(request, origin, i, ms, type=kind, from_agent=f"w-{name}", **extra)
                )
            cut = sorted(rnd.sample(range(1, len(mine)), 3))
            pages += [mine[i:j] for i, j in zip([0, *cut], [*cut, len(mine)], strict=True)]
        rnd.shuffle(pages)
        for k, page in enumerate(pages):
            # Another process (the second store on the same database) applies some pages:
            # a's checkpoint must notice the events it did not fold.
            res = replication.apply_remote_events(other if k % 3 == 2 else a, page, "peer")
            assert len(res.applied_ids) == len(page), res
            projection_is_the_fold(a, tid)
        assert a.task_folds.folded > 0


def test_a_rolled_back_transaction_leaves_no_checkpoint_past_what_was_committed(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with LogStore.open(db_url, clock=clock) as a:
        tid = new_task(a)
        workflows.task_update(a, task_id=tid, action="claim", from_agent="worker")
        moves = progress_on_a_copy(tmp_path, a, tid, 30)
        clock.advance(3_600_000)
        workflows.task_update(a, task_id=tid, action="progress", from_agent="worker", progress=99)
        replication.apply_remote_events(a, moves[:10], "b")

        def doomed(tx: Any) -> None:
            draft = a.draft_event(
                type="note",
                stream="project/demo",
                room="delegation",
                from_agent="x",
                correlation_id=tid,
                body="rolled back",
            )
            tx.insert_event(draft)
            a.task_folds.refold(tx, tid, a.task_settings)
            raise RuntimeError("roll back")

        with pytest.raises(RuntimeError):
            a.transaction(doomed)
        point = a.task_folds.checkpoint(tid)
        committed = wire_of(a, tid)
        assert point is not None
        upto = [w for w in committed if (w["hlc"], w["id"]) <= (point.hlc, point.event_id)]
        assert point.count == len(upto)  # it names only committed events
        replication.apply_remote_events(a, moves[10:], "b")
        projection_is_the_fold(a, tid)


def thread_reads(store: LogStore, work: Any) -> list[str]:
    """The statements `work()` ran that read events of a thread (by correlation id) whole."""
    seen: list[str] = []
    hook = lambda sql, params: seen.append(sql)  # noqa: E731
    store.backend.statement_hooks.append(hook)
    try:
        work()
    finally:
        store.backend.statement_hooks.remove(hook)
    return [s for s in seen if "events.body" in s and "correlation_id =" in s.split("WHERE")[-1]]


def test_a_new_task_brought_whole_by_a_page_is_folded_without_reading_it_back(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with LogStore.open(str(tmp_path / "a.sqlite3"), clock=clock) as a:
        tid = new_task(a)
        workflows.task_update(a, task_id=tid, action="claim", from_agent="worker")
        for p in (10, 20, 30):
            clock.advance(1)
            workflows.task_update(
                a, task_id=tid, action="progress", from_agent="worker", progress=p
            )
        wire = wire_of(a, tid)
    with LogStore.open(db_url, clock=clock) as b:
        reads = thread_reads(b, lambda: replication.apply_remote_events(b, wire, "a"))
        assert reads == []  # the page is the whole thread: folded as it came
        assert b.task_status(tid)["task"]["progress"] == 30
        projection_is_the_fold(b, tid)


def test_a_new_task_whose_thread_began_before_its_request_is_folded_from_the_log(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with LogStore.open(str(tmp_path / "a.sqlite3"), clock=clock) as a:
        tid = new_task(a, to="*")
        request = wire_of(a, tid)[0]
    origin = "rep_" + "e" * 12
    ms = int(request["hlc"][:13])
    early = peer_event(request, origin, 1, ms - 5, type="task.claim", from_agent="w")
    later = peer_event(request, origin, 2, ms + 5, type="task.claim", from_agent="w")
    with LogStore.open(db_url, clock=clock) as b:
        replication.apply_remote_events(b, [early], "e")  # held, no task yet
        reads = thread_reads(b, lambda: replication.apply_remote_events(b, [request, later], "a"))
        assert reads  # the page is not the whole thread: the thread is read
        task = b.task_status(tid)["task"]
        assert (task["state"], task["assignee"]) == ("claimed", "w")
        assert [x["event_id"] for x in task["anomalies"]] == [early["id"]]
        projection_is_the_fold(b, tid)
