"""The async edge shared by the hub's servers (HTTP/SSE and MCP over HTTP).

Core calls run in worker threads (`workers.run_sync`, anyio's rules without its per-call
cost); waits never hold a thread: a blocked
`event_wait` sits in its store's wait room (waits.py), whose one reader sleeps on the notifier.
`Feed` coalesces the tail reads of every live subscriber into one query per wake-up;
`PresenceQueue`, `with_presence` and `sweep_presence` carry the hub's presence frames beside the
log. Must not import fastapi,
mcp, typer or httpx.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, cast

from mempalace_logstream import delivery_hook, errors, notify, operations, presence, waits, workers
from mempalace_logstream import validation as v
from mempalace_logstream.models import Event, Page
from mempalace_logstream.store import LogStore, ReadRequest

FALLBACK_CHECK_S = notify.FALLBACK_CHECK_S
FEED_BATCH = 500
T = TypeVar("T")


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a sync core call in a worker thread."""
    return await workers.run_sync(functools.partial(fn, *args, **kwargs))


async def run_detached(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call (a hub client's long-poll) in a daemon thread that a cancelled
    caller leaves behind: cancelling returns at once, and the process may exit while the call
    is still in flight (a worker thread would hold both until the call ends)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, exc: Exception | None) -> None:
        if done.done():  # the caller was cancelled: nobody wants the answer
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(cast(T, result))

    def work() -> None:
        result: T | None = None
        exc: Exception | None = None
        try:
            result = fn(*args)
        except Exception as error:  # handed to the awaiting task, which raises it
            exc = error
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=work, name="logstream-call", daemon=True).start()
    return await done


