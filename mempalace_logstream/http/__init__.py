"""The HTTP hub (FastAPI): the only home of fastapi and sse_starlette; never imports typer or mcp.

settings.py     HubSettings, ExtraMount, the listening socket (no framework)
responses.py    the error shape and the error -> status table
guard.py        Host/Origin/token/cookie/size guard, raw ASGI middleware
params.py       request models and query-string arguments
ops.py          POST /v1/<op> and the GET aliases
sse.py          the live feed at /v1/stream and /logstream/stream
sync_routes.py  /sync/* for peers (module-level handlers)
pages.py        /about and /docs
session.py      the dashboard's login cookie (what the guard accepts in place of the bearer)
dashboard_routes.py  the dashboard at / (static files in dashboard/), login, logout
app.py          create_app: the wiring; stop_serving (answer the waits, end the streams)
server.py       HubServer: uvicorn's server, stopping the app cleanly on a signal
"""

from __future__ import annotations

from mempalace_logstream.http.app import create_app
from mempalace_logstream.http.settings import (
    ExtraMount,
    HubSettings,
    check_token,
    is_loopback_host,
    listen_socket,
    version,
)

__all__ = [
    "ExtraMount",
    "HubSettings",
    "check_token",
    "create_app",
    "is_loopback_host",
    "listen_socket",
    "version",
]
