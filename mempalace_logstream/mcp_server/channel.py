"""Channel mode (S-8.8): `logstream mcp --agent NAME --channel` pushes each new event of NAME's
inbox into a Claude Code session as `notifications/claude/channel`.

The server declares the experimental capability `claude/channel`; its `instructions` tell the
model what a `<channel>` block is and which tools answer it. Delivery keeps `watch`'s contract:
a cursor in a state file, the notification written and flushed to stdout before the checkpoint
(a crash replays, never skips), a restart resumes after the cursor, a first start begins at the
tip unless `--from-start`. Wake-ups are the log's own (`event_wait`), never a sleep. Bursts are
coalesced: at most `burst` notifications go out per `window_ms` as events come; past that rate,
events are gathered until the window ends and go out as one notification that counts and lists
them (as does any batch of more than `burst` events).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import anyio
from mcp.server.stdio import stdio_server
from mcp.types import NotificationParams

from mempalace_logstream import aio, backoff, cursors, display, errors, watch
from mempalace_logstream import validation as v
from mempalace_logstream.identity.actor import Actor
from mempalace_logstream.identity.keyring import KEY_ADD
from mempalace_logstream.mcp_server.channel_text import INSTRUCTIONS, render, render_burst
from mempalace_logstream.mcp_server.server import Backend, build_server, speak_on_stderr

METHOD = "notifications/claude/channel"
CAPABILITY = "claude/channel"
SOURCE = "logstream"
DEFAULT_BODY_CHARS = 600
MAX_BODY_CHARS = 20_000
DEFAULT_BURST = 3
DEFAULT_WINDOW_MS = 250
POLL_TIMEOUT_MS = 60_000
_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ChannelOptions:
    """What `--channel` delivers, validated before anything is served."""

    agent: str
    filters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    state_file: Path | None = None
    legacy_state_file: Path | None = None  # the per-agent file of before issue 19 (adopted)
    from_start: bool = False
    body_chars: int = DEFAULT_BODY_CHARS
    burst: int = DEFAULT_BURST
    window_ms: int = DEFAULT_WINDOW_MS
    # With identity in place (the log holds agents' keys), only verified senders are pushed
    # unless this is set; the rest stays readable with the tools (RFC 0008, S-8.8).
    allow_unverified: bool = False

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000

    @classmethod
    def parse(
        cls,
        *,
        agent: Any,
        allow_from: Any = None,
        state_file: Any = None,
        from_start: bool = False,
        body_chars: Any = None,
        burst: Any = None,
        window_ms: Any = None,
        allow_unverified: bool = False,
        target: str | None = None,
        palace: str | None = None,
        home: Path | None = None,
        **raw_filters: Any,
    ) -> ChannelOptions:
        """The default cursor file is per log and agent, `<palace>/channel/<log key>/<agent>.json`
        (`target` names the log: cursors.log_target), apart from `watch`'s, so a watch and a
        channel of one agent never share a cursor; `home` holds the per-agent file of earlier
        versions. Raises ValidationError naming the option and its limit."""
        name = v.routing("agent", agent, required=True)
        assert name is not None
        allowed = v.filter_values("allow_from", allow_from)
        if "writer" in raw_filters and raw_filters["writer"] is not None:
            raise v.fail("writer", "is not a channel filter; use allow_from to choose senders")
        base = watch.WatchOptions.parse(agent=name, state_file="", **raw_filters)
        filters = dict(base.filters)
        if allowed is not None:
            filters["writer"] = allowed  # sender gating runs in SQL, like every filter
        return cls(
            agent=name,
            filters=filters,
            state_file=_state_file(state_file, name, target, palace),
            legacy_state_file=_legacy_file(state_file, name, home),
            from_start=bool(from_start),
            body_chars=_bounded("body_chars", body_chars, DEFAULT_BODY_CHARS, 1, MAX_BODY_CHARS),
            burst=_bounded("burst", burst, DEFAULT_BURST, 1, 1_000),
            window_ms=_bounded("window_ms", window_ms, DEFAULT_WINDOW_MS, 0, 60_000),
            allow_unverified=bool(allow_unverified),
        )


def _state_file(raw: Any, agent: str, target: str | None, palace: str | None) -> Path | None:
    """`--state-file` as given (`""` disables); else the per-log default."""
    if raw is not None:
        text = str(raw)
        return Path(text).expanduser() if text != "" else None
    if target is None:
        raise v.fail("state_file", "has no default without the log's target; pass state_file")
    return cursors.default_file("channel", agent, target, palace)


def _legacy_file(raw: Any, agent: str, home: Path | None) -> Path | None:
    """The per-agent file of earlier versions, adopted when the default is in use."""
    return cursors.legacy_file("channel", agent, home) if raw is None else None


def _bounded(name: str, raw: Any, default: int, low: int, high: int) -> int:
    if raw is None:
        return default
    n = v.strict_int(name, raw)
    if not low <= n <= high:
        raise v.fail(name, f"is {n}; it must be between {low} and {high:,}", high)
    return n


# ----------------------------------------------------------------------------- the wire


class Wire:
    """The stdout the SDK writes its messages to, shared with the channel: one line per write
    call under one lock, so a notification written here is whole and flushed on return."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    async def write(self, text: str) -> None:  # the SDK's writer: a whole JSON line per call
        with self._lock:
            self._out.write(text.encode("utf-8"))

    async def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def notify(self, content: str, meta: dict[str, str]) -> None:
        message = {"jsonrpc": "2.0", "method": METHOD, "params": {"content": content, "meta": meta}}
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            self._out.write(line.encode("utf-8"))
            self._out.flush()


