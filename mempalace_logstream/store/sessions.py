"""Dashboard sessions ended by a logout (issue 18 item 12), kept in `logstream_meta` until
they would have expired, so that a copied session cookie stops working on every hub of the
database and after a restart. Local to this database, never replicated. The cookie itself is
`http/session.py`'s; this module only keeps the ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mempalace_logstream.schema import meta

if TYPE_CHECKING:
    from mempalace_logstream.store.core import LogStore

PREFIX = "dashboard.ended."  # meta rows `dashboard.ended.<session id>` = its expiry (unix s)


def _rows() -> sa.Select[Any]:
    return sa.select(meta.c.key, meta.c.value).where(meta.c.key.startswith(PREFIX, autoescape=True))


def end_session(store: LogStore, session_id: str, expires_s: int, now_s: int) -> None:
    """Record `session_id` as ended until `expires_s`, and forget the ended sessions that
    have expired by `now_s` (one write transaction)."""
    name = PREFIX + session_id

    def work(conn: sa.Connection, _state: Any) -> None:
        rows = conn.execute(_rows()).all()
        stale = [k for k, val in rows if not val.isdigit() or int(val) <= now_s]
        if stale:
            conn.execute(sa.delete(meta).where(meta.c.key.in_(stale)))
        if not any(k == name for k, _ in rows):
            conn.execute(sa.insert(meta).values(key=name, value=str(expires_s)))

    store.core_transaction(work)


def ended_sessions(store: LogStore) -> dict[str, int]:
    """session id -> expiry (unix s) of the sessions ended by a logout."""
    with store.connect() as conn:
        rows = conn.execute(_rows()).all()
    return {str(k)[len(PREFIX) :]: int(val) for k, val in rows if val.isdigit()}
