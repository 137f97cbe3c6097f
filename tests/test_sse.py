"""SSE on a real uvicorn hub with a real client (httpx + httpx-sse): live, resume, errors, cap."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from tests.hubkit import LiveHub, append, live_hub

STREAM = "/v1/stream"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(
        tmp_path_factory.mktemp("sse"), ping_interval_s=0.2, sse_max_clients=3, resume_wait_s=0.3
    ) as h:
        yield h


@pytest.fixture
def client(hub: LiveHub):
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        yield c


async def _events(source: AsyncIterator[ServerSentEvent], n: int) -> list[ServerSentEvent]:
    out: list[ServerSentEvent] = []
    async for sse in source:
        if sse.event == "logstream":
            out.append(sse)
            if len(out) == n:
                break
    return out


def _run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_a_subscriber_receives_live_events_as_framed_json(hub: LiveHub, client) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            async with aconnect_sse(ac, "GET", STREAM, params={"room": "live"}) as source:
                assert source.response.status_code == 200
                assert source.response.headers["content-type"].startswith("text/event-stream")
                await _until(lambda: hub.app.state.sse_clients >= 1)
                sent = [append(client, room="live", body=f"n{i}") for i in range(3)]
                append(client, room="elsewhere")  # filtered out
                got = await _events(source.aiter_sse(), 3)
        assert [s.id for s in got] == [e["id"] for e in sent]
        assert [json.loads(s.data) for s in got] == sent

    _run(scenario())


def test_resume_with_last_event_id_has_no_gaps_or_duplicates(hub: LiveHub, client) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            first = append(client, room="resume", body="0")
            params = {"room": "resume", "since_event_id": first["id"]}
            async with aconnect_sse(ac, "GET", STREAM, params=params) as source:
                await _until(lambda: hub.app.state.sse_clients >= 1)
                batch1 = [append(client, room="resume", body=f"a{i}") for i in range(2)]
                got1 = await _events(source.aiter_sse(), 2)
            # Disconnected: these arrive while nobody listens.
            batch2 = [append(client, room="resume", body=f"b{i}") for i in range(3)]
            headers = {"Last-Event-ID": got1[-1].id}
            async with aconnect_sse(
                ac, "GET", STREAM, params={"room": "resume"}, headers=headers
            ) as source:
                frames = source.aiter_sse()
                got2 = await _events(frames, 3)
                batch3 = [append(client, room="resume", body="c")]
                got3 = await _events(frames, 1)
        ids = [s.id for s in got1 + got2 + got3]
        assert ids == [e["id"] for e in batch1 + batch2 + batch3]
        assert len(set(ids)) == len(ids)

    _run(scenario())


def test_bad_filters_and_cursors_are_400_json_before_the_stream_opens(client) -> None:
    for params, field in (
        ({"type": "Not A Type"}, "type"),
        ({"status": "maybe"}, "status"),
        ({"since_event_id": "evt_unknown"}, "since_event_id"),
        ({"limit": "5"}, "limit"),
    ):
        resp = client.get(STREAM, params=params)
        assert resp.status_code == 400, params
        assert resp.headers["content-type"] == "application/json"
        assert resp.json()["field"] == field


def test_an_unknown_last_event_id_waits_bounded_then_fails_cleanly(client) -> None:
    started = time.monotonic()
    resp = client.get(STREAM, headers={"Last-Event-ID": "evt_20261201T000000_0123456789ab"})
    assert resp.status_code == 400 and resp.json()["field"] == "Last-Event-ID"
    assert "waited" in resp.json()["error"]
    assert time.monotonic() - started >= 0.3  # it waited for a late sync first


@pytest.mark.parametrize("value", ["bogus", "evt_not_synced_yet", "evt x", "e" * 129, "é"])
def test_a_last_event_id_that_can_never_arrive_is_400_at_once(client, value: str) -> None:
    started = time.monotonic()
    resp = client.get(STREAM, headers={"Last-Event-ID": value.encode()})
    assert resp.status_code == 400 and resp.json()["field"] == "Last-Event-ID", resp.text
    assert time.monotonic() - started < 0.3  # no wait for an id of another shape


def _reconnect(hub: LiveHub, client, params: dict[str, str]) -> list[str]:
    """Connect, read one event, drop; append two while away; reconnect to the SAME URL with
    Last-Event-ID as a browser EventSource does; return the ids received after reconnecting."""

    async def scenario() -> list[str]:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            async with aconnect_sse(ac, "GET", STREAM, params=params) as source:
                await _until(lambda: hub.app.state.sse_clients >= 1)
                seen = append(client, room=params["room"], body="seen")
                got = await _events(source.aiter_sse(), 1)
            assert got[0].id == seen["id"]
            await _until(lambda: hub.app.state.sse_clients == 0)
            away = [append(client, room=params["room"], body=f"away{i}") for i in range(2)]
            headers = {"Last-Event-ID": got[0].id}
            async with aconnect_sse(ac, "GET", STREAM, params=params, headers=headers) as src:
                frames = src.aiter_sse()
                await _until(lambda: hub.app.state.sse_clients >= 1)
                later = append(client, room=params["room"], body="later")
                again = await _events(frames, 3)
            assert [e["id"] for e in away] + [later["id"]] == [s.id for s in again]
            return [s.id for s in again]

    return _run(scenario())


def test_last_event_id_beats_since_event_id_tip_on_reconnect(hub: LiveHub, client) -> None:
    # The README's own URL: a reconnect must deliver what was sent while away.
    _reconnect(hub, client, {"room": "rc-tip", "since_event_id": "tip"})


def test_last_event_id_beats_a_fixed_since_event_id_on_reconnect(hub: LiveHub, client) -> None:
    # A fixed id in the URL must not replay the backlog on every reconnect.
    first = append(client, room="rc-fixed", body="old")
    got = _reconnect(hub, client, {"room": "rc-fixed", "since_event_id": first["id"]})
    assert first["id"] not in got


@pytest.mark.parametrize("param", ["to_agent", "stream", "type", "since_event_id", "writer"])
def test_an_empty_parameter_is_400_not_no_filter(client, param: str) -> None:
    with client.stream("GET", STREAM, params={param: ""}) as resp:  # never a stream
        assert resp.status_code == 400
        body = json.loads(resp.read())
    assert body["field"] == param and "empty" in body["error"]
    listed = client.get("/v1/events", params={param: ""})
    assert listed.status_code == 422 and listed.json()["field"] == param


def test_the_stream_accepts_exactly_the_parameters_the_readme_names(client) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith("| `/v1/stream`"))
    named = set(re.findall(r"`([a-z_]+)`", line.split("|")[2]))
    from mempalace_logstream.http.sse import SSE_PARAMS

    assert named - {"tip"} == set(SSE_PARAMS)
    for unknown in ("limit", "order", "before_event_id", "since_created_at", "agent"):
        resp = client.get(STREAM, params={unknown: "x"})
        assert resp.status_code == 400 and resp.json()["field"] == unknown


def test_a_burst_of_connects_never_passes_the_client_cap(tmp_path: Path) -> None:
    with live_hub(tmp_path, sse_max_clients=3, ping_interval_s=5) as h:

        async def connect(ac: httpx.AsyncClient) -> tuple[int, object]:
            cm = ac.stream("GET", STREAM)
            resp = await cm.__aenter__()
            return resp.status_code, cm

        async def scenario() -> list[int]:
            limits = httpx.Limits(max_connections=200)
            async with httpx.AsyncClient(base_url=h.url, timeout=30, limits=limits) as ac:
                results = await asyncio.gather(*(connect(ac) for _ in range(60)))
                codes = [code for code, _ in results]
                for _, cm in results:
                    await cm.__aexit__(None, None, None)
            await _until(lambda: h.app.state.sse_clients == 0)
            return codes

        codes = _run(scenario(), timeout=60)
        assert codes.count(200) == 3 and codes.count(503) == 57, codes


def test_pings_and_a_retry_hint_are_sent(hub: LiveHub) -> None:
    async def scenario() -> list[str]:
        lines: list[str] = []
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            async with ac.stream("GET", STREAM) as resp:
                async for line in resp.aiter_lines():
                    lines.append(line)
                    if lines.count(": ping") >= 2:
                        break
        return lines

    lines = _run(scenario())
    assert lines[0] == ": connected"
    assert "retry: 3000" in lines


def test_the_client_cap_answers_503_with_retry_after_and_frees_slots(hub: LiveHub) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            opened = []
            for _ in range(3):
                cm = ac.stream("GET", STREAM)
                resp = await cm.__aenter__()
                assert resp.status_code == 200
                opened.append(cm)
            refused = await ac.get(STREAM)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            assert "event_wait" in refused.json()["error"]
            await opened.pop().__aexit__(None, None, None)
            await _until(lambda: hub.app.state.sse_clients < 3)
            async with ac.stream("GET", STREAM) as again:
                assert again.status_code == 200
            for cm in opened:
                await cm.__aexit__(None, None, None)
        await _until(lambda: hub.app.state.sse_clients == 0)

    _run(scenario())


def test_the_legacy_path_serves_the_same_feed(hub: LiveHub, client) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            first = append(client, room="legacy")
            params = {"room": "legacy", "since_event_id": first["id"]}
            async with aconnect_sse(ac, "GET", "/logstream/stream", params=params) as source:
                sent = append(client, room="legacy")
                got = await _events(source.aiter_sse(), 1)
        assert got[0].id == sent["id"]

    _run(scenario())


def test_repeated_filters_match_any_value(hub: LiveHub, client) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            first = append(client, room="multi-x")
            params = [("room", "multi-a"), ("room", "multi-b"), ("since_event_id", first["id"])]
            async with aconnect_sse(ac, "GET", STREAM, params=params) as source:
                sent = [append(client, room=r) for r in ("multi-a", "multi-c", "multi-b")]
                got = await _events(source.aiter_sse(), 2)
        assert [s.id for s in got] == [sent[0]["id"], sent[2]["id"]]

    _run(scenario())


def test_the_slot_counter_returns_to_zero(tmp_path: Path) -> None:
    with live_hub(tmp_path, sse_max_clients=1, ping_interval_s=0.1) as h:

        async def scenario() -> None:
            async with httpx.AsyncClient(base_url=h.url, timeout=30) as ac:
                for _ in range(3):  # a cap of one, reused three times
                    async with ac.stream("GET", STREAM) as resp:
                        assert resp.status_code == 200
                    await _until(lambda: h.app.state.sse_clients == 0)

        _run(scenario())
