"""The request guard: raw ASGI middleware (streaming-safe) in front of every route.

On a loopback hub, the Host header must name this hub and an Origin must be a loopback origin
(DNS rebinding); with a token, every path but `/healthz` needs `Authorization: Bearer <token>`:
the hub's own token (the admin) or an agent's (RFC 0008, http/auth.py), and the rest of the
request runs as that actor; a body over `max_request_bytes` is refused with 413 before it is
read, or while it is read when it has no Content-Length.

A browser cannot send the bearer: the dashboard's session cookie (`session.py`) stands in for it,
read-only unless the login named an operator, and a cookie-authenticated POST must carry the
dashboard's header and no foreign Origin. `/` is let through without credentials: it answers the
login form (the route reads `scope["state"]["dashboard_auth"]`). A read-only dashboard session
reads as the admin (its login was the hub's token); an operator session acts as its operator
(it writes under that name only); a session ended by a logout is no session.

An admitted `POST /v1/<op>` goes to the op's short path (`ops.PlainPosts`), which answers the
common request itself and hands every other to the app (issue 25).

Every response says it must not be framed (`X-Frame-Options: DENY`, CSP `frame-ancestors
'none'`), the guard's own refusals included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mempalace_logstream.http import session
from mempalace_logstream.http.auth import Authenticator, Refusal
from mempalace_logstream.http.responses import send_error
from mempalace_logstream.http.settings import LOOPBACK_NAMES, HubSettings, is_loopback_host
from mempalace_logstream.identity.actor import ACTOR_SCOPE_KEY, ADMIN, ANONYMOUS, Actor, acting_as
from mempalace_logstream.store import LogStore


class Posts(Protocol):
    """The ops' short path (`ops.PlainPosts`, which the app hands in: the guard sits below
    the routes and imports none of them)."""

    @property
    def routes(self) -> Mapping[str, object]:
        """The paths it answers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Answer a POST to one of `routes`, or hand it to `app`."""


_BODY_METHODS = ("POST", "PUT", "PATCH")


class HubGuard:
    """Raw ASGI guard (streaming-safe): Host/Origin pinning on loopback, bearer token, size."""

    def __init__(
        self,
        app: ASGIApp,
        settings: HubSettings,
        store: LogStore | None = None,
        sessions: session.EndedSessions | None = None,
        posts: Posts | None = None,
    ) -> None:
        self.app = app
        self.posts = posts
        self.sessions = sessions or session.EndedSessions(store)
        self.settings = settings
        names = set(LOOPBACK_NAMES) | {settings.host.strip("[]").lower()}
        self.hosts = names | {h.strip("[]").lower() for h in settings.allowed_hosts}
        self.auth = Authenticator(settings.token, store)
        self.loopback = settings.is_loopback
        self.limit = settings.max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _unframeable(send)
        headers = {k.decode("latin-1").lower(): val for k, val in scope["headers"]}
        refusal = self._refusal(headers)
        if refusal is not None:
            await send_error(send, *refusal)
            return
        actor = await self._actor(scope["path"], scope["method"], headers, scope)
        if isinstance(actor, Refusal):
            await send_error(send, actor.status, actor.message, actor.field)
            return
        length = headers.get("content-length")
        limit = self.limit
        if length is not None and length.isdigit() and int(length) > limit:
            message = f"request body is {int(length)} bytes; the limit is {limit} bytes"
            await send_error(send, 413, message, "body")
            return
        if length is None and scope["method"] in _BODY_METHODS:
            buffered = await _buffered(receive, limit)
            if buffered is None:
                await send_error(send, 413, f"request body exceeds {limit} bytes", "body")
                return
            receive = buffered
        scope[ACTOR_SCOPE_KEY] = actor
        posts = self.posts
        with acting_as(actor):
            if (
                posts is not None
                and scope["method"] == "POST"
                and scope["path"] in posts.routes
                and not scope.get("root_path")
            ):
                await posts(scope, receive, send, self.app)
            else:
                await self.app(scope, receive, send)

    def _refusal(self, headers: Mapping[str, bytes]) -> tuple[int, str, str] | None:
        if self.loopback:
            host = _hostname(headers.get("host", b"").decode("latin-1"))
            if host not in self.hosts:
                return 403, "Host header is not allowed on a loopback hub (DNS rebinding)", "Host"
            origin = headers.get("origin")
            if origin is not None and not _is_loopback_origin(origin.decode("latin-1")):
                return 403, "Origin is not a loopback origin", "Origin"
        return None

    async def _actor(
        self, path: str, method: str, headers: Mapping[str, bytes], scope: Scope
    ) -> Actor | Refusal:
        """Who the request is (its bearer token, else a dashboard session), or why it is
        refused. ANONYMOUS: no token and no keys at all on this hub (as before identity), or a
        public path; never None (a local process's trust)."""
        state = scope.setdefault("state", {})
        state["dashboard_auth"] = True
        if path == "/healthz":
            return ANONYMOUS
        actor = await self.auth.actor(_bearer(headers.get("authorization", b"")))
        if isinstance(actor, Actor) and not actor.admin and _admin_only(path, method):
            return Refusal(403, f"{path} takes the hub's admin token, not an agent's", "token")
        if not isinstance(actor, Refusal):
            return actor
        if path in session.PUBLIC_PATHS or path.startswith(session.PUBLIC_PREFIX):
            return ANONYMOUS
        found = await self._session(headers.get("cookie"))
        if found is not None:
            refused = _cookie_refusal(found, path, method, headers)
            if refused is not None:
                return Refusal(*refused)
            return Actor(agent=found.operator) if found.operator else ADMIN
        if path == "/" and method in ("GET", "HEAD"):
            state["dashboard_auth"] = False  # the route answers the login form
            return ANONYMOUS
        return actor

    async def _session(self, cookie: bytes | None) -> session.Session | None:
        """The dashboard session of a Cookie header: signed, unexpired, not logged out."""
        if cookie is None or self.settings.token is None:
            return None
        found = session.session_of(self.settings.token, cookie.decode("latin-1"))
        if found is None or await self.sessions.is_ended(found):
            return None
        return found


def _unframeable(send: Send) -> Send:
    """`send` with the no-framing headers added to the response's start."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *session.FRAME_HEADERS]}
        await send(message)

    return wrapped


def _cookie_refusal(
    found: session.Session, path: str, method: str, headers: Mapping[str, bytes]
) -> tuple[int, str, str] | None:
    """What a dashboard session may not do: write without the CSRF header or from a foreign
    Origin, or POST beyond its role (read-only, or an operator's two writes)."""
    if method in ("GET", "HEAD"):
        return None
    if headers.get(session.CSRF_HEADER) != b"1":
        return 403, f"a dashboard session's {method} needs the {session.CSRF_HEADER} header", "csrf"
    origin = headers.get("origin")
    host = headers.get("host", b"").decode("latin-1")
    if origin is not None and not session.same_origin(origin.decode("latin-1"), host):
        return 403, "Origin is not this hub", "Origin"
    if method != "POST" or not session.may_post(found, path):
        role = f"operator {found.operator}" if found.operator else "a read-only session"
        return 403, f"{role} may not {method} {path}; log in with the token", "token"
    return None


def _admin_only(path: str, method: str) -> bool:
    """Requests an agent's token may not make: pushing a peer's events into this log (they
    carry other agents' names; replicas sync with the admin token)."""
    return method == "POST" and path == "/sync/push"


def _bearer(header: bytes) -> bytes:
    """The credentials of `Authorization: Bearer <token>`; the scheme is case-insensitive
    (RFC 9110 §11.1), so `bearer` and `BEARER` work. Anything else gives b""."""
    scheme, _, credentials = header.strip().partition(b" ")
    return credentials.strip() if scheme.lower() == b"bearer" else b""


def _hostname(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_loopback_origin(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and is_loopback_host(parts.hostname or "")


async def _buffered(receive: Receive, limit: int) -> Receive | None:
    """Read a body without Content-Length up to `limit`; None when it is larger."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
