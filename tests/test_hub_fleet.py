"""Three real hubs on one real PostgreSQL log behind a round-robin proxy (issue 23 "Must
show"): one hub dies by SIGKILL while 8 writers append through the proxy and a `watch
--follow`, a `tail --json` and an SSE client follow through it. Every acknowledged append is
stored exactly once; each follower gets every event exactly once, in order, after
reconnecting to another hub. A claim race across the hubs has one winner.

The followers and the first writes all go to the hub that dies (the proxy has only it in
rotation until then), so each of them must fail over."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mempalace_logstream import LogStore
from mempalace_logstream.http import session
from tests.outagekit import CliProcess, HubProcess, cli_env, hub_fleet, until
from tests.proxykit import RoundRobinProxy, SseFollower

pytestmark = [pytest.mark.pg, pytest.mark.slow]

WRITERS, PER_WRITER = 8, 500
TASK = {"branch": "main", "base_commit": "abc1234", "done": "tests pass", "project": "fleet"}


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[list[HubProcess]]:
    with hub_fleet(pg_url, tmp_path) as hubs:
        yield hubs


class Writer(threading.Thread):
    """Appends PER_WRITER notes through `url`, each with its idempotency key, retrying an
    append whose answer was lost (a connection cut, a 5xx) until it is acknowledged."""

    def __init__(self, url: str, n: int) -> None:
        super().__init__(daemon=True, name=f"writer-{n}")
        self.url, self.n = url, n
        self.acked: dict[str, str] = {}  # idempotency key -> event id
        self.retries = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as client:
                for k in range(PER_WRITER):
                    key = f"w{self.n}-{k}"
                    body = {
                        **{"type": "note", "stream": "s", "room": "r", "from_agent": f"w{self.n}"},
                        **{"to_agent": "bob", "body": key, "idempotency_key": key},
                    }
                    self.acked[key] = self._append(client, body)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _append(self, client: httpx.Client, body: dict[str, str]) -> str:
        deadline = time.monotonic() + 60
        while True:
            try:
                resp = client.post("/v1/event_append", json=body)
                if resp.status_code == 200:
                    return str(resp.json()["event"]["id"])
                assert resp.status_code >= 500, resp.text  # a refusal would be a defect
            except httpx.TransportError:
                pass
            self.retries += 1
            assert time.monotonic() < deadline, f"{body['idempotency_key']} never acknowledged"
            time.sleep(0.05)


def stored_to_bob(db: str, since: str) -> list[tuple[str, str]]:
    """(id, body) of the events to bob after `since`, in log order."""
    out: list[tuple[str, str]] = []
    with LogStore.open(db) as store:
        cursor = since
        while True:
            page = store.event_list(since_event_id=cursor, to_agent="bob", limit=500)
            out += [(e.id, e.body or "") for e in page.events if e.to_agent == "bob"]
            if not page.events:
                return out
            cursor = page.events[-1].id


def test_a_hub_killed_under_load_loses_and_doubles_nothing(
    fleet: list[HubProcess], tmp_path: Path
) -> None:
    dying, *rest = fleet
    proxy = RoundRobinProxy([dying.port])
    env = cli_env(tmp_path)
    seed = httpx.post(
        proxy.url + "/v1/event_append",
        json={"type": "note", "stream": "s", "room": "r", "from_agent": "lead", "to_agent": "x"},
        timeout=30,
    ).json()["event"]["id"]
    watch = CliProcess(
        [
            *("watch", "--agent", "bob", "--follow", "--json", "--hub", proxy.url),
            *("--since-event-id", seed, "--state-file", str(tmp_path / "watch.json")),
            "--no-presence",
        ],
        env,
    )
    tail = CliProcess(["tail", "--hub", proxy.url, "--json", "--since-event-id", seed], env)
    sse = SseFollower(proxy.url, seed, to_agent="bob")
    writers = [Writer(proxy.url, n) for n in range(WRITERS)]
    try:
        for w in writers:
            w.start()
        until(lambda: sum(len(w.acked) for w in writers) >= 400, 120)
        until(lambda: len(sse.ids) >= 50 and len(tail.out.lines) >= 50, 120)
        proxy.backends = [h.port for h in fleet]  # the others join the rotation…
        dying.kill()  # …and the hub every client is on dies (SIGKILL)
        for w in writers:
            w.join(300)
            assert w.error is None, repr(w.error)
        acked = {key: eid for w in writers for key, eid in w.acked.items()}
        assert len(acked) == WRITERS * PER_WRITER
        stored = stored_to_bob(rest[0].db, seed)
        by_body = Counter(body for _id, body in stored)
        assert [b for b, n in by_body.items() if n > 1] == []  # nothing stored twice
        assert {eid for eid, _b in stored} == set(acked.values())  # every acknowledged one
        assert {b: eid for eid, b in stored} == acked
        order = [eid for eid, _b in stored]
        assert watch.out.wait_for(lambda ls: len(_watch_ids(ls)) >= len(order), 120)
        assert tail.out.wait_for(lambda ls: len(_tail_ids(ls, "bob")) >= len(order), 120)
        until(lambda: len(sse.ids) >= len(order), 120)
        assert _watch_ids(watch.out.lines) == order  # once each, in order
        assert _tail_ids(tail.out.lines, "bob") == order
        assert sse.ids == order
        assert sse.reconnects >= 1 and sum(w.retries for w in writers) >= 1
        for proc in (watch, tail):
            assert proc.proc.poll() is None, proc.err.text()  # still following
            assert "Traceback" not in proc.err.text()
    finally:
        watch.stop()
        tail.stop()
        sse.close()
        proxy.close()


def _watch_ids(lines: list[str]) -> list[str]:
    return [e["id"] for line in lines if line for e in json.loads(line)["events"]]


def _tail_ids(lines: list[str], to_agent: str) -> list[str]:
    return [e["id"] for line in lines if line if (e := json.loads(line))["to_agent"] == to_agent]


def test_a_claim_race_across_three_hubs_has_one_winner(fleet: list[HubProcess]) -> None:
    body = {"from_agent": "lead", "to_agent": "*", "goal": "one winner", **TASK}
    made = httpx.post(fleet[0].url + "/v1/task_create", json=body, timeout=30)
    assert made.status_code == 200, made.text
    tid = made.json()["task"]["correlation_id"]
    claimers = [(f"agent{i}", fleet[i % 3].url) for i in range(9)]
    answers: dict[str, int] = {}
    start = threading.Barrier(len(claimers))

    def claim(agent: str, url: str) -> None:
        move = {"task_id": tid, "action": "claim", "from_agent": agent}
        start.wait(30)
        answers[agent] = httpx.post(url + "/v1/task_update", json=move, timeout=30).status_code

    threads = [threading.Thread(target=claim, args=c) for c in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [a for a, code in answers.items() if code == 200]
    assert len(answers) == 9 and len(winners) == 1, answers
    assert all(code == 409 for a, code in answers.items() if a not in winners), answers
    for hub in fleet:  # every hub says the same
        status = httpx.post(hub.url + "/v1/task_status", json={"task_id": tid}, timeout=30)
        assert (status.json()["task"]["state"], status.json()["task"]["assignee"]) == (
            "claimed",
            winners[0],
        ), status.text


TOKEN = "tok-fleet-dashboard-9"
CHROMIUM = "/usr/bin/chromium"
LIVE = "window.dashboard && window.dashboard.es && window.dashboard.es.readyState === 1"


def test_a_dashboard_login_through_one_hub_works_on_the_others_and_a_logout_ends_it_on_all(
    pg_url: str, tmp_path: Path
) -> None:
    """In Debian's Chromium: log in through the proxy, then open each hub with the same
    cookie (cookies do not depend on the port); a logout on one hub ends the session on the
    others within their reread of the ended sessions."""
    from playwright.sync_api import sync_playwright

    from tests.conftest import skip_unless_ci

    if not Path(CHROMIUM).exists():
        skip_unless_ci(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    db = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    LogStore.open(db).close()
    extra = ("--host", "0.0.0.0", "--token", TOKEN)  # a non-loopback hub: logins needed
    hubs = [HubProcess(db, tmp_path / f"h{i}", *extra) for i in range(3)]
    proxy = None
    try:
        for hub in hubs:
            hub.home.mkdir(parents=True)
            hub.start()
        proxy = RoundRobinProxy([h.port for h in hubs])
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_context().new_page()
            assert page.goto(proxy.url + "/").status == 401  # the login form
            page.fill("input[name=token]", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_function(LIVE)
            for hub in hubs:  # each hub itself, the same cookie
                resp = page.goto(hub.url + "/")
                assert resp is not None and resp.status == 200, hub.url
                page.wait_for_function(LIVE)
            cookie = next(c for c in page.context.cookies() if c["name"] == "logstream_session")
            browser.close()
        jar = {"logstream_session": cookie["value"]}
        for hub in hubs:
            assert httpx.get(hub.url + "/v1/events", cookies=jar).status_code == 200
        out = httpx.post(
            hubs[2].url + "/dashboard/logout", cookies=jar, headers={"X-Logstream-Dashboard": "1"}
        )
        assert out.status_code == 303
        for hub in hubs:
            until(lambda h=hub: httpx.get(h.url + "/v1/events", cookies=jar).status_code == 401, 30)
        # Failed logins count on every hub: five wrong tokens spread over the hubs lock this
        # address out of all of them.
        for i in range(session.MAX_LOGIN_FAILURES):
            wrong = httpx.post(hubs[i % 3].url + "/dashboard/login", data={"token": "nope"})
            assert wrong.status_code == 401, wrong.text
        for hub in hubs:
            locked = httpx.post(hub.url + "/dashboard/login", data={"token": TOKEN})
            assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
    finally:
        if proxy is not None:
            proxy.close()
        for hub in hubs:
            hub.kill()
