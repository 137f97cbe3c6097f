"""The core of `logstream watch` (S-5.5): state files, the watch spec and the follow loop.

Everything goes through a client's `call("event_wait" | "event_list", **args)`, so a watch works
the same against a local store and a remote hub. Output is delivered by the caller's `emit`
before each checkpoint (at-least-once: a crash replays, never skips).
Must not import fastapi, typer, mcp or the store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mempalace_logstream import cursors, errors, lazy
from mempalace_logstream import validation as v

if TYPE_CHECKING:
    from dataclasses import dataclass, field
else:  # made dataclasses on first need: the inbox reads state files only (lazy.py, issue 25)
    from mempalace_logstream.lazy import dataclass, field

STATE_ABSENT, STATE_OK, STATE_EMPTY, STATE_CORRUPT = "absent", "ok", "empty", "corrupt"
DEFAULT_POLL_TIMEOUT_MS = 300_000
EXIT_MATCHED, EXIT_ERROR, EXIT_IDLE, EXIT_INTERRUPTED = 0, 1, 2, 130


class Client(Protocol):
    def call(self, name: str, /, **args: Any) -> dict[str, Any]: ...


# ----------------------------------------------------------------------------- state file


def resolve_state_file(
    state_file: str | None,
    agent: str | None,
    target: str | None = None,
    palace: str | None = None,
) -> Path | None:
    """`--state-file` as given; `""` disables; else, with an agent, one file per log and agent
    (`<palace>/watch/<log key>/<agent>.json`, cursors.default_file) and no state without one.
    A default needs the log's `target` (cursors.log_target)."""
    if state_file is not None:
        return Path(state_file).expanduser() if state_file != "" else None
    if agent is None:
        return None
    if target is None:
        raise v.fail("state_file", "has no default without the log's target; pass state_file")
    return cursors.default_file("watch", agent, target, palace)


def read_state(path: Path | None) -> tuple[str, str | None, str | None]:
    """(state, cursor, problem). No exists() preflight: that is False for an untraversable
    path too, which must read as corrupt (replay), never as a first run (tip)."""
    if path is None:
        return STATE_ABSENT, None, None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return STATE_ABSENT, None, None
    except OSError as exc:
        return STATE_CORRUPT, None, f"cannot read it ({exc.strerror or exc})"
    try:
        doc = json.loads(raw)
    except ValueError:
        return STATE_CORRUPT, None, "it is not valid JSON"
    if not isinstance(doc, dict) or "cursor" not in doc:
        return STATE_CORRUPT, None, "it has no cursor"
    cursor = doc["cursor"]
    if cursor is None or cursor == "":
        return STATE_EMPTY, None, None
    if not isinstance(cursor, str):
        return STATE_CORRUPT, None, "its cursor is not a string"
    return STATE_OK, cursor, None


def write_state(path: Path, cursor: str | None, agent: str | None) -> None:
    """Atomically replace the state file (tmp + fsync + rename + directory fsync).

    Raises OSError; a reader sees the old file or the new one, never a torn write."""
    doc: dict[str, Any] = {"cursor": cursor, "updated_at": _utc_now()}
    if agent is not None:
        doc["agent"] = agent
    cursors.write_json(path, doc)


def _utc_now() -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# ----------------------------------------------------------------------------- options


