"""Loop guards (issue 20 item 5): two scripted agents that answer each other at once stop at
the thread's budget with exactly one `thread.budget_exhausted`; a person's message resets it;
acks, state-changing moves and cancels pass; the per-pair window budget; the same refusal on
HTTP, MCP and the CLI. A manual clock for the window: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from mcp import Client

from mempalace_logstream import LogStore, errors, mcp_server, workflows
from mempalace_logstream.tasks import guards as g
from tests.conftest import ManualClock, run_cli
from tests.hubkit import LiveHub

COMMIT = "abc1234"


def _open(url: str, clock: ManualClock, **settings: Any) -> LogStore:
    store = LogStore.open(url, clock=clock)
    store.task_settings = dataclasses.replace(store.task_settings, **settings)
    return store


def _task(store: LogStore, **extra: Any) -> str:
    out = workflows.task_create(
        store,
        project="p",
        from_agent="claude",
        to_agent="codex",
        goal="fix the bug",
        branch="main",
        base_commit=COMMIT,
        done="tests pass",
        **extra,
    )
    return str(out["task_id"])


def _say(store: LogStore, tid: str | None, writer: str, to: str | None, n: int = 0) -> Any:
    return store.event_append(
        type="task.reply",
        stream="project/p",
        room="delegation",
        from_agent=writer,
        to_agent=to,
        correlation_id=tid,
        body=f"reply {n} from {writer}",
    )


def _ping_pong(store: LogStore, tid: str | None, limit: int = 500) -> tuple[int, str]:
    """codex and claude answer each other at once until a write is refused: (how many were
    written, the refusal)."""
    pair = ("codex", "claude")
    for n in range(limit):
        writer, to = pair[n % 2], pair[(n + 1) % 2]
        try:
            _say(store, tid, writer, to, n)
        except g.BudgetExhausted as exc:
            return n, exc.message
    raise AssertionError("never refused")


def _exhausted(store: LogStore) -> list[Any]:
    return list(store.event_list(type=g.EXHAUSTED_TYPE, order="asc", limit=500).events)


def test_two_agents_that_answer_each_other_stop_at_the_thread_budget(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, pair_budget=1_000)
    try:
        tid = _task(store)
        written, message = _ping_pong(store, tid)
        assert written == 60  # the default thread budget
        assert message.startswith(
            f"thread {tid} has used its budget of 60 agent-written events since the task "
            "request (60 written); write refused. A person writing in the thread lifts it, or "
            "the requester (claude) raises it"
        )
        count = store.stats()["events"]
        for _ in range(3):  # still refused, nothing written, no second notice
            with pytest.raises(g.BudgetExhausted) as info:
                _say(store, tid, "codex", "claude")
            assert info.value.field == "thread_budget"
        notices = _exhausted(store)
        assert len(notices) == 1
        assert store.stats()["events"] == count
        notice = notices[0]
        assert (notice.to_agent, notice.from_agent) == ("claude", g.HUB_WRITER)
        assert notice.correlation_id == tid
        assert notice.metadata["budget"] == "thread"
        assert notice.metadata["limit"] == 60
    finally:
        store.close()


def test_a_person_in_the_thread_resets_it_and_a_new_episode_gets_its_notice(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, humans=("alice",), pair_budget=1_000)
    try:
        tid = _task(store, thread_budget=5)
        assert _ping_pong(store, tid)[0] == 5
        _say(store, tid, "alice", "codex")  # a person: never refused, and the count restarts
        written, message = _ping_pong(store, tid)
        assert written == 5
        assert "since alice's event" in message
        assert len(_exhausted(store)) == 2
        # The admin is a person too.
        _say(store, tid, "admin", None)
        assert _ping_pong(store, tid)[0] == 5
    finally:
        store.close()


def test_acks_state_changing_moves_and_cancels_pass_an_exhausted_thread(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, pair_budget=1_000)
    try:
        tid = _task(store, thread_budget=3)
        last = None
        for n in range(3):
            last = _say(store, tid, "codex", "claude", n)
        with pytest.raises(g.BudgetExhausted):
            _say(store, tid, "codex", "claude")
        assert last is not None
        workflows.event_ack(store, event_id=last.id, from_agent="claude")  # an ack passes
        workflows.task_update(
            store, task_id=tid, action="claim", from_agent="codex"
        )  # open -> claimed
        for pct in (10, 20, 30):  # status updates are never counted: they are no chatter
            workflows.task_update(
                store, task_id=tid, action="progress", from_agent="codex", progress=pct
            )
        with pytest.raises(g.BudgetExhausted):
            _say(store, tid, "codex", "claude")
        workflows.task_update(store, task_id=tid, action="cancel", from_agent="claude")
        assert store.task_status(tid)["task"]["state"] == "cancelled"
        assert len(_exhausted(store)) == 1
    finally:
        store.close()


def test_the_requester_raises_the_budget_with_a_thread_budget_event(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, pair_budget=1_000)
    try:
        tid = _task(store, thread_budget=2)
        assert _ping_pong(store, tid)[0] == 2
        store.event_append(
            type=g.RAISE_TYPE,
            stream="project/p",
            room="delegation",
            from_agent="claude",
            correlation_id=tid,
            metadata={"thread_budget": 7},
        )
        written, message = _ping_pong(store, tid)
        assert written == 7
        assert "budget of 7" in message and "since claude's raise" in message
    finally:
        store.close()


def test_the_pair_budget_counts_messages_in_a_window_without_a_task_move(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, pair_budget=4, pair_window_ms=60_000)
    try:
        for n in range(4):  # no thread: direct messages
            _say(store, None, ("codex", "claude")[n % 2], ("claude", "codex")[n % 2], n)
            clock.advance(1_000)
        with pytest.raises(g.BudgetExhausted) as info:
            _say(store, None, "claude", "codex")
        assert info.value.field == "pair_budget"
        assert info.value.message.startswith(
            "agents claude and codex have exchanged 4 messages in the last 60 s without a task "
            "move (pair budget 4 per 60 s); write refused."
        )
        with pytest.raises(g.BudgetExhausted):
            _say(store, None, "codex", "claude")
        notices = _exhausted(store)
        assert len(notices) == 1
        assert notices[0].metadata["agents"] == ["claude", "codex"]
        _say(store, None, "codex", "gemini")  # another pair, and broadcasts, are not counted
        _say(store, None, "codex", "*")
        clock.advance(56_001)  # the oldest message left the window: one more may go
        _say(store, None, "claude", "codex")
        with pytest.raises(g.BudgetExhausted):
            _say(store, None, "codex", "claude")
        # A task move between them restarts the count.
        tid = _task(store, thread_budget=100)
        workflows.task_update(store, task_id=tid, action="claim", from_agent="codex")
        assert _ping_pong(store, tid)[0] == 4
    finally:
        store.close()


def test_the_pair_budget_needs_both_agents_among_the_newest_messages(
    db_url: str, clock: ManualClock
) -> None:
    store = _open(db_url, clock, pair_budget=3, pair_window_ms=60_000)
    try:
        for n in range(7):  # one agent writing to another that never answers is no loop
            _say(store, None, "codex", "claude", n)
        with pytest.raises(g.BudgetExhausted) as info:  # the answer makes it an exchange
            _say(store, None, "claude", "codex")
        assert info.value.field == "pair_budget"
        assert _exhausted(store)[0].metadata["agents"] == ["claude", "codex"]
        # the episode is named by the oldest of the 3 it counted (codex's 5th message)
        counted = store.event_list(to_agent="claude", order="desc", limit=3).events
        assert [e.body for e in counted] == [f"reply {n} from codex" for n in (6, 5, 4)]
        assert _episode(store) == f"pair:claude|codex:{counted[-1].id}"
    finally:
        store.close()


def _episode(store: LogStore) -> str:
    """The idempotency key of the one refusal notice (the episode it names)."""
    with store.snapshot() as ex:
        rows = ex.rows(
            "test.notice-key",
            lambda: sa.text("SELECT idempotency_key FROM events WHERE type = :t"),
            {"t": g.EXHAUSTED_TYPE},
        )
    assert len(rows) == 1
    return str(rows[0][0])


def test_a_peer_s_events_are_never_refused(tmp_path: Path, clock: ManualClock) -> None:
    from mempalace_logstream import sync

    src = _open(str(tmp_path / "a.sqlite3"), clock, pair_budget=1_000)
    dst = _open(str(tmp_path / "b.sqlite3"), clock, pair_budget=1_000, thread_budget=3)
    try:
        tid = _task(src)
        for n in range(20):
            _say(src, tid, ("codex", "claude")[n % 2], ("claude", "codex")[n % 2], n)
        sync.sync_with_peer(dst, sync.LocalPeer(src))
        assert len(dst.event_list(correlation_id=tid, limit=500).events) == 21
    finally:
        src.close()
        dst.close()


def _exhaust_for_surfaces(db: str) -> str:
    with LogStore.open(db) as store:
        tid = _task(store, thread_budget=2)
        _say(store, tid, "codex", "claude")
        _say(store, tid, "claude", "codex")
        return tid


def test_the_refusal_reads_the_same_on_http_mcp_and_the_cli(tmp_path: Path) -> None:
    from mempalace_logstream.http import HubSettings

    db = str(tmp_path / "hub.sqlite3")
    tid = _exhaust_for_surfaces(db)
    args = {
        "type": "task.reply",
        "stream": "project/p",
        "room": "delegation",
        "from_agent": "codex",
        "to_agent": "claude",
        "correlation_id": tid,
        "body": "again",
    }
    expected = (
        f"thread {tid} has used its budget of 2 agent-written events since the task request "
        "(2 written); write refused. A person writing in the thread lifts it, or the requester "
        "(claude) raises it with an event of type thread.budget on the thread, metadata "
        '{"thread_budget": N}'
    )
    store = LogStore.open(db)
    hub = LiveHub(store, HubSettings())
    hub.start()
    try:
        resp = httpx.post(f"{hub.url}/v1/event_append", json=args, timeout=30)
        assert resp.status_code == 409, resp.text
        assert resp.json() == {"error": expected, "field": "thread_budget"}

        async def mcp() -> str:
            async with Client(f"{hub.url}/mcp") as client:
                result = await client.call_tool("mempalace_event_append", args)
                assert result.is_error is True
                return str(result.content[0].text)

        assert asyncio.run(asyncio.wait_for(mcp(), 60)) == expected

        async def in_memory() -> str:
            async with Client(mcp_server.build_server(store)) as client:
                result = await client.call_tool("mempalace_event_append", args)
                return str(result.content[0].text)

        assert asyncio.run(in_memory()) == expected
    finally:
        hub.stop()
        store.close()
    done = run_cli(
        "append",
        *("--type", "task.reply", "--stream", "project/p", "--room", "delegation"),
        *("--from-agent", "codex", "--to-agent", "claude", "--correlation-id", tid),
        *("--body", "again", "--db", db),
    )
    assert done.returncode == 1
    assert done.stderr.decode().strip() == f"error: {expected}"
    with LogStore.open(db) as store:
        assert len(_exhausted(store)) == 1
        assert len(store.event_list(correlation_id=tid, type="task.reply", limit=50).events) == 2


def test_the_budget_options_are_validated(sqlite_store: LogStore) -> None:
    with pytest.raises(errors.ValidationError) as info:
        _task(sqlite_store, thread_budget=0)
    assert info.value.field == "thread_budget"
