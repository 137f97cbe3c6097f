"""The dashboard's login session (issue 14): a cookie the guard accepts in place of the bearer.

A person's browser cannot send `Authorization: Bearer`, and the token must never ride in a URL,
so `POST /dashboard/login` (the token in the body) answers a cookie: HttpOnly, SameSite=Strict,
Secure on https, holding `v2:<expires>:<operator>:<session id>:<mac>` where the MAC is an
HMAC-SHA256 keyed by the hub's token. The token itself never leaves the hub again; changing it
ends every session, and a logout ends its own on the hub (`Sessions`: the id is recorded in
the database until it would have expired, so a copied cookie stops working, on every hub of
that database and after a restart).

A session is read-only unless the login named an operator: then it may also append (post into a
room) and update tasks (cancel), as that operator only. A cookie-authenticated POST must carry
`X-Logstream-Dashboard: 1` (a header a cross-site form cannot send) and, when it has an Origin,
one naming this hub (CSRF, on top of SameSite=Strict). Failed logins are counted per client
address (`LoginThrottle`, kept in the database so that every hub of it counts the same):
past `MAX_LOGIN_FAILURES` in `LOGIN_WINDOW_S`, that address is refused (429) until the window
passes.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from mempalace_logstream import aio
from mempalace_logstream.store.sessions import (
    end_session,
    ended_sessions,
    login_failed,
    login_failures,
    login_succeeded,
)

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore

COOKIE = "logstream_session"
CSRF_HEADER = "x-logstream-dashboard"
MAX_AGE_S = 12 * 3600
OPERATOR_WRITES = ("/v1/event_append", "/v1/task_update")
MAX_LOGIN_FAILURES = 5  # failed logins per client address and window before it is refused
LOGIN_WINDOW_S = 60
MAX_TRACKED_CLIENTS = 10_000  # addresses with recent failures kept (oldest dropped first)
# Every response says it must not be framed (clickjacking): the legacy header and CSP.
FRAME_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
)


@dataclass(frozen=True)
class Session:
    operator: str | None  # None: read-only
    expires_s: int
    session_id: str = ""


def _mac(token: str, expires_s: int, operator: str, session_id: str) -> str:
    msg = f"logstream-dashboard:v2:{expires_s}:{operator}:{session_id}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def cookie_value(token: str, operator: str | None, now_s: float | None = None) -> str:
    expires = int(now_s if now_s is not None else time.time()) + MAX_AGE_S
    name, sid = operator or "", secrets.token_hex(16)
    return f"v2:{expires}:{quote(name, safe='')}:{sid}:{_mac(token, expires, name, sid)}"


def set_cookie_header(value: str, *, secure: bool, max_age: int = MAX_AGE_S) -> str:
    flags = f"; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={value}{flags}{'; Secure' if secure else ''}"


def session_of(token: str, cookie_header: str, now_s: float | None = None) -> Session | None:
    """The well-formed, unexpired session in a Cookie header, or None (absent, forged,
    expired). Whether it was ended by a logout is `Sessions.is_ended`."""
    for part in cookie_header.split(";"):
        name, _, value = part.strip().partition("=")
        if name != COOKIE:
            continue
        fields = value.split(":")
        if len(fields) != 5 or fields[0] != "v2" or not fields[1].isdigit():
            return None
        expires, operator, sid = int(fields[1]), unquote(fields[2]), fields[3]
        if not hmac.compare_digest(
            fields[4].encode(), _mac(token, expires, operator, sid).encode()
        ):
            return None
        if expires <= (now_s if now_s is not None else time.time()):
            return None
        return Session(operator or None, expires, sid)
    return None


class LoginThrottle:
    """Failed logins per client address in a sliding window; bounded memory. This one
    counts in the hub's memory (a log it may not write); `SharedLoginThrottle` counts in the
    database, for every hub of it."""

    def __init__(self, limit: int = MAX_LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S) -> None:
        self.limit, self.window_s = limit, window_s
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )

    def _recent(self, client: str, now: float) -> collections.deque[float]:
        times = self._failures.get(client, collections.deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        return times

    def _wait(self, times: Sequence[float], now: float) -> int | None:
        if len(times) < self.limit:
            return None
        return max(1, int(times[-self.limit] + self.window_s - now + 0.999))

    async def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Seconds until `client` may try again, or None when it may now."""
        at = time.time() if now is None else now
        return self._wait(self._recent(client, at), at)

    async def failed(self, client: str, now: float | None = None) -> int:
        """Count a failed login of `client`; returns its failures in the window."""
        at = time.time() if now is None else now
        times = self._recent(client, at)
        times.append(at)
        self._failures[client] = times
        self._failures.move_to_end(client)
        while len(self._failures) > MAX_TRACKED_CLIENTS:
            self._failures.popitem(last=False)
        return len(times)

    async def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)


