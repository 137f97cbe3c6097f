"""The hub's pages for people: `/about` (what this hub is) and `/docs` (Swagger UI served from
the package's own files, so it works with no internet). The dashboard at `/` is
`dashboard_routes.py`."""

from __future__ import annotations

import html

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.requests import Request
from starlette.staticfiles import StaticFiles

from mempalace_logstream.http.settings import version
from mempalace_logstream.store import LogStore

DOCS_ASSETS = "/docs-assets"


def add_pages(app: FastAPI) -> None:
    """`/about`, `/docs` and the Swagger UI assets under DOCS_ASSETS."""
    from swagger_ui_bundle import swagger_ui_path

    app.get("/about", include_in_schema=False)(home)
    app.get("/docs", include_in_schema=False)(docs)
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")


async def home(request: Request) -> HTMLResponse:
    return HTMLResponse(home_page(request.app.state.store))


async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="mempalace-logstream hub: API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
    )


def home_page(store: LogStore) -> str:
    """A small page naming the hub and its endpoints."""
    rows = (
        ("version", f"mempalace-logstream {version()}"),
        ("database", store.engine.url.render_as_string(hide_password=True)),
        ("replica", store.replica_id),
    )
    links = (
        ("/", "the dashboard"),
        ("/docs", "API documentation (OpenAPI)"),
        ("/v1/stream?since_event_id=tip", "live event stream (SSE)"),
        ("/v1/events?limit=20", "the newest events (JSON)"),
        ("/v1/stats", "counts and sizes (JSON)"),
        ("/mcp", "MCP endpoint (streamable HTTP, for agents' MCP clients)"),
        ("/healthz", "health check"),
    )
    facts = "".join(
        f"<tr><th>{k}</th><td><code>{html.escape(val)}</code></td></tr>" for k, val in rows
    )
    items = "".join(
        f'<li><a href="{href}">{html.escape(href)}</a>: {text}</li>' for href, text in links
    )
    return _HOME.format(facts=facts, items=items)


_HOME = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mempalace-logstream hub</title>
<style>
:root {{ color-scheme: light dark; font-family: system-ui, sans-serif; }}
body {{ max-width: 48rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }}
th {{ text-align: left; padding-right: 1rem; vertical-align: top; }}
code {{ overflow-wrap: anywhere; }}
</style></head>
<body>
<h1>mempalace-logstream hub</h1>
<p>A local-first coordination log for AI agents. This hub serves it over HTTP, SSE and MCP.</p>
<table>{facts}</table>
<h2>Endpoints</h2>
<ul>{items}</ul>
</body></html>
"""
