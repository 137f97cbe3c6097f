"""The dashboard at `/` (issue 14) in a real browser: Playwright driving Debian's Chromium
against a real hub (uvicorn on a loopback port). Each view is screenshotted into
docs/screenshots/ (the README shows one).

The page loads; an event appended by another process appears within 2 s; a task crosses the
board as it is claimed, progresses and completes; a patch renders as a diff and a binary
artifact as a download with its size and sha256; after the hub restarts the page catches up
with no gap and no duplicate; presence appears and expires; a hub that is not on loopback
demands its token, keeps it out of every URL, and lets a named operator post and cancel.

The screenshots go to a scratch directory unless `LOGSTREAM_SCREENSHOTS=1` asks for
docs/screenshots/ (to refresh the README's images): a test run leaves the checkout unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.http import HubSettings
from tests.conftest import REPO, run_cli, skip_unless_ci
from tests.hubkit import LiveHub, append, live_hub

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
DOC_SHOTS = REPO / "docs" / "screenshots"
PATCH = (
    "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n"
    " import os\n-print('hello')\n+print('hello, world')\n def main(): pass\n"
)
LIVE = "window.dashboard && window.dashboard.es && window.dashboard.es.readyState === 1"
TASK = {"project": "demo", "branch": "main", "base_commit": "abc1234", "done": "tests pass"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_unless_ci("the playwright package is not installed")
    if not os.path.exists(CHROMIUM):
        skip_unless_ci(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 760})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], errors


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with live_hub(tmp_path_factory.mktemp("dash"), retry_ms=300) as h:
        yield h


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run's screenshots go: docs/screenshots/ only when asked for."""
    if os.environ.get("LOGSTREAM_SCREENSHOTS") == "1":
        return DOC_SHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture()
def shot(page: Any, shots: Path) -> Callable[[str], None]:
    """`shot(name)`: a screenshot of the page, into `shots`."""

    def take(name: str) -> None:
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / f"{name}.png"))

    return take


def task(client: httpx.Client, goal: str, **extra: Any) -> str:
    body = {"from_agent": "lead", "to_agent": "worker", "goal": goal, **TASK, **extra}
    resp = client.post("/v1/task_create", json=body)
    assert resp.status_code == 200, resp.text
    tid: str = resp.json()["task"]["correlation_id"]
    return tid


def move(client: httpx.Client, tid: str, action: str, agent: str = "worker", **extra: Any) -> None:
    body = {"task_id": tid, "action": action, "from_agent": agent, **extra}
    resp = client.post("/v1/task_update", json=body)
    assert resp.status_code == 200, resp.text


def open_view(page: Any, url: str, view: str) -> None:
    page.goto(f"{url}/#{view}")
    page.wait_for_function(LIVE)


def test_the_page_loads_and_an_event_from_another_process_appears_within_2_s(
    hub: LiveHub, page: Any, shot: Callable[[str], None]
) -> None:
    with httpx.Client(base_url=hub.url) as c:
        for i in range(3):
            append(c, body=f"warm-up note {i}", from_agent="lead", to_agent="worker")
    open_view(page, hub.url, "events")
    page.wait_for_selector(".row >> text=warm-up note 2")
    assert page.title() == "mempalace-logstream dashboard"
    page.keyboard.press("2")  # keyboard: number keys and arrows move between the tabs
    assert page.get_attribute("#tab-tasks", "aria-selected") == "true"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tab-events"
    assert page.is_visible("#view-events") and not page.is_visible("#view-tasks")
    db = str(hub.store.engine.url.database)
    args = "append --type note --stream s --room r --from-agent other --db".split()
    done = run_cli(*args, db, "--body", "from another process")
    assert done.returncode == 0, done.stderr
    t0 = time.monotonic()
    page.wait_for_selector(".row >> text=from another process", timeout=2000)
    assert time.monotonic() - t0 < 2.0
    shot("events")
    # Filters ask the hub again (and apply to live events); clearing them restores the feed.
    page.fill("#filters input[name=writer]", "other")
    page.click("#filters button[type=submit]")
    page.wait_for_function("document.getElementById('event-list').dataset.count === '1'")
    assert page.inner_text(".row .body") == "from another process"
    page.click("#clear-filters")
    page.wait_for_selector(".row >> text=warm-up note 2")


