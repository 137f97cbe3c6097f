"""`POST /v1/<op>`'s short path (http/ops.py `OpRoute`) answers exactly what FastAPI's own
handler answers: the same status, content type and bytes, for plain requests and for every
request it hands over (no or another content type, bad JSON, a non-object, unknown or missing
parameters). Each request is sent twice to one live hub, once with the short path off."""

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

        async def never(*_args: Any) -> None:
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

    async def spy(*args: Any) -> dict[str, Any] | None:
        got = await real(*args)
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
