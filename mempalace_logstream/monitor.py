"""Monitor mode for Claude Code (issue 19): `logstream tail --agent NAME --monitor`.

Claude Code's Monitor tool runs a command in the background and wakes the model with each line
the command prints (lines within ~200 ms are merged; a monitor expires, at most ~30 min; a flood
is cut). So this prints one short line per new inbox event of NAME (to NAME or `*`, never NAME's
own writes): at most `LINE_MAX` characters, every value a sender chose a JSON string with
nothing hidden (`display.quoted`), naming the type, the sender, the task and its state and the
event id, ending with the command that reads it. Events that come while a line went out less
than `WINDOW_S` ago are held until the window ends and go out as one line ("7 new events for
NAME: …"), so a burst of any size costs a few lines. Senders are gated as in channel mode: once
agents have keys, only verified ones (`allow_unverified` lifts it).

Delivery keeps `watch`'s contract: the cursor is the monitor's own, per log and agent
(`<palace>/monitor/<log key>/<agent>.json`, cursors.py), moved only after the line was written
and flushed (a crash repeats a line, never skips an event); the first run starts at the newest
event. Before `max_runtime_s` it prints a last line saying how to re-arm and returns 0, ahead
of the tool's own expiry. Reads go through a client's `call` (the local store, or a hub whose
outages a `reconnect.Reconnect` rides through).
Must not import typer, fastapi, mcp, httpx or the store.
"""

from __future__ import annotations

import collections
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mempalace_logstream import cursors, display, errors, inbox, watch
from mempalace_logstream import validation as v

LINE_MAX = 200
WINDOW_S = 0.5  # a line at most this often while events keep coming; the rest is coalesced
DEFAULT_MAX_RUNTIME_S = 25 * 60  # under the Monitor tool's 30 min limit
MAX_GATHER = 2_000  # events held for one coalesced line (a longer burst takes more lines)
POLL_MS = 60_000
PREFIX = "[logstream] "
_CAPS = (48, 36, 28, 20, 14, 10)  # room for each value a sender chose, tried in turn


@dataclass(frozen=True, kw_only=True)
class MonitorOptions:
    """What a monitor delivers, validated before anything is read or written."""

    agent: str
    filters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    state_file: Path | None = None
    from_start: bool = False
    since_event_id: str | None = None
    max_runtime_s: float = DEFAULT_MAX_RUNTIME_S
    allow_unverified: bool = False
    hub: str | None = None  # named in the commands the lines give (a hub typed, not the env's)

    @classmethod
    def parse(
        cls,
        *,
        agent: Any,
        target: str,
        palace: str | None = None,
        state_file: Any = None,
        from_start: bool = False,
        since_event_id: Any = None,
        max_runtime_s: Any = None,
        allow_unverified: bool = False,
        hub: str | None = None,
        **raw_filters: Any,
    ) -> MonitorOptions:
        """`target` is the log's URL (or the hub's): the default cursor file is per log and
        agent. Raises ValidationError naming the field and the limit."""
        base = watch.WatchOptions.parse(
            agent=agent,
            state_file="",
            since_event_id=since_event_id,
            from_start=from_start,
            **raw_filters,
        )
        assert base.agent is not None
        runtime = DEFAULT_MAX_RUNTIME_S if max_runtime_s is None else max_runtime_s
        if not isinstance(runtime, int | float) or isinstance(runtime, bool) or runtime <= 0:
            raise v.fail("max_runtime", f"is {runtime!r}; it must be a positive duration")
        return cls(
            agent=base.agent,
            filters=base.filters,
            state_file=_state_file(state_file, base.agent, target, palace),
            from_start=base.from_start,
            since_event_id=base.since_event_id,
            max_runtime_s=float(runtime),
            allow_unverified=bool(allow_unverified),
            hub=hub,
        )

    def rearm(self) -> str:
        """The command that starts this monitor again."""
        return f"logstream tail --agent {arg(self.agent)} --monitor" + self._hub_flag()

    def _hub_flag(self) -> str:
        return f" --hub {arg(self.hub)}" if self.hub else ""


def _state_file(raw: Any, agent: str, target: str, palace: str | None) -> Path | None:
    """`--state-file` as given (`""` = none); else `<palace>/monitor/<log key>/<agent>.json`
    (cursors.default_file: per log and agent, as every follower's)."""
    if raw is not None:
        return Path(str(raw)).expanduser() if raw != "" else None
    return cursors.default_file("monitor", agent, target, palace)


