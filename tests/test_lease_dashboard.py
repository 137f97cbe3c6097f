"""File leases visible to people (issue 22): the dashboard's agents view lists the active
leases (holder, globs, mode, expiry, task, reason, fence, project) and each agent's lease count
and globs, in a real browser (Playwright driving Debian's Chromium) against a real hub
(uvicorn on a loopback port). A lease taken or released while the page is open shows within
seconds (the lease events on the stream ask the hub again); a read-only session may read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.hubkit import LiveHub, live_hub
from tests.test_dashboard import browser, open_view, page

pytestmark = pytest.mark.slow
__all__ = ["browser", "page"]  # the fixtures this module borrows


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    with live_hub(tmp_path, retry_ms=300) as h:
        yield h


def _acquire(c: httpx.Client, agent: str, paths: list[str], **extra: Any) -> dict[str, Any]:
    body = {"agent": agent, "paths": paths, "project": "demo", "ttl_s": 600, **extra}
    resp = c.post("/v1/lease_acquire", json=body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["lease"])


def test_the_agents_view_shows_active_leases_and_follows_them(hub: LiveHub, page: Any) -> None:
    with httpx.Client(base_url=hub.url) as c:
        task = c.post(
            "/v1/task_create",
            json={
                "from_agent": "lead",
                "to_agent": "claude",
                "goal": "refactor auth",
                "project": "demo",
                "branch": "main",
                "base_commit": "abc1234",
                "done": "tests pass",
            },
        ).json()["task"]["correlation_id"]
        held = _acquire(
            c, "claude", ["src/**", "tests/auth/"], reason="auth refactor", task_id=task
        )
        docs = _acquire(c, "codex", ["docs/**"], exclusive=False)
        open_view(page, hub.url, "agents")
        row = f"#leases-body tr[data-lease='{held['lease_id']}']"
        page.wait_for_selector(row, timeout=5000)
        cells = page.eval_on_selector_all(f"{row} td", "tds => tds.map(td => td.textContent)")
        assert cells[0] == "claude"
        assert cells[1] == "src/**, tests/auth"
        assert cells[2] == "exclusive"
        assert cells[3].endswith("left")
        assert cells[4:] == [task, "auth refactor", str(held["fence"]), "demo"]
        shared = page.inner_text(f"#leases-body tr[data-lease='{docs['lease_id']}']")
        assert "shared" in shared and "codex" in shared
        # each agent's row says how many leases it holds, and on what
        claude = page.inner_text("[data-agent='claude'] td.leases")
        assert claude == "1: src/**, tests/auth"
        # taken and released while the page is open: the lease events ask the hub again
        late = _acquire(c, "gemini", ["lib/**"])
        page.wait_for_selector(f"#leases-body tr[data-lease='{late['lease_id']}']", timeout=3000)
        resp = c.post("/v1/lease_release", json={"lease_id": held["lease_id"], "agent": "claude"})
        assert resp.status_code == 200, resp.text
        page.wait_for_selector(row, state="detached", timeout=3000)
        assert page.inner_text("[data-agent='claude'] td.leases") == ""


def test_no_active_lease_says_so(hub: LiveHub, page: Any) -> None:
    open_view(page, hub.url, "agents")
    page.wait_for_selector("#leases-body >> text=No active file leases.", timeout=5000)


def test_a_read_only_dashboard_session_reads_the_leases_and_takes_none(tmp_path: Path) -> None:
    token = "tok-lease-view"
    csrf = {"X-Logstream-Dashboard": "1"}
    with live_hub(tmp_path, token=token, host="0.0.0.0") as h, httpx.Client(base_url=h.url) as c:
        auth = {"Authorization": f"Bearer {token}"}
        body = {"agent": "claude", "paths": ["src/**"], "project": "demo"}
        assert c.post("/v1/lease_acquire", json=body, headers=auth).status_code == 200
        assert c.post("/dashboard/login", data={"token": token}).status_code == 303
        listed = c.post("/v1/lease_list", json={"active": True}, headers=csrf)
        assert listed.status_code == 200 and listed.json()["count"] == 1
        check = {"agent": "codex", "path": "src/a.py"}
        checked = c.post("/v1/lease_check", json=check, headers=csrf)
        assert checked.status_code == 200 and checked.json()["allowed"] is False
        taken = c.post("/v1/lease_acquire", json={**body, "agent": "codex"}, headers=csrf)
        assert taken.status_code == 403 and taken.json()["field"] == "token"
