"""Presence shared by every hub on one PostgreSQL log (issue 23, first scope bullet).

Three real `logstream serve` processes on one PostgreSQL schema behind a round-robin proxy: an
agent announced through the proxy is listed by every hub and its presence frame reaches an SSE
client on each hub; when its TTL lapses it is gone from every hub's list, with a `gone` frame
on each hub's SSE; a leave through one hub is a `gone` frame on all of them; a delivery path
announced through one hub makes another say `unverified`. In process: two hubs' registries on
one log, the agent bound held across them, and a feed that lost its connection catches up.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors, shared_presence
from mempalace_logstream.backends import pg_presence
from mempalace_logstream.presence import Registry
from tests.outagekit import HubProcess, hub_fleet, until
from tests.proxykit import RoundRobinProxy

pytestmark = [pytest.mark.pg]

WITHIN_S = 10  # a change made through one hub reaches the others (LISTEN/NOTIFY: milliseconds)


def _db(pg_url: str) -> str:
    return pg_url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[list[HubProcess]]:
    with hub_fleet(pg_url, tmp_path) as hubs:
        yield hubs


class PresenceStream:
    """An SSE client of one hub's `/v1/stream?presence=1` in a thread: keeps every presence
    frame's data, in order; `open` is set once the hub answered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.frames: list[dict[str, Any]] = []
        self.open = threading.Event()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-presence-sse", daemon=True)
        self._thread.start()
        assert self.open.wait(30), f"no stream from {url}: {self.error!r}"

    def _run(self) -> None:
        params = {"presence": "1", "since_event_id": "tip"}
        timeout = httpx.Timeout(10, read=60)
        try:
            with httpx.stream("GET", self.url + "/v1/stream", params=params, timeout=timeout) as r:
                assert r.status_code == 200, r.status_code
                self.open.set()
                kind = None
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:") and kind == "presence":
                        self.frames.append(json.loads(line[5:].strip()))
                    elif line == "":
                        kind = None
        except BaseException as exc:  # reported by the test
            self.error = exc

    def states(self, agent: str) -> list[str]:
        return [f["state"] for f in list(self.frames) if f["agent"] == agent]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)  # a ping (every second) wakes the reader


def listed(url: str) -> dict[str, dict[str, Any]]:
    """A hub's `presence_list` over HTTP: {agent: entry}."""
    resp = httpx.post(url + "/v1/presence_list", json={}, timeout=30)
    assert resp.status_code == 200, resp.text
    return {a["agent"]: a for a in resp.json()["agents"]}


@pytest.mark.slow  # three `logstream serve` processes
def test_presence_through_the_proxy_is_listed_streamed_and_expires_on_every_hub(
    fleet: list[HubProcess],
) -> None:
    proxy = RoundRobinProxy([h.port for h in fleet])
    streams = [PresenceStream(h.url) for h in fleet]
    try:
        events_before = _events(fleet[0].db)
        made = httpx.post(
            proxy.url + "/v1/presence_announce",
            json={"agent": "codex", "state": "working", "note": "on it", "ttl_s": 3},
            timeout=30,
        )
        assert made.status_code == 200, made.text
        expires_at = made.json()["presence"]["expires_at"]
        for hub in fleet:  # every hub lists it, as announced
            until(lambda hub=hub: "codex" in listed(hub.url), WITHIN_S)
            entry = listed(hub.url)["codex"]
            assert (entry["state"], entry["note"], entry["expires_at"]) == (
                "working",
                "on it",
                expires_at,
            )
        for s in streams:  # and each hub's SSE carried its frame
            until(lambda s=s: "working" in s.states("codex"), WITHIN_S)
        # The TTL lapses with nobody refreshing: gone on every hub, a frame on each stream.
        for s in streams:
            until(lambda s=s: s.states("codex")[-1:] == ["gone"], 3 + WITHIN_S)
        for hub in fleet:
            assert "codex" not in listed(hub.url)
        assert all(s.states("codex") == ["working", "gone"] for s in streams), [
            s.frames for s in streams
        ]
        gone = [next(f for f in s.frames if f["state"] == "gone") for s in streams]
        assert {f["expires_at"] for f in gone} == {expires_at}  # each says when it lapsed
        # A leave through one hub is a `gone` frame on every hub at once (no TTL to wait).
        for body in ({"agent": "claude", "state": "idle", "ttl_s": 600}, {"agent": "claude"}):
            op = "presence_announce" if "state" in body else "presence_leave"
            assert httpx.post(f"{proxy.url}/v1/{op}", json=body, timeout=30).status_code == 200
        for s in streams:
            until(lambda s=s: s.states("claude") == ["idle", "gone"], WITHIN_S)
        for hub in fleet:
            assert listed(hub.url) == {}
        assert _events(fleet[0].db) == events_before  # never written to the log
        assert len(proxy.served) == 3  # the proxy spread the calls over the hubs
    finally:
        for s in streams:
            s.close()
        proxy.close()