# ----------------------------------------------------------------------------- lines


def arg(value: Any) -> str:
    """A word of a shell command in a line: shell-quoted, and with nothing hidden (a value that
    holds a control character is shown escaped, and so would not run as is)."""
    return shlex.quote(display.one_line(str(value)))


def quoted(value: Any, cap: int) -> str:
    """`value` as a JSON string with nothing hidden (`display.quoted`), cut (with `…`) so that
    it takes at most `cap` characters."""
    raw = str(value)
    text = display.quoted(raw)
    while len(text) > cap and raw:
        raw = raw[: max(0, len(raw) - max(1, len(text) - cap))]
        text = display.quoted(raw + "…")
    return text


def _fit(build: Callable[[int, bool], str]) -> str:
    """The first `build(cap, with_hub)` that fits `LINE_MAX`, trying roomier values first and
    the hub flag before going without it."""
    for with_hub in (True, False):
        for cap in _CAPS:
            line = build(cap, with_hub)
            if len(line) <= LINE_MAX:
                return line
    return line[: LINE_MAX - 1] + "…"  # only a hub URL of absurd length gets here


def event_line(event: dict[str, Any], opts: MonitorOptions, task_state: str | None) -> str:
    """One event: `[logstream] new for "NAME": "TYPE" from "SENDER", task "T" (STATE); read it:
    logstream get ID`."""

    def build(cap: int, with_hub: bool) -> str:
        text = f"{PREFIX}new for {quoted(opts.agent, cap)}: {quoted(event.get('type'), cap)}"
        text += f" from {quoted(event.get('from_agent'), cap)}"
        if event.get("correlation_id"):
            text += f", task {quoted(event['correlation_id'], cap)}"
            if task_state:
                text += f" ({quoted(task_state, 16)[1:-1]})"
        command = f"logstream get {arg(event.get('id'))}"
        return f"{text}; read it: {command}{opts._hub_flag() if with_hub else ''}"

    return _fit(build)


def burst_line(events: list[dict[str, Any]], since: str | None, opts: MonitorOptions) -> str:
    """Many events in one line: how many, of which types, from whom, and the command that
    lists them (after the cursor the monitor held before them)."""
    types = collections.Counter(str(e.get("type")) for e in events).most_common()
    senders = list(dict.fromkeys(str(e.get("from_agent")) for e in events))

    def build(cap: int, with_hub: bool) -> str:
        kinds = ", ".join(f"{n} {quoted(t, cap)}" for t, n in types[:2])
        if len(types) > 2:
            kinds += f", {len(types) - 2} other types"
        who = ", ".join(quoted(s, cap) for s in senders[:2])
        if len(senders) > 2:
            who += f" +{len(senders) - 2} more"
        command = f"logstream list --to-agent {arg(opts.agent)}"
        if since:
            command += f" --since-event-id {arg(since)}"
        if len(events) > v.DEFAULT_LIST_LIMIT:
            command += f" --limit {v.MAX_LIST_LIMIT}"
        head = f"{PREFIX}{len(events)} new events for {quoted(opts.agent, cap)}"
        hub = opts._hub_flag() if with_hub else ""
        return f"{head}: {kinds} from {who}; read them: {command}{hub}"

    return _fit(build)


def final_line(opts: MonitorOptions) -> str:
    """The last line, at `--max-runtime`: nothing is lost, and how to re-arm."""
    minutes = opts.max_runtime_s / 60
    took = f"{minutes:g} min" if minutes >= 1 else f"{opts.max_runtime_s:g} s"

    def build(cap: int, with_hub: bool) -> str:
        command = f"logstream tail --agent {arg(opts.agent)} --monitor"
        command += opts._hub_flag() if with_hub else ""
        return (
            f"{PREFIX}monitor for {quoted(opts.agent, cap)} ended after {took} "
            f"(--max-runtime); nothing is lost: re-arm with a new Monitor running {command}"
        )

    return _fit(build)


# ----------------------------------------------------------------------------- following


