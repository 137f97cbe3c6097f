"""How the PostgreSQL writer begins a write transaction (backends/postgres.py): the
starting-state query, prepared once per connection, and the optimistic begin's check.

Optimistic begin (issue 25): after a commit of its own, the writer knows the state it left
(`Left`: the newest seq and artifact seq, the keyring's marks). The next transaction sends
nothing to begin: BEGIN, the append lock and `EXECUTE` of the check are queued and go with
its first message. Under the lock the check reads the starting state (the same statement)
and divides by zero when it is not the one left: another writer committed, the message
fails before anything of it is written, and the pipeline runs the batch again, reading the
state (`base.StateMoved`).
"""

from __future__ import annotations

import contextlib
import select
from dataclasses import dataclass
from typing import Any

import psycopg

from mempalace_logstream.backends import base
from mempalace_logstream.backends.pg_inline import Inline


@dataclass(frozen=True)
class Left:
    """What a committed write transaction left: its connection, the newest seq and artifact
    seq (its own counters), and the keyring's marks as it read them last."""

    db: psycopg.Connection[Any]
    max_seq: int
    max_art: int
    marks: tuple[Any, Any]


def state_key(state: base.Statement) -> Any:
    """What identifies a prepared starting-state query: its text and parameters."""
    return (state[0], tuple(sorted(state[1].items())))


def prepare(
    db: psycopg.Connection[Any], name: str, state: base.Statement, replace: bool, insert: str
) -> int:
    """PREPARE the starting-state query as `name` (its parameters as literals: one plan,
    made once), its check as `name`_check, and `insert` (a local append's INSERT of one
    event, its parameters as `$n`) as `name`_insert (DEALLOCATE the ones held first, if
    `replace`); the round trips it took. A connection this backend prepared on before
    (given back, then taken again) holds them already: the names are the backend's own, so
    are the statements."""
    trips = 0
    if replace:
        db.execute(f"DEALLOCATE {name}; DEALLOCATE {name}_check; DEALLOCATE {name}_insert")
        trips += 1
    statements = _prepare_statements(name, psycopg.ClientCursor(db).mogrify(*state))
    for sql in (*statements, f"PREPARE {name}_insert AS {insert}"):
        trips += 1
        with contextlib.suppress(psycopg.errors.DuplicatePreparedStatement):
            db.execute(sql)
    return trips


def _prepare_statements(name: str, state_text: str) -> tuple[str, str]:
    """The state query (its parameters inlined: `state_text`) as `name`, and the check:
    the state's counters and pins (what the pipeline's state rests on) against the ones
    the last transaction left; a division by zero when they differ (the error fails the
    message: nothing after it runs). The state's columns it does not use are not
    computed: the newest key event (`key_top`, ~14 µs of the server's: two type-index
    lookups and the row) is one of the events, which are never deleted and only ever
    appended past `max(seq)`, so an unchanged `max(seq)` is an unchanged `key_top`. The
    pins are meta rows, written without an event: compared."""
    check = (
        f"PREPARE {name}_check(bigint, bigint, text) AS SELECT 1 / ("
        "coalesce(s.max_seq, 0) = $1 AND coalesce(s.max_art, 0) = $2 "
        "AND s.pins IS NOT DISTINCT FROM $3)::int "
        f"FROM ({state_text}) AS s(max_seq, max_art, top, own, key_top, pins)"
    )
    return f"PREPARE {name} AS {state_text}", check


def check(name: str, left: Left, inline: Inline) -> str:
    """The `EXECUTE` of the check prepared as `name`_check, against `left`."""
    values = (left.max_seq, left.max_art, left.marks[1])
    return inline.text(f"EXECUTE {name}_check(%s, %s, %s)", values)


def unmoved(left: Left, row: Any) -> bool:
    """The starting state `row` is the one `left` (by our last commit): nobody else
    committed since. After an optimistic begin that failed, the next one waits until this
    holds, so writers of several processes that take turns do not each pay a failed
    message and its rollback."""
    if row is None:
        return False
    return ((row[0] or 0), (row[1] or 0), (row[4], row[5])) == (
        left.max_seq,
        left.max_art,
        left.marks,
    )


def server_spoke(db: psycopg.Connection[Any]) -> bool:
    """The server sent something since our last statement's answer: on the writer's
    connection (no LISTEN) that is the error of a connection it ended (`pg_terminate_backend`,
    a restart, an idle timeout), or its closing. A zero-timeout poll of the socket."""
    return bool(select.select([db.fileno()], [], [], 0)[0])
