"""A bridge: one log, one NATS server, the publisher and the consumer side by side.

`run_bridge` is what `logstream bridge nats` runs (until a signal); `BridgeThread` runs one
beside something else (the hub of `logstream serve --nats`, a test): its own asyncio loop in
a daemon thread, started once the connect checks passed (or raising their refusal).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable

from mempalace_logstream.natsbridge.consumer import Consumer, Tally
from mempalace_logstream.natsbridge.publisher import Publisher
from mempalace_logstream.natsbridge.setup import BridgeConfig, Link, connect
from mempalace_logstream.store import LogStore


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Bridge:
    """The two halves over one checked connection."""

    def __init__(
        self,
        store: LogStore,
        cfg: BridgeConfig,
        say: Callable[[str], None] = _stderr,
        leads: Callable[[], bool] | None = None,
    ) -> None:
        self.store, self.cfg, self.say, self.leads = store, cfg, say, leads
        self.link: Link | None = None
        self.publisher: Publisher | None = None
        self.consumer: Consumer | None = None

    @property
    def tally(self) -> Tally:
        return self.consumer.tally if self.consumer is not None else Tally()

    @property
    def published(self) -> int:
        return self.publisher.published if self.publisher is not None else 0

    async def open(self) -> None:
        """Connect and check (raises BridgeRefused / PeerUnavailableError), bind both halves."""
        name = f"logstream bridge {self.store.replica_id}"
        self.link = await connect(self.cfg, self.say, name)
        self.publisher = Publisher(self.store, self.link, self.cfg, self.say, self.leads)
        self.consumer = Consumer(self.store, self.link, self.cfg, self.say)
        await self.publisher.load_position()
        await self.consumer.subscribe()

    async def serve(self, stop: asyncio.Event) -> None:
        """Run both halves until `stop` is set, then close the connection."""
        assert self.link is not None and self.publisher and self.consumer
        tasks = [
            asyncio.ensure_future(self.publisher.run(stop)),
            asyncio.ensure_future(self.consumer.run(stop)),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await self.link.close()


def run_bridge(store: LogStore, cfg: BridgeConfig, say: Callable[[str], None] = _stderr) -> None:
    """Connect, check, then bridge until SIGINT/SIGTERM (the CLI's foreground run)."""
    import signal

    async def main() -> None:
        bridge = Bridge(store, cfg, say)
        await bridge.open()
        after = bridge.publisher.position if bridge.publisher is not None else 0
        say(
            f"nats bridge: {store.replica_id} on {cfg.url} stream {cfg.stream} "
            f"(subjects {cfg.prefix}.>); publishing after origin_seq {after}"
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await bridge.serve(stop)
        say("nats bridge: stopped")

    asyncio.run(main())


class BridgeThread:
    """A bridge in a daemon thread with its own event loop."""

    def __init__(
        self,
        store: LogStore,
        cfg: BridgeConfig,
        say: Callable[[str], None] = _stderr,
        leads: Callable[[], bool] | None = None,
    ) -> None:
        """`leads`: whether this process leads its log now (several hubs on one PostgreSQL
        log: only the leader publishes); None publishes always."""
        self.bridge = Bridge(store, cfg, say, leads)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="nats-bridge", daemon=True)

    def start(self, timeout: float = 30.0) -> BridgeThread:
        """Start and wait until the checks passed; raises their refusal."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the NATS bridge did not connect within {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def _main(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            try:
                await self.bridge.open()
            except BaseException as exc:
                self._error = exc
                if self.bridge.link is not None:
                    await self.bridge.link.close()
                return
            finally:
                self._ready.set()
            await self.bridge.serve(self._stop)

        asyncio.run(main())
