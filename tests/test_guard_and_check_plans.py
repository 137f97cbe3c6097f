"""The pair loop guard's statement and the optimistic begin's check on a log of realistic
size (issue 25): plans, never times. The pair guard walks the pair index (migration 0012:
from_agent, to_agent, seq; addressed rows only) on both databases, and on PostgreSQL its
prepared statement runs on a generic plan, planned once per connection (a custom plan of
it, made anew on every addressed append, cost ~0.25-0.4 ms on a 50,000-event log), and
counts nothing unless the other agent wrote back in the window (a probe of that way). The
optimistic check reads the counters and the pins, not the newest key event (an unchanged
max(seq) implies it)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.backends import sqlite_write_sql

AGENTS = 40


def add(store: LogStore, **fields: Any) -> Any:
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    return store.event_append(**{**base, **fields})


def _fill_sql(rows: int) -> str:
    """`rows` events among AGENTS agents over the last two hours, every fifth a broadcast,
    written as the store writes them (seq, created_at's format), then ANALYZEd."""
    return (
        "INSERT INTO events (seq, id, origin_replica, origin_seq, hlc, type, stream, room, "
        "from_agent, to_agent, body, created_at, metadata_json) "
        "SELECT 10 + g, 'evt_fill_' || g, 'rep_fill', g, "
        "to_char(g, 'FM0000000000000') || '-000000-rep_fill', "
        "(ARRAY['note', 'chat', 'event.ack', 'task.progress'])[1 + g % 4], 's', 'r', "
        f"'agent-' || (g * 7 % {AGENTS}), "
        f"CASE WHEN g % 5 = 0 THEN '*' ELSE 'agent-' || (g * 13 % {AGENTS}) END, 'x', "
        "to_char((now() AT TIME ZONE 'utc') - interval '2 hours' "
        f"+ g * interval '2 hours' / {rows}, 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), '{{}}' "
        f"FROM generate_series(1, {rows}) AS g; ANALYZE events"
    )


def record_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every statement a psycopg cursor sends from now on (until `monkeypatch`
    undoes it at the test's end)."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return sent


@pytest.mark.pg
def test_postgres_the_pair_guard_runs_on_a_generic_plan_of_the_pair_index(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LogStore.open(pg_url) as store:
        add(store, body="first")
        with store.backend.transaction() as tx:
            tx.db.execute(_fill_sql(20_000))
        sent = record_statements(monkeypatch)
        for i in range(8):  # past PostgreSQL's five custom plans of a prepared statement
            add(store, from_agent="agent-1", to_agent="agent-2", body=f"m{i}")
        monkeypatch.undo()
        message = sent[-1]
        pair = re.findall(r"EXECUTE logstream_read_\w+\([^;]*\)", message)
        check = re.findall(r"EXECUTE logstream_state_\w+_check\([^;]*\)", message)
        assert len(pair) == 1 and len(check) == 1, message
        with store.backend.transaction() as tx:
            plan = "\n".join(r[0] for r in tx.db.execute(f"EXPLAIN {pair[0]}").fetchall())
            checked = "\n".join(r[0] for r in tx.db.execute(f"EXPLAIN {check[0]}").fetchall())
            ran = tx.db.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {pair[0]}").fetchall()
    assert plan.count("Index Scan Backward using ix_events_pair") == 2, plan
    # agent-2 never wrote to agent-1: the probe of that way finds nothing, nothing is counted.
    walked = [r[0] for r in ran if "Index Scan Backward using ix_events_pair" in r[0]]
    assert len(walked) == 2 and all("never executed" in step for step in walked), ran
    # A generic plan names the parameters; a custom one (planned on every append) the values.
    assert "'agent-1'" not in plan and "'agent-2'" not in plan, plan
    assert "from_agent = ($" in plan, plan
    # The optimistic check reads max(seq), max(artifact seq) and the pins: not the newest
    # key event (two type-index lookups and its row).
    assert "ix_events_type_seq" not in checked, checked
    assert "pk_events" in checked and "logstream_meta" in checked, checked


def test_sqlite_the_pair_guard_walks_the_pair_index_which_holds_addressed_rows_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pair.sqlite3"
    with LogStore.open(str(path), durability="off") as store:
        for i in range(60):
            to = "*" if i % 3 == 0 else f"a{(i + 1) % 5}"
            add(store, from_agent=f"a{i % 5}", to_agent=to, body=str(i))
        add(store, body="to nobody")
    key = next(k for k in sqlite_write_sql.STATEMENTS if k[0] == "guards.pair")
    sql, defaults = sqlite_write_sql.STATEMENTS[key]
    params = {**defaults, "a": "a1", "b": "a2", "cutoff": "2000", "before": 10**9}
    params.update({f"k{i}": kind for i, kind in enumerate(key[2])})
    with sqlite3.connect(path) as raw:
        plan = [r[3] for r in raw.execute("EXPLAIN QUERY PLAN " + sql, params)]
        (definition,) = raw.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'ix_events_pair'"
        ).fetchone()
        refused, found, _oldest = raw.execute(sql, params).fetchone()
    assert sum("USING INDEX ix_events_pair (from_agent=? AND to_agent=?" in s for s in plan) == 2
    assert definition.endswith("WHERE to_agent IS NOT NULL AND to_agent != '*'"), definition
    # a1 -> a2 (a2 never writes to a1): i = 1 mod 5, the broadcasts (i = 0 mod 3) left out.
    assert (refused, found) == (0, len([i for i in range(1, 60, 5) if i % 3]))


@pytest.mark.pg
def test_postgres_the_optimistic_check_still_sees_another_stores_pin(pg_url: str) -> None:
    """A pin is a meta row, written without an event (max(seq) unchanged): the check compares
    the pins, so the next append after another store's pin fails its first message and runs
    again, reading the state (and the keyring with the pin)."""
    key_id = "ed25519:" + "ab" * 16
    with LogStore.open(pg_url) as a, LogStore.open(pg_url) as b:
        add(a, body="a1")
        add(a, body="a2")  # alone: the optimistic begin
        assert b.pin_admin(key_id)
        before = a.backend.round_trips  # type: ignore[attr-defined]
        assert add(a, body="a3").seq == 3
        # The failed message and its ROLLBACK, then BEGIN with the state, the keyring read
        # again (its pins changed) and the COMMIT: 1 when nobody else wrote (above).
        assert a.backend.round_trips - before == 5  # type: ignore[attr-defined]
        before = a.backend.round_trips  # type: ignore[attr-defined]
        assert add(a, body="a4").seq == 4
        assert a.backend.round_trips - before == 2  # type: ignore[attr-defined]
