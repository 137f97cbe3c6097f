"""MCP resources over the log, and `resources/subscribe` (S-8.8), for every spec-following client.

    logstream://inbox/{agent}            the newest 50 events to `agent` (or to *)
    logstream://task/{task_id}           a task's thread, oldest first (up to 500 events)
    logstream://events{?stream,room,…}   the newest 50 events matching the filters

A client that subscribes to one of these URIs gets `notifications/resources/updated` with that
URI whenever an event it would now list is appended: in the handshake era (2025-11-25) after
`resources/subscribe`, in 2026-07-28 on a `subscriptions/listen` stream whose
`resourceSubscriptions` name it (over stdio or streamable HTTP alike). One follower per server
wakes on the log's own wake-ups (`event_wait`), and runs only while someone is subscribed.

The follower's cursor is taken at the log's tip when the first subscription is answered, and
kept in memory: a hub that goes away (`--hub`) is tried again with capped backoff, one line
says it is lost and one that it is back, and the follower goes on from its cursor, so every
change made meanwhile is signalled once the hub answers again (no lost update).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from mcp.types import (
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)

from mempalace_logstream import backoff, deliveries, display, errors
from mempalace_logstream import validation as v
from mempalace_logstream.models import Event
from mempalace_logstream.store import Filters

if TYPE_CHECKING:
    from mempalace_logstream.mcp_server.server import LogstreamMCP

INBOX = "logstream://inbox/{agent}"
TASK = "logstream://task/{task_id}"
EVENTS = "logstream://events{?" + ",".join(v.FILTER_FIELDS) + "}"
INVALID_PARAMS = -32602
MAX_SUBSCRIPTIONS = 1_000  # per server: bounded memory against a client that never stops
POLL_TIMEOUT_MS = 60_000
_log = logging.getLogger(__name__)
_TEMPLATES = {name: UriTemplate.parse(t) for name, t in (("inbox", INBOX), ("task", TASK))}
_TEMPLATES["events"] = UriTemplate.parse(EVENTS)


def _dump(result: dict[str, Any]) -> str:
    """JSON a model reads: the same value, with `<`, `>`, `&` and hidden characters written
    as \\u escapes (S-8.11)."""
    return display.json_text(result, markup=True)


async def inbox(agent: str, ctx: Context) -> str:
    """Your inbox: the newest 50 events addressed to you (or to *), as JSON {events, cursor}.
    Subscribe to be told when new mail arrives."""
    return _dump(await _server(ctx).run_op("event_list", {"to_agent": agent, "limit": 50}))


async def task(task_id: str, ctx: Context) -> str:
    """A task's thread (its correlation id), oldest first, up to 500 events, as JSON."""
    args = {"correlation_id": task_id, "order": "asc", "limit": v.MAX_LIST_LIMIT}
    return _dump(await _server(ctx).run_op("event_list", args))


async def events(
    ctx: Context,
    stream: str | None = None,
    room: str | None = None,
    topic: str | None = None,
    type: str | None = None,
    to_agent: str | None = None,
    writer: str | None = None,
    exclude_writer: str | None = None,
    correlation_id: str | None = None,
    status: str | None = None,
) -> str:
    """The newest 50 events matching the filters (comma-separated values mean any of them)."""
    args = {k: _values(val) for k, val in locals().items() if k != "ctx" and val is not None}
    return _dump(await _server(ctx).run_op("event_list", {**args, "limit": 50}))


def _values(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list) else str(raw).split(",")
    return [item for item in items if item != ""] or [""]


def _server(ctx: Context) -> LogstreamMCP:
    from mempalace_logstream.mcp_server.server import LogstreamMCP

    server = ctx.mcp_server
    assert isinstance(server, LogstreamMCP)
    return server


