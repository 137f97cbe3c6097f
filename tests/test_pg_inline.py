"""The PostgreSQL writer's parameters written as literals (backends/pg_inline.py): its queued
writes, its reads' EXECUTEs and its optimistic check travel as text. Values that quoting
could get wrong are stored and found back exactly, on a server whose strings conform to the
standard (the default) and on one whose do not (psycopg's quoting then)."""

from __future__ import annotations

from typing import Any

import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.backends.pg_inline import _split

TRICKY = [
    "it's",
    "''",
    "back\\slash\\",
    "\\'; DROP TABLE events; --",
    "%s %(x)s %% 100%",
    "E'\\x41'",
    "$1 $$ $tag$",
    "ünïcødé ✓ 日本",
    "line\nbreak\ttab",
]


def test_a_statement_is_split_once_at_its_placeholders() -> None:
    assert _split("a %s b %s") == (("a ", " b ", ""), (0, 1))
    assert _split("x = %(x)s AND y LIKE %(y)s || '%%' AND z = %(x)s") == (
        ("x = ", " AND y LIKE ", " || '%' AND z = ", ""),
        ("x", "y", "x"),
    )
    assert _split("SELECT 1") == (("SELECT 1",), ())


@pytest.mark.pg
@pytest.mark.parametrize("conforming", ["on", "off"])
def test_tricky_text_is_stored_and_read_back_exactly(pg_url: str, conforming: str) -> None:
    url = f"{pg_url}%20-cstandard_conforming_strings%3D{conforming}"
    with LogStore.open(url) as store:
        inline = store.backend._writer_cursors(store.backend._writer()).inline  # type: ignore[attr-defined]
        assert inline.plain is (conforming == "on")
        written: list[Any] = []
        for i, text in enumerate(TRICKY):
            fields = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
            topic = "".join(c for c in text if c >= " ")  # names take no control characters
            # A directed message: its loop guard's read is an EXECUTE sent with its INSERT.
            event = store.event_append(
                **fields, to_agent="b", body=text, topic=topic, idempotency_key=f"{topic}#{i}"
            )
            # The same key again: found by the idempotency read, whose key is inlined.
            again = store.event_append(
                **fields, to_agent="b", body=text, topic=topic, idempotency_key=f"{topic}#{i}"
            )
            assert again == event
            written.append(event)
        listed = store.event_list(order="asc").events
        assert [e.body for e in listed] == TRICKY
        assert [e.topic for e in listed] == ["".join(c for c in t if c >= " ") for t in TRICKY]
        assert list(listed) == written


@pytest.mark.pg
def test_literals_stay_right_when_the_setting_changes_after_connecting(pg_url: str) -> None:
    """The quoting is decided when the writer connects; a string with a backslash is written
    as an escape string, so it reads back the same if `standard_conforming_strings` is turned
    off later in the session, and a negative number never runs into a minus before it."""
    import psycopg

    from mempalace_logstream.backends.pg_inline import Inline

    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as db:
        inline = Inline(db)
        assert inline.plain
        sql = "SELECT 1-%s, %s, %s"
        for setting in ("on", "off"):
            db.execute(f"SET standard_conforming_strings = {setting}")
            for text in TRICKY:
                row = db.execute(inline.text(sql, (-1, text, "plain's"))).fetchone()
                assert row == (2, text, "plain's"), (setting, text)