@dataclass
class Monitor:
    """Follows NAME's inbox after its cursor and writes a line per event (or per burst), then
    checkpoints; `write` must have flushed its line on return."""

    client: watch.Client
    opts: MonitorOptions
    write: Callable[[str], None]
    note: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    lines: int = 0  # lines written (read by tests)
    _last_line: float = float("-inf")

    def run(self) -> int:
        """Until `max_runtime_s`: 0 then (after the re-arm line); 1 if it could not start."""
        deadline = self.clock() + self.opts.max_runtime_s
        started, cursor = self._start()
        if not started:
            return watch.EXIT_ERROR
        self.note(
            f"monitoring the inbox of {self.opts.agent}: one line per new event on stdout, "
            f"cursor {self.opts.state_file or '(none)'}; exits 0 after "
            f"{self.opts.max_runtime_s:g} s (--max-runtime)"
        )
        while True:
            left = deadline - self.clock()
            if left <= 0:
                self.write(final_line(self.opts))
                return 0
            out = self._wait(cursor, min(POLL_MS, int(left * 1000) + 1))
            after = out.get("cursor") or cursor
            if out["events"]:
                events, after = self._gather(list(out["events"]), after, out, deadline)
                self._deliver(events, cursor)
            if after != cursor:
                self._checkpoint(after)  # after the line: a crash repeats it, never skips
                cursor = after

    def _start(self) -> tuple[bool, str | None]:
        """watch's start rules: the stored cursor, the tip on a first run (said on stderr), a
        replay from the start for a corrupt file or a cursor this log does not hold."""
        opts = watch.WatchOptions(
            agent=self.opts.agent,
            filters=self.opts.filters,
            state_file=self.opts.state_file,
            from_start=self.opts.from_start,
            since_event_id=self.opts.since_event_id,
            follow=True,
        )
        return watch.Watcher(self.client, opts, _Notes(self.note), human=False).start()

    def _wait(self, cursor: str | None, timeout_ms: int) -> dict[str, Any]:
        args = {name: list(vals) for name, vals in self.opts.filters.items()}
        return self.client.call(
            "event_wait",
            since_event_id=cursor,
            timeout_ms=max(0, timeout_ms),
            limit=v.MAX_LIST_LIMIT,
            **args,
        )

    def _gather(
        self, events: list[dict[str, Any]], cursor: str | None, out: dict[str, Any], end: float
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The events to put in the next line: with a line out less than `WINDOW_S` ago, what
        comes until the window ends joins them; a page with more behind it is read on."""
        hold = min(self._last_line + WINDOW_S, end)
        more = bool(out.get("has_more"))
        while len(events) < MAX_GATHER:
            left = hold - self.clock()
            if left <= 0 and not more:
                break
            page = self._wait(cursor, int(max(0.0, left) * 1000))
            cursor = page.get("cursor") or cursor
            more = bool(page.get("has_more"))
            events += page["events"]
        return events, cursor

    def _deliver(self, events: list[dict[str, Any]], since: str | None) -> None:
        shown, _identity = inbox.admitted(self.client, events, self.opts.allow_unverified)
        if not shown:
            return  # every sender gated: the cursor still moves past them
        if len(shown) == 1:
            line = event_line(shown[0], self.opts, self._task_state(shown[0]))
        else:
            line = burst_line(shown, since, self.opts)
        self.write(line)
        self.lines += 1
        self._last_line = self.clock()

    def _task_state(self, event: dict[str, Any]) -> str | None:
        task_id = event.get("correlation_id")
        if not task_id:
            return None
        try:
            status = self.client.call("task_status", task_id=task_id)
        except (errors.NotFoundError, errors.ValidationError, errors.ForbiddenError):
            return None  # a plain thread, not a task
        state = status.get("task", {}).get("state")
        return str(state) if state else None

    def _checkpoint(self, cursor: str | None) -> None:
        path = self.opts.state_file
        if path is None:
            return
        try:
            watch.write_state(path, cursor, self.opts.agent)
        except OSError as exc:  # the next start repeats these lines: no skip
            self.note(
                f"warning: could not checkpoint to {path} ({exc.strerror or exc}); a restart "
                "will repeat these events"
            )


class _Notes:
    """watch's start notes (first run, corrupt cursor file), to stderr."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note

    def batch(self, batch: watch.Batch, *, final: bool) -> None:  # pragma: no cover - unused
        raise AssertionError("the monitor writes its own lines")

    def note(self, message: str) -> None:
        self._note(message)
