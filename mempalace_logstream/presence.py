"""Presence (S-8.4): who is home, held by the hub and never written to the log.

An agent announces `watching`, `working` or `idle` with a TTL; the entry vanishes when the TTL
passes unless it is announced again; `leave` removes it at once. Listeners (the SSE feed) get
every change, expiries included, as frames: `{"event": "announce"|"leave"|"expire", ...}` plus
the entry's public fields (`to_dict()`), whose state is `gone` for a leave or an expiry. They are
told in the order the changes happened (under the table's lock), and `subscribe` can hand over a
snapshot atomically with the subscription, so a subscriber misses nothing and sees no change
twice out of order. Something must call `sweep()` when `next_expiry_ms()` passes for expiries to
be told without a read (the hub runs a sweeper task). Bounded: at most `max_agents` entries; an
announcement past that is refused. Pure: a clock is injected, no I/O, no framework.

Shared (issue 23): given a `Backing` (the `presence` table of a PostgreSQL log), the registry
is every hub's cache of that table: an announcement or a leave is written there first, then
applied here; the changes other hubs write arrive through `apply` / `apply_leave` (in the
order of their change number `rev`, a stale one ignored) and a reconnect's `resync`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from mempalace_logstream import errors
from mempalace_logstream import validation as v

STATES = ("watching", "working", "idle")
# The delivery paths an announcement may name (issue 20, RFC 0009); all but `hook` push.
PATHS = ("watch", "channel", "codex", "monitor", "sse", "hook")
GONE = "gone"  # the state a frame carries when an entry is left or expires
DEFAULT_TTL_S = 60
MAX_TTL_S = 3_600
MAX_NOTE_CHARS = 500
MAX_AGENTS = 1_000
NEEDS_A_HUB = (
    "presence is kept by a hub: give --hub URL (or LOGSTREAM_HUB), or start one with "
    "`logstream serve`"
)

Listener = Callable[[dict[str, Any]], None]
Paths = dict[str, tuple[int, int]]  # delivery path -> (since_ms, expires_ms)


class Backing(Protocol):
    """Where a shared registry writes its changes first (the `presence` table): each returns
    the change number it took, later changes having larger ones."""

    def announce(self, entry: Presence, path: str | None, max_agents: int) -> tuple[int, Paths]:
        """Store `entry` (and `path` among its delivery paths); its paths after. Raises the
        `full` ValidationError when `max_agents` live entries are held and it is not one."""

    def leave(self, agent: str, now_ms: int) -> tuple[int, bool]:
        """Remove `agent`; whether it was live at `now_ms`."""


@dataclass(frozen=True, kw_only=True)
class Presence:
    agent: str
    state: str
    task_id: str | None
    note: str | None
    announced_ms: int
    expires_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "state": self.state,
            "task_id": self.task_id,
            "note": self.note,
            "announced_at": iso(self.announced_ms),
            "expires_at": iso(self.expires_ms),
        }

    def gone(self, at_ms: int) -> dict[str, Any]:
        """The public fields once it is left or expired: state `gone`, `expires_at` = when."""
        return {**self.to_dict(), "state": GONE, "expires_at": iso(min(at_ms, self.expires_ms))}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def draft(
    *, agent: Any, state: Any, task_id: Any, note: Any, ttl_s: Any, path: Any, now: int
) -> Presence:
    """The entry an announcement at `now` makes (its `path` checked), or ValidationError
    naming the field."""
    name = v.writer("agent", agent)  # `*` addresses everyone; it is nobody's presence
    if state not in STATES:
        raise v.fail("state", f"{state!r} is not one of {', '.join(STATES)}")
    if path is not None and path not in PATHS:
        raise v.fail("path", f"{path!r} is not one of {', '.join(PATHS)}")
    ttl = DEFAULT_TTL_S if ttl_s is None else v.strict_int("ttl_s", ttl_s)
    if not 1 <= ttl <= MAX_TTL_S:
        raise v.fail("ttl_s", f"is {ttl}; it must be between 1 and {MAX_TTL_S}", MAX_TTL_S)
    text = None if note is None else v.body(note, field="note")
    if text is not None and len(text) > MAX_NOTE_CHARS:
        raise v.fail("note", f"is {len(text)} characters; the limit is 500", 500)
    return Presence(
        agent=name,
        state=state,
        task_id=v.routing("task_id", task_id),
        note=text or None,
        announced_ms=now,
        expires_ms=now + ttl * 1000,
    )


def merge_path(held: Paths, path: str, now: int, expires_ms: int) -> Paths:
    """`held` with `path` announced at `now` until `expires_ms`: a live path keeps its
    since-when, a lapsed or new one starts now."""
    since, until = held.get(path, (now, now))
    return {**held, path: (since if until > now else now, expires_ms)}


def full(max_agents: int) -> errors.ValidationError:
    """The refusal of an announcement past `max_agents` live entries."""
    return errors.ValidationError(
        f"this hub tracks at most {max_agents:,} agents; presence refused",
        field="agent",
        limit=max_agents,
    )


class Registry:
    """The hub's presence table; thread-safe (HTTP handlers run in worker threads)."""

    def __init__(
        self,
        *,
        clock: Callable[[], int] = _wall_ms,
        max_agents: int = MAX_AGENTS,
        backing: Backing | None = None,
    ) -> None:
        self._clock = clock
        self._max = max_agents
        self._lock = threading.RLock()
        self._entries: dict[str, Presence] = {}
        self._expiry: list[tuple[int, str]] = []  # (expires_ms, agent), lazily cleaned
        self._listeners: list[Listener] = []
        # agent -> {delivery path: (since_ms, expires_ms)}: each path lives for its own TTL.
        self._paths: dict[str, Paths] = {}
        self._backing = backing
        # Shared: the change number applied last per agent (a leave's too), and the one a
        # resync read the whole table at; a change not newer than both is stale.
        self._revs: dict[str, int] = {}
        self._floor = 0

    def announce(
        self,
        *,
        agent: Any,
        state: Any,
        task_id: Any = None,
        note: Any = None,
        ttl_s: Any = None,
        path: Any = None,
    ) -> Presence:
        """Announce or refresh an agent (and the delivery `path` it is reached by, if named);
        raises ValidationError naming the field."""
        now = self._clock()
        entry = draft(
            agent=agent, state=state, task_id=task_id, note=note, ttl_s=ttl_s, path=path, now=now
        )
        if self._backing is not None:
            rev, paths = self._backing.announce(entry, path, self._max)
            self.apply(rev, entry, paths)
            return entry
        name = entry.agent
        with self._lock:
            self._tell(self._expire(now))
            if name not in self._entries and len(self._entries) >= self._max:
                raise full(self._max)
            self._entries[name] = entry
            heapq.heappush(self._expiry, (entry.expires_ms, name))
            if path is not None:
                held = self._paths_of(name)
                held.update(merge_path(held, path, now, entry.expires_ms))
            self._tell([{"event": "announce", **entry.to_dict()}])
        return entry

    def leave(self, agent: Any) -> bool:
        """Remove an agent at once (a watcher that stops); True if it was present."""
        name = v.writer("agent", agent)
        if self._backing is not None:
            rev, was = self._backing.leave(name, self._clock())
            self.apply_leave(rev, name)
            return was
        return self._remove(name)

    def _remove(self, name: str) -> bool:
        with self._lock:
            now = self._clock()
            gone = self._expire(now)
            entry = self._entries.pop(name, None)
            self._paths.pop(name, None)
            self._tell(gone + ([{"event": "leave", **entry.gone(now)}] if entry else []))
        return entry is not None

    def present(self) -> list[Presence]:
        """Who is home now, by agent name."""
        with self._lock:
            self._tell(self._expire(self._clock()))
            return sorted(self._entries.values(), key=lambda e: e.agent)

    def subscribe(self, listener: Listener, *, snapshot: bool = False) -> Callable[[], None]:
        """Call `listener(frame)` on every change; returns the unsubscribe function.

        With `snapshot`, the listener is first called with an `announce` frame per entry present
        now, atomically with the subscription (no change falls between them). Listeners run
        under the table's lock, in the order of the changes: they must be quick (queue the
        frame) and must not call the registry.
        """
        with self._lock:
            if snapshot:
                self._tell(self._expire(self._clock()))
                for entry in sorted(self._entries.values(), key=lambda e: e.agent):
                    listener({"event": "announce", **entry.to_dict()})
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def paths(self, agent: str) -> dict[str, tuple[int, int]]:
        """`agent`'s live delivery paths: {path: (since_ms, expires_ms)}."""
        now = self._clock()
        with self._lock:
            held = self._paths.get(agent, {})
            return {p: span for p, span in held.items() if span[1] > now}

    def path_agents(self) -> list[str]:
        """Every agent that announced a delivery path here (live or lapsed), by name."""
        with self._lock:
            return sorted(self._paths)

    def announced(self, agent: str) -> bool:
        """Whether `agent` announced a delivery path here, live or lapsed (a reaped watcher,
        a hook-only agent are known here; an agent never announced is not)."""
        with self._lock:
            return agent in self._paths

    def _paths_of(self, agent: str) -> Paths:
        held = self._paths.get(agent)
        if held is None:
            if len(self._paths) >= self._max * 2:  # lapsed agents are forgotten, oldest first
                forgotten = next(iter(self._paths))
                self._paths.pop(forgotten)
                self._revs.pop(forgotten, None)
            held = self._paths[agent] = {}
        return held

    # ------------------------------------------------------------------ shared (issue 23)
    def apply(self, rev: int, entry: Presence, paths: Paths) -> None:
        """A change written to the shared table (here or by another hub): `entry` and its
        agent's `paths` as of change `rev`; a change older than what is held is ignored."""
        with self._lock:
            if self._newer(entry.agent, rev):
                self._put(entry, paths)

    def _put(self, entry: Presence, paths: Paths) -> None:
        now = self._clock()
        frames = self._expire(now)
        held = self._paths_of(entry.agent)
        held.clear()
        held.update(paths)
        old = self._entries.pop(entry.agent, None)
        if entry.expires_ms > now:
            self._entries[entry.agent] = entry
            heapq.heappush(self._expiry, (entry.expires_ms, entry.agent))
            frames.append({"event": "announce", **entry.to_dict()})
        elif old is not None:  # heard of after it lapsed: it went when it lapsed
            frames.append({"event": "expire", **entry.gone(entry.expires_ms)})
        self._tell(frames)

    def apply_leave(self, rev: int, agent: str) -> None:
        """A leave written to the shared table as change `rev` (ignored when stale)."""
        with self._lock:
            if self._newer(agent, rev):
                self._remove(agent)

    def resync(self, rev: int, rows: list[tuple[int, Presence, Paths]]) -> None:
        """The whole shared table as read at change `rev` (a start, a lost feed): each row's
        change, entry and paths. Listeners hear what differs from what was held; changes up
        to `rev` are stale from now on."""
        with self._lock:
            held = {entry.agent for _r, entry, _p in rows}
            for agent in sorted((set(self._paths) | set(self._entries)) - held):
                self._remove(agent)
                self._revs.pop(agent, None)
            for row_rev, entry, paths in rows:
                same = self._entries.get(entry.agent) == entry
                if not (same and self._paths.get(entry.agent) == paths):
                    self._put(entry, paths)
                self._revs[entry.agent] = row_rev
            self._floor = max(self._floor, rev)

    def _newer(self, agent: str, rev: int) -> bool:
        """Whether change `rev` to `agent` is newer than what is held (and now held)."""
        if rev <= self._floor or rev <= self._revs.get(agent, 0):
            return False
        if agent not in self._revs and len(self._revs) >= self._max * 4:
            # Bounded: forget the leaves heard (changes come in order: only a change this hub
            # made and applies late could be older than a leave forgotten, and it lapses).
            for a in [a for a in self._revs if a not in self._paths]:
                del self._revs[a]
        self._revs[agent] = rev
        return True

    def now_ms(self) -> int:
        """The table's clock (a sweeper computes its sleeps on it)."""
        return self._clock()

    def next_expiry_ms(self) -> int | None:
        """When the next entry expires (a hub's timer wakes then to announce it)."""
        with self._lock:
            live = [(t, a) for t, a in self._expiry if self._live(a, t)]
            return min(live)[0] if live else None

    def sweep(self) -> int:
        """Expire what is due now and tell the listeners; returns how many went."""
        with self._lock:
            gone = self._expire(self._clock())
            self._tell(gone)
        return len(gone)

    def _live(self, agent: str, expires_ms: int) -> bool:
        entry = self._entries.get(agent)
        return entry is not None and entry.expires_ms == expires_ms

    def _expire(self, now: int) -> list[dict[str, Any]]:
        gone: list[dict[str, Any]] = []
        while self._expiry and self._expiry[0][0] <= now:
            expires_ms, agent = heapq.heappop(self._expiry)
            if self._live(agent, expires_ms):
                entry = self._entries.pop(agent)
                gone.append({"event": "expire", **entry.gone(expires_ms)})
        return gone

    def _tell(self, frames: list[dict[str, Any]]) -> None:
        """Tell every listener each frame; the caller holds the lock (changes stay in order)."""
        for frame in frames:
            for listener in self._listeners:
                listener(frame)
