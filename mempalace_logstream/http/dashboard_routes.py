"""The dashboard (issue 14, S-6.5): `/` serves the page (plain HTML, CSS and JS from the
package's `dashboard/` folder, no build step, nothing from the internet), `/dashboard/assets/`
its files, `/dashboard/session` what the page may do, and the login and logout of a hub with a
token (`session.py`). The page reads through the hub's existing routes (`/v1/events`,
`/v1/stream`, `/v1/task_list`, `/v1/tasks/{id}`, `/v1/artifacts/{id}`, `/v1/presence`,
`/sync/peers`, `/v1/stats`).
"""

from __future__ import annotations

import hmac
import html
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.http import session
from mempalace_logstream.http.responses import error_response
from mempalace_logstream.http.settings import HubSettings, version

FILES = Path(__file__).with_name("dashboard")
log = logging.getLogger("mempalace_logstream.dashboard")


def add_dashboard(app: FastAPI) -> None:
    """The dashboard's routes, and on `app.state` its failed-login counter and the sessions
    ended by a logout (the guard refuses those)."""
    app.state.sessions = session.EndedSessions(app.state.store)
    app.state.login_throttle = session.throttle_for(app.state.store)
    app.get("/", include_in_schema=False)(index)
    app.get("/dashboard/session", include_in_schema=False)(session_info)
    app.post("/dashboard/login", include_in_schema=False)(login)
    app.post("/dashboard/logout", include_in_schema=False)(logout)
    app.mount("/dashboard/assets", StaticFiles(directory=str(FILES)), name="dashboard-assets")


async def index(request: Request) -> Response:
    if not request.scope.get("state", {}).get("dashboard_auth", True):
        return HTMLResponse(login_page(None), status_code=401)
    return FileResponse(FILES / "index.html", headers={"Cache-Control": "no-cache"})


async def session_info(request: Request) -> dict[str, Any]:
    """What the page may do: `operator` (a name: it may post and cancel) or read-only."""
    settings: HubSettings = request.app.state.settings
    store = request.app.state.store
    found = _session(request, settings)  # None: no token, or the bearer header
    operator = found.operator if found is not None else None
    return {
        "token_required": settings.token is not None,
        "cookie_session": found is not None,
        "operator": operator,
        # No token: whoever reaches a loopback hub may write already (as its API allows);
        # the page still asks for an operator name before it writes.
        "can_write": not store.read_only and (found is None or operator is not None),
        "replica_id": store.replica_id,
        "version": version(),
    }


def _session(request: Request, settings: HubSettings) -> session.Session | None:
    cookie = request.headers.get("cookie")
    if settings.token is None or cookie is None:
        return None
    return session.session_of(settings.token, cookie)


async def login(request: Request) -> Response:
    """The token in a form (or JSON) body; answers the session cookie and a redirect to `/`."""
    settings: HubSettings = request.app.state.settings
    origin = request.headers.get("origin")
    if origin is not None and not session.same_origin(origin, request.headers.get("host", "")):
        return error_response(403, "Origin is not this hub", "Origin")  # login CSRF
    if settings.token is None:
        return RedirectResponse("/", status_code=303)
    throttle: session.LoginThrottle = request.app.state.login_throttle
    client = request.client.host if request.client else "unknown"
    wait = await throttle.retry_after(client)
    if wait is not None:
        note = f"Too many failed logins from this address; try again in {wait} s."
        return HTMLResponse(login_page(note), status_code=429, headers={"Retry-After": str(wait)})
    fields = _form(await request.body(), request.headers.get("content-type", ""))
    token = fields.get("token", "")
    if not hmac.compare_digest(token.encode(), settings.token.encode()):
        await _log_failure(throttle, client)
        return HTMLResponse(login_page("That is not this hub's token."), status_code=401)
    await throttle.succeeded(client)
    operator = fields.get("operator", "").strip() or None
    if operator is not None:
        try:
            operator = v.routing("operator", operator)
        except errors.ValidationError as exc:
            return HTMLResponse(login_page(exc.message), status_code=422)
    secure = request.url.scheme == "https"
    resp = RedirectResponse("/", status_code=303)
    value = session.cookie_value(settings.token, operator)
    resp.headers.append("set-cookie", session.set_cookie_header(value, secure=secure))
    return resp


async def _log_failure(throttle: session.LoginThrottle, client: str) -> None:
    """Count and log a failed login (the address and the count, never what was presented)."""
    n = await throttle.failed(client)
    locked = f"; locked for {throttle.window_s:g} s" if n >= throttle.limit else ""
    log.warning(
        "failed dashboard login from %s (%d in the last %g s%s)",
        client,
        n,
        throttle.window_s,
        locked,
    )


async def logout(request: Request) -> Response:
    """End the session on the hub (its cookie, even copied, no longer works) and clear it."""
    settings: HubSettings = request.app.state.settings
    found = _session(request, settings)
    if found is not None:
        await request.app.state.sessions.end(found)
    resp = RedirectResponse("/", status_code=303)
    secure = request.url.scheme == "https"
    resp.headers.append("set-cookie", session.set_cookie_header("", secure=secure, max_age=0))
    return resp


def _form(body: bytes, content_type: str) -> dict[str, str]:
    text = body.decode("utf-8", "replace")
    if content_type.partition(";")[0].strip().lower() == "application/json":
        try:
            data = json.loads(text)
        except ValueError:
            return {}
        return (
            {k: val for k, val in data.items() if isinstance(val, str)}
            if isinstance(data, dict)
            else {}
        )
    return {k: vals[0] for k, vals in parse_qs(text).items() if vals}


def login_page(error: str | None) -> str:
    note = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    return (FILES / "login.html").read_text(encoding="utf-8").replace("<!--error-->", note)