def test_history_pages_in_through_the_list_endpoint(hub: LiveHub, page: Any) -> None:
    store = hub.store
    drafts = [
        store.draft_event(type="note", stream="bulk", room="r", from_agent="bulk", body=f"b{i}")
        for i in range(250)
    ]
    store.transaction(lambda tx: [tx.insert_event(d) for d in drafts])
    open_view(page, hub.url, "events")
    page.wait_for_function("document.getElementById('event-list').dataset.count === '200'")
    total = store.stats()["events"]
    page.click("#older")
    want = str(min(total, 400))
    page.wait_for_function(f"document.getElementById('event-list').dataset.count === '{want}'")
    shown = page.evaluate("window.dashboard.events.map(e => e.id)")
    assert len(set(shown)) == len(shown)
    assert page.locator(".row").count() < 60  # windowed: only the rows in view are in the page


def test_a_task_moves_across_the_board(
    hub: LiveHub, page: Any, shot: Callable[[str], None]
) -> None:
    with httpx.Client(base_url=hub.url) as c:
        parent = task(c, "Ship the dashboard")
        open_view(page, hub.url, "tasks")
        card = f"[data-task='{parent}']"
        page.wait_for_selector(f"[data-state='open'] {card}")
        move(c, parent, "claim")
        page.wait_for_selector(f"[data-state='claimed'] {card} .lease")
        child = task(
            c, "Write the tests", from_agent="worker", to_agent="helper", parent_task_id=parent
        )
        move(c, parent, "progress", progress=60)
        page.wait_for_selector(f"[data-state='working'] {card} .progress")
        assert page.get_attribute(f"{card} .progress", "title") == "progress 60 %"
        assert "1 child task" in page.inner_text(card)
        assert "parent" in page.inner_text(f"[data-task='{child}']")
        shot("tasks")
        page.emulate_media(color_scheme="dark")
        shot("tasks-dark")
        page.emulate_media(color_scheme="light")
        move(c, parent, "complete")
        page.wait_for_selector(f"[data-state='ready'] {card}")
        move(c, parent, "accept", agent="lead")
        page.wait_for_selector(f"[data-state='completed'] {card}")


def bar_inside_its_card(page: Any, card: str) -> None:
    box = page.locator(card).bounding_box()
    bar = page.locator(f"{card} .progress > div").bounding_box()
    assert box is not None and bar is not None
    assert bar["width"] > 0
    assert box["x"] <= bar["x"] and bar["x"] + bar["width"] <= box["x"] + box["width"], (box, bar)


def test_a_card_shows_the_goal_done_question_and_lost_lease_and_its_bar_stays_inside(
    hub: LiveHub, page: Any
) -> None:
    with httpx.Client(base_url=hub.url) as c:
        asked = task(c, "Fix the login loop", done="tests/test_login.py passes")
        move(c, asked, "claim")
        move(c, asked, "progress", progress=100)
        move(c, asked, "block", body="Which database: SQLite or PostgreSQL?")
        leased = task(c, "Rotate the signing keys", lease_ms=1000)
        move(c, leased, "claim")
    open_view(page, hub.url, "tasks")
    card = f"[data-state='blocked'] [data-task='{asked}']"
    page.wait_for_selector(card)
    assert page.inner_text(f"{card} .goal") == "Fix the login loop"
    assert page.inner_text(f"{card} .done") == "done: tests/test_login.py passes"
    assert page.inner_text(f"{card} .question") == "question: Which database: SQLite or PostgreSQL?"
    assert page.get_attribute(f"{card} .progress", "title") == "progress 100 %"
    bar_inside_its_card(page, card)
    # The lease (1 s) passes with nobody moving the task: the card says so.
    lost = f"[data-state='open'] [data-task='{leased}'] .lost"
    page.wait_for_selector(lost, timeout=10_000)
    assert page.inner_text(lost).startswith("lost lease: attempt 1 (worker), expired ")
    # History from elsewhere (an older version, a foreign peer) may hold a value off the
    # scale: the bar still stays in its card.
    page.evaluate(
        """(id) => {
          const t = window.dashboard.tasks.get(id);
          window.dashboard.tasks.set(id, { ...t, progress: 4000 });
          mark("tasks");
        }""",
        asked,
    )
    page.wait_for_function(
        f"document.querySelector(\"[data-task='{asked}'] .progress\").title.includes('4000')"
    )
    bar_inside_its_card(page, card)