@dataclass(frozen=True, kw_only=True)
class WatchOptions(lazy.Record):
    """Every argument of a watch, validated before anything polls or writes."""

    agent: str | None = None
    filters: dict[str, tuple[str, ...]] = field(default_factory=dict)
    state_file: Path | None = None
    # The per-agent file of before issue 19, adopted by the first log that holds its cursor
    # when `state_file` (the per-log default) does not exist yet.
    legacy_state_file: Path | None = None
    since_event_id: str | None = None
    from_start: bool = False
    follow: bool = False
    idle_exit_ms: int | None = None
    limit: int = v.DEFAULT_LIST_LIMIT
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    @classmethod
    def parse(
        cls,
        *,
        agent: Any = None,
        state_file: Any = None,
        since_event_id: Any = None,
        from_start: bool = False,
        follow: bool = False,
        idle_exit_ms: Any = None,
        limit: Any = None,
        poll_timeout_ms: Any = None,
        target: str | None = None,
        palace: str | None = None,
        home: Path | None = None,
        **raw_filters: Any,
    ) -> WatchOptions:
        """`target` names the log (cursors.log_target) for the default state file, one per log
        and agent under `palace`; `home` holds the per-agent files of earlier versions.
        Raises ValidationError naming the field and the limit."""
        unknown = set(raw_filters) - set(v.FILTER_FIELDS)
        if unknown:
            raise v.fail(sorted(unknown)[0], "is not a watch filter")
        clean_agent = v.routing("agent", agent)
        filters = {
            name: vals
            for name in v.FILTER_FIELDS
            if (vals := v.filter_values(name, raw_filters.get(name))) is not None
        }
        if clean_agent is not None:
            # --agent = my inbox, minus my own writes (never wake on your own `*` broadcast).
            for name in ("to_agent", "exclude_writer"):
                filters[name] = tuple(dict.fromkeys((*filters.get(name, ()), clean_agent)))
        since = since_event_id
        if from_start and since is not None:
            raise v.fail("from_start", "cannot be combined with since_event_id: give one of them")
        if not (isinstance(since, str) and since.strip() == "tip"):
            since = v.routing("since_event_id", since)
        legacy = None
        if state_file is None and clean_agent is not None:
            legacy = cursors.legacy_file("watch", clean_agent, home)
        return cls(
            agent=clean_agent,
            filters=filters,
            state_file=resolve_state_file(state_file, clean_agent, target, palace),
            legacy_state_file=legacy,
            since_event_id=since.strip() if isinstance(since, str) else None,
            from_start=bool(from_start),
            follow=bool(follow),
            idle_exit_ms=_idle_exit(idle_exit_ms),
            limit=v.limit(limit),
            poll_timeout_ms=_poll_timeout(poll_timeout_ms),
        )

    def describe(self) -> str:
        if self.agent:
            return f"agent {self.agent}"
        if "to_agent" in self.filters:
            return "to " + ", ".join(self.filters["to_agent"])
        return "everything" if not self.filters else "the filtered log"


def _idle_exit(value: Any) -> int | None:
    """None (wait for ever) when absent or 0, as in the reference; else a positive ms count."""
    if value is None:
        return None
    n = v.strict_int("idle_exit_ms", value)
    if n < 0:
        raise v.fail("idle_exit_ms", f"is {n}; it must be 0 (wait for ever) or more", 0)
    return n or None


def _poll_timeout(value: Any) -> int:
    if value is None:
        return DEFAULT_POLL_TIMEOUT_MS
    n = v.strict_int("poll_timeout_ms", value)
    if n < 1 or n > v.MAX_WAIT_MS:
        raise v.fail(
            "poll_timeout_ms", f"is {n}; it must be between 1 and {v.MAX_WAIT_MS} ms", v.MAX_WAIT_MS
        )
    return n


def _from(cursor: str | None) -> str:
    """Where a watch starts, in the words of both start messages."""
    return f"after event {cursor}" if cursor else "from the start of the log"


def _first_run_note(cursor: str | None, from_start: bool) -> str:
    if from_start:
        return f"first run (--from-start): replaying the whole log, {_from(None)}."
    if cursor is None:
        return f"first run: the log is empty, so watching {_from(None)}; nothing is skipped."
    return (
        f"first run: starting at the newest event, so watching {_from(cursor)}; earlier events "
        "are not replayed. Use --from-start to replay them, or sweep your inbox with "
        "`logstream list --to-agent <you>`."
    )


# ----------------------------------------------------------------------------- following


