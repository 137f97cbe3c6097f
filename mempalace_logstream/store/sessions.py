"""Dashboard sessions ended by a logout (issue 18 item 12), kept in `logstream_meta` until
they would have expired, so that a copied session cookie stops working on every hub of the
database and after a restart. Local to this database, never replicated. The cookie itself is
`http/session.py`'s; this module only keeps the ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream.backends.queries import meta as meta_rows

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream.store.core import LogStore

PREFIX = "dashboard.ended."  # meta rows `dashboard.ended.<session id>` = its expiry (unix s)


def end_session(store: LogStore, session_id: str, expires_s: int, now_s: int) -> None:
    """Record `session_id` as ended until `expires_s`, and forget the ended sessions that
    have expired by `now_s` (one write transaction)."""
    name = PREFIX + session_id

    def work(conn: sa.Connection, _state: Any) -> None:
        rows = meta_rows.with_prefix(conn, PREFIX)
        stale = [k for k, val in rows if not val.isdigit() or int(val) <= now_s]
        if stale:
            meta_rows.delete(conn, stale)
        if not any(k == name for k, _ in rows):
            meta_rows.insert(conn, name, str(expires_s))

    store.core_transaction(work)


def ended_sessions(store: LogStore) -> dict[str, int]:
    """session id -> expiry (unix s) of the sessions ended by a logout."""
    with store.connect() as conn:
        rows = meta_rows.with_prefix(conn, PREFIX)
    return {k[len(PREFIX) :]: int(val) for k, val in rows if val.isdigit()}