def test_a_patch_renders_as_a_diff_and_a_binary_artifact_as_a_download(
    hub: LiveHub, page: Any, shot: Callable[[str], None]
) -> None:
    blob = bytes(range(256)) * 4
    with httpx.Client(base_url=hub.url) as c:
        tid = task(c, "Fix the greeting")
        move(c, tid, "claim")
        content = base64.b64encode(blob).decode()
        put = {"kind": "file", "content": content, "encoding": "base64", "created_by": "worker"}
        art = c.post("/v1/artifact_put", json=put).json()["artifact"]
        note = {"stream": "project/demo", "correlation_id": tid, "from_agent": "worker"}
        append(c, **note, body="the build log", artifact_ids=[art["id"]])
        patch = {"content": PATCH, "from_agent": "worker", "stream": "project/demo"}
        resp = c.post("/v1/patch_submit", json={**patch, "correlation_id": tid})
        assert resp.status_code == 200, resp.text
    open_view(page, hub.url, "tasks")
    page.click(f"[data-task='{tid}'] button")
    page.wait_for_selector("pre.diff")
    assert page.inner_text(".diff .add") == "+print('hello, world')"
    assert page.inner_text(".diff .del") == "-print('hello')"
    assert page.inner_text(".diff .hunk").startswith("@@ -1,3 +1,3 @@")
    binary = page.locator(".artifact", has_text=art["id"])
    assert f"{len(blob)} bytes" in binary.inner_text()
    assert hashlib.sha256(blob).hexdigest() in binary.inner_text()
    with page.expect_download() as got:
        binary.locator("a", has_text="Download").click()
    assert Path(got.value.path()).read_bytes() == blob
    shot("thread")


def test_presence_appears_and_expires(hub: LiveHub, page: Any, shot: Callable[[str], None]) -> None:
    with httpx.Client(base_url=hub.url) as c:
        body = {"agent": "scout", "state": "working", "note": "reading the log", "ttl_s": 3}
        assert c.post("/v1/presence_announce", json=body).status_code == 200
        c.post("/v1/presence_announce", json={"agent": "lead", "state": "watching", "ttl_s": 60})
    open_view(page, hub.url, "agents")
    row = "[data-agent='scout']"
    page.wait_for_selector(f"{row} .state-working", timeout=3000)
    assert "reading the log" in page.inner_text(row)
    shot("agents")
    # Gone: the row says "away" (polling sees the expiry time pass) or leaves (a frame).
    page.wait_for_selector(f"{row} .state-working", state="detached", timeout=8000)


def test_the_sync_estate_view(
    hub: LiveHub, page: Any, tmp_path: Path, shot: Callable[[str], None]
) -> None:
    other = tmp_path / "laptop.sqlite3"
    with LogStore.open(str(other)) as laptop:
        laptop.event_append(type="note", stream="s", room="r", from_agent="laptop", body="hi")
    db = str(hub.store.engine.url.database)
    synced = run_cli("sync", "--db", db, "--peer-db", str(other))
    assert synced.returncode == 0, synced.stderr
    open_view(page, hub.url, "sync")
    page.wait_for_selector("#sync >> text=conflicts")
    text = page.inner_text("#sync")
    assert hub.store.replica_id in text and str(other) in text, text
    shot("sync")


def test_the_page_catches_up_after_the_hub_restarts(tmp_path: Path, page: Any) -> None:
    path = str(tmp_path / "restart.sqlite3")
    settings = HubSettings(retry_ms=300)
    store = LogStore.open(path)
    first = LiveHub(store, settings)
    first.start()
    port = int(first.url.rsplit(":", 1)[1])
    try:
        with httpx.Client(base_url=first.url) as c:
            for i in range(3):
                append(c, body=f"before {i}")
        open_view(page, first.url, "events")
        page.wait_for_selector(".row >> text=before 2")
        with httpx.Client(base_url=first.url) as c:
            append(c, body="live before the restart")
        page.wait_for_selector(".row >> text=live before the restart")
    finally:
        first.stop()
        store.close()
    with LogStore.open(path) as offline:  # written while no hub runs: the page must catch up
        for i in range(5):
            offline.event_append(type="note", stream="s", room="r", from_agent="a", body=f"gap {i}")
    store = LogStore.open(path)
    second = LiveHub(store, settings, port=port)
    second.start()
    try:
        with httpx.Client(base_url=second.url) as c:
            append(c, body="after the restart")
        page.wait_for_selector(".row >> text=after the restart", timeout=15000)
        shown = page.evaluate("window.dashboard.events.map(e => e.id)")
        stored = [e.id for e in store.event_list(order="desc", limit=100).events]
        assert shown == stored  # every event once, newest first: no gap, no duplicate
    finally:
        second.stop()
        store.close()