@contextlib.contextmanager
def claimed_stdout() -> Iterator[Wire]:
    """The wire on a private copy of fd 1; fd 1 itself points at stderr meanwhile, so stray
    output from anything else never corrupts the JSON-RPC stream. Restored on exit."""
    sys.stdout.flush()
    private = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(private, "wb")
    try:
        yield Wire(out)
    finally:
        with contextlib.suppress(OSError, ValueError):
            out.flush()
        os.dup2(private, 1)
        out.close()


# ----------------------------------------------------------------------------- delivery


class _Stopped(Exception):
    """Delivery ends (a refused token, an error about the request itself); said already."""


@dataclass
class Channel:
    """Follows NAME's inbox after the stored cursor and notifies, then checkpoints."""

    backend: Backend
    starter: watch.Client  # a blocking client for watch's start rules (tip, cursor checks)
    opts: ChannelOptions
    wire: Wire
    outage: backoff.Outage  # the lines about the log or hub: lost, back, refused
    crash_hook: Callable[[str, int], None] | None = None
    sent: int = 0  # batches delivered (the crash hook counts these, like watch's prints)
    _identity: bool = False  # the log holds agents' keys (once true, stays true)
    _sent_at: collections.deque[float] = field(init=False)

    def __post_init__(self) -> None:
        self._sent_at = collections.deque(maxlen=self.opts.burst)

    async def run(self) -> None:
        """Deliver until cancelled. A hub that is down, stopping or restarting is tried again
        with capped backoff (one line when it is lost, one when it is back) and delivery goes on
        from the cursor; a refused token ends delivery (one line) and the tools go on answering
        with that error."""
        try:
            cursor = await self._retrying(self._begin)
            while True:
                cursor = await self._retrying(functools.partial(self._step, cursor))
        except _Stopped:
            return

    async def _begin(self) -> str | None:
        started, cursor = await aio.run_detached(self._start)
        if not started:
            raise SystemExit(1)
        return cursor

    async def _step(self, cursor: str | None) -> str | None:
        """One wait and what it brought, pushed then checkpointed; returns the new cursor. A
        failure anywhere leaves the cursor where it was: the step is simply done again."""
        try:
            out = await self._wait(cursor, POLL_TIMEOUT_MS)
        except errors.NotFoundError as exc:
            if exc.field != "since_event_id":
                raise
            self.outage.note(
                f"cursor {cursor!r} is not in this log (rebuilt or reset?); replaying from the "
                "start (duplicates possible, nothing skipped)"
            )
            return None
        after = out.get("cursor") or cursor
        if not out["events"]:
            if after != cursor:
                await self._checkpoint(after)  # rows the filters passed over are safe
            return after
        events, after, held = await self._gather(list(out["events"]), after)
        events = await self._admitted(events)
        if not events:  # all gated: nothing to push, the cursor still moves past them
            await self._checkpoint(after)
            return after
        if len(events) <= self.opts.burst:
            await self._task_states(events)
        self._send(events, cursor, after, one=held)
        await self._checkpoint(after)
        self._crash("checkpoint")
        return after

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` until it succeeds: transient failures wait (capped backoff) and try
        again; a refusal or an error about the request itself stops delivery (`_Stopped`)."""
        pause = backoff.Backoff()
        while True:
            try:
                result = await attempt()
            except errors.LogstreamError as exc:
                if backoff.is_refusal(exc):
                    self.outage.refused(exc, "nothing is pushed, the tools answer with this error")
                    raise _Stopped from exc
                if not backoff.is_transient(exc):
                    self.outage.note(f"stopped pushing: {exc.message}; the tools go on answering")
                    raise _Stopped from exc
                self.outage.failed(exc)
                await anyio.sleep(pause.delay())
                continue
            self.outage.ok()
            return result

    async def _admitted(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events to push: with identity in place (any agent has a key in the log), only
        verified senders unless `allow_unverified`; without it, everything (a solo log)."""
        if self.opts.allow_unverified or all(e.get("verified") is True for e in events):
            return events
        if not self._identity:
            args = {"type": [KEY_ADD], "limit": 1}
            self._identity = bool((await self.backend.call("event_list", args))["events"])
        if not self._identity:
            return events
        return [e for e in events if e.get("verified") is True]

    def _start(self) -> tuple[bool, str | None]:
        opts = watch.WatchOptions(
            agent=self.opts.agent,
            filters=self.opts.filters,
            state_file=self.opts.state_file,
            legacy_state_file=self.opts.legacy_state_file,
            from_start=self.opts.from_start,
            follow=True,
        )
        watcher = watch.Watcher(self.starter, opts, _StderrNotes(), human=False)
        return watcher.start()

    async def _wait(self, cursor: str | None, timeout_ms: int) -> dict[str, Any]:
        args: dict[str, Any] = {name: list(vals) for name, vals in self.opts.filters.items()}
        args |= {"since_event_id": cursor, "timeout_ms": timeout_ms, "limit": v.MAX_LIST_LIMIT}
        return await self.backend.call("event_wait", args)

    async def _gather(
        self, events: list[dict[str, Any]], cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None, bool]:
        """(events, cursor, held). Up to `burst` notifications per `window_ms` go out at once;
        past that, events are gathered (bounded) until the window ends and go out as one, so a
        busy log costs a session a few notifications, never one per event."""
        sent = self._sent_at
        if len(sent) < self.opts.burst or time.monotonic() - sent[0] >= self.opts.window_s:
            return events, cursor, False
        until = sent[0] + self.opts.window_s
        while len(events) < v.MAX_LIST_LIMIT * 4:
            left = until - time.monotonic()
            if left <= 0:
                break
            more = await self._wait(cursor, max(1, int(left * 1000)))
            cursor = more.get("cursor") or cursor
            events += more["events"]
        return events, cursor, True

    def _send(
        self, events: list[dict[str, Any]], since: str | None, after: str | None, *, one: bool
    ) -> None:
        """One notification per event, or one for all of them when they are many (more than
        the window has room for: `burst` less what went out within `window_ms`) or were held
        back by the rate (`one`)."""
        now = time.monotonic()
        room = self.opts.burst - sum(1 for at in self._sent_at if now - at < self.opts.window_s)
        if len(events) > max(room, 1) or (one and len(events) > 1):
            self.wire.notify(*render_burst(events, since, after, self.opts))
            self._sent_at.append(time.monotonic())
        else:
            for event in events:
                self.wire.notify(*render(event, self.opts))
                self._sent_at.append(time.monotonic())
        self.sent += 1
        self._crash("print")

    async def _task_states(self, events: list[dict[str, Any]]) -> None:
        """Each event on a task's thread gets the task's state now (meta `task_state`)."""
        for event in events:
            task_id = event.get("correlation_id")
            if not task_id:
                continue
            try:
                status = await self.backend.call("task_status", {"task_id": task_id})
            except errors.LogstreamError:  # not a task (a plain thread), or a hub that failed
                continue
            event["task_state"] = status["task"]["state"]

    async def _checkpoint(self, cursor: str | None) -> None:
        path = self.opts.state_file
        if path is None:
            return
        try:
            await aio.run(watch.write_state, path, cursor, self.opts.agent)
        except OSError as exc:  # the next start replays from the older cursor: no skip
            _log.warning("could not checkpoint to %s (%s); a restart will replay", path, exc)

    def _crash(self, where: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(where, self.sent)


def note(message: str) -> None:
    """One line on stderr (never the wire), the sender's characters escaped."""
    print(f"logstream channel: {display.terminal(message)}", file=sys.stderr, flush=True)


def outage(source: str) -> backoff.Outage:
    """The lines channel mode says about its log or hub."""
    return backoff.Outage(
        source,
        note,
        meanwhile="the tools answer with this error meanwhile",
        back="pushing from the cursor",
    )


class _StderrNotes:
    """watch's start notes (first run, corrupt state file) go to stderr, never to the wire."""

    def batch(self, batch: watch.Batch, *, final: bool) -> None:  # pragma: no cover - unused
        raise AssertionError("the channel delivers its own batches")

    def note(self, message: str) -> None:
        note(message)


async def serve(
    backend: Backend,
    starter: watch.Client,
    opts: ChannelOptions,
    *,
    read_only: bool = False,
    tools: str | None = None,
    crash_hook: Callable[[str, int], None] | None = None,
    actor: Actor | None = None,
    source: str = "the log",
    push: Backend | None = None,
) -> None:
    """Serve the tools (the `tools` profile) over stdio with the channel capability,
    delivering once initialized; tool calls run as `actor`. `source` names the log in the
    lines about it ("hub URL"). `push`, when given, is what the channel reads through (a hub
    client whose reads are marked as pushes in the delivery ledger), the tools keep
    `backend`."""
    server = build_server(
        backend, read_only=read_only, tools=tools, instructions=INSTRUCTIONS, actor=actor
    )
    speak_on_stderr(server, source)
    lowlevel = server.protocol  # the SDK's low-level server (protocol.py)
    initialized = anyio.Event()

    async def on_initialized(ctx: Any, params: NotificationParams) -> None:
        initialized.set()

    lowlevel.add_notification_handler(
        "notifications/initialized", NotificationParams, on_initialized
    )
    init = lowlevel.create_initialization_options(experimental_capabilities={CAPABILITY: {}})
    with claimed_stdout() as wire:
        channel = Channel(push or backend, starter, opts, wire, outage(source), crash_hook)
        async with _stdio(wire) as (read, write), anyio.create_task_group() as tg:

            async def deliver() -> None:
                await initialized.wait()
                try:
                    await channel.run()
                except Exception as exc:  # the channel's edge: the tools outlive any failure
                    _log.debug("channel delivery failed", exc_info=True)
                    note(f"stopped pushing ({type(exc).__name__}: {exc}); the tools go on")

            tg.start_soon(deliver)
            tg.start_soon(server.subscriptions.run)
            await lowlevel.run(read, write, init)
            tg.cancel_scope.cancel()  # the client closed stdin: stop following


@contextlib.asynccontextmanager
async def _stdio(wire: Wire) -> AsyncIterator[Any]:
    async with stdio_server(stdout=cast(Any, wire)) as streams:
        yield streams
