"""The delivery ledger (issue 20 item 3, RFC 0009): per event and recipient, pushed (by which
path), seen and acked times, kept in the hub's database across a restart, on SQLite and
PostgreSQL; marks are batched (one transaction per flush) and the earliest time wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempalace_logstream import deliveries, operations
from mempalace_logstream.backends.queries import ledger as ledger_sql
from mempalace_logstream.store import LogStore
from tests.conftest import new_pg_schema, run_cli
from tests.hubproc import HubProcess, env_for, wait_for

NOTE = {"type": "note", "stream": "s", "room": "r"}


def _post(url: str, op: str, args: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    headers = {deliveries.DELIVERY_HEADER: path} if path else {}
    resp = httpx.post(f"{url}/v1/{op}", json=args, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def _rows(url: str, event_id: str) -> dict[str, dict[str, Any]]:
    out = _post(url, "delivery_status", {"event_id": event_id})
    return {row["recipient"]: row for row in out["recipients"]}


def _wakeable(url: str, agent: str) -> str | None:
    listed = _post(url, "presence_list", {})
    return next((a["wakeable"] for a in listed["agents"] if a["agent"] == agent), None)


def _sse_until(url: str, agent: str, since: str, event_id: str) -> None:
    """Follow the hub's SSE stream as `agent` until the frame of `event_id` arrives."""
    params = {"from_agent": agent, "since_event_id": since}
    with httpx.stream("GET", f"{url}/v1/stream", params=params, timeout=10) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line == f"id: {event_id}":
                return
    raise AssertionError("the stream ended before the event")


def test_three_recipients_by_path_across_a_hub_restart(db_url: str, tmp_path: Path) -> None:
    hub = HubProcess(db_url, tmp_path)  # type: ignore[arg-type]  # a URL, passed as --db
    hub.start()
    try:
        url = hub.url
        start = _post(url, "event_append", {**NOTE, "from_agent": "lead", "body": "start"})
        since = start["event"]["id"]
        sent = _post(url, "event_append", {**NOTE, "from_agent": "lead", "to_agent": "*"})
        eid = sent["event"]["id"]
        # w1: pushed by the hub's SSE stream, then reads its inbox, then acks.
        _sse_until(url, "w1", since, eid)
        wait_for(lambda: _rows(url, eid).get("w1", {}).get("pushed_at") is not None, 10, "sse")
        _post(url, "event_list", {"to_agent": "w1"})
        _post(url, "event_ack", {"event_id": eid, "from_agent": "w1"})
        # w2: a channel read pushes it (header), then the agent's own wait sees it.
        _post(url, "event_list", {"from_agent": "w2", "since_event_id": since}, "channel")
        _post(url, "event_wait", {"from_agent": "w2", "since_event_id": since, "timeout_ms": 0})
        # w3: the Codex deliverer pushes it; the agent acks without reading.
        _post(url, "event_wait", {"from_agent": "w3", "since_event_id": since}, "codex")
        _post(url, "event_ack", {"event_id": eid, "from_agent": "w3"})
        before = _rows(url, eid)
        # A later read does not move a time: the earliest wins.
        _post(url, "event_list", {"to_agent": "w1"})
        assert _rows(url, eid) == before
        # The author is no recipient of its own broadcast.
        _post(url, "event_list", {"from_agent": "lead"})
        assert set(_rows(url, eid)) == {"w1", "w2", "w3"}
        hub.stop()
        hub.start()
        after = _rows(url, eid)
        # w1 reacted to its push before the restart: the hub recalls it from the ledger.
        w1_path = {"agent": "w1", "state": "watching", "path": "sse", "ttl_s": 60}
        _post(url, "presence_announce", w1_path)
        wait_for(lambda: _wakeable(url, "w1") == "yes", 10, "w1 recalled as wakeable")
        cli = run_cli("delivery", eid, "--hub", url, "--json", env=env_for(tmp_path))
        assert cli.returncode == 0, cli.stderr
        assert {r["recipient"]: r for r in json.loads(cli.stdout)["recipients"]} == after
    finally:
        hub.close()
    assert after == before
    w1, w2, w3 = after["w1"], after["w2"], after["w3"]
    assert w1["pushed_path"] == "sse" and w1["pushed_at"] <= w1["seen_at"] <= w1["acked_at"]
    assert w2["pushed_path"] == "channel" and w2["pushed_at"] <= w2["seen_at"]
    assert w2["acked_at"] is None
    assert w3["pushed_path"] == "codex" and w3["seen_at"] is None
    assert w3["pushed_at"] <= w3["acked_at"]