def test_a_non_loopback_hub_demands_its_token_and_keeps_it_out_of_urls(
    tmp_path: Path, page: Any, shot: Callable[[str], None]
) -> None:
    token = "tok-dashboard-secret-42"
    # The guard sees host 0.0.0.0 as a non-loopback hub; the socket itself stays on loopback.
    with live_hub(tmp_path, token=token, host="0.0.0.0", retry_ms=300) as hub:
        urls: list[str] = []
        page.on("request", lambda req: urls.append(req.url))
        resp = page.goto(hub.url + "/")
        assert resp is not None and resp.status == 401
        assert page.locator("input[name=token]").get_attribute("type") == "password"
        assert page.goto(hub.url + "/v1/events").status == 401
        page.goto(hub.url + "/")
        page.fill("input[name=token]", token)
        page.fill("input[name=operator]", "operator")
        shot("login")
        page.click("button[type=submit]")
        page.wait_for_function(LIVE)
        cookies = [c for c in page.context.cookies() if c["name"] == "logstream_session"]
        assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
        assert token not in cookies[0]["value"]
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
        assert page.inner_text("#who") == "operator: operator"
        # The operator posts into a room; the log shows who did it.
        page.fill("#compose input[name=stream]", "ops")
        page.fill("#compose input[name=room]", "general")
        page.fill("#compose input[name=body]", "hold all merges")
        page.click("#compose button[type=submit]")
        page.wait_for_selector(".row >> text=hold all merges")
        with httpx.Client(base_url=hub.url, headers=hub.headers()) as c:
            posted = c.get("/v1/events", params={"room": "general"}).json()["events"]
            assert [(e["from_agent"], e["body"]) for e in posted] == [
                ("operator", "hold all merges")
            ]
            tid = task(c, "A task the operator started", from_agent="operator")
        page.click("#tab-tasks")
        page.once("dialog", lambda d: d.accept())
        page.click(f"[data-task='{tid}'] button.cancel")
        page.wait_for_selector(f"[data-state='cancelled'] [data-task='{tid}']")
        assert all(token not in u for u in urls), [u for u in urls if token in u]
        assert token not in page.url


def test_the_page_cannot_be_framed_and_logout_ends_the_session_on_the_hub(
    tmp_path: Path, page: Any, browser: Any
) -> None:
    """Issue 18 item 12 in the browser: another page's iframe shows nothing of the dashboard
    (X-Frame-Options DENY, CSP frame-ancestors 'none'), and the Log out button ends the
    session on the hub: the cookie copied before it is refused afterwards."""
    token = "tok-dashboard-frames-7"
    with live_hub(tmp_path, token=token, host="0.0.0.0", retry_ms=300) as hub:
        page.goto(hub.url + "/")
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_function(LIVE)
        (copied,) = [c for c in page.context.cookies() if c["name"] == "logstream_session"]
        # Framed by another origin (logged in, so only the headers can stop it).
        framer = page.context.new_page()
        framer.set_content(f'<iframe id="f" src="{hub.url}/" width="600" height="400"></iframe>')
        framer.wait_for_load_state("load")
        (child,) = [f for f in framer.frames if f != framer.main_frame]
        assert not child.url.startswith(hub.url), child.url  # blocked: an error page
        assert child.query_selector("#who") is None
        framer.close()
        page.click("#logout")
        page.wait_for_selector("input[name=token]")
        other = browser.new_context()
        other.add_cookies([copied])
        thief = other.new_page()
        resp = thief.goto(hub.url + "/")
        assert resp is not None and resp.status == 401  # the login form, not the dashboard
        assert thief.locator("input[name=token]").count() == 1
        other.close()


def test_the_sync_view_without_peers_names_commands_that_exist(tmp_path: Path, page: Any) -> None:
    """Issue 18 item 20: what the Sync tab tells a hub with no peers to run exists."""
    with live_hub(tmp_path, retry_ms=300) as hub:
        open_view(page, hub.url, "sync")
        page.wait_for_selector("#sync >> text=No peers")
        text = page.inner_text("#sync")
        shown = page.locator("#sync code").all_inner_texts()
    said = [c for c in shown + text.split("(") if c.startswith("logstream ")]
    commands = [c.replace(")", " ").replace(".", " ").split()[1:] for c in said]
    assert said and "peers.json" in text, text
    for cmd in commands:  # each names a real (sub)command: its help's usage line says so
        words = list(itertools.takewhile(lambda w: w.isalpha() and w.islower(), cmd))
        done = run_cli(*words, "--help")
        usage = done.stdout.decode().splitlines()[0] if done.stdout else ""
        assert done.returncode == 0 and f"{' '.join(words)} [OPTIONS]" in usage, (words, usage)
