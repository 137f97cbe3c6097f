"""A small round-robin TCP load balancer for the several-hubs tests (issue 23): each new
client connection goes to the next backend in rotation that accepts a connection (a dead
hub is skipped, as a load balancer's health check would), and bytes are piped both ways
until either side closes. Runs an asyncio loop in a daemon thread on a free loopback port;
`backends` may be changed while it runs (a hub taken in or out of rotation), and `served`
counts the connections each backend took."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter


class RoundRobinProxy:
    def __init__(self, backends: list[int]) -> None:
        self.backends = list(backends)  # ports on 127.0.0.1, in rotation order
        self.served: Counter[int] = Counter()
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="test-proxy", daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the proxy did not start"
        self.port = self._port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _port(self) -> int:
        """The port the started server listens on (asserted apart from `__init__`, whose
        attribute types mypy would otherwise not infer past `self._server`'s narrowing)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.backends)):
            ports = list(self.backends)
            if not ports:
                return None
            port = ports[self._next % len(ports)]
            self._next += 1
            with contextlib.suppress(OSError):
                pair = await asyncio.open_connection("127.0.0.1", port)
                self.served[port] += 1
                return pair
        return None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        with contextlib.suppress(asyncio.CancelledError):  # the proxy closing
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def close(self) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF or an error on either side, then close the writing side (the other
    direction sees its peer gone and ends too)."""
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()


class SseFollower:
    """An EventSource-like client of `/v1/stream` in a thread: on any break it reconnects
    (through the proxy: to another hub) with `Last-Event-ID`, and keeps the ids it received,
    in order; `reconnects` counts the breaks."""

    def __init__(self, url: str, since_event_id: str, **params: str) -> None:
        self.url, self.params = url, {"since_event_id": since_event_id, **params}
        self.ids: list[str] = []
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-sse", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import httpx

        last: str | None = None
        while not self._stop.is_set():
            headers = {"Last-Event-ID": last} if last else {}
            try:
                with httpx.stream(
                    "GET",
                    self.url + "/v1/stream",
                    params=self.params,
                    headers=headers,
                    timeout=httpx.Timeout(10, read=60),
                ) as resp:
                    if resp.status_code != 200:
                        raise httpx.HTTPError(f"status {resp.status_code}")
                    frame_id = None
                    for line in resp.iter_lines():
                        if self._stop.is_set():
                            return
                        if line.startswith("id:"):
                            frame_id = line[3:].strip()
                        elif line == "" and frame_id:
                            self.ids.append(frame_id)
                            last, frame_id = frame_id, None
            except httpx.HTTPError:
                pass
            if not self._stop.is_set():
                self.reconnects += 1
                self._stop.wait(0.1)  # an EventSource's retry delay

    def close(self) -> None:
        self._stop.set()
        self._thread.join(70)
