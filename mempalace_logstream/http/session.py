"""The dashboard's login session (issue 14): a cookie the guard accepts in place of the bearer.

A person's browser cannot send `Authorization: Bearer`, and the token must never ride in a URL,
so `POST /dashboard/login` (the token in the body) answers a cookie: HttpOnly, SameSite=Strict,
Secure on https, holding `v1:<expires>:<operator>:<mac>` where the MAC is an HMAC-SHA256 keyed by
the hub's token. The token itself never leaves the hub again; changing it ends every session.

A session is read-only unless the login named an operator: then it may also append (post into a
room) and update tasks (cancel), and nothing else. A cookie-authenticated POST must carry
`X-Logstream-Dashboard: 1` (a header a cross-site form cannot send) and, when it has an Origin,
one naming this hub (CSRF, on top of SameSite=Strict).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

COOKIE = "logstream_session"
CSRF_HEADER = "x-logstream-dashboard"
MAX_AGE_S = 12 * 3600
OPERATOR_WRITES = ("/v1/event_append", "/v1/task_update")


@dataclass(frozen=True)
class Session:
    operator: str | None  # None: read-only
    expires_s: int


def _mac(token: str, expires_s: int, operator: str) -> str:
    msg = f"logstream-dashboard:v1:{expires_s}:{operator}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def cookie_value(token: str, operator: str | None, now_s: float | None = None) -> str:
    expires = int(now_s if now_s is not None else time.time()) + MAX_AGE_S
    name = operator or ""
    return f"v1:{expires}:{quote(name, safe='')}:{_mac(token, expires, name)}"


def set_cookie_header(value: str, *, secure: bool, max_age: int = MAX_AGE_S) -> str:
    flags = f"; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={value}{flags}{'; Secure' if secure else ''}"


def session_of(token: str, cookie_header: str, now_s: float | None = None) -> Session | None:
    """The valid session in a Cookie header, or None (absent, forged, expired)."""
    for part in cookie_header.split(";"):
        name, _, value = part.strip().partition("=")
        if name != COOKIE:
            continue
        fields = value.split(":")
        if len(fields) != 4 or fields[0] != "v1" or not fields[1].isdigit():
            return None
        expires, operator = int(fields[1]), unquote(fields[2])
        if not hmac.compare_digest(fields[3].encode(), _mac(token, expires, operator).encode()):
            return None
        if expires <= (now_s if now_s is not None else time.time()):
            return None
        return Session(operator or None, expires)
    return None


def same_origin(origin: str, host: str) -> bool:
    """Whether an Origin header names the host this request was sent to."""
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()


# What a read-only session may POST (reads that have no GET alias, and logging out).
READ_POSTS = ("/v1/task_list", "/v1/event_list", "/v1/presence_list", "/dashboard/logout")
# Reachable with no credentials on a hub with a token: the login itself and the page's code.
PUBLIC_PATHS = ("/dashboard/login",)
PUBLIC_PREFIX = "/dashboard/assets/"


def may_post(session: Session, path: str) -> bool:
    return path in READ_POSTS or (session.operator is not None and path in OPERATOR_WRITES)
