"""Hybrid logical clock: `<13-digit unix ms>-<6 hex counter>-<replica id>`.

Fixed width, so string order is causal order with the replica id as the final tiebreak; the
format is shared with the reference so the two can sync. Pure: no SQLAlchemy, no I/O.
"""

import re
import threading
import time
from typing import NamedTuple, Protocol

MAX_COUNTER = 0xFFFFFF
MAX_FUTURE_DRIFT_MS = 60_000
HLC_RE = re.compile(r"^(\d{13})-([0-9a-f]{6})-(\S+)$")
_UNPADDED_MS = 10**12  # the least ms that has 13 digits without padding


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:  # (`HybridClock.tick` reads it inline: the same expression)
        return time.time_ns() // 1_000_000


_time_ns = time.time_ns


# A NamedTuple, not a dataclass: ordered as (wall_ms, counter, replica_id) without the six
# methods a dataclass generates at import (issue 25).
class Stamp(NamedTuple):
    wall_ms: int
    counter: int
    replica_id: str

    def render(self) -> str:
        return f"{self.wall_ms:013d}-{self.counter:06x}-{self.replica_id}"


def parse(value: str) -> Stamp | None:
    """Parse an HLC string; None if it is malformed."""
    if not isinstance(value, str):
        return None
    m = HLC_RE.match(value)
    if not m:
        return None
    return Stamp(int(m.group(1)), int(m.group(2), 16), m.group(3))


def is_valid(value: str) -> bool:
    """Whether `parse` would read `value` (without building the Stamp)."""
    return isinstance(value, str) and HLC_RE.match(value) is not None


class HybridClock:
    """Thread-safe HLC. `now()` is strictly monotonic whatever the wall clock does."""

    def __init__(self, replica_id: str, clock: Clock | None = None) -> None:
        self.replica_id = replica_id
        self._clock = clock or SystemClock()
        # The wall clock is the system's own (not a test's, not a subclass): `tick` reads
        # `time.time_ns` itself, without the Python call of `SystemClock.now_ms` per append.
        self._system = type(self._clock) is SystemClock
        self._lock = threading.Lock()
        self._ms = 0
        self._counter = 0
        # The last stamp `tick` minted, kept when it is well formed (`is_valid`): an event
        # carrying this very object (`stamp is clock.minted`: an equal string from anywhere
        # else is checked) needs no second check of its HLC (identity's verdict). Its length
        # tells: 13 digits of ms (never negative) and 6 of counter, after a suffix checked
        # once here (-1: never well formed). Read-only outside the clock.
        self._stamp_len = 21 + len(replica_id) if is_valid(f"{0:013d}-000000-{replica_id}") else -1
        self.minted: str | None = None

    @property
    def wall_clock(self) -> Clock:
        return self._clock

    def now(self) -> str:
        """Tick: a stamp strictly greater than every stamp issued or observed before."""
        return self.tick()[1]

    def tick(self) -> tuple[int, str]:
        """`now()` with the wall clock's reading it was made at (ms): an event's id and
        creation time take it, so an append reads the clock once."""
        with self._lock:
            wall = _time_ns() // 1_000_000 if self._system else self._clock.now_ms()
            if wall > self._ms:
                self._ms, self._counter = wall, 0
            elif self._counter < MAX_COUNTER:
                self._counter += 1
            else:
                self._ms, self._counter = self._ms + 1, 0
            # `Stamp.render` without the Stamp (a tick per append), and without format specs
            # where they change nothing (each costs ~0.1 µs): ms has 13 digits from 2001 on,
            # and the counter of a new ms is 0.
            ms, counter = self._ms, self._counter
            if ms < _UNPADDED_MS:
                stamp = f"{ms:013d}-{counter:06x}-{self.replica_id}"
            elif counter:
                stamp = f"{ms}-{counter:06x}-{self.replica_id}"
            else:
                stamp = f"{ms}-000000-{self.replica_id}"
            self.minted = stamp if len(stamp) == self._stamp_len else None
            return wall, stamp

    def observe(self, remote: str | None) -> bool:
        """Adopt a remote stamp if it is ahead; ignore malformed or far-future stamps.

        Returns False when the stamp was ignored (malformed, or more than 60 s ahead of the
        wall clock), so callers can report the anomaly.
        """
        stamp = parse(remote) if remote else None
        if stamp is None:
            return False
        with self._lock:
            if stamp.wall_ms > self._clock.now_ms() + MAX_FUTURE_DRIFT_MS:
                return False
            if (stamp.wall_ms, stamp.counter) > (self._ms, self._counter):
                self._ms, self._counter = stamp.wall_ms, stamp.counter
            return True

    def seed(self, own: str | None) -> None:
        """Adopt a stamp this replica issued itself (read back from its log), however far ahead
        of the wall clock: our own stamps are trusted, so a restart after the wall clock moved
        back never issues a stamp below one already in the log."""
        stamp = parse(own) if own else None
        if stamp is None:
            return
        with self._lock:
            if (stamp.wall_ms, stamp.counter) > (self._ms, self._counter):
                self._ms, self._counter = stamp.wall_ms, stamp.counter

    def is_far_future(self, remote: str) -> bool:
        stamp = parse(remote)
        return stamp is not None and stamp.wall_ms > self._clock.now_ms() + MAX_FUTURE_DRIFT_MS