async def call(store: LogStore, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """`operations.call` for async servers; `event_wait` sleeps on the notifier, not a thread."""
    clean = operations.check_args(name, args)
    if name == "event_wait":
        result = await event_wait(store, clean)
    else:
        result = await run(operations.OPERATIONS[name].handler, store, **clean)
    delivery_hook.after_call(store, name, clean, result)  # the delivery ledger's marks (queued)
    return result


async def event_wait(store: LogStore, args: dict[str, Any]) -> dict[str, Any]:
    """S-5.4 on the event loop: same validation, cursor and timeout rules as `store.event_wait`.

    The first read is the wait's own (filtered); with nothing to answer it blocks in its
    store's wait room (waits.py): one shared read per wake-up for every blocked wait, a cap
    (BusyError), and cancelling the call (its client went away) leaves the room at once.
    While its server stops, BusyError("hub is stopping")."""
    if waits.of(store).stopping:
        raise waits.stopping_error()
    clean = {k: val for k, val in args.items() if val is not None}
    timeout = v.timeout_ms(clean.pop("timeout_ms", None)) / 1000
    req = store.read_request(**clean)
    if req.order is None:
        req = req.replace(order="asc")
    deadline = time.monotonic() + timeout
    seen = store.notifier.version
    page = await run(store.read, req)
    if page.events:
        return page.to_wait_dict()
    if time.monotonic() >= deadline:
        return page.replace(timed_out=True).to_wait_dict()
    page = await waits.of(store).block(store, req, page, seen, deadline)
    return page.to_wait_dict()


async def wait_for_event(store: LogStore, event_id: str, timeout_s: float) -> bool:
    """True once `event_id` exists here (e.g. synced in late), False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = store.notifier.version
        try:
            await run(store.event_get, event_id)
            return True
        except errors.NotFoundError:
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        await store.notifier.wait_async(seen, min(remaining, FALLBACK_CHECK_S))


class Feed:
    """Shared tail reads: subscribers woken by one commit all read after the same seq, so they
    share one unfiltered query and filter in Python (`Filters.matches`), instead of N queries."""

    def __init__(self, store: LogStore) -> None:
        self._store = store
        self._req = store.read_request(limit=FEED_BATCH, order="asc")
        self._inflight: dict[int, asyncio.Future[Page]] = {}

    async def after(self, seq: int) -> Page:
        fut = self._inflight.get(seq)
        if fut is None:
            fut = asyncio.ensure_future(run(self._store.read, self._req, seq))
            self._inflight[seq] = fut
            fut.add_done_callback(functools.partial(self._forget, seq))
        # Shielded: one subscriber disconnecting must not cancel the read the others await.
        return await asyncio.shield(fut)

    def _forget(self, seq: int, _fut: asyncio.Future[Page]) -> None:
        self._inflight.pop(seq, None)


async def follow(
    store: LogStore,
    feed: Feed,
    req: ReadRequest,
    after_seq: int,
    stopped: Callable[[], bool] = lambda: False,
) -> AsyncIterator[list[Event]]:
    """Yield batches of matching events after `after_seq` in local append order, until
    `stopped()` says the server stops (checked at each wake-up: the stop bumps the notifier).

    Catch-up reads use the filtered query (a selective reader skips a backlog cheaply); at the
    tip the subscriber joins the shared `Feed`. The cursor passes filtered-out rows.
    """
    seq = after_seq
    catch_up = req.replace(limit=FEED_BATCH, order="asc")
    while not stopped():
        page = await run(store.read, catch_up, seq)
        seq = page.scanned_seq
        if page.events:
            yield list(page.events)
        if not page.has_more:
            break
    while not stopped():
        seen = store.notifier.version
        page = await feed.after(seq)
        seq = page.scanned_seq
        matched = [e for e in page.events if req.filters.matches(e)]
        if matched:
            yield matched
        if not page.has_more:
            await store.notifier.wait_async(seen, FALLBACK_CHECK_S)


# ----------------------------------------------------------------------------- presence
# Presence frames (S-8.4) beside the log on one SSE stream. A subscriber holds at most `limit`
# frames, the latest per agent (older changes of an agent are coalesced into its newest; past
# `limit` agents the oldest are dropped), so a slow client costs bounded memory: its log frames
# are pulled only as fast as it reads, and its presence frames wait here.
PRESENCE_SWEEP_MAX_S = 1.0


class PresenceQueue:
    """One subscriber's pending presence frames (public fields, `event` key dropped)."""

    def __init__(self, registry: presence.Registry, limit: int) -> None:
        self.limit = max(1, limit)
        self.dropped = 0  # frames lost past `limit` (not counting coalesced ones)
        self.high_water = 0  # the most frames ever pending at once (tests check the bound)
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._lock = threading.Lock()
        self._pending: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._scheduled = False
        self._unsubscribe = registry.subscribe(self._put, snapshot=True)

    def _put(self, frame: dict[str, Any]) -> None:
        """The registry's listener (any thread, under its lock): queue, coalesce, wake."""
        data = {k: val for k, val in frame.items() if k != "event"}
        with self._lock:
            self._pending.pop(data["agent"], None)
            self._pending[data["agent"]] = data
            while len(self._pending) > self.limit:
                self._pending.popitem(last=False)
                self.dropped += 1
            self.high_water = max(self.high_water, len(self._pending))
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody will read it
            self._loop.call_soon_threadsafe(self._wake.set)

    def take(self) -> list[dict[str, Any]]:
        """Every pending frame, oldest first; the queue is empty after."""
        with self._lock:
            self._wake.clear()
            self._scheduled = False
            out = list(self._pending.values())
            self._pending.clear()
        return out

    async def wait(self) -> None:
        await self._wake.wait()

    def close(self) -> None:
        self._unsubscribe()


async def with_presence(
    batches: AsyncIterator[list[Event]], queue: PresenceQueue
) -> AsyncIterator[tuple[list[Event], list[dict[str, Any]]]]:
    """Merge a `follow` with a presence queue: yields (events, presence frames), either may be
    empty. The next batch is read only after the previous one was consumed (back-pressure)."""
    it = aiter(batches)
    batch: asyncio.Future[list[Event]] = asyncio.ensure_future(anext(it))
    woken: asyncio.Future[None] | None = None
    try:
        while True:
            woken = asyncio.ensure_future(queue.wait())
            pending: set[asyncio.Future[Any]] = {batch, woken}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            events: list[Event] = []
            if batch.done():
                try:
                    events = batch.result()
                except StopAsyncIteration:  # the follower ended (the server stops)
                    return
                batch = asyncio.ensure_future(anext(it))
            if not woken.done():
                woken.cancel()
            yield events, queue.take()
    finally:
        if woken is not None:
            woken.cancel()
        aclose = getattr(it, "aclose", None)
        if batch.done() and aclose is not None:  # the follower sits at a yield: close it now
            with contextlib.suppress(Exception):
                await aclose()
        else:  # cancelling the read finalizes the follower inside its task
            batch.cancel()


async def sweep_presence(
    registry: presence.Registry, max_sleep_s: float = PRESENCE_SWEEP_MAX_S
) -> None:
    """Expire entries as their TTLs pass (listeners hear `expire` within ~`max_sleep_s`),
    without anyone listing; wakes early when an announcement may move the next expiry. Runs
    until cancelled (the hub's lifespan)."""
    wake = asyncio.Event()
    loop = asyncio.get_running_loop()

    def changed(frame: dict[str, Any]) -> None:
        if frame["event"] == "announce":
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

    unsubscribe = registry.subscribe(changed)
    try:
        while True:
            wake.clear()
            registry.sweep()
            due = registry.next_expiry_ms()
            delay = max_sleep_s
            if due is not None:
                delay = min(max_sleep_s, max(0.001, (due - registry.now_ms()) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)
    finally:
        unsubscribe()