@dataclass(frozen=True, kw_only=True)
class Batch(lazy.Record):
    events: list[dict[str, Any]]
    cursor: str | None
    timed_out: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "count": len(self.events),
            "cursor": self.cursor,
            "timed_out": self.timed_out,
        }


def follow(
    client: Client,
    filters: dict[str, tuple[str, ...]],
    cursor: str | None,
    *,
    limit: int,
    timeout_ms: Callable[[], int],
) -> Iterator[Batch]:
    """Yield one batch per `event_wait` after `cursor`, forever; filters run in SQL.

    The cursor each batch carries has passed every examined row, matched or not, so a
    selective follower never rescans its backlog. Stops when the consumer stops iterating.
    """
    args = {name: list(vals) for name, vals in filters.items()}
    while True:
        out = client.call(
            "event_wait",
            since_event_id=cursor,
            timeout_ms=max(0, timeout_ms()),
            limit=limit,
            **args,
        )
        cursor = out.get("cursor") or cursor
        yield Batch(events=list(out["events"]), cursor=cursor, timed_out=not out["events"])


class Output(Protocol):
    def batch(self, batch: Batch, *, final: bool) -> None:
        """Deliver one batch; must have reached its destination (flushed) on return."""

    def note(self, message: str) -> None: ...


@dataclass
class Watcher(lazy.Record):
    """The `logstream watch` algorithm of S-5.5 over any client."""

    client: Client
    opts: WatchOptions
    out: Output
    crash_hook: Callable[[str, int], None] | None = None  # tests: ("print"|"checkpoint", n)
    human: bool = True
    _warned: bool = False

    def run(self) -> int:
        """Returns the exit code: 0 matched, 2 idle with nothing, 130 interrupted, 1 error."""
        try:
            started, cursor = self.start()
            return self._loop(cursor) if started else EXIT_ERROR
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED

    # -- start: resolve the cursor, then the required first checkpoint

    def start(self) -> tuple[bool, str | None]:
        """(started, cursor); False after an error note, with nothing consumed or written."""
        opts = self.opts
        state, stored, problem = read_state(opts.state_file)
        if state == STATE_ABSENT and opts.legacy_state_file is not None:
            state, stored, problem = self._adopted(opts.legacy_state_file)
        explicit = opts.since_event_id
        if explicit == "tip":
            explicit = self._tip() or None
        if opts.from_start and state == STATE_OK:
            self.out.note(
                f"error: --from-start replays only on a first run, but the state file "
                f"{opts.state_file} already holds cursor {stored}. Delete that file to replay "
                "the whole log, or drop --from-start to resume after its cursor. Nothing was "
                "consumed."
            )
            return False, None
        cursor = explicit if explicit is not None else stored
        if state == STATE_CORRUPT and explicit is None:
            self.out.note(
                f"state file {opts.state_file} is unreadable or corrupt ({problem}); replaying "
                "from the start of the log (duplicates possible, nothing skipped)"
            )
        if cursor is None and state == STATE_ABSENT and not explicit:
            cursor = None if opts.from_start else self._tip()
            self.out.note(_first_run_note(cursor, opts.from_start))
        if cursor is not None:
            try:
                self.client.call("event_list", since_event_id=cursor, limit=1)
            except errors.NotFoundError:
                if explicit is not None:
                    self.out.note(
                        f"error: since_event_id {cursor!r} not found in this log. Nothing was "
                        "written to the state file."
                    )
                    return False, None
                self.out.note(
                    f"stored cursor {cursor!r} is not in this log (rebuilt or reset?); "
                    "replaying from the start"
                )
                cursor = None
        if opts.state_file is not None:
            try:
                write_state(opts.state_file, cursor, opts.agent)
            except OSError as exc:
                self.out.note(
                    f"error: could not write the initial checkpoint to {opts.state_file} "
                    f"({exc.strerror or exc}). Refusing to start; nothing was consumed."
                )
                return False, None
        if self.human:
            self.out.note(f"Watching {opts.describe()} {_from(cursor)}; Ctrl-C to stop.")
        return True, cursor

    def _tip(self) -> str | None:
        return self.client.call("event_list", limit=1, order="desc").get("cursor")

    def _adopted(self, legacy: Path) -> tuple[str, str | None, str | None]:
        """The state read after adopting `legacy` (a per-agent cursor file of an earlier
        version) as this log's state file, when this log holds its cursor; else absent (a first
        run), the file left for the log it belongs to. An empty cursor (its log was empty then)
        cannot be placed: the first log that reads it adopts it (at worst a replay, no skip)."""
        state, stored, problem = read_state(legacy)
        if state == STATE_CORRUPT:
            self.out.note(f"the per-agent cursor file {legacy} is not adopted: {problem}")
        if state not in (STATE_OK, STATE_EMPTY):
            return STATE_ABSENT, None, None
        if stored is not None:
            try:
                self.client.call("event_list", since_event_id=stored, limit=1)
            except errors.NotFoundError:
                self.out.note(
                    f"the per-agent cursor file {legacy} names event {stored!r}, which this log "
                    "does not hold: left for the log it belongs to"
                )
                return STATE_ABSENT, None, None
        assert self.opts.state_file is not None
        try:
            taken = cursors.adopt(legacy, self.opts.state_file)
        except OSError as exc:
            self.out.note(f"could not adopt {legacy} ({exc.strerror or exc}); left as it is")
            return STATE_ABSENT, None, None
        if not taken:  # another process of this log (or a replica's) took it first
            return read_state(self.opts.state_file)
        self.out.note(
            f"adopted the per-agent cursor file {legacy} as this log's {self.opts.state_file} "
            "(cursors are per log and agent now; another log of this agent starts afresh)"
        )
        return read_state(self.opts.state_file)

    # -- loop: print, then checkpoint

    def _loop(self, cursor: str | None) -> int:
        opts = self.opts
        idle_deadline = self._idle_deadline()
        matched = False
        printed = 0

        def timeout_ms() -> int:
            if idle_deadline is None:
                return opts.poll_timeout_ms
            left = int((idle_deadline - time.monotonic()) * 1000)
            return max(0, min(opts.poll_timeout_ms, left))

        for batch in follow(
            self.client, opts.filters, cursor, limit=opts.limit, timeout_ms=timeout_ms
        ):
            if batch.events:
                self.out.batch(batch, final=not opts.follow)
                printed += 1
                self._crash_point("print", printed)
                self._checkpoint(batch.cursor)
                self._crash_point("checkpoint", printed)
                cursor, matched = batch.cursor, True
                if not opts.follow:
                    return EXIT_MATCHED
                idle_deadline = self._idle_deadline()
                continue
            if batch.cursor != cursor:
                self._checkpoint(batch.cursor)  # rejected rows are safe to pass
                cursor = batch.cursor
            if idle_deadline is not None and time.monotonic() >= idle_deadline:
                self.out.batch(batch, final=True)
                return EXIT_MATCHED if matched else EXIT_IDLE
        raise AssertionError("follow() never ends")  # pragma: no cover

    def _crash_point(self, where: str, printed: int) -> None:
        if self.crash_hook is not None:
            self.crash_hook(where, printed)

    def _idle_deadline(self) -> float | None:
        if self.opts.idle_exit_ms is None:
            return None
        return time.monotonic() + self.opts.idle_exit_ms / 1000

    def _checkpoint(self, cursor: str | None) -> None:
        if self.opts.state_file is None:
            return
        try:
            write_state(self.opts.state_file, cursor, self.opts.agent)
        except OSError as exc:  # the next start replays from the older cursor: no skip
            if not self._warned:
                self._warned = True
                self.out.note(
                    f"warning: could not checkpoint to {self.opts.state_file} "
                    f"({exc.strerror or exc}); a restart will replay these events"
                )