def test_marks_are_batched_and_the_earliest_time_wins(db_url: str) -> None:
    store = LogStore.open(db_url)
    now = [1_780_000_000_000]
    try:
        ledger = deliveries.Ledger(store, flush_s=3600, clock=lambda: now[0])
        events = [
            store.event_append(**NOTE, from_agent="lead", to_agent="w1", body=str(i)).to_dict()
            for i in range(200)
        ]
        commits = store.commits
        for e in events:  # 200 reads, one flush: one transaction
            ledger.seen([e], "w1")
        assert ledger.flush() == 200 and store.commits == commits + 1
        first = deliveries.status(store, events[0]["id"])["recipients"][0]["seen_at"]
        now[0] += 5_000
        ledger.seen(events[:1], "w1")
        ledger.pushed(events[:1], "w1", "watch")
        ledger.flush()
        now[0] -= 60_000  # an earlier push (a clock step back): it wins, with its path
        ledger.pushed(events[:1], "w1", "monitor")
        ledger.acked(events[0]["id"], "w1")
        ledger.close()
        row = deliveries.status(store, events[0]["id"])["recipients"][0]
        assert row["seen_at"] == first
        assert row["pushed_path"] == "monitor" and row["pushed_at"] < first
        assert row["acked_at"] is not None
    finally:
        store.close()


def test_a_local_client_records_its_reads_and_task_status_shows_the_request(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "log.sqlite3")
    client = operations.LocalClient(LogStore.open(db))
    task = client.call(
        "task_create",
        project="p",
        from_agent="lead",
        to_agent="w1",
        goal="g",
        branch="main",
        base_commit="abc1234",
        done="d",
    )
    client.call("event_list", to_agent="w1")
    client.close()  # the queued marks are written before the store closes
    client = operations.LocalClient(LogStore.open(db))
    try:
        rows = client.call("task_status", task_id=task["task_id"])["task"]["delivery"]
        assert [r["recipient"] for r in rows] == ["w1"] and rows[0]["seen_at"]
        with pytest.raises(Exception, match="event_id"):
            client.call("delivery_status", event_id="evt_nope")
    finally:
        client.close()


def test_a_bad_delivery_header_is_refused_and_an_observer_marks_nothing(tmp_path: Path) -> None:
    hub = HubProcess(tmp_path / "log.sqlite3", tmp_path)
    hub.start()
    try:
        eid = _post(hub.url, "event_append", {**NOTE, "from_agent": "lead", "to_agent": "w1"})
        # The dashboard (its header) and an explicit observer read w1's inbox: nobody read it.
        ident = eid["event"]["id"]
        for headers in ({"X-Logstream-Dashboard": "1"}, {deliveries.DELIVERY_HEADER: "none"}):
            got = httpx.get(f"{hub.url}/v1/events", params={"to_agent": "w1"}, headers=headers)
            assert got.status_code == 200 and got.json()["count"] == 1
        assert _rows(hub.url, ident) == {}
        resp = httpx.post(
            f"{hub.url}/v1/event_list",
            json={"from_agent": "w1"},
            headers={deliveries.DELIVERY_HEADER: "pigeon"},
            timeout=10,
        )
        assert resp.status_code == 422
        assert resp.json()["field"] == deliveries.DELIVERY_HEADER
    finally:
        hub.close()


def test_task_stalled_names_what_the_ledger_knows_of_the_request(db_url: str, clock: Any) -> None:
    from mempalace_logstream import reminders, workflows
    from mempalace_logstream.tasks import guards as g

    store = LogStore.open(db_url, clock=clock)
    try:
        ledger = deliveries.enable(store)
        assert ledger is not None
        out = workflows.task_create(
            store,
            project="p",
            from_agent="claude",
            to_agent="codex",
            goal="fix the bug",
            branch="main",
            base_commit="abc1234",
            done="tests pass",
            max_reminders=0,
        )
        request = out["task"].to_dict()
        ledger.pushed([request], "codex", "codex")  # the Codex queue delivered it, no claim
        clock.advance(10 * 60_000)
        assert [x.kind for x in reminders.remind_once(store)] == ["stalled"]
        page = store.event_list(type=g.STALLED_TYPE, order="asc", limit=10)
        rows = page.events[0].metadata["delivery"]
        assert [(r["recipient"], r["pushed_path"], r["seen_at"]) for r in rows] == [
            ("codex", "codex", None)
        ]
    finally:
        deliveries.disable(store)
        store.close()


def test_only_mail_to_the_agent_is_a_push_and_a_reaction_makes_it_wakeable(
    tmp_path: Path,
) -> None:
    store = LogStore.open(str(tmp_path / "log.sqlite3"))
    now = [1_780_000_000_000]
    try:
        ledger = deliveries.Ledger(store, flush_s=3600, clock=lambda: now[0], window_s=60)
        other = store.event_append(**NOTE, from_agent="lead", to_agent="w2").to_dict()
        mine = store.event_append(**NOTE, from_agent="lead", to_agent="w1").to_dict()
        ledger.pushed([], "w1", "channel")  # a wait that timed out
        ledger.pushed([other], "w1", "channel")  # others' mail
        assert ledger.life("w1").pushed_ms is None
        assert ledger.wakeable("w1", ["channel"]) == "unverified"
        ledger.pushed([mine], "w1", "channel")
        assert ledger.life("w1").pending_ms == now[0]
        now[0] += 1_000
        ledger.seen([], "w1")  # any read after the push is a reaction
        assert ledger.wakeable("w1", ["channel"]) == "yes"
        assert ledger.wakeable("w1", ["hook"]) == "no"  # no live push path
        now[0] += 61_000  # past the window, no reaction since
        assert ledger.wakeable("w1", ["channel"]) == "unverified"
        ledger.close()
        rows = deliveries.status(store, mine["id"])["recipients"]
        assert [(r["recipient"], r["pushed_path"]) for r in rows] == [("w1", "channel")]
        assert deliveries.status(store, other["id"])["recipients"] == []
    finally:
        store.close()


