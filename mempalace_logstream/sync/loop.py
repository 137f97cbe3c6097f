"""The hub's background sync: `SyncLoop` runs rounds with every peer of peers.json, one thread
per peer, re-reading the file every interval; `interval_from_env` reads its period.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.backends.leader import LeaderLock
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.limits import (
    DEFAULT_DEADLINE_S,
    DEFAULT_INTERVAL_S,
    MAX_RESPONSE_BYTES,
)
from mempalace_logstream.sync.peers import estate, http_round, load_peers

log = logging.getLogger(__name__)

INTERVAL_ENV = ("MEMPALACE_LOGSTREAM_SYNC_INTERVAL", "MEMPALACE_SYNC_INTERVAL")


def interval_from_env(environ: Mapping[str, str]) -> float:
    """The hub loop period in seconds: `MEMPALACE_LOGSTREAM_SYNC_INTERVAL`, else the
    reference's `MEMPALACE_SYNC_INTERVAL`, else 15; 0 or less disables the loop."""
    for key in INTERVAL_ENV:
        raw = (environ.get(key) or "").strip()
        if raw:
            try:
                return max(0.0, float(raw))
            except ValueError:
                raise errors.ValidationError(
                    f"{key}={raw!r} must be a number of seconds (0 disables)", field=key
                ) from None
    return DEFAULT_INTERVAL_S


class _Worker:
    """One peer's thread in the hub loop: a round, then `interval` seconds, until retired."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.key = (spec["name"], spec["url"], spec["token"])
        self.retired = threading.Event()
        self.peer: Any = None
        self.thread: threading.Thread | None = None

    def retire(self) -> None:
        self.retired.set()
        if self.peer is not None and getattr(self.peer, "deadline", None) is not None:
            self.peer.deadline.cancel()


class SyncLoop:
    """Background rounds with every peer of `<palace>/peers.json`, every `interval_s` seconds.

    Each peer has its own thread (a round, then `interval_s`), so a slow or hostile peer
    delays only itself; each round ends at `deadline_s` and reads at most
    `max_response_bytes` per response. A supervisor thread re-reads peers.json every
    `interval_s` and starts, replaces or retires peer threads (a malformed file is logged
    once per change). `start()` is a no-op when interval_s <= 0; `stop()` cancels the
    rounds in flight and joins.
    """

    def __init__(
        self,
        store: LogStore,
        palace: str | Path,
        interval_s: float = DEFAULT_INTERVAL_S,
        push: bool = False,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        leader: LeaderLock | None = None,
    ) -> None:
        self.store = store
        self.leader = leader
        self.leading = leader is None  # set by each pass when hubs share the log
        self.palace = Path(palace).expanduser()
        self.interval_s = float(interval_s)
        self.push = push
        self.deadline_s = deadline_s
        self.max_response_bytes = max_response_bytes
        self.rounds = 0  # supervisor passes over peers.json
        self.peer_rounds: dict[str, int] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.last_error: str | None = None
        self.round_done = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: dict[str, _Worker] = {}

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    @property
    def last_results(self) -> list[dict[str, Any]]:
        """The latest result of each configured peer, in peers.json order."""
        with self.round_done:
            return [self.results[n] for n in self._workers if n in self.results]

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="logstream-sync", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        workers = list(self._workers.values())
        for w in workers:
            w.retire()
        end = time.monotonic() + timeout
        for t in [self._thread, *(w.thread for w in workers)]:
            if t is not None:
                t.join(max(0.0, end - time.monotonic()))
        self._thread = None
        self._workers = {}

    def supervise(self) -> None:
        """One pass over peers.json: a thread for each new or changed peer, none for a removed
        one (its round in flight is cancelled). With several hubs on one log, only the
        leading hub runs rounds: the others retire their peers' threads and try to take the
        lead on every pass, so a dead leader is replaced within one interval."""
        if self.leader is not None:
            self.leading = self.leader.hold()
            if not self.leading:
                self._retire_all()
                self._passed()
                return
        try:
            specs, error = load_peers(self.palace), None
        except errors.LogstreamError as exc:
            specs, error = None, exc.message
        if error != self.last_error and error is not None:
            log.warning("sync loop: %s", error)
        self.last_error = error
        if specs is not None:
            wanted = {s["name"]: s for s in specs}
            for name, w in list(self._workers.items()):
                if name not in wanted or w.key != _Worker(wanted[name]).key:
                    w.retire()
                    del self._workers[name]
            for name, spec in wanted.items():
                if name not in self._workers and not self._stop.is_set():
                    self._workers[name] = self._spawn(spec)
        self._passed()

    def _passed(self) -> None:
        """Count a pass of the supervisor (`wait_rounds`)."""
        with self.round_done:
            self.rounds += 1
            self.round_done.notify_all()

    def _retire_all(self) -> None:
        for w in self._workers.values():
            w.retire()
        self._workers = {}

    def _spawn(self, spec: dict[str, Any]) -> _Worker:
        w = _Worker(spec)
        w.thread = threading.Thread(
            target=self._work, args=(w,), daemon=True, name=f"logstream-sync-{spec['name']}"[:60]
        )
        w.thread.start()
        return w

    def _work(self, w: _Worker) -> None:
        name = w.spec["name"]
        while not (self._stop.is_set() or w.retired.is_set()):
            try:
                result = http_round(
                    self.store,
                    w.spec,
                    self.push,
                    None,
                    False,
                    self.deadline_s,
                    self.max_response_bytes,
                    lambda p: setattr(w, "peer", p),
                )
            except Exception:  # the outermost edge of a daemon thread: keep the loop alive
                log.exception("sync loop round with %s failed", name)
                result = {"peer_name": name, "error": "internal error (see the hub log)"}
            with self.round_done:
                if not w.retired.is_set():
                    self.results[name] = result
                self.peer_rounds[name] = self.peer_rounds.get(name, 0) + 1
                self.round_done.notify_all()
            w.retired.wait(self.interval_s)

    def wait_rounds(self, n: int, timeout: float) -> bool:
        """Block until the supervisor has read peers.json at least `n` times."""
        return self._wait(lambda: self.rounds >= n, timeout)

    def wait_peer_rounds(self, name: str, n: int, timeout: float) -> bool:
        """Block until the peer `name` has finished at least `n` rounds (tests, status)."""
        return self._wait(lambda: self.peer_rounds.get(name, 0) >= n, timeout)

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.round_done:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.round_done.wait(left)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.supervise()
            except Exception:  # the outermost edge of a daemon thread: keep the loop alive
                log.exception("sync loop supervision failed")
            self._stop.wait(self.interval_s)

    def estate(self) -> dict[str, Any]:
        out = estate(self.store, self.palace, self.interval_s if self.enabled else 0)
        alive = self._thread is not None
        out["estate_source"] = {"in_process": True, "published_at": None, "writer_alive": alive}
        if self.leader is not None:
            out["sync_leader"] = {"hub": self.leader.holder(), "this_hub": self.leading}
        return out
