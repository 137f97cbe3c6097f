"""A real uvicorn hub on a free loopback port, for the hub tests (HTTP, SSE, MCP, auth, CLI)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from mempalace_logstream import LogStore, mcp_server
from mempalace_logstream.http import ExtraMount, HubSettings, create_app, listen_socket
from mempalace_logstream.http.server import HubServer
from mempalace_logstream.presence import Registry


class LiveHub:
    """uvicorn serving `create_app` in a thread; `url` is ready once `start()` returns."""

    def __init__(self, store: LogStore, settings: HubSettings, port: int = 0) -> None:
        self.store = store
        self.settings = settings
        self.presence = Registry()  # shared by the HTTP routes and the MCP tools, as in serve
        # As `logstream serve` mounts it: the SDK loads in a worker thread once the hub serves.
        mcp_app, lifespan = mcp_server.late_http_endpoint(store, presence=self.presence)
        mount = ExtraMount("/mcp", mcp_app, lifespan, drain=mcp_app.drain)
        self.app = create_app(store, settings, mounts=(mount,), presence=self.presence)
        self.sock = listen_socket("127.0.0.1", port)  # a port again: a restart
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app, log_level="warning", timeout_graceful_shutdown=1, lifespan="on"
        )
        self.server = HubServer(config, self.app)  # a stop answers the open waits at once
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self, timeout: float = 15.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the hub did not start")
            time.sleep(0.01)
        resp = httpx.get(self.url + "/healthz", timeout=timeout)
        assert resp.status_code == 200

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def headers(self) -> dict[str, str]:
        token = self.settings.token
        return {"Authorization": f"Bearer {token}"} if token else {}


@contextmanager
def live_hub(tmp_path: Path, **settings: Any) -> Iterator[LiveHub]:
    store = LogStore.open(str(tmp_path / "hub.sqlite3"))
    hub = LiveHub(store, HubSettings(**settings))
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()
        store.close()


def append(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"type": "note", "stream": "s", "room": "r", "from_agent": "a", **fields}
    resp = client.post("/v1/event_append", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["event"]