@pytest.mark.slow  # three `logstream serve` processes
def test_a_delivery_path_announced_through_one_hub_is_known_to_the_others(
    fleet: list[HubProcess],
) -> None:
    a, b, c = fleet
    body = {"agent": "watcher", "state": "watching", "ttl_s": 60, "path": "watch"}
    assert httpx.post(a.url + "/v1/presence_announce", json=body, timeout=30).status_code == 200
    until(lambda: "watcher" in listed(b.url), WITHIN_S)
    seen = listed(b.url)["watcher"]
    assert seen["wakeable"] == "unverified"  # a live push path, no reaction seen yet
    assert [p["path"] for p in seen["paths"]] == ["watch"]
    # A hook-only agent announced through c: b warns a sender that it cannot be woken.
    hook = {"agent": "hooked", "state": "idle", "ttl_s": 60, "path": "hook"}
    assert httpx.post(c.url + "/v1/presence_announce", json=hook, timeout=30).status_code == 200
    until(lambda: "hooked" in listed(b.url), WITHIN_S)
    assert listed(b.url)["hooked"]["wakeable"] == "no"
    note = {"type": "note", "stream": "s", "room": "r", "from_agent": "lead", "body": "hi"}
    sent = httpx.post(b.url + "/v1/event_append", json={**note, "to_agent": "hooked"}, timeout=30)
    assert sent.json()["warning"] == (
        "hooked has no live delivery path; it will see this at its next prompt"
    )
    sent = httpx.post(b.url + "/v1/event_append", json={**note, "to_agent": "watcher"}, timeout=30)
    assert "warning" not in sent.json()


def _events(db: str) -> int:
    with LogStore.open(db) as store:
        return int(store.stats()["events"])


# ----------------------------------------------------------------------------- in process
@pytest.fixture
def two_hubs(pg_url: str) -> Iterator[tuple[Registry, Registry]]:
    stores = [LogStore.open(_db(pg_url)) for _ in range(2)]
    registries = [shared_presence.registry_for(s) for s in stores]
    try:
        for r in registries:
            shared_presence.start(r)
        yield registries[0], registries[1]
    finally:
        for r in registries:
            shared_presence.stop(r)
        for s in stores:
            s.close()


def _names(reg: Registry) -> list[str]:
    return [e.agent for e in reg.present()]


def test_changes_reach_the_other_hub_in_order_and_stale_ones_are_ignored(
    two_hubs: tuple[Registry, Registry],
) -> None:
    a, b = two_hubs
    heard: list[tuple[str, str, str | None]] = []
    b.subscribe(lambda f: heard.append((f["event"], f["agent"], f["note"])))
    a.announce(agent="x", state="working", note="one", ttl_s=60)
    until(lambda: ("announce", "x", "one") in heard, WITHIN_S)
    b.announce(agent="x", state="working", note="two", ttl_s=60)
    a.announce(agent="y", state="idle", ttl_s=60)
    a.leave("y")
    until(lambda: ("leave", "y", None) in heard, WITHIN_S)
    assert heard == [
        ("announce", "x", "one"),
        ("announce", "x", "two"),
        ("announce", "y", None),
        ("leave", "y", None),
    ]
    until(lambda: [e.note for e in a.present()] == ["two"], WITHIN_S)
    assert _names(a) == _names(b) == ["x"]


