"""A page statement's binding forms read the same rows (issue 25).

On SQLite a read binds its page statement by position (`SqliteBackend.positional_dialect`:
SQLite's `?NNN`, each distinct parameter once, so an inbox split in legs that repeats its
bounds binds by position too); the named form (`:name` from a dict) is what every other
statement and PostgreSQL use. Both must give the same page for any values: quotes, text that
looks like a parameter (`?1`, `:lo`, `%(top)s`, `$1`), unicode, many filters and many values.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.models import Page

HOSTILE = (
    "it's",
    'say "hi"',
    "?1",
    "?2 OR 1=1",
    ":lo",
    ":top",
    "%(top)s",
    "$1",
    "ünïcødé-名前-🙂",
    "a;DROP TABLE events;--",
    "back\\slash",
    "*x",
)
TYPES = ("note", "build.report", "chat.message")
STATUSES = ("open", "completed")


def _fill(store: LogStore, n: int) -> None:
    rnd = random.Random(25)
    for i in range(n):
        row: dict[str, Any] = {
            "type": rnd.choice(TYPES),
            "stream": rnd.choice(HOSTILE[:6]),
            "room": rnd.choice(HOSTILE[4:]),
            "from_agent": rnd.choice(HOSTILE[:5]),
            "body": f"{rnd.choice(HOSTILE)} {i}",
        }
        if i % 3:
            row["to_agent"] = rnd.choice((*HOSTILE[:7], "*"))
        if i % 4:
            row["correlation_id"] = rnd.choice(HOSTILE[3:9])
        if i % 5 == 0:
            row["topic"] = rnd.choice(HOSTILE)
        if row["type"] == "build.report":
            row["status"] = rnd.choice(STATUSES)
        store.event_append(**row)


def _reads(ids: list[str], created: str) -> list[dict[str, Any]]:
    many = list(HOSTILE[:9])
    reads: list[dict[str, Any]] = [
        {},
        {"to_agent": HOSTILE[0]},
        {"to_agent": HOSTILE[1], "limit": 3},
        {"to_agent": [HOSTILE[2], HOSTILE[4]], "order": "asc"},
        {"to_agent": many},  # more values than an inbox splits: one IN list
        {"to_agent": HOSTILE[3], "since_event_id": ids[10]},
        {"to_agent": [HOSTILE[5], HOSTILE[6]], "since_event_id": ids[5], "limit": 2},
        {"to_agent": HOSTILE[0], "before_event_id": ids[-5], "order": "desc", "limit": 4},
        {"correlation_id": HOSTILE[3]},
        {"correlation_id": [HOSTILE[4], HOSTILE[5], HOSTILE[8]], "limit": 5},
        {"stream": HOSTILE[:3], "room": HOSTILE[4:9], "exclude_writer": HOSTILE[1]},
        {"writer": [HOSTILE[0], HOSTILE[2]], "topic": HOSTILE, "order": "asc"},
        {"type": "build.report", "status": ["open"], "to_agent": HOSTILE[2]},
        {"type": list(TYPES[:2]), "since_created_at": created, "limit": 7},
        {
            "stream": HOSTILE[:6],
            "room": HOSTILE[4:],
            "writer": HOSTILE[:5],
            "exclude_writer": [HOSTILE[3]],
            "correlation_id": HOSTILE[3:9],
            "to_agent": [HOSTILE[0], HOSTILE[1], HOSTILE[6]],
            "since_event_id": ids[3],
            "before_event_id": ids[-2],
            "limit": 6,
        },
    ]
    return reads


def _pages(store: LogStore, reads: list[dict[str, Any]]) -> tuple[list[Page], list[Any]]:
    seen: list[Any] = []
    store.backend.statement_hooks.append(
        lambda sql, params: seen.append(params) if "events.body" in sql else None
    )
    pages = []
    for args in reads:
        first = store.event_list(**args)
        pages.append(first)
        assert store.event_list(**args) == first  # read again: the remembered statement
        page = first
        while page.has_more:  # every page of the read, after each cursor
            page = store.event_list(**{**args, "since_event_id": page.cursor, "order": "asc"})
            pages.append(page)
    return pages, seen


def test_sqlite_positional_and_named_pages_are_the_same(tmp_path: Path) -> None:
    path = str(tmp_path / "bind.sqlite3")
    with LogStore.open(path) as store:
        _fill(store, 90)
        every = store.event_list(order="asc", limit=500).events
    ids = [e.id for e in every]
    reads = _reads(ids, every[40].created_at[:19] + "Z")
    with LogStore.open(path) as positional, LogStore.open(path) as named:
        named.reads._positional = None  # the named form, as before positional binding
        by_position, bound = _pages(positional, reads)
        by_name, named_bound = _pages(named, reads)
        assert by_position == by_name
        assert bound and all(type(params) is tuple for params in bound)
        assert all(isinstance(params, dict) for params in named_bound)
        # And both are the filter's rows (`Filters.matches`, the rule in Python).
        for args in reads[:5] + reads[8:13]:
            req = positional.read_request(**{**args, "limit": 500, "order": "asc"})
            want = [e for e in every if req.filters.matches(e)]
            got = positional.event_list(**{**args, "limit": 500, "order": "asc"}).events
            assert list(got) == want, args
    assert sum(len(p.events) for p in by_position) > 100


@pytest.mark.parametrize("n_to", [1, 2, 8, 9])
def test_sqlite_a_split_inbox_binds_each_bound_once(tmp_path: Path, n_to: int) -> None:
    """An inbox split in legs repeats lo and top in every leg: the positional statement
    numbers each distinct parameter once (`?1`, `?2` in every leg), so it binds from a tuple
    of lo, top, the values and the limit."""
    agents = [f"agent-{i}" for i in range(n_to)]
    seen: list[tuple[str, Any]] = []
    with LogStore.open(str(tmp_path / "legs.sqlite3")) as store:
        for i in range(12):
            to = agents[i % n_to] if i % 3 else "*"
            store.event_append(
                type="note", stream="s", room="r", from_agent="a", body=f"{i}", to_agent=to
            )
        store.backend.statement_hooks.append(lambda sql, params: seen.append((sql, params)))
        page = store.event_list(to_agent=agents, limit=5, order="asc")
    sql, params = next((s, p) for s, p in seen if "events.body" in s)
    legs = n_to + 1 if n_to + 1 <= 8 else 1  # the agents and "*"; over 8 values: one IN list
    assert sql.count("UNION ALL") == legs - 1
    numbers = re.findall(r"\?(\d+)", sql)
    assert numbers.count("1") == numbers.count("2") == legs and ":" not in sql
    assert params == (0, 12, *agents, "*", 6)
    assert [e.body for e in page.events] == ["0", "1", "2", "3", "4"] and page.has_more
