"""The shared presence table's statements (issue 23): `presence`, one row per agent (its latest
announcement, its delivery paths as JSON, the change number `rev` that wrote it), and the
change counter, the meta row `presence_rev`. Portable statements on a `sa.Connection`; the
caller holds the presence lock (backends/pg_presence.py), so a read then a write is safe.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from mempalace_logstream.presence import Paths, Presence
from mempalace_logstream.schema import meta, presence

REV_KEY = "presence_rev"
# One row: (its change number, the entry, its delivery paths).
Row = tuple[int, Presence, Paths]


_COLS = ("agent", "state", "task_id", "note", "announced_ms", "expires_ms", "rev", "paths_json")


def _select() -> sa.Select[tuple[object, ...]]:
    return sa.select(*(presence.c[name] for name in _COLS))


def _from(r: sa.Row[tuple[object, ...]]) -> Row:
    agent, state, task_id, note, announced, expires, rev, paths = tuple(r)
    entry = Presence(
        agent=str(agent),
        state=str(state),
        task_id=None if task_id is None else str(task_id),
        note=None if note is None else str(note),
        announced_ms=int(str(announced)),
        expires_ms=int(str(expires)),
    )
    return int(str(rev)), entry, paths_from_json(str(paths))


def paths_from_json(text: str) -> Paths:
    """The paths column (`{path: [since_ms, expires_ms]}`) as a dict of tuples."""
    return {str(p): (int(span[0]), int(span[1])) for p, span in json.loads(text).items()}


def paths_to_json(paths: Paths) -> str:
    return json.dumps({p: list(span) for p, span in sorted(paths.items())})


def every(conn: sa.Connection) -> list[Row]:
    """Every row (live or lapsed), by agent."""
    q = _select().order_by(presence.c.agent)
    return [_from(r) for r in conn.execute(q).all()]


def one(conn: sa.Connection, agent: str) -> Row | None:
    """`agent`'s row, None if it has none."""
    r = conn.execute(_select().where(presence.c.agent == agent)).first()
    return None if r is None else _from(r)


def live_count(conn: sa.Connection, now_ms: int) -> int:
    """How many entries are live at `now_ms`."""
    q = sa.select(sa.func.count()).select_from(presence).where(presence.c.expires_ms > now_ms)
    return int(conn.execute(q).scalar() or 0)


def put(conn: sa.Connection, rev: int, entry: Presence, paths: Paths) -> None:
    """Write `entry` with its `paths` as change `rev` (replacing the agent's row)."""
    values = {
        "state": entry.state,
        "task_id": entry.task_id,
        "note": entry.note,
        "paths_json": paths_to_json(paths),
        "announced_ms": entry.announced_ms,
        "expires_ms": entry.expires_ms,
        "rev": rev,
    }
    done = conn.execute(sa.update(presence).where(presence.c.agent == entry.agent), values)
    if done.rowcount == 0:
        conn.execute(sa.insert(presence).values(agent=entry.agent, **values))


def delete(conn: sa.Connection, agent: str) -> None:
    conn.execute(sa.delete(presence).where(presence.c.agent == agent))


def forget(conn: sa.Connection, lapsed_before_ms: int) -> None:
    """Drop the rows that lapsed before `lapsed_before_ms` (their paths are forgotten)."""
    conn.execute(sa.delete(presence).where(presence.c.expires_ms < lapsed_before_ms))


def trim(conn: sa.Connection, keep: int, now_ms: int) -> None:
    """Past `keep` rows, drop the ones that lapsed first (live rows are never dropped)."""
    total = int(conn.execute(sa.select(sa.func.count()).select_from(presence)).scalar() or 0)
    if total <= keep:
        return
    oldest = (
        sa.select(presence.c.agent)
        .where(presence.c.expires_ms <= now_ms)
        .order_by(presence.c.expires_ms)
        .limit(total - keep)
    )
    conn.execute(sa.delete(presence).where(presence.c.agent.in_(oldest.scalar_subquery())))


def current_rev(conn: sa.Connection) -> int:
    """The last change number taken (0 before the first)."""
    got = conn.execute(sa.select(meta.c.value).where(meta.c.key == REV_KEY)).scalar()
    return 0 if got is None else int(got)


def next_rev(conn: sa.Connection) -> int:
    """Take the next change number (in the caller's transaction)."""
    rev = current_rev(conn) + 1
    done = conn.execute(sa.update(meta).where(meta.c.key == REV_KEY).values(value=str(rev)))
    if done.rowcount == 0:
        conn.execute(sa.insert(meta).values(key=REV_KEY, value=str(rev)))
    return rev