class SharedLoginThrottle(LoginThrottle):
    """The failed logins kept in the database (`store/sessions.py`), so the limit holds
    across every hub behind a load balancer and across restarts."""

    def __init__(
        self, store: LogStore, limit: int = MAX_LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S
    ) -> None:
        super().__init__(limit, window_s)
        self.store = store

    async def retry_after(self, client: str, now: float | None = None) -> int | None:
        at = time.time() if now is None else now
        times = await aio.run(login_failures, self.store, client, at - self.window_s)
        return self._wait(times, at)

    async def failed(self, client: str, now: float | None = None) -> int:
        at = time.time() if now is None else now
        return await aio.run(login_failed, self.store, client, at, self.window_s)

    async def succeeded(self, client: str) -> None:
        await aio.run(login_succeeded, self.store, client)


def throttle_for(store: LogStore | None) -> LoginThrottle:
    """The shared throttle on a log this hub may write, else one in memory."""
    if store is None or store.read_only:
        return LoginThrottle()
    return SharedLoginThrottle(store)


def same_origin(origin: str, host: str) -> bool:
    """Whether an Origin header names the host this request was sent to."""
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()


# What a read-only session may POST (reads that have no GET alias, and logging out).
READ_POSTS = (
    "/v1/task_list",
    "/v1/event_list",
    "/v1/presence_list",
    "/v1/delivery_status",
    "/v1/lease_list",
    "/v1/lease_check",
    "/dashboard/logout",
)
# Reachable with no credentials on a hub with a token: the login itself and the page's code.
PUBLIC_PATHS = ("/dashboard/login",)
PUBLIC_PREFIX = "/dashboard/assets/"


def may_post(session: Session, path: str) -> bool:
    return path in READ_POSTS or (session.operator is not None and path in OPERATOR_WRITES)


class EndedSessions:
    """The session ids a logout ended (kept in the store until they would have expired),
    reread at most `REFRESH_S` after the last read: a logout on another hub of the same
    database takes effect within that time, one on this hub at once."""

    REFRESH_S = 1.0

    def __init__(self, store: LogStore | None) -> None:
        self.store = store
        self._ended: dict[str, int] = {}
        self._read_at = -self.REFRESH_S

    async def is_ended(self, found: Session) -> bool:
        if found.session_id in self._ended:
            return True
        if self.store is not None and time.monotonic() - self._read_at >= self.REFRESH_S:
            self._read_at = time.monotonic()
            self._ended.update(await aio.run(ended_sessions, self.store))
            now = time.time()
            self._ended = {k: at for k, at in self._ended.items() if at > now}
        return found.session_id in self._ended

    async def end(self, found: Session) -> None:
        """End `found` now, on this hub and (unless the log is read-only) in the store."""
        self._ended[found.session_id] = found.expires_s
        if self.store is not None and not self.store.read_only:
            args = (found.session_id, found.expires_s, int(time.time()))
            await aio.run(end_session, self.store, *args)
