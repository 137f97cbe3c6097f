"""`logstream serve` starts without the MCP SDK (issue 25: ready in ≤ 1.5 s): the hub's /mcp
endpoint is built in a worker thread once the hub serves (`mcp_server/late.py`); a request at
/mcp that comes first waits for it; a build that fails answers /mcp 500 and the hub serves on.

The hub tests (tests/hubkit.py) all mount the endpoint this way, over a real uvicorn server."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

from bench.bench_cli import INIT
from mempalace_logstream import LogStore
from mempalace_logstream.http import HubSettings
from mempalace_logstream.mcp_server.late import LateEndpoint
from tests.hubkit import LiveHub
from tests.leankit import modules_after

WAIT_S = 30.0
# A fresh interpreter makes the hub's app as `logstream serve` does, SQLite log, and reports the
# modules it then holds: neither the SDK nor psycopg (a SQLite hub shares no presence table).
BUILD_HUB_APP = """
import sys
from mempalace_logstream import sync
from mempalace_logstream.cli import hub
from mempalace_logstream.cli.shared import open_store
from mempalace_logstream.http import HubSettings
store = open_store({db!r}, None, create=True)
loop = sync.SyncLoop(store, {palace!r}, interval_s=0)
app = hub._hub_app(store, HubSettings(), loop, False, 15.0)
assert any(getattr(r, "path", None) == "/mcp" for r in app.router.routes)
store.close()
"""
NOT_AT_START = ("mcp", "mcp.types", "psycopg", "mempalace_logstream.mcp_server.endpoint")


def test_the_hub_app_is_made_without_the_mcp_sdk_or_psycopg(tmp_path: Path) -> None:
    code = BUILD_HUB_APP.format(db=str(tmp_path / "log.sqlite3"), palace=str(tmp_path))
    loaded = set(modules_after(code))
    assert "fastapi" in loaded and "mempalace_logstream.mcp_server.late" in loaded
    assert loaded.isdisjoint(NOT_AT_START), loaded & set(NOT_AT_START)


def test_mcp_on_a_started_hub_loads_the_sdk_and_answers(tmp_path: Path) -> None:
    store = LogStore.open(f"sqlite:///{tmp_path / 'log.sqlite3'}", create=True)
    hub = LiveHub(store, HubSettings())
    hub.start()
    try:
        resp = httpx.post(
            hub.url + "/mcp",
            json=INIT,
            headers={"accept": "application/json, text/event-stream"},
            timeout=WAIT_S,
        )
        assert resp.status_code == 200, resp.text
        assert "mempalace-logstream" in resp.text  # the server's name in its answer
        assert hub.app.state.mounts[0].app.inner is not None
        health = httpx.get(hub.url + "/healthz", timeout=WAIT_S).json()
        assert health["ok"] is True and health["mcp"] == "ready"
    finally:
        hub.stop()
        store.close()


class _Recorder:
    """An ASGI app that answers 204 and counts its calls (the built endpoint's stand-in)."""

    def __init__(self) -> None:
        self.calls = 0
        self.drained = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def drain(self) -> None:
        self.drained = True


async def _request(app: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": "/mcp"}, receive, send)
    return sent


def test_a_request_before_the_build_waits_for_it_then_reaches_the_endpoint() -> None:
    release = threading.Event()
    inner = _Recorder()
    lifespans: list[str] = []

    def build() -> Any:
        assert release.wait(WAIT_S)  # the SDK still importing
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def lifespan() -> Any:
            lifespans.append("in")
            yield
            lifespans.append("out")

        return inner, lifespan

    late = LateEndpoint(build)

    async def main() -> list[dict[str, Any]]:
        with anyio.fail_after(WAIT_S):
            async with late.lifespan():
                async with anyio.create_task_group() as tg:
                    answers: list[list[dict[str, Any]]] = []

                    async def ask() -> None:
                        answers.append(await _request(late))

                    tg.start_soon(ask)
                    await anyio.wait_all_tasks_blocked()
                    assert answers == [] and inner.calls == 0  # waiting on the build
                    assert late.state == "starting"
                    await anyio.to_thread.run_sync(release.set)
                assert late.state == "ready"
                await late.drain()
            return answers[0]

    sent = anyio.run(main)
    assert sent[0]["status"] == 204 and inner.calls == 1
    assert inner.drained and lifespans == ["in", "out"]  # its lifespan ran and ended


def test_a_build_that_fails_answers_500_with_what_failed() -> None:
    def build() -> Any:
        raise ImportError("no SDK here")

    late = LateEndpoint(build)

    async def main() -> list[dict[str, Any]]:
        with anyio.fail_after(WAIT_S):
            async with late.lifespan():
                sent = await _request(late)
                assert late.state == "failed"
                await late.drain()  # nothing built, nothing to drain
                return sent

    sent = anyio.run(main)
    assert sent[0]["status"] == 500
    body = json.loads(sent[1]["body"])
    assert body["field"] is None
    assert body["error"].startswith("the MCP endpoint could not start (ImportError: ")
    assert "no SDK here" in body["error"]


def test_an_endpoint_whose_lifespan_fails_answers_500_and_the_lifespan_goes_on() -> None:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan() -> Any:
        raise RuntimeError("session manager refused")
        yield

    late = LateEndpoint(lambda: (_Recorder(), lifespan))

    async def main() -> list[dict[str, Any]]:
        with anyio.fail_after(WAIT_S):
            async with late.lifespan():  # the hub's lifespan is not ended by the failure
                sent = await _request(late)
                assert late.state == "failed"
                return sent

    sent = anyio.run(main)
    assert sent[0]["status"] == 500
    assert "RuntimeError: session manager refused" in json.loads(sent[1]["body"])["error"]