def test_the_agent_bound_holds_across_hubs(pg_url: str) -> None:
    with LogStore.open(_db(pg_url)) as store:
        table = pg_presence.for_engine(store.engine)
        assert table is not None
        one, two = Registry(backing=table, max_agents=2), Registry(backing=table, max_agents=2)
        one.announce(agent="a", state="idle")
        two.announce(agent="b", state="idle")
        with pytest.raises(errors.ValidationError) as refused:
            one.announce(agent="c", state="idle")
        assert refused.value.field == "agent" and refused.value.limit == 2
        assert "at most 2 agents" in str(refused.value)
        two.announce(agent="a", state="working")  # a refresh of a live agent passes
        assert two.leave("b") is True and two.leave("b") is False
        one.announce(agent="c", state="idle")


def test_a_feed_that_lost_its_connection_catches_up(
    pg_url: str, two_hubs: tuple[Registry, Registry]
) -> None:
    a, b = two_hubs
    feed = shared_presence.feed_of(b)
    assert feed is not None and feed.resyncs == 1
    heard: list[tuple[str, str]] = []
    b.subscribe(lambda f: heard.append((f["event"], f["agent"])))
    a.announce(agent="early", state="idle", ttl_s=60)
    until(lambda: _names(b) == ["early"], WITHIN_S)
    # Cut b's LISTEN connection; a leaves `early` and announces `late` while b is deaf.
    eng = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        cut = conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query = :listen AND pid <> pg_backend_pid()"
            ),
            {"listen": f'LISTEN "{feed.table.channel}"'},
        ).all()
    eng.dispose()
    assert len(cut) == 2  # both hubs' listeners
    a.leave("early")
    a.announce(agent="late", state="working", ttl_s=60)
    until(lambda: feed.resyncs >= 2 and _names(b) == ["late"], WITHIN_S + 10)
    assert heard[0] == ("announce", "early") and ("leave", "early") in heard
    assert heard[-1] == ("announce", "late")


def test_lapsed_rows_are_kept_for_their_paths_up_to_twice_the_bound(pg_url: str) -> None:
    now = [1_000_000_000]
    with LogStore.open(_db(pg_url)) as store:
        table = pg_presence.for_engine(store.engine)
        assert table is not None
        reg = Registry(backing=table, max_agents=2, clock=lambda: now[0])
        for n in range(6):  # two at a time, each pair lapsed before the next
            reg.announce(agent=f"a{n}", state="idle", ttl_s=1, path="watch")
            if n % 2:
                now[0] += 2_000
        reg.announce(agent="live", state="idle", ttl_s=60)
        _rev, rows = table.snapshot()
        # 4 rows at most (twice the bound): the live one and the latest lapsed ones.
        assert [entry.agent for _r, entry, _p in rows] == ["a3", "a4", "a5", "live"]
        assert rows[0][2]["watch"][1] < now[0]  # a lapsed path is remembered as lapsed
        assert reg.announced("a5") and reg.paths("a5") == {}  # known, its path lapsed
        assert not reg.announced("a0")  # forgotten here too (the same bound in memory)


def test_a_hub_started_later_reads_who_is_home_from_the_table(
    pg_url: str, two_hubs: tuple[Registry, Registry]
) -> None:
    a, _b = two_hubs
    a.announce(agent="here", state="working", ttl_s=60, path="channel")
    with LogStore.open(_db(pg_url)) as store:  # a hub (re)started after the announcement
        late = shared_presence.registry_for(store)
        assert late.present() == []
        shared_presence.start(late)  # returns once the table was read
        try:
            assert _names(late) == ["here"] and list(late.paths("here")) == ["channel"]
        finally:
            shared_presence.stop(late)
