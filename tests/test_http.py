"""The HTTP API on a real uvicorn hub: routes, the error model, sizes, and non-blocking waits."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import httpx
import pytest

from mempalace_logstream import errors, operations
from mempalace_logstream import waits as waits_mod
from tests.hubkit import LiveHub, append, live_hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    # One hub for the module (starting one costs a second here); tests use their own names.
    with live_hub(tmp_path_factory.mktemp("hub"), max_request_bytes=64 * 1024) as h:
        yield h


@pytest.fixture
def client(hub: LiveHub):
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        yield c


def test_healthz_answers_without_a_token(client: httpx.Client) -> None:
    resp = client.get("/healthz")
    assert resp.status_code == 200
    assert resp.json()["ok"] is True


def test_every_operation_has_a_post_route_in_the_openapi_schema(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for op in operations.OPERATIONS:
        assert f"/v1/{op}" in paths and "post" in paths[f"/v1/{op}"], op
    assert client.get("/docs").status_code == 200


def test_append_then_get_and_list_round_trip_the_event(client: httpx.Client) -> None:
    event = append(client, body="héllo\r\nworld", to_agent="rt", metadata={"k": [1, 2]})
    got = client.post("/v1/event_get", json={"event_id": event["id"]}).json()["event"]
    assert got == event
    assert client.get(f"/v1/events/{event['id']}").json()["event"] == event
    listed = client.get("/v1/events", params={"to_agent": "rt", "stream": ["x", "s"]}).json()
    assert [e["id"] for e in listed["events"]] == [event["id"]]
    assert listed["cursor"] == event["id"]


def test_validation_errors_are_422_with_the_core_message_and_field(
    hub: LiveHub, client: httpx.Client
) -> None:
    with pytest.raises(errors.ValidationError) as local:
        hub.store.event_append(type="Bad Type", stream="s", room="r", from_agent="a")
    resp = client.post(
        "/v1/event_append",
        json={"type": "Bad Type", "stream": "s", "room": "r422", "from_agent": "a"},
    )
    assert resp.status_code == 422
    assert resp.json() == {"error": local.value.message, "field": "type"}
    assert client.get("/v1/events", params={"room": "r422"}).json()["count"] == 0


def test_an_unknown_field_is_422_naming_it(client: httpx.Client) -> None:
    resp = client.post("/v1/event_list", json={"limit": 5, "colour": "red"})
    assert resp.status_code == 422
    assert resp.json() == {"error": "colour is not a parameter of event_list", "field": "colour"}
    resp = client.get("/v1/events", params={"colour": "red"})
    assert resp.status_code == 422 and resp.json()["field"] == "colour"


def test_a_missing_or_null_required_field_is_422(client: httpx.Client) -> None:
    for body in (
        {"stream": "s", "room": "r", "from_agent": "a"},
        {"type": None, "stream": "s", "room": "r", "from_agent": "a"},
    ):
        resp = client.post("/v1/event_append", json=body)
        assert resp.status_code == 422
        assert resp.json() == {"error": "type is required", "field": "type"}


def test_bad_json_and_non_object_bodies_are_422(client: httpx.Client) -> None:
    resp = client.post(
        "/v1/event_list", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422 and resp.json()["field"] == "body"
    resp = client.post("/v1/event_list", json=[1, 2])
    assert resp.status_code == 422 and resp.json()["field"] == "body"


def test_unknown_ids_are_404_and_a_reused_idempotency_key_is_409(client: httpx.Client) -> None:
    resp = client.get("/v1/artifacts/art_nope")
    assert resp.status_code == 404
    assert resp.json() == {"error": "artifact 'art_nope' not found", "field": "artifact_id"}
    assert client.post("/v1/event_list", json={"since_event_id": "evt_x"}).status_code == 404
    append(client, idempotency_key="k-409", body="one")
    resp = client.post(
        "/v1/event_append",
        json={
            "type": "note",
            "stream": "s",
            "room": "r",
            "from_agent": "a",
            "idempotency_key": "k-409",
            "body": "two",
        },
    )
    assert resp.status_code == 409 and resp.json()["field"] == "idempotency_key"


def test_binary_artifacts_round_trip_byte_exact_through_base64(client: httpx.Client) -> None:
    raw = bytes(range(256)) * 3
    resp = client.post(
        "/v1/artifact_put",
        json={
            "kind": "file",
            "content": base64.b64encode(raw).decode(),
            "encoding": "base64",
            "created_by": "a",
        },
    )
    assert resp.status_code == 200, resp.text
    art = resp.json()["artifact"]
    assert art["sha256"] == hashlib.sha256(raw).hexdigest()
    got = client.get(f"/v1/artifacts/{art['id']}").json()["artifact"]
    assert got["encoding"] == "base64" and base64.b64decode(got["content"]) == raw


def test_oversized_requests_get_413_with_or_without_content_length(client: httpx.Client) -> None:
    big = b'{"body": "' + b"x" * (70 * 1024) + b'"}'
    resp = client.post("/v1/event_list", content=big, headers={"content-type": "application/json"})
    assert resp.status_code == 413 and resp.json()["field"] == "body"

    def chunks():
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    resp = client.post(
        "/v1/event_list", content=chunks(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 413


def test_a_chunked_body_under_the_limit_is_accepted(client: httpx.Client) -> None:
    body = b'{"type":"note","stream":"s","room":"r","from_agent":"a","body":"chunked"}'
    resp = client.post(
        "/v1/event_append",
        content=iter([body[:10], body[10:]]),
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 200 and resp.json()["event"]["body"] == "chunked"


def test_event_wait_returns_matches_and_times_out_normally(client: httpx.Client) -> None:
    first = append(client, to_agent="waiter")
    out = client.post("/v1/event_wait", json={"to_agent": "waiter", "timeout_ms": 1000}).json()
    assert out["timed_out"] is False and out["events"][0]["id"] == first["id"]
    out = client.post(
        "/v1/event_wait",
        json={"since_event_id": first["id"], "to_agent": "waiter", "timeout_ms": 50},
    ).json()
    assert out["timed_out"] is True and out["events"] == [] and out["count"] == 0
    bad = client.post("/v1/event_wait", json={"timeout_ms": 300_001})
    assert bad.status_code == 422 and bad.json()["field"] == "timeout_ms"


def test_long_waits_hold_no_thread_and_never_block_appends(hub: LiveHub) -> None:
    asyncio.run(_long_waits_and_an_append(hub))


async def _long_waits_and_an_append(hub: LiveHub) -> None:
    # 60 concurrent 300 s waits: more than anyio's 40 worker threads, so a wait that held a
    # thread would starve the append below.
    async with httpx.AsyncClient(base_url=hub.url, timeout=60) as ac:
        tip = (await ac.post("/v1/event_list", json={"limit": 1})).json()["cursor"]
        waits = [
            asyncio.create_task(
                ac.post(
                    "/v1/event_wait",
                    json={
                        "since_event_id": tip or "tip",
                        "to_agent": f"w{i % 3}",
                        "timeout_ms": 300_000,
                    },
                )
            )
            for i in range(60)
        ]
        await _until(lambda: waits_mod.of(hub.store).open >= 60)  # all 60 blocked in the room
        started = time.monotonic()
        resp = await ac.post(
            "/v1/event_append",
            json={"type": "note", "stream": "s", "room": "r", "from_agent": "a", "to_agent": "*"},
        )
        assert resp.status_code == 200
        done = await asyncio.wait_for(asyncio.gather(*waits), timeout=20)
        elapsed = time.monotonic() - started
    assert all(r.json()["events"][0]["id"] == resp.json()["event"]["id"] for r in done)
    assert elapsed < 20


async def _until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_the_hub_socket_makes_accepted_connections_tcp_nodelay() -> None:
    """Keep-alive requests must not wait on Nagle + delayed ACK (~40 ms each): asyncio sets
    TCP_NODELAY on accepted connections only when the listening socket is IPPROTO_TCP."""
    import asyncio
    import socket

    from mempalace_logstream.http import listen_socket

    async def accepted_nodelay() -> int:
        sock = listen_socket("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        async with server:
            _r, w = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, 10)
            w.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0
    taken = listen_socket("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):  # a port in use is an error, and leaks no socket
            listen_socket("127.0.0.1", taken.getsockname()[1]).close()
    finally:
        taken.close()
