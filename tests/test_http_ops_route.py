"""`POST /v1/<op>`'s short path (http/ops.py `PlainPosts`, run by the guard) answers exactly
what FastAPI's own handler answers: the same status, content type and bytes, for plain
requests and for every request it hands over (no or another content type, bad JSON, a
non-object, unknown or missing parameters, a body sent in chunks). Each request is sent twice
to one live hub, once with the short path off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mempalace_logstream import operations
from mempalace_logstream.http import ops
from tests.hubkit import LiveHub, live_hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with live_hub(tmp_path_factory.mktemp("hub")) as h:
        yield h


@pytest.fixture
def client(hub: LiveHub) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        yield c


def _both(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch, path: str, **kwargs: Any
) -> tuple[httpx.Response, httpx.Response]:
    fast = client.post(path, **kwargs)
    with monkeypatch.context() as m:

        def never(*_args: Any) -> None:
            return None

        m.setattr(ops, "_plain_args", never)
        full = client.post(path, **kwargs)
    return fast, full


def _same(fast: httpx.Response, full: httpx.Response) -> None:
    assert fast.status_code == full.status_code, (fast.text, full.text)
    assert fast.headers["content-type"] == full.headers["content-type"]
    assert fast.headers["content-length"] == full.headers["content-length"]
    assert fast.content == full.content


EVENT = {
    "type": "note",
    "stream": "s",
    "room": "r",
    "from_agent": "a",
    "to_agent": "b",
    "body": 'héllo 🌍 \u2028 "quoted" \\ \x01 end',
    "metadata": {"f": 0.1, "big": 2**60, "neg": -1.5e-7, "nested": {"k": [1, "ü", None, True]}},
    "idempotency_key": "ops-route-1",
}


def test_an_idempotent_append_answers_the_same_bytes_both_ways(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, full = _both(client, monkeypatch, "/v1/event_append", json=EVENT)
    assert fast.status_code == 200
    _same(fast, full)


def test_reads_answer_the_same_bytes_both_ways(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = client.post("/v1/event_append", json=EVENT).json()["event"]
    for path, body in (
        ("/v1/event_get", {"event_id": event["id"]}),
        ("/v1/event_list", {"stream": ["s", "t"], "limit": 5, "preview": True}),
        ("/v1/event_list", {}),
        ("/v1/stats", {}),
        ("/v1/event_get", {"event_id": "evt_nope"}),
        ("/v1/event_list", {"limit": "many"}),
        ("/v1/event_list", {"limit": None}),
    ):
        fast, full = _both(client, monkeypatch, path, json=body)
        _same(fast, full)
    assert (
        client.get(f"/v1/events/{event['id']}").content
        == _both(client, monkeypatch, "/v1/event_get", json={"event_id": event["id"]})[0].content
    )


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (json.dumps(EVENT), {}),
        (json.dumps(EVENT), {"content-type": "text/plain"}),
        (json.dumps(EVENT), {"content-type": "application/vnd.x+json"}),
        (json.dumps(EVENT), {"content-type": "Application/JSON; charset=utf-8"}),
        ("", {"content-type": "application/json"}),
        ("{nope", {"content-type": "application/json"}),
        ("[1, 2]", {"content-type": "application/json"}),
        ('"text"', {"content-type": "application/json"}),
        ("\xff\xfe", {"content-type": "application/json"}),
        ("[" * 5000 + "]" * 5000, {"content-type": "application/json"}),
        (json.dumps({**EVENT, "colour": "red"}), {"content-type": "application/json"}),
        (json.dumps({"type": "note"}), {"content-type": "application/json"}),
    ],
)
def test_every_other_request_gets_fastapis_own_answer(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch, content: str, headers: dict[str, str]
) -> None:
    fast, full = _both(
        client, monkeypatch, "/v1/event_append", content=content.encode("utf-8"), headers=headers
    )
    _same(fast, full)


def test_a_plain_request_takes_the_short_path(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[bool] = []
    real = ops._plain_args

    def spy(*args: Any) -> dict[str, Any] | None:
        got = real(*args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(ops, "_plain_args", spy)
    assert client.post("/v1/event_append", json=EVENT).status_code == 200
    assert client.post("/v1/event_append", json={"type": "note"}).status_code == 422
    assert taken == [True, False]


def test_the_operation_routes_are_matched_first(hub: LiveHub, client: httpx.Client) -> None:
    """The router tries its routes in order: `POST /v1/<op>` (most of a hub's traffic) comes
    before the pages and the dashboard's routes, and they still answer."""
    routes = hub.app.router.routes
    first = [getattr(r, "path", None) for r in routes[: len(operations.OPERATIONS)]]
    assert first == [f"/v1/{name}" for name in operations.OPERATIONS]
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/stats").status_code == 200
    assert client.post("/v1/event_append", json=EVENT).status_code == 200


def test_a_chunked_body_answers_the_same_both_ways(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Content-Length (the guard buffers it up to its limit): a plain one, a bad one."""
    for payload in (json.dumps({**EVENT, "idempotency_key": "chunked"}), '{"type": 1'):
        data = payload.encode()

        def chunks(data: bytes = data) -> Iterator[bytes]:
            yield data[:10]
            yield data[10:]

        fast = client.post(
            "/v1/event_append", content=chunks(), headers={"content-type": "application/json"}
        )
        with monkeypatch.context() as m:
            m.setattr(ops, "_plain_args", lambda *_args: None)
            full = client.post(
                "/v1/event_append", content=chunks(), headers={"content-type": "application/json"}
            )
        assert "content-length" not in fast.request.headers
        _same(fast, full)


def test_a_domain_error_names_its_field_both_ways(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The core's validation answers on the short path as through FastAPI's handler."""
    for path, body, headers in (
        ("/v1/event_append", {**EVENT, "idempotency_key": None, "type": ""}, {}),
        ("/v1/event_list", {"limit": 10**9}, {}),
        ("/v1/event_list", {}, {"X-Logstream-Delivery": "no such path"}),
    ):
        fast, full = _both(client, monkeypatch, path, json=body, headers=headers)
        assert fast.status_code == 422, fast.text
        assert fast.json()["field"], fast.text
        _same(fast, full)


def test_the_guard_runs_before_the_short_path(client: httpx.Client) -> None:
    """A refused request never reaches the short path, and its answer is the guard's."""
    resp = client.post("/v1/event_append", json=EVENT, headers={"Host": "evil.example"})
    assert resp.status_code == 403
    assert resp.json()["field"] == "Host"
    assert resp.headers["x-frame-options"] == "DENY"


def test_event_wait_is_left_to_fastapis_handler(
    hub: LiveHub, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`event_wait` watches its client for a disconnect: it never takes the short path."""
    seen: list[object] = []
    real = ops._plain_args

    def spy(*args: Any) -> dict[str, Any] | None:
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(ops, "_plain_args", spy)
    resp = client.post("/v1/event_wait", json={"stream": "none-here", "timeout_ms": 0})
    assert resp.status_code == 200, resp.text
    assert resp.json()["timed_out"] is True
    assert seen == []
    assert "/v1/event_wait" not in ops.PlainPosts(hub.store).routes
