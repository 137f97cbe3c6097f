"""The live feed (S-6.3): SSE at `/v1/stream` and `/logstream/stream`.

Frames: `id:` the event id, `event: logstream`, `data:` the event's JSON. A stream resumes
after `Last-Event-ID` (a reconnecting EventSource) or else `since_event_id`; without either it
tails from now. With `presence=1` it also carries the hub's presence (S-8.4): `event: presence`,
`data:` `{agent, state, task_id, note, announced_at, expires_at}` (state `gone` when an entry
is left or expires), no `id:` (not part of the resumable log); first one frame per entry present
at connect, then every change. A slow client's presence frames are coalesced per agent and
bounded (`HubSettings.sse_presence_backlog`). Parameters are checked and the first read done
before any header is sent, so an error is a plain 400 and never a half-open stream. At the
client cap: 503 + Retry-After. When the hub stops, every stream ends with a `: hub is
stopping` comment and a clean end of stream (an EventSource reconnects with Last-Event-ID).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mempalace_logstream import aio, deliveries, delivery_hook, errors
from mempalace_logstream import validation as v
from mempalace_logstream.http.params import query_args, query_docs
from mempalace_logstream.http.responses import error_response
from mempalace_logstream.http.settings import HubSettings
from mempalace_logstream.models import Event, Page
from mempalace_logstream.store import LogStore, ReadRequest

SSE_PARAMS = (*v.FILTER_FIELDS, "from_agent", "since_event_id", "preview", "slim", "presence")
STREAM_PATHS = ("/logstream/stream", "/v1/stream")

# Our ids and the reference's: a Last-Event-ID of this shape may be an event that has not
# synced to this hub yet, so the stream waits for it (bounded, S-5.2); any other unknown value
# can never arrive and is refused at once.
_EVENT_ID_SHAPE = re.compile(r"^evt_\d{8}T\d{6}_[0-9a-f]{12,}$")
# The last frame of a stream the hub ends because it stops (`app.stop_serving`).
_STOPPING = ServerSentEvent(comment="hub is stopping", sep="\n")


def add_sse_routes(app: FastAPI) -> None:
    """The stream at both paths; only `/v1/stream` is in the OpenAPI document."""
    app.state.sse_clients = 0
    app.state.sse_presence = set()  # the presence queues of the open streams (bounded each)
    stream_doc = {"description": "text/event-stream", "content": {"text/event-stream": {}}}
    docs = {**query_docs(SSE_PARAMS), "responses": {"200": stream_doc}}
    for path in STREAM_PATHS:
        in_schema = path == "/v1/stream"
        app.get(path, tags=["stream"], openapi_extra=docs, include_in_schema=in_schema)(stream)


class _SlotResponse(EventSourceResponse):
    """Releases its client slot however the stream ends (even before the body starts)."""

    def __init__(self, *args: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def stream(request: Request) -> Any:
    """Live feed (S-6.3): `id:` event id, `event: logstream`, `data:` event JSON.

    Resumes after `Last-Event-ID` (a reconnecting EventSource) or else `since_event_id`;
    without either, tails from now. Errors answer 400 before the stream opens; at the
    client cap, 503 + Retry-After.
    """
    state = request.app.state
    store: LogStore = state.store
    settings: HubSettings = state.settings
    # The slot is taken before the first await: clients connecting at once cannot all
    # pass the check while each waits for its first read.
    if state.sse_clients >= settings.sse_max_clients:
        return error_response(
            503,
            f"the hub serves at most {settings.sse_max_clients} SSE clients; retry later "
            "or long-poll event_wait",
            None,
            {"Retry-After": "5"},
        )
    state.sse_clients += 1
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            state.sse_clients -= 1

    try:
        req, first, with_presence = await _open_stream(request, store, settings)
    except errors.LogstreamError as exc:
        release()
        return error_response(400, exc.message, getattr(exc, "field", None))
    except BaseException:
        release()
        raise
    return _SlotResponse(
        _frames(store, state, req, first, with_presence, _pusher(store, request)),
        release=release,
        ping=settings.ping_interval_s,
        ping_message_factory=lambda: ServerSentEvent(comment="ping", sep="\n"),
        sep="\n",
        headers={"Cache-Control": "no-cache"},
    )


def _last_event_id(request: Request) -> str | None:
    """The Last-Event-ID header, validated; None when absent or empty."""
    raw = request.headers.get("last-event-id")
    if raw is None or not raw.strip():
        return None
    return v.remote_id("Last-Event-ID", raw.strip())


async def _open_stream(
    request: Request, store: LogStore, settings: HubSettings
) -> tuple[ReadRequest, Page, bool]:
    """Validate and run the first read before any header is sent (never a half-open stream).

    `Last-Event-ID` wins over `since_event_id`: a browser EventSource reconnects to the URL it
    was opened with (often `since_event_id=tip`) and says where it stopped in the header.
    """
    args = query_args(request, SSE_PARAMS, v.FILTER_FIELDS)
    with_presence = v.boolean("presence", args.pop("presence", None))
    path = deliveries.check_path(request.headers.get(deliveries.DELIVERY_HEADER)) or "sse"
    request.state.delivery = (delivery_hook.reader(args), path)
    header = _last_event_id(request)
    if header is not None:
        args["since_event_id"] = header
    elif not args.get("since_event_id"):
        args["since_event_id"] = "tip"
    req = store.read_request(**args)
    catch_up = req.replace(limit=aio.FEED_BATCH, order="asc")
    try:
        first: Page = await aio.run(store.read, catch_up)
    except errors.NotFoundError:
        if header is None:
            raise
        waited = _EVENT_ID_SHAPE.match(header) is not None
        if not waited or not await aio.wait_for_event(store, header, settings.resume_wait_s):
            after = f" (waited {settings.resume_wait_s:g} s for it to sync in)" if waited else ""
            raise errors.NotFoundError(
                f"Last-Event-ID {header!r} is not an event of this hub{after}; reconnect "
                "without it to tail from now",
                field="Last-Event-ID",
                ident=header,
            ) from None
        first = await aio.run(store.read, catch_up)
    return req, first, with_presence


Pushed = Callable[[list[Event]], None]


def _pusher(store: LogStore, request: Request) -> Pushed:
    """What marks the events a stream sent as pushed to its agent (the delivery ledger),
    when the stream names one (from_agent, a single to_agent, an agent token)."""
    agent, path = request.state.delivery
    ledger = deliveries.of(store)
    if agent is None or ledger is None or path == deliveries.OBSERVER:
        return lambda _events: None
    return lambda events: ledger.pushed(events, agent, path) if events else None


async def _frames(
    store: LogStore,
    state: Any,
    req: ReadRequest,
    first: Page,
    with_presence: bool,
    pushed: Pushed,
) -> AsyncIterator[ServerSentEvent]:
    settings: HubSettings = state.settings
    yield ServerSentEvent(comment="connected", retry=settings.retry_ms, sep="\n")
    batches = aio.follow(store, state.feed, req, first.scanned_seq, lambda: state.stopping)
    if not with_presence:
        pushed(list(first.events))  # marked as the frames are handed out
        for event in first.events:
            yield _frame(event, req)
        async for batch in batches:
            pushed(batch)
            for event in batch:
                yield _frame(event, req)
        yield _STOPPING  # the hub stops: a clean end of stream (the client reconnects)
        return
    # Subscribed (with the snapshot) only once the body starts: a response that never
    # starts leaves no listener behind.
    queue = aio.PresenceQueue(state.presence, settings.sse_presence_backlog)
    state.sse_presence.add(queue)
    try:
        for data in queue.take():
            yield _presence_frame(data)
        pushed(list(first.events))
        for event in first.events:
            yield _frame(event, req)
        async for events, frames in aio.with_presence(batches, queue):
            for data in frames:
                yield _presence_frame(data)
            pushed(events)
            for event in events:
                yield _frame(event, req)
        yield _STOPPING
    finally:
        queue.close()
        state.sse_presence.discard(queue)


def _presence_frame(data: dict[str, Any]) -> ServerSentEvent:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=text, event="presence", sep="\n")


def _frame(event: Event, req: ReadRequest) -> ServerSentEvent:
    data = _frame_data(event, req.preview, req.slim)
    return ServerSentEvent(data=data, id=event.id, event="logstream", sep="\n")


# An event's `data:` JSON per (preview, slim), built once for all the subscribers one commit
# wakes: they share the Feed page's Event objects. Weak keys: an entry lives only while some
# subscriber still holds the event, so memory stays bounded by the pages in flight.
_FRAME_DATA: weakref.WeakKeyDictionary[Event, dict[tuple[bool, bool], str]] = (
    weakref.WeakKeyDictionary()
)


def _frame_data(event: Event, preview: bool, slim: bool) -> str:
    built = _FRAME_DATA.get(event)
    if built is None:
        built = _FRAME_DATA[event] = {}
    data = built.get((preview, slim))
    if data is None:
        data = built[(preview, slim)] = json.dumps(
            event.to_dict(preview=preview, slim=slim), ensure_ascii=False, separators=(",", ":")
        )
    return data
