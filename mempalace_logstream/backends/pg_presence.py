"""Presence shared by the hubs of one PostgreSQL log (issue 23): the `presence` table as a
`presence.Backing`, and the fan-out of its changes by LISTEN/NOTIFY.

Every change (an announcement, a leave) runs in one transaction under a transaction-level
advisory lock, takes the next change number and sends a NOTIFY with the change itself (JSON),
so every hub hears every change in commit order, which is change-number order. A listener is a
dedicated autocommit connection (`pg_listen.autocommit_connector`, as the store's change
signal's); after (re)connecting, a hub reads the whole table (`snapshot`) under the same lock,
so no change falls between the snapshot and the notifications. Expiry needs no write: every
hub expires an entry on its own clock when `expires_ms` passes. Rows that lapsed more than a
day ago, and past twice the agent bound the ones that lapsed first, are forgotten on the next
announcement.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import presence
from mempalace_logstream.backends import base
from mempalace_logstream.backends.pg_listen import PgListener, autocommit_connector
from mempalace_logstream.backends.queries import presence as rows

PG_PRESENCE_LOCK = 0x70726573  # "pres": with the events table's oid, one lock per log
FORGET_MS = 24 * 3_600_000  # a lapsed row's paths are remembered this long
KEEP_FACTOR = 2  # rows kept past the live ones: lapsed agents' paths (as a hub's memory keeps)
MAX_PAYLOAD = 7_900  # NOTIFY's limit is 8,000 bytes; a larger change says "reload"


def for_engine(engine: sa.Engine) -> PgPresenceTable | None:
    """The shared presence table of `engine`'s log, or None where a hub keeps presence in
    memory (SQLite: one hub per file)."""
    return PgPresenceTable(engine) if engine.dialect.name == "postgresql" else None


class PgPresenceTable:
    """The `presence` table of one PostgreSQL log; a `presence.Backing`."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        with base.wrap_exceptions(), engine.connect() as conn:
            oid = conn.execute(sa.text("SELECT 'events'::regclass::oid::bigint")).scalar()
        self.oid = int(oid or 0)
        self.channel = f"logstream_presence_{self.oid}"
        self._connect = autocommit_connector(engine)

    @contextlib.contextmanager
    def _change(self) -> Iterator[tuple[sa.Connection, int]]:
        """A transaction holding the presence lock, with the next change number."""
        with base.wrap_exceptions(), self.engine.begin() as conn:
            self._lock(conn)
            yield conn, rows.next_rev(conn)

    def _lock(self, conn: sa.Connection) -> None:
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(:k, CAST(:oid AS int))"),
            {"k": PG_PRESENCE_LOCK, "oid": self.oid},
        )

    def _notify(self, conn: sa.Connection, change: dict[str, Any]) -> None:
        text = json.dumps(change, ensure_ascii=False, separators=(",", ":"))
        if len(text.encode()) > MAX_PAYLOAD:
            text = json.dumps({"rev": change["rev"], "op": "reload"})
        conn.execute(sa.select(sa.func.pg_notify(self.channel, text)))

    def announce(
        self, entry: presence.Presence, path: str | None, max_agents: int
    ) -> tuple[int, presence.Paths]:
        now = entry.announced_ms
        with self._change() as (conn, rev):
            rows.forget(conn, now - FORGET_MS)
            held = rows.one(conn, entry.agent)
            live = held is not None and held[1].expires_ms > now
            if not live and rows.live_count(conn, now) >= max_agents:
                raise presence.full(max_agents)
            paths = {} if held is None else held[2]
            if path is not None:
                paths = presence.merge_path(paths, path, now, entry.expires_ms)
            rows.put(conn, rev, entry, paths)
            rows.trim(conn, KEEP_FACTOR * max_agents, now)
            self._notify(conn, announce_change(rev, entry, paths))
        return rev, paths

    def leave(self, agent: str, now_ms: int) -> tuple[int, bool]:
        with self._change() as (conn, rev):
            held = rows.one(conn, agent)
            rows.delete(conn, agent)
            self._notify(conn, {"rev": rev, "op": "leave", "agent": agent})
        return rev, held is not None and held[1].expires_ms > now_ms

    def snapshot(self) -> tuple[int, list[rows.Row]]:
        """Every row and the change number they are as of (no change in flight)."""
        with base.wrap_exceptions(), self.engine.begin() as conn:
            self._lock(conn)
            return rows.current_rev(conn), rows.every(conn)

    def listener(self) -> PgListener:
        return PgListener(self._connect, self.channel)


def announce_change(rev: int, entry: presence.Presence, paths: presence.Paths) -> dict[str, Any]:
    return {
        "rev": rev,
        "op": "announce",
        "agent": entry.agent,
        "state": entry.state,
        "task_id": entry.task_id,
        "note": entry.note,
        "announced_ms": entry.announced_ms,
        "expires_ms": entry.expires_ms,
        "paths": {p: list(span) for p, span in paths.items()},
    }


def read_change(payload: str) -> tuple[str, int, str, presence.Presence | None, presence.Paths]:
    """A NOTIFY payload as (op, rev, agent, entry, paths): op `announce` (with the entry and
    its agent's paths), `leave`, or `reload` (read the whole table again)."""
    change = json.loads(payload)
    op, rev, agent = str(change["op"]), int(change["rev"]), str(change.get("agent", ""))
    if op != "announce":
        return op, rev, agent, None, {}
    entry = presence.Presence(
        agent=agent,
        state=str(change["state"]),
        task_id=change["task_id"],
        note=change["note"],
        announced_ms=int(change["announced_ms"]),
        expires_ms=int(change["expires_ms"]),
    )
    paths = {str(p): (int(s[0]), int(s[1])) for p, s in change["paths"].items()}
    return op, rev, agent, entry, paths