MARK_TIMES = st.none() | st.integers(0, 50).map(lambda s: f"2026-12-04T10:00:{s:02d}.000Z")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["w1", "w2"]),
                MARK_TIMES,
                st.sampled_from(["watch", "sse"]),
                MARK_TIMES,
                MARK_TIMES,
            ),
            max_size=6,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_merge_keeps_the_earliest_time_per_column(
    ledger_store: LogStore, batches: list[list[tuple[Any, ...]]]
) -> None:
    """Marks merged by separate flushes (as separate hub lives would: no memory of what was
    written) leave, per (event, recipient), the earliest time of each column, and the path of
    the earliest push."""
    event = ledger_store.event_append(**NOTE, from_agent="lead", to_agent="*", body="x")
    expect: dict[str, dict[str, Any]] = {}
    for batch in batches:
        rows: dict[str, dict[str, Any]] = {}  # one mark per key in a flush, as the ledger's
        for who, pushed, path, seen, acked in batch:
            row = {"event_id": event.id, "recipient": who, "pushed_at": pushed}
            rows[who] = {**row, "pushed_path": path if pushed else None}
            rows[who].update(seen_at=seen, acked_at=acked)
        marks = list(rows.values())
        ledger_store.transaction(lambda tx, r=marks: ledger_sql.merge(tx.ex, r))
        for who, row in rows.items():
            held = expect.setdefault(who, dict.fromkeys(ledger_sql.ROW[2:]))
            for column in ("pushed_at", "seen_at", "acked_at"):
                new = row[column]
                if new is not None and (held[column] is None or new < held[column]):
                    held[column] = new
                    if column == "pushed_at":
                        held["pushed_path"] = row["pushed_path"]
    got = {
        r["recipient"]: {k: r[k] for k in ledger_sql.ROW[2:]}
        for r in deliveries.status(ledger_store, event.id)["recipients"]
    }
    assert got == expect


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])
def ledger_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One store per backend for every example (a fresh event each)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'l.sqlite3'}"
    else:
        url = new_pg_schema(request.getfixturevalue("pg_database"))
    store = LogStore.open(url)
    yield store
    store.close()


def test_a_failed_flush_keeps_its_marks_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush that fails (a disk that refuses one write) loses nothing: its marks go with
    the next flush, merged with the marks made meanwhile."""
    from mempalace_logstream import errors

    store = LogStore.open(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    try:
        ledger = deliveries.Ledger(store, flush_s=3600)
        sent = [
            store.event_append(**NOTE, from_agent="lead", to_agent="w1", body=str(i)).to_dict()
            for i in range(3)
        ]
        ledger.seen(sent[:2], "w1")
        real = store.transaction

        def full_disk(work: Any) -> Any:
            raise errors.StorageError("database or disk is full")

        monkeypatch.setattr(store, "transaction", full_disk)
        assert ledger.flush() == 0
        monkeypatch.setattr(store, "transaction", real)
        ledger.seen(sent[2:], "w1")
        assert ledger.flush() == 3
        for e in sent:
            (row,) = deliveries.status(store, e["id"])["recipients"]
            assert row["recipient"] == "w1" and row["seen_at"] is not None
    finally:
        store.close()


def test_a_new_ledger_recalls_who_reacted_to_a_push_from_the_table(db_url: str) -> None:
    """`wakeable` survives a hub restart, and on PostgreSQL crosses hubs: a new ledger (a
    restarted hub, or another hub's store on the same database) learns each agent's last push
    and last read from the table, so an agent that reacted is `yes` at once, and one that was
    pushed to and never reacted stays `unverified`."""
    first, second = LogStore.open(db_url), LogStore.open(db_url)
    try:
        ledger = deliveries.Ledger(first, flush_s=3600)
        mail = [
            first.event_append(**NOTE, from_agent="lead", to_agent=to, body="x").to_dict()
            for to in ("w1", "w2")
        ]
        ledger.pushed(mail[:1], "w1", "watch")
        ledger.seen(mail[:1], "w1")  # w1 read it after the push: a reaction
        ledger.pushed(mail[1:], "w2", "channel")  # w2 never reacted
        ledger.close()
        again = deliveries.Ledger(second, flush_s=3600)
        assert again.wakeable("w1", ["watch"]) == "unverified"  # nothing recalled yet
        assert again.recall() == 2
        assert again.wakeable("w1", ["watch"]) == "yes"
        assert again.wakeable("w2", ["channel"]) == "unverified"
        assert again.life("w2").pushed_ms is not None and again.life("w2").life_ms is None
        assert again.recall() == 0  # nothing new to learn
        again.close()
    finally:
        first.close()
        second.close()
