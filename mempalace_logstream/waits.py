"""The blocked `event_wait`s of an async server (the hub, `logstream mcp`): one read per
wake-up for all of them, a cap, and nothing left behind by a caller that went away.

A wait first reads with its own filters (`aio.event_wait`): matches already there are answered
at once. With nothing to answer, it joins its store's `WaitRoom` for the running event loop.
One task per room sleeps on the store's notifier; each wake-up reads the new rows once,
unfiltered, after the oldest cursor in the room, and hands each waiter the rows its filters
match (`ReadRequest` rules in Python, as the SSE feed does). A commit so costs one read, however
many waits are open (RFC 0002). A blocked wait holds a slot of its store's cap
(`Waits.max_waits`); past it, `BusyError` (HTTP 503 + Retry-After). A waiter cancelled (its
HTTP client disconnected, its MCP call was cancelled) leaves the room at once. A server that
stops (`Waits.stop`) answers every blocked wait at once with `BusyError("hub is stopping")`,
and every later one too, until `resume`.
Must not import fastapi, mcp, typer or httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from mempalace_logstream import errors, notify
from mempalace_logstream.models import Event, Page
from mempalace_logstream.store import LogStore, ReadRequest

DEFAULT_MAX_WAITS = 512
RETRY_AFTER_S = 5
STOP_RETRY_AFTER_S = 1  # a stopping hub: try again soon (a restart takes about a second)
ROOM_BATCH = 500  # rows per shared read; a longer burst is read in several
STOPPING = "hub is stopping"
T = TypeVar("T")


def stopping_error() -> errors.BusyError:
    """What every wait answers while its server stops: HTTP 503 `{"error": "hub is stopping",
    "field": null}` with `Retry-After`, an error result over MCP."""
    return errors.BusyError(STOPPING, retry_after_s=STOP_RETRY_AFTER_S)


def busy_message(limit: int) -> str:
    return (
        f"too many open waits: at most {limit} event_wait calls may block at once here "
        f"(logstream serve --wait-max-clients); retry in {RETRY_AFTER_S} s"
    )


class Waits:
    """The cap and the rooms of one store (`of(store)`): one room per event loop."""

    def __init__(self, max_waits: int = DEFAULT_MAX_WAITS) -> None:
        self.max_waits = max_waits
        self.reads = 0  # shared reads made by the rooms (read by tests)
        self.stopping = False  # the server stops: every wait answers `stopping_error()`
        self._lock = threading.Lock()  # rooms of loops in different threads share the count
        self._open = 0
        self._rooms: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WaitRoom] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def open(self) -> int:
        """Waits blocked right now, in every room."""
        return self._open

    async def block(
        self, store: LogStore, req: ReadRequest, page: Page, seen: int, deadline: float
    ) -> Page:
        """`WaitRoom.wait` in this loop's room, holding a slot of the cap while it blocks.
        Raises BusyError at the cap, and while the server stops."""
        with self._lock:
            if self.stopping:
                raise stopping_error()
            if self._open >= self.max_waits:
                raise errors.BusyError(busy_message(self.max_waits), retry_after_s=RETRY_AFTER_S)
            self._open += 1
        try:
            loop = asyncio.get_running_loop()
            room = self._rooms.get(loop)
            if room is None:
                room = self._rooms[loop] = WaitRoom(self)
            return await room.wait(store, req, page, seen, deadline)
        finally:
            with self._lock:
                self._open -= 1

    def stop(self) -> int:
        """The server stops: every blocked wait (in every room) answers `stopping_error()` at
        once, and so does every wait begun from now on. Returns how many were blocked. Safe
        from any thread: a room of another event loop is answered on its own loop."""
        with self._lock:
            self.stopping = True
            blocked = self._open
            rooms = list(self._rooms.items())
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for loop, room in rooms:
            if loop is here:
                room.fail(stopping_error)
            else:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(room.fail, stopping_error)
        return blocked

    def resume(self) -> None:
        """Serve waits again (a server started anew on the same store)."""
        with self._lock:
            self.stopping = False


# Keyed weakly by store; a Waits never refers to its store (a room's reader task holds it
# only while it runs), so a closed store's entry goes with it.
_WAITS: weakref.WeakKeyDictionary[LogStore, Waits] = weakref.WeakKeyDictionary()
_WAITS_LOCK = threading.Lock()


def of(store: LogStore) -> Waits:
    """The blocked waits of `store` in this process (made on first use)."""
    with _WAITS_LOCK:
        found = _WAITS.get(store)
        if found is None:
            found = _WAITS[store] = Waits()
        return found


class _Waiter:
    """One blocked wait: its request, the cursor it has passed (the newest row examined: its
    id and seq) and the future its answer goes to."""

    __slots__ = ("req", "page", "cursor", "scanned", "answer")

    def __init__(self, req: ReadRequest, page: Page, answer: asyncio.Future[Page]) -> None:
        self.req, self.page, self.answer = req, page, answer
        self.cursor, self.scanned = page.cursor, page.scanned_seq

    def timed_out(self) -> Page:
        return self.page.replace(cursor=self.cursor, scanned_seq=self.scanned, timed_out=True)


class WaitRoom:
    """The blocked waits of one store on one event loop, and the task that reads for them."""

    def __init__(self, waits: Waits) -> None:
        self._waits = waits
        self._waiters: dict[_Waiter, None] = {}  # insertion-ordered set
        self._poke = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def wait(
        self, store: LogStore, req: ReadRequest, page: Page, seen: int, deadline: float
    ) -> Page:
        """The answer for `req` once rows match after `page` (an empty first read of `req`
        begun at notifier version `seen`), or at `deadline` (time.monotonic) `page` with its
        cursor moved on over the rows that did not match, `timed_out`."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(req, page, loop.create_future())
        if self._reader is None or self._reader.done():
            self._poke.clear()  # a poke left by the last reader's leavers is not for this one
            self._reader = loop.create_task(self._serve(store, seen))
        self._waiters[waiter] = None
        if store.notifier.version != seen:
            # Something committed since the first read began: the reader may have read past
            # it already, without this waiter. Make it read once more.
            self._poke.set()
        try:
            remaining = deadline - time.monotonic()
            await asyncio.wait({waiter.answer}, timeout=max(0.0, remaining))
            if waiter.answer.done():
                return waiter.answer.result()
            return waiter.timed_out()
        finally:
            self._leave(waiter)

    def fail(self, error: Callable[[], Exception]) -> None:
        """Answer every waiter of the room with an error (each its own instance)."""
        for waiter in self._waiters:
            if not waiter.answer.done():
                waiter.answer.set_exception(error())

    def _leave(self, waiter: _Waiter) -> None:
        self._waiters.pop(waiter, None)
        if not waiter.answer.done():
            waiter.answer.cancel()
        elif not waiter.answer.cancelled():
            waiter.answer.exception()  # retrieved: a failure nobody awaits is not logged
        if not self._waiters:
            self._poke.set()  # the reader exits now, not at its next fallback check

    async def _serve(self, store: LogStore, seen: int) -> None:
        """Read for the room until it is empty: once per wake-up, after the oldest cursor.
        It starts asleep: the first waiter has just read (a commit since then poked it)."""
        every = store.read_request(limit=ROOM_BATCH, order="asc")
        while self._waiters:
            await self._sleep(store, seen)
            if not self._waiters:
                return
            self._poke.clear()
            seen = store.notifier.version
            lo = min(w.scanned for w in self._waiters)
            try:
                page = await anyio.to_thread.run_sync(store.read, every, lo)
            except Exception as exc:  # the database failed: every waiter gets the error
                for waiter in self._waiters:
                    if not waiter.answer.done():
                        waiter.answer.set_exception(exc)
                return
            self._waits.reads += 1
            answered = [w for w in self._waiters if self._offer(w, page, lo)]
            for waiter in answered:  # out of the room now, before their tasks resume
                del self._waiters[waiter]
            if page.has_more:  # a burst longer than one read: read on at once
                self._poke.set()

    def _offer(self, waiter: _Waiter, page: Page, lo: int) -> bool:
        """Answer `waiter` with the rows of `page` (read after `lo`) that it waits for (True),
        or move its cursor past them. A waiter that joined after the read began, behind `lo`,
        is left for the next read (its join poked the reader)."""
        after = waiter.scanned
        if waiter.answer.done() or after < lo or page.scanned_seq <= after:
            return False
        req = waiter.req
        hits = [e for e in page.events if e.seq > after and matches(req, e)]
        if not hits:
            waiter.cursor, waiter.scanned = page.cursor, page.scanned_seq
            return False
        waiter.answer.set_result(answer(req, hits, page))
        return True

    async def _sleep(self, store: LogStore, seen: int) -> None:
        """Until a commit (the notifier moves past `seen`), a poke, or the fallback check."""
        if store.notifier.version != seen or self._poke.is_set() or not self._waiters:
            return
        poked = asyncio.ensure_future(self._poke.wait())
        bumped = asyncio.ensure_future(store.notifier.wait_async(seen, notify.FALLBACK_CHECK_S))
        try:
            await asyncio.wait({poked, bumped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            poked.cancel()
            bumped.cancel()


def matches(req: ReadRequest, event: Event) -> bool:
    """The page's SQL rules in Python: the filters and the `since_created_at` window."""
    if req.since_created_at and event.created_at < req.since_created_at:
        return False
    return req.filters.matches(event)


def answer(req: ReadRequest, hits: list[Event], page: Page) -> Page:
    """A wait's answer from the matching rows of a shared page: at most `limit` of them; the
    cursor is the newest row examined (the last one returned when the answer is cut)."""
    events = hits[: req.limit]
    cursor: str | None
    if len(hits) > req.limit:
        cursor, scanned, more = events[-1].id, events[-1].seq, True
    else:
        cursor, scanned, more = page.cursor, page.scanned_seq, page.has_more
    return Page(
        events=tuple(events),
        cursor=cursor,
        has_more=more,
        note=req.note,
        scanned_seq=scanned,
        preview=req.preview,
        slim=req.slim,
    )


async def unless_gone(
    work: Callable[[], Awaitable[T]], gone: Callable[[], Awaitable[Any]]
) -> tuple[bool, T | None]:
    """Run `work()` until it ends or `gone()` returns (the caller went away), whichever is
    first: (True, its result), or (False, None) after cancelling it. Its errors propagate."""
    outcome: list[T] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await gone()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            outcome.append(await work())
        except Exception as exc:  # re-raised below, outside the task group (no group wrap)
            failed.append(exc)
        tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
    return (True, outcome[0]) if outcome else (False, None)
