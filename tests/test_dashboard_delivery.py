"""The dashboard shows who can be woken and who an event reached (issue 20): Playwright driving
Debian's Chromium against a real hub. The agents view shows each agent's wakeable state and
live delivery paths; the thread view shows the delivery ledger of the task's request; the
dashboard's own reads of an agent's inbox mark nothing (the operator looking is no agent
reading)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import test_dashboard as dash
from tests.hubkit import LiveHub, live_hub

TASK, open_view = dash.TASK, dash.open_view
browser, page = dash.browser, dash.page  # the browser fixtures (Debian's Chromium)

pytestmark = pytest.mark.slow


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[LiveHub]:
    with live_hub(tmp_path, retry_ms=300) as h:
        yield h


def test_agents_show_wakeable_and_paths_and_the_thread_shows_the_ledger(
    hub: LiveHub, page: Any
) -> None:
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        for agent, path in (("w-yes", "channel"), ("w-new", "watch"), ("w-hook", "hook")):
            body = {"agent": agent, "state": "watching", "path": path, "ttl_s": 120}
            assert c.post("/v1/presence_announce", json=body).status_code == 200
        body = {"from_agent": "lead", "to_agent": "w-yes", "goal": "ship it", **TASK}
        created = c.post("/v1/task_create", json=body).json()
        tid, request = created["task_id"], created["task"]["id"]
        # w-yes: the channel pushes the request, the agent reads it.
        push = {"to_agent": "w-yes", "since_event_id": None}
        c.post("/v1/event_list", json=push, headers={"X-Logstream-Delivery": "channel"})
        c.post("/v1/event_list", json={"to_agent": "w-yes"})
    open_view(page, hub.url, "agents")
    for agent, state in (("w-yes", "yes"), ("w-new", "unverified"), ("w-hook", "no")):
        page.wait_for_selector(f"[data-agent='{agent}'] [data-wakeable='{state}']", timeout=8000)
    assert "channel since" in page.inner_text("[data-agent='w-yes']")
    assert "watch since" in page.inner_text("[data-agent='w-new']")
    page.click("#tab-tasks")
    page.click(f"[data-task='{tid}'] button")
    row = f"[data-id='{request}'] [data-recipient='w-yes']"
    page.wait_for_selector(row, timeout=8000)
    text = page.inner_text(row)
    assert "pushed" in text and "(channel)" in text and "seen" in text and "not seen" not in text
    # The page's own inbox reads (agents view) marked nothing for anyone else.
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        rows = c.post("/v1/delivery_status", json={"event_id": request}).json()["recipients"]
    assert [r["recipient"] for r in rows] == ["w-yes"]