def filters_for(uri: str) -> Filters:
    """What an event must match to change the resource at `uri`; ValidationError otherwise."""
    for kind, template in _TEMPLATES.items():
        params = template.match(uri)
        if params is None:
            continue
        if kind == "inbox":
            return Filters.parse(to_agent=[params["agent"]])
        if kind == "task":
            return Filters.parse(correlation_id=[params["task_id"]])
        return Filters.parse(**{k: _values(val) for k, val in params.items()})
    raise errors.ValidationError(f"{uri!r} is not a logstream resource", field="uri")


@dataclass
class Subscriptions:
    """Who is subscribed to what, and the one follower that tells them when it changes."""

    server: LogstreamMCP
    by_session: dict[Any, dict[str, Filters]] = field(default_factory=dict)  # connection key
    senders: dict[Any, Any] = field(default_factory=dict)  # connection key -> a ServerSession
    wanted: anyio.Event = field(default_factory=anyio.Event)
    # subscriptions/listen (2026-07-28): the open streams' URIs, counted, under one key whose
    # "sender" publishes to the bus that the SDK's listen handler fans out per stream.
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    listening: dict[str, int] = field(default_factory=dict)
    outage: backoff.Outage = field(default_factory=lambda: outage("the log", _log.warning))
    cursor: str | None = None  # where the follower reads on from, once `following`
    following: bool = False
    _arming: anyio.Lock = field(default_factory=anyio.Lock)

    def __post_init__(self) -> None:
        # The SDK's listen handler serves the streams (ack, per-stream filter); `listen` wraps it.
        self._streams = ListenHandler(self.bus, max_subscriptions=MAX_SUBSCRIPTIONS)

    async def listen(
        self, ctx: Any, params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """One `subscriptions/listen` stream: its resource URIs join the follower's for as long
        as the stream is open; the SDK's handler acknowledges and delivers (per-stream filter)."""
        uris = dict.fromkeys(params.notifications.resource_subscriptions or ())
        matchers = {}
        for uri in uris:
            try:
                matchers[uri] = filters_for(uri)
            except errors.LogstreamError as exc:
                raise MCPError(code=INVALID_PARAMS, message=exc.message) from exc
        if self.count() + len(matchers) > MAX_SUBSCRIPTIONS:
            raise MCPError(code=INVALID_PARAMS, message="too many subscriptions on this server")
        await self.arm()
        mine = self.by_session.setdefault(_LISTEN, {})
        self.senders[_LISTEN] = self
        for uri, matcher in matchers.items():
            mine[uri] = matcher
            self.listening[uri] = self.listening.get(uri, 0) + 1
        if matchers:
            self.wanted.set()
        try:
            return await self._streams(ctx, params)
        finally:
            for uri in matchers:
                self.listening[uri] -= 1
                if not self.listening[uri]:
                    del self.listening[uri]
                    mine.pop(uri, None)
            if not mine:
                self._forget(_LISTEN)

    async def send_resource_updated(self, uri: str) -> None:
        """The listen streams' "session": one event on the bus reaches every stream that
        asked for `uri` (the SDK filters per stream)."""
        await self.bus.publish(ResourceUpdated(uri=uri))

    def count(self) -> int:
        return sum(len(uris) for uris in self.by_session.values())

    async def subscribe(self, ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        uri = str(params.uri)
        try:
            matcher = filters_for(uri)
        except errors.LogstreamError as exc:
            raise MCPError(code=INVALID_PARAMS, message=exc.message) from exc
        if self.count() >= MAX_SUBSCRIPTIONS:
            raise MCPError(code=INVALID_PARAMS, message="too many subscriptions on this server")
        await self.arm()
        key = _connection(ctx)
        self.by_session.setdefault(key, {})[uri] = matcher
        self.senders.setdefault(key, ctx.session)
        self.wanted.set()
        return EmptyResult()

    async def unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        key = _connection(ctx)
        self.by_session.get(key, {}).pop(str(params.uri), None)
        if not self.by_session.get(key):
            self._forget(key)
        return EmptyResult()

    def _forget(self, key: Any) -> None:
        self.by_session.pop(key, None)
        self.senders.pop(key, None)

    async def arm(self) -> None:
        """Take the follower's cursor at the log's tip, once, before the first subscription is
        answered: every change after the answer is news to it. A log (hub) that cannot answer
        now leaves the follower to arm itself once it does."""
        if self.following:
            return
        with contextlib.suppress(errors.LogstreamError):
            await self._arm()

    async def _arm(self) -> None:
        async with self._arming:
            if not self.following:
                tip = await self.server.backend.call("event_list", {"limit": 1, "order": "desc"})
                self.cursor, self.following = tip.get("cursor"), True

    async def run(self) -> None:
        """Follow the log while anyone is subscribed; tell each subscriber what changed."""
        pause = backoff.Backoff()
        while True:
            if not self.by_session:
                self.following = False  # changes before a subscription are not news to it
                self.wanted = anyio.Event()
                await self.wanted.wait()
                continue
            try:
                await self._arm()
                args = {"since_event_id": self.cursor, "timeout_ms": POLL_TIMEOUT_MS, "limit": 500}
                # The follower reads for the subscribers, not as any agent: no ledger marks.
                with deliveries.delivering(deliveries.OBSERVER):
                    out = await self.server.backend.call("event_wait", args)
            except errors.LogstreamError as exc:
                self._failed(exc)
                await anyio.sleep(pause.delay())
                continue
            self.outage.ok()
            pause.reset()
            self.cursor = out.get("cursor") or self.cursor
            if out["events"]:
                await self._tell(out["events"])

    def _failed(self, exc: errors.LogstreamError) -> None:
        if backoff.is_refusal(exc):  # not transient: every subscription ends, said once
            self.outage.refused(exc, "resource subscriptions end; subscribe again")
            for key in list(self.by_session):
                self._forget(key)
        elif isinstance(exc, errors.NotFoundError) and exc.field == "since_event_id":
            self.outage.note(f"cursor {self.cursor!r} is not in this log any more; from its tip")
            self.following = False
        else:
            self.outage.failed(exc)

    async def _tell(self, batch: list[dict[str, Any]]) -> None:
        rows = [cast(Event, SimpleNamespace(**event)) for event in batch]
        for key, uris in list(self.by_session.items()):
            changed = [uri for uri, match in uris.items() if any(map(match.matches, rows))]
            for uri in changed:
                try:
                    await self.senders[key].send_resource_updated(uri)
                except Exception as exc:  # noqa: BLE001 - a session that went away is dropped
                    _log.debug("resource subscriber went away (%s)", type(exc).__name__)
                    self._forget(key)
                    break


_LISTEN = object()  # the key of the listen streams' URIs in `by_session`


def note(message: str) -> None:
    """A line about the follower on stderr (a stdio server's), the characters escaped."""
    print(f"logstream resources: {display.terminal(message)}", file=sys.stderr, flush=True)


def outage(source: str, note: Callable[[str], None]) -> backoff.Outage:
    """The lines a resource follower says about its log or hub (`source`: "hub URL")."""
    return backoff.Outage(
        source,
        note,
        meanwhile="resource updates wait for it",
        back="resource updates go on from where they stopped",
    )


def _connection(ctx: Any) -> Any:
    """One key per client connection: SDK 2.x builds a ServerSession per request around the
    connection (not public in 2.3), so the session object alone cannot key a subscription."""
    return getattr(ctx.session, "_connection", ctx.session)


def install(server: LogstreamMCP) -> Subscriptions:
    """Register the three resource templates on `server`; the subscriptions it returns serve
    `resources/subscribe`, `resources/unsubscribe` and `subscriptions/listen` (protocol.py)."""
    server.resource(INBOX, name="inbox", mime_type="application/json")(inbox)
    server.resource(TASK, name="task", mime_type="application/json")(task)
    server.resource(EVENTS, name="events", mime_type="application/json")(events)
    return Subscriptions(server)
