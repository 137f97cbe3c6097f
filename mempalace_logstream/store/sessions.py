"""Dashboard sessions ended by a logout (issue 18 item 12), kept in `logstream_meta` until
they would have expired, so that a copied session cookie stops working on every hub of the
database and after a restart. Local to this database, never replicated. The cookie itself is
`http/session.py`'s; this module only keeps the ids.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from mempalace_logstream.backends.queries import meta as meta_rows

if TYPE_CHECKING:
    from mempalace_logstream.backends import Executor
    from mempalace_logstream.store.core import LogStore

PREFIX = "dashboard.ended."  # meta rows `dashboard.ended.<session id>` = its expiry (unix s)


def end_session(store: LogStore, session_id: str, expires_s: int, now_s: int) -> None:
    """Record `session_id` as ended until `expires_s`, and forget the ended sessions that
    have expired by `now_s` (one write transaction)."""
    name = PREFIX + session_id

    def work(ex: Executor, _state: Any) -> None:
        rows = meta_rows.with_prefix(ex, PREFIX)
        stale = [k for k, val in rows if not val.isdigit() or int(val) <= now_s]
        if stale:
            meta_rows.delete(ex, stale)
        if not any(k == name for k, _ in rows):
            meta_rows.insert(ex, name, str(expires_s))

    store.pipeline.write(work)


def ended_sessions(store: LogStore) -> dict[str, int]:
    """session id -> expiry (unix s) of the sessions ended by a logout."""
    with store.snapshot() as ex:
        rows = meta_rows.with_prefix(ex, PREFIX)
    return {k[len(PREFIX) :]: int(val) for k, val in rows if val.isdigit()}


# Failed dashboard logins, counted per client address by every hub of the database: one
# meta row per failure, `dashboard.failed.<address digest>.<nonce>` = its unix time, so that
# hubs never overwrite each other's counts. Rows older than the window go at the next
# failure; at most MAX_FAILURE_ROWS are kept (the oldest go first).
FAILED = "dashboard.failed."
MAX_FAILURE_ROWS = 10_000


def _client_prefix(client: str) -> str:
    return FAILED + hashlib.sha256(client.encode()).hexdigest()[:24] + "."


def _at(val: str) -> float:
    try:
        return float(val)
    except ValueError:
        return 0.0


def _time(row: tuple[str, float]) -> float:
    return row[1]


def login_failures(store: LogStore, client: str, since_s: float) -> list[float]:
    """The unix times of `client`'s failed logins after `since_s`, oldest first."""
    with store.snapshot() as ex:
        rows = meta_rows.with_prefix(ex, _client_prefix(client))
    return sorted(t for _k, val in rows if (t := _at(val)) > since_s)


def login_failed(store: LogStore, client: str, now_s: float, window_s: float) -> int:
    """Record a failed login of `client` at `now_s`; its failures within the window."""
    mine = _client_prefix(client)

    def work(ex: Executor, _state: Any) -> int:
        rows = sorted(((k, _at(val)) for k, val in meta_rows.with_prefix(ex, FAILED)), key=_time)
        drop = [k for k, t in rows if t <= now_s - window_s]
        live = rows[len(drop) :]  # sorted by time: the stale ones come first
        excess = len(live) + 1 - MAX_FAILURE_ROWS
        if excess > 0:
            drop += [k for k, _t in live[:excess]]
            live = live[excess:]
        if drop:
            meta_rows.delete(ex, drop)
        meta_rows.insert(ex, mine + secrets.token_hex(8), repr(now_s))
        return 1 + sum(1 for k, _t in live if k.startswith(mine))

    failures: int = store.pipeline.write(work)
    return failures


def login_succeeded(store: LogStore, client: str) -> None:
    """Forget `client`'s failed logins."""

    def work(ex: Executor, _state: Any) -> None:
        keys = [k for k, _v in meta_rows.with_prefix(ex, _client_prefix(client))]
        if keys:
            meta_rows.delete(ex, keys)

    store.pipeline.write(work)
