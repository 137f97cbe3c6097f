"""What a person sees first (issue 9, item 18): `/` names the hub, `/docs` works with no
internet (Swagger UI from the package), and the banner and `stats` say which database,
replica and version this is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

import mempalace_logstream
from tests.conftest import run_cli
from tests.hubkit import LiveHub, live_hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(tmp_path_factory.mktemp("pages")) as h:
        yield h


def _external_urls(page: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']?((?:https?:)?//[^"' >]+)""", page)


def test_the_about_page_names_the_hub_and_links_its_endpoints(hub: LiveHub) -> None:
    resp = httpx.get(hub.url + "/about", timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    page = resp.text
    assert f"mempalace-logstream {mempalace_logstream.__version__}" in page
    assert hub.store.replica_id in page
    assert str(hub.store.engine.url.database) in page
    for href in ("/", "/docs", "/v1/stream?since_event_id=tip", "/mcp", "/healthz"):
        assert f'href="{href}"' in page
    assert _external_urls(page) == []


def test_docs_load_every_asset_from_the_hub_itself(hub: LiveHub) -> None:
    page = httpx.get(hub.url + "/docs", timeout=30).text
    assert _external_urls(page) == [], _external_urls(page)
    assets = re.findall(r"""(?:src|href)\s*=\s*["'](/docs-assets/[^"']+)""", page)
    assert {a.rsplit("/", 1)[1] for a in assets} >= {"swagger-ui-bundle.js", "swagger-ui.css"}
    for asset in assets:
        got = httpx.get(hub.url + asset, timeout=30)
        assert got.status_code == 200 and len(got.content) > 500, asset
    assert httpx.get(hub.url + "/openapi.json", timeout=30).json()["info"]["version"] == (
        mempalace_logstream.__version__
    )
    assert httpx.get(hub.url + "/redoc", timeout=30).status_code == 404  # needs a CDN: off


def test_pages_stay_behind_the_token(tmp_path: Path) -> None:
    with live_hub(tmp_path, token="tok-pages-9") as hub:
        for path in ("/", "/about", "/docs", "/docs-assets/swagger-ui.css"):
            assert httpx.get(hub.url + path, timeout=30).status_code == 401, path
        for path in ("/", "/about"):
            ok = httpx.get(hub.url + path, headers={"Authorization": "Bearer tok-pages-9"})
            assert ok.status_code == 200 and "tok-pages-9" not in ok.text


def test_stats_show_database_replica_and_version(tmp_path: Path) -> None:
    db = str(tmp_path / "s.sqlite3")
    assert (
        run_cli(
            "append",
            "--type",
            "note",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "a",
            "--db",
            db,
        ).returncode
        == 0
    )
    out = json.loads(run_cli("stats", "--db", db, "--json").stdout)
    assert out["version"] == mempalace_logstream.__version__
    assert out["database"].endswith("s.sqlite3") and out["replica_id"].startswith("rep_")
    human = run_cli("stats", "--db", db).stdout.decode()
    assert out["replica_id"] in human and "s.sqlite3" in human
    assert f"mempalace-logstream {mempalace_logstream.__version__}" in human
