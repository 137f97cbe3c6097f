"""The task lifecycle through the store (RFC 0007), on a SQLite file and on PostgreSQL: moves,
refusals that write nothing, rules that `event_append` cannot bypass, leases on the store's
clock, delegation limits, the projection equal to the fold of the log (also after a rebuild and
an adoption from before the projection), and the reference's own threads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors, migrate, tasks, workflows
from mempalace_logstream.tasks import TaskSettings
from tests.conftest import ManualClock

PATCH = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.fixture
def log(log_url: str, clock: ManualClock) -> Iterator[LogStore]:
    with LogStore.open(log_url, clock=clock) as store:
        yield store


def create(store: LogStore, to: str = "codex", **extra: Any) -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent="claude",
        to_agent=to,
        goal="fix the login",
        branch="main",
        base_commit="abcdef1",
        done="tests pass",
        **extra,
    )
    return str(out["task"].correlation_id)


def move(store: LogStore, tid: str, action: str, agent: str, **kw: Any) -> dict[str, Any]:
    return workflows.task_update(store, task_id=tid, action=action, from_agent=agent, **kw)["task"]


def event_count(store: LogStore) -> int:
    return int(store.stats()["events"])


def fold_of(store: LogStore, tid: str) -> tasks.Task | None:
    thread = store.event_list(correlation_id=tid, order="asc", limit=500).events
    return tasks.fold(thread, store.task_settings)


def projection(store: LogStore, tid: str) -> tasks.Task:
    import sqlalchemy as sa

    from mempalace_logstream.schema import tasks as table
    from mempalace_logstream.store.tasks import from_doc

    with store.engine.connect() as conn:
        doc = conn.execute(sa.select(table.c.doc_json).where(table.c.task_id == tid)).scalar()
    return from_doc(doc)


# ----------------------------------------------------------------------------- the path


def test_create_claim_progress_complete_accept(log: LogStore) -> None:
    tid = create(log)
    status = log.task_status(tid)["task"]
    assert (status["state"], status["a2a_state"], status["requester"]) == (
        "open",
        "submitted",
        "claude",
    )
    t = move(log, tid, "claim", "codex")
    assert (t["state"], t["assignee"], t["attempt"]) == ("claimed", "codex", 1)
    assert t["lease_expires_at"] is not None
    move(log, tid, "progress", "codex", progress=10)
    t = move(log, tid, "progress", "codex", progress=60, body="half way")
    assert (t["state"], t["progress"]) == ("working", 60)
    art = log.artifact_put(kind="patch", content=PATCH, created_by="codex")
    result = {"disposition": "completed", "verification": [{"name": "pytest", "status": "passed"}]}
    t = move(log, tid, "complete", "codex", result=result, artifact_ids=[art.id])
    assert t["state"] == "ready" and t["result"]["artifact_ids"] == [art.id]
    t = move(log, tid, "accept", "claude")
    assert (t["state"], t["a2a_state"]) == ("completed", "completed")
    full = log.task_status(tid)["task"]
    assert len(full["events"]) == 6 and full["artifacts"] == [art.id]
    thread = log.event_list(correlation_id=tid, order="asc").events
    assert [e.type for e in thread] == [
        "task.request",
        "task.claim",
        "task.progress",
        "task.progress",
        "task.result",
        "task.accept",
    ]
    assert [e.status for e in thread] == [
        "open",
        "claimed",
        "working",
        "working",
        "ready",
        "completed",
    ]
    assert thread[1].to_agent == "claude" and thread[5].to_agent == "codex"
    assert projection(log, tid) == fold_of(log, tid)


def test_a_patch_on_the_task_is_a_result_and_an_ack_applied_accepts_it(log: LogStore) -> None:
    tid = create(log)
    workflows.event_ack(
        log,
        event_id=log.task_status(tid)["task"]["events"][0],
        from_agent="codex",
        status="claimed",
    )
    out = workflows.patch_submit(
        log, content=PATCH, from_agent="codex", stream="project/demo", correlation_id=tid
    )
    assert log.task_status(tid)["task"]["state"] == "ready"
    workflows.event_ack(log, event_id=out["event"].id, from_agent="claude", status="applied")
    assert log.task_status(tid)["task"]["state"] == "completed"
    assert projection(log, tid) == fold_of(log, tid)


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("steps", "action", "agent", "kind", "text"),
    [
        (
            [("cancel", "claude")],
            "claim",
            "codex",
            errors.ConflictError,
            "is cancelled; claim refused",
        ),
        (
            [],
            "claim",
            "gemini",
            errors.ForbiddenError,
            "is addressed to codex; only codex may claim it",
        ),
        (
            [("claim", "codex")],
            "cancel",
            "codex",
            errors.ForbiddenError,
            "only the requester (claude) may cancel",
        ),
        ([], "accept", "claude", errors.ConflictError, "is open; accept refused"),
        (
            [("claim", "codex")],
            "claim",
            "codex",
            errors.ConflictError,
            "is already claimed by codex (attempt 1)",
        ),
    ],
)
def test_an_illegal_move_is_refused_and_writes_nothing(
    log: LogStore, steps: list[tuple[str, str]], action: str, agent: str, kind: type, text: str
) -> None:
    tid = create(log)
    for a, who in steps:
        move(log, tid, a, who)
    before = (event_count(log), log.task_status(tid))
    with pytest.raises(kind) as info:
        move(log, tid, action, agent)
    assert text in str(info.value) and tid in str(info.value)
    assert (event_count(log), log.task_status(tid)) == before


def test_event_append_cannot_bypass_the_rules(log: LogStore) -> None:
    tid = create(log)
    n = event_count(log)
    base = {"stream": "project/demo", "room": "delegation", "correlation_id": tid}
    with pytest.raises(errors.ForbiddenError, match="only codex may claim"):
        log.event_append(type="task.claim", from_agent="gemini", **base)
    with pytest.raises(errors.ForbiddenError, match="only codex may claim"):
        log.event_append(type="task.reply", status="claimed", from_agent="gemini", **base)
    with pytest.raises(errors.ConflictError, match="is open; progress refused"):
        log.event_append(type="task.progress", from_agent="codex", metadata={"progress": 1}, **base)
    with pytest.raises(errors.NotFoundError, match="task task_nope not found; claim refused"):
        log.event_append(
            type="task.claim", from_agent="codex", **{**base, "correlation_id": "task_nope"}
        )
    assert event_count(log) == n
    log.event_append(type="note", from_agent="gemini", body="just a comment", **base)  # fine


def test_bad_move_input_names_the_field(log: LogStore) -> None:
    tid = create(log)
    move(log, tid, "claim", "codex")
    cases = [
        ({"action": "finish"}, "action", "action 'finish' is not one of claim, decline"),
        ({"action": "progress"}, "progress", "progress needs a number"),
        (
            {"action": "progress", "progress": "lots"},
            "progress",
            "progress must be a finite number",
        ),
        (
            {"action": "complete", "result": {"disposition": "completed"}},
            "artifact_ids",
            "needs at least one artifact",
        ),
        ({"action": "block"}, "body", "a block needs a body"),
        ({"action": "claim", "lease_ms": 5}, "lease_ms", "lease_ms 5 must be between 1000"),
    ]
    for args, field, text in cases:
        with pytest.raises(errors.LogstreamError) as info:
            workflows.task_update(log, task_id=tid, from_agent="codex", **args)
        assert getattr(info.value, "field", None) == field and text in str(info.value), args
    with pytest.raises(errors.NotFoundError, match="task task_missing not found"):
        log.task_status("task_missing")


# ----------------------------------------------------------------------------- leases


def test_a_lease_passes_on_the_stores_clock(log: LogStore, clock: ManualClock) -> None:
    tid = create(log, to="*", lease_ms=60_000)
    move(log, tid, "claim", "codex")
    clock.advance(59_000)
    assert log.task_status(tid)["task"]["state"] == "claimed"
    assert [t["task_id"] for t in log.task_list(state="claimed")["tasks"]] == [tid]
    clock.advance(2_000)
    t = log.task_status(tid)["task"]
    assert (t["state"], t["assignee"], t["lost"][0]["assignee"]) == ("open", None, "codex")
    assert [x["task_id"] for x in log.task_list(state="open")["tasks"]] == [tid]
    assert log.task_list(state="claimed")["tasks"] == []
    with pytest.raises(errors.ConflictError, match=r"lease of attempt 1 \(codex\) expired"):
        move(log, tid, "progress", "codex", progress=1)
    t = move(log, tid, "claim", "gemini")
    assert (t["assignee"], t["attempt"]) == ("gemini", 2)
    assert projection(log, tid) == fold_of(log, tid)


# ----------------------------------------------------------------------------- delegation


def test_delegation_depth_and_breadth_are_limited(log: LogStore) -> None:
    root = create(log)
    child = create(log, parent_task_id=root)
    grandchild = create(log, parent_task_id=child)
    with pytest.raises(errors.ValidationError) as info:
        create(log, parent_task_id=grandchild)
    assert info.value.field == "parent_task_id"
    assert str(info.value) == (
        f"task depth 4 exceeds the limit of 3 (parent {grandchild} is at depth 3)"
    )
    for _ in range(9):
        create(log, parent_task_id=root)
    with pytest.raises(
        errors.ValidationError, match=f"task {root} already has 10 open children; the limit is 10"
    ):
        create(log, parent_task_id=root)
    move(log, child, "cancel", "claude")  # a closed child makes room
    create(log, parent_task_id=root)
    status = log.task_status(root)["task"]
    assert len(status["children"]) == 11 and status["depth"] == 1
    assert log.task_status(grandchild)["task"]["parent_task_id"] == child
    with pytest.raises(errors.NotFoundError, match="parent task task_ghost not found"):
        create(log, parent_task_id="task_ghost")
    assert create(log, parent_correlation_id=child)  # the reference's name works too


def test_the_limits_come_from_the_settings(db_url: str) -> None:
    with LogStore.open(db_url, task_settings=TaskSettings(max_depth=5, max_children=1)) as store:
        a = create(store)
        b = create(store, parent_task_id=a)
        c = create(store, parent_task_id=b)
        d = create(store, parent_task_id=c)
        create(store, parent_task_id=d)  # depth 5
        with pytest.raises(
            errors.ValidationError, match="already has 1 open children; the limit is 1"
        ):
            create(store, parent_task_id=a)


# ----------------------------------------------------------------------------- the projection


def test_task_list_filters_and_pages(log: LogStore) -> None:
    ids = [create(log, to=f"w{i % 2}") for i in range(5)]
    move(log, ids[0], "claim", "w0")
    page = log.task_list(limit=2)
    assert [t["task_id"] for t in page["tasks"]] == [ids[0], ids[4]]  # most recently moved
    rest = log.task_list(limit=10, cursor=page["cursor"])
    assert [t["task_id"] for t in rest["tasks"]] == [ids[3], ids[2], ids[1]]
    assert {t["task_id"] for t in log.task_list(to_agent="w1")["tasks"]} == {ids[1], ids[3]}
    assert {t["task_id"] for t in log.task_list(state="open", to_agent="w0")["tasks"]} == {
        ids[2],
        ids[4],
    }
    assert len(log.task_list(from_agent="claude", stream="project/demo")["tasks"]) == 5
    for bad, field in (
        ({"state": "done"}, "state"),
        ({"cursor": "x"}, "cursor"),
        ({"limit": 0}, "limit"),
    ):
        with pytest.raises(errors.ValidationError) as info:
            log.task_list(**bad)
        assert info.value.field == field


def test_rebuild_gives_the_same_projection(log: LogStore) -> None:
    a, b = create(log), create(log, to="*")
    move(log, a, "claim", "codex")
    move(log, b, "claim", "gemini")
    move(log, b, "fail", "gemini", retryable=True)
    before = {t: projection(log, t) for t in (a, b)}
    assert log.rebuild_tasks() == 2
    assert {t: projection(log, t) for t in (a, b)} == before


def test_a_log_from_before_the_projection_is_folded_on_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    with LogStore.open(url) as store:
        tid = create(store)
        move(store, tid, "claim", "codex")
        want = projection(store, tid)
        migrate.downgrade(store.engine, "0003")  # as a log written before revision 0004
    with LogStore.open(url) as store:
        assert projection(store, tid) == want
        assert store.task_status(tid)["task"]["state"] == "claimed"


def test_a_projection_an_older_fold_wrote_is_rebuilt_on_open(db_url: str) -> None:
    """The fold's rules changed (issue 18: progress is a percentage, identity's rules): a log
    whose rows an older version wrote is folded again when a writer opens it."""
    import sqlalchemy as sa

    from mempalace_logstream.schema import meta
    from mempalace_logstream.schema import tasks as table

    with LogStore.open(db_url) as store:
        tid = create(store)
        move(store, tid, "claim", "codex")
        want = projection(store, tid)
        stale = json.dumps({**json.loads(_doc(store, tid)), "progress": 4000.0})
        with store.engine.begin() as conn:  # as a version without the scale left it
            conn.execute(sa.update(table).where(table.c.task_id == tid).values(doc_json=stale))
            conn.execute(sa.delete(meta).where(meta.c.key == "tasks_fold"))
    with LogStore.open(db_url) as store:
        assert projection(store, tid) == want
        assert store.task_status(tid)["task"]["progress"] is None


def _doc(store: LogStore, tid: str) -> str:
    import sqlalchemy as sa

    from mempalace_logstream.schema import tasks as table

    with store.engine.connect() as conn:
        doc = conn.execute(sa.select(table.c.doc_json).where(table.c.task_id == tid)).scalar()
    return str(doc)


def test_a_reference_thread_folds_into_the_expected_states(tmp_path: Path) -> None:
    """Written by the real reference package (its own CLI), adopted by our store."""
    from tests import refpkg

    refpkg.require_ref_or_skip()
    palace = tmp_path / "palace"
    created = refpkg.ref_cli_json(
        *("task", "create", "--project", "demo", "--from-agent", "lead", "--to-agent", "dev"),
        *("--goal", "fix it", "--branch", "main", "--base-commit", "abcdef1", "--done", "green"),
        palace=palace,
    )
    task = created["task"]
    tid = task["correlation_id"]
    refpkg.ref_cli(
        "logstream",
        "ack",
        task["id"],
        "--from-agent",
        "dev",
        "--status",
        "claimed",
        palace=palace,
        check=True,
    )
    art = refpkg.ref_cli_json(
        "artifact",
        "put",
        "--kind",
        "patch",
        "--created-by",
        "dev",
        "--content",
        PATCH,
        palace=palace,
    )
    ready = refpkg.ref_cli_json(
        *("logstream", "append", "--type", "patch.ready", "--stream", task["stream"]),
        *("--room", "patches", "--from-agent", "dev", "--to-agent", "lead"),
        *("--correlation-id", tid, "--status", "ready", "--artifact-id", art["id"]),
        palace=palace,
    )
    ready_id = ready["event"]["id"] if "event" in ready else ready["id"]
    ack = ("logstream", "ack", ready_id, "--from-agent", "lead", "--status", "applied")
    refpkg.ref_cli(*ack, palace=palace, check=True)
    # Adopted by our store (one way: the reference cannot write to it afterwards); the
    # projection is folded on open.
    with LogStore.open(f"sqlite:///{palace / 'logstream.sqlite3'}") as store:
        t = store.task_status(tid)["task"]
        thread = store.event_list(correlation_id=tid, order="asc").events
        assert projection(store, tid) == fold_of(store, tid)
    states = [tasks.fold(thread[: k + 1]).state for k in range(len(thread))]  # type: ignore[union-attr]
    assert states == ["open", "claimed", "ready", "completed"]
    assert (t["state"], t["requester"], t["assignee"]) == ("completed", "lead", "dev")
    assert t["result"]["artifact_ids"] == [art["id"]]


def test_the_limits_are_read_from_the_environment(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    db = ("--db", str(tmp_path / "env.sqlite3"))
    create_args = (
        *("task", "create", "--project", "p", "--from-agent", "a", "--to-agent", "b"),
        *("--goal", "g", "--done", "d", "--branch", "main", "--base-commit", "abcdef1"),
    )
    root = json.loads(run_cli(*create_args, *db, "--json").stdout)["task"]["correlation_id"]
    env = {"MEMPALACE_LOGSTREAM_TASK_MAX_DEPTH": "1"}
    out = run_cli(*create_args, "--parent", root, *db, env=env)
    assert out.returncode == 1
    assert out.stderr.decode().strip() == (
        f"error: task depth 2 exceeds the limit of 1 (parent {root} is at depth 1)"
    )
    bad = run_cli("task", "list", *db, env={"MEMPALACE_LOGSTREAM_TASK_MAX_CHILDREN": "0"})
    assert bad.returncode == 1
    assert b"MEMPALACE_LOGSTREAM_TASK_MAX_CHILDREN=0 must be between 1 and 100000" in bad.stderr


def test_task_documents_decode_to_the_same_tasks_one_by_one_or_as_a_page() -> None:
    """`task_list` decodes a page of documents in one parse and fills each Task directly
    (issue 25): the same tasks, field for field, as `Task(**doc)`; a document with a field
    this version does not know still reads (the field left out)."""
    import json

    from mempalace_logstream.store.tasks import from_doc, from_docs, to_row
    from mempalace_logstream.tasks import Task

    base = {"task_id": "t", "state": "open", "requester": "r", "to_agent": None, "stream": "s"}
    one = Task(**base, request_event_id="e", created_ms=1, conflicts=({"a": 1},))
    two = Task(**base, request_event_id="f", created_ms=2, progress=50.0, depth=2)
    docs = [to_row(one, 1)["doc_json"], to_row(two, 2)["doc_json"]]
    assert from_docs(docs) == [one, two] == [from_doc(d) for d in docs]
    assert [t.__dict__ for t in from_docs(docs)] == [one.__dict__, two.__dict__]
    assert from_doc(json.dumps(json.loads(docs[0]) | {"added_later": 1})) == one
    assert from_docs([]) == []
