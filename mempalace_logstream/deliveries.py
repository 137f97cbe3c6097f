"""The delivery ledger and who can be woken (issue 20 items 1-3, RFC 0009).

Per event and recipient the ledger records when a delivery path pushed the event (and which
path), when the recipient first read it, and when it acked it; the earliest time wins per
column. Marks are queued in memory and merged into the `deliveries` table by one background
thread every `FLUSH_S` (and on `close`), in one write transaction, so a read never waits on a
write. Hub-local like presence: never replicated.

Per agent it also keeps, in memory, the last push and the first sign of life after it (a
read, an ack or any write): with the live delivery paths presence knows, that makes
`wakeable` (`yes` / `unverified` / `no`). The surfaces call `delivery_hook.after_call` once an
operation returns (aio.py, operations.py): it decides what the call marks; statements live in
backends/queries/ledger.py.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors
from mempalace_logstream.backends.queries import ledger as sql
from mempalace_logstream.store.ids import now_text

if TYPE_CHECKING:
    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore

log = logging.getLogger(__name__)

FLUSH_S = 0.25
CLOSE_WAIT_S = 5.0
DEFAULT_WAKEABLE_WINDOW_S = 1_800
# Every delivery path an agent may announce; all but `hook` push to the agent.
PATHS = ("watch", "channel", "codex", "monitor", "sse", "hook")
PUSH_PATHS = frozenset(PATHS) - {"hook"}
DELIVERY_HEADER = "X-Logstream-Delivery"
OBSERVER = "none"  # a read that delivers to nobody (the dashboard, `X-Logstream-Delivery: none`)
READS = frozenset({"event_list", "event_wait", "event_get"})
WAKEABLE = ("yes", "unverified", "no")
MAX_PAGES = 4_096  # pages remembered as sorted out (per agent and column)
MAX_KNOWN = 200_000  # marks remembered as recorded (a re-read then writes nothing)
MAX_AGENTS = 10_000  # per-agent push/life entries kept in memory (oldest dropped past it)

# The delivery path of the running call when the client says its read delivers (header).
_PATH: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "logstream_delivery_path", default=None
)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@contextlib.contextmanager
def delivering(path: str | None) -> Iterator[None]:
    """Run the calls inside as reads that push to their agent through `path` (None: plain)."""
    token = _PATH.set(path)
    try:
        yield
    finally:
        _PATH.reset(token)


def check_path(raw: str | None) -> str | None:
    """A delivery path named by a client, or ValidationError naming the header."""
    if raw is None or raw == "":
        return None
    if raw not in PATHS and raw != OBSERVER:
        raise errors.ValidationError(
            f"{DELIVERY_HEADER} is {raw!r}; it must be one of {', '.join(PATHS)} or {OBSERVER}",
            field=DELIVERY_HEADER,
        )
    return raw


@dataclass
class Life:
    """One agent's last push (and path), and the first sign of life after a push."""

    pushed_ms: int | None = None
    pushed_path: str | None = None
    pending_ms: int | None = None  # the first push not reacted to yet
    life_ms: int | None = None
    reacted_ms: int | None = None  # the last sign of life that followed a push


class Ledger:
    """The marks of one store in this process (`enable(store)`); thread-safe."""

    def __init__(
        self,
        store: LogStore,
        *,
        flush_s: float = FLUSH_S,
        clock: Callable[[], int] = _wall_ms,
        registry: Registry | None = None,
        window_s: int = DEFAULT_WAKEABLE_WINDOW_S,
    ) -> None:
        self.store, self.flush_s, self.clock = store, flush_s, clock
        self.registry, self.window_s = registry, window_s
        self._lock = threading.Lock()  # the read path's: the raw marks and the agents' lives
        # The flusher's (or a close's) sorting and writing: never held by a read.
        self._flush_lock = threading.Lock()
        self._queue: dict[tuple[str, str], sql.Mark] = {}
        # (column, agent, ms, path, events or [event id]) as the calls left them
        self._raw: list[tuple[str, str, int, str | None, Sequence[Any]]] = []
        # (event, recipient, column) -> the time queued or written: a later mark is a no-op
        # (the earliest wins), so a re-read costs no write. Bounded, oldest forgotten first.
        self._known: dict[tuple[str, str, str], str] = {}
        # (column, agent, the ids of a page) sorted out already: a re-read of it is skipped.
        self._pages: dict[tuple[str, str, tuple[str, ...]], int] = {}
        self._life: dict[str, Life] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flushes = 0  # transactions written (tests and the bench read it)

    # ------------------------------------------------------------------ marks
    # A mark costs the read O(1): the read's events are kept as they are (a reference) and
    # sorted out (addressed to whom, already recorded?) by the flusher, off the read path.
    def pushed(self, events: Sequence[Any], agent: str, path: str) -> None:
        """`events` (public dicts or Events) were handed to `agent`'s delivery path `path`: a
        push when any is addressed to it (a wait that timed out, or others' mail, is none)."""
        ids = addressed(events, agent)
        if not ids:
            return
        now = self.clock()
        with self._lock:
            life = self._life_of(agent)
            life.pushed_ms, life.pushed_path = now, path
            if life.pending_ms is None:
                life.pending_ms = now
            self._raw.append(("pushed_at", agent, now, path, events))
        self._started()

    def seen(self, events: Sequence[Any], agent: str) -> None:
        """`agent` read `events` (a sign of life)."""
        now = self.alive(agent)
        if events:
            with self._lock:
                self._raw.append(("seen_at", agent, now, None, events))
            self._started()

    def acked(self, event_id: str, agent: str) -> None:
        """`agent` acked `event_id` (a sign of life)."""
        now = self.alive(agent)
        with self._lock:
            self._raw.append(("acked_at", agent, now, None, [event_id]))
        self._started()

    def _sort_out(self) -> None:
        """The raw marks into the queue: per (event, recipient, column), a mark only when it
        is earlier than any queued or written (a re-read writes nothing). Under the flush lock
        only: a read waits for nothing but the swap of the raw list."""
        with self._lock:
            raw, self._raw = self._raw, []
        known, pages = self._known, self._pages
        for column, agent, ms, path, events in raw:
            if column != "acked_at":
                # The same page read again by the same agent, no earlier, changes nothing.
                ids = tuple(e["id"] if isinstance(e, dict) else e.id for e in events)
                page = (column, agent, ids)
                held_ms = pages.get(page)
                if held_ms is not None and held_ms <= ms:
                    continue
                if held_ms is None and len(pages) >= MAX_PAGES:
                    pages.pop(next(iter(pages)))
                pages[page] = ms
            at = now_text(ms)
            for e in events:
                if column == "acked_at":
                    ident = e
                else:
                    row = e if isinstance(e, dict) else _routing(e)
                    ident = row["id"]
                    held = known.get((ident, agent, column))
                    if (held is not None and held <= at) or not _to(row, agent):
                        continue
                if self._fresh((ident, agent, column), at):
                    self._merge(_mark(ident, agent, column, at, path))

    def alive(self, agent: str) -> int:
        """A sign of life of `agent` now (a read, an ack, a write); returns the time."""
        now = self.clock()
        with self._lock:
            life = self._life_of(agent)
            life.life_ms = now
            if life.pending_ms is not None:
                life.reacted_ms, life.pending_ms = now, None
        return now

    def _life_of(self, agent: str) -> Life:
        life = self._life.get(agent)
        if life is None:
            if len(self._life) >= MAX_AGENTS:
                self._life.pop(next(iter(self._life)))
            life = self._life[agent] = Life()
        return life

    def _fresh(self, known: tuple[str, str, str], at: str) -> bool:
        """Whether a mark at `at` can change the ledger: none as early is queued or written
        (the earliest wins; a re-read writes nothing). Remembers it; under the flush lock."""
        held_at = self._known.get(known)
        if held_at is not None and held_at <= at:
            return False
        if held_at is None and len(self._known) >= MAX_KNOWN:
            self._known.pop(next(iter(self._known)))
        self._known[known] = at
        return True

    def _merge(self, mark: sql.Mark) -> None:
        """Queue `mark`, merged with what is queued for its (event, recipient): earliest wins
        (under the flush lock)."""
        key = (mark.event_id, mark.recipient)
        held = self._queue.get(key)
        self._queue[key] = mark if held is None else earliest(held, mark)

    # ------------------------------------------------------------------ flushing
    def _started(self) -> None:
        if self._thread is None and not self._stop.is_set():
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="logstream-ledger", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()

    def flush(self) -> int:
        """Write what is queued in one transaction; returns how many marks went."""
        with self._flush_lock:
            self._sort_out()
            marks, self._queue = list(self._queue.values()), {}
            if not marks:
                return 0
            try:
                self.store.transaction(lambda tx: sql.merge(tx.ex, marks))
            except errors.LogstreamError as exc:  # the store closed or failed: marks are lost
                log.warning("delivery ledger: %d mark(s) not recorded: %s", len(marks), exc)
                return 0
            self.flushes += 1
            return len(marks)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the flusher and write what is queued."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_S)  # a flush stuck on a dead database never hangs an exit
        self.flush()

    # ------------------------------------------------------------------ reading
    def status(self, event_id: str) -> dict[str, Any]:
        """What the ledger holds for `event_id` (queued marks written first)."""
        self.flush()
        return status(self.store, event_id)

    def life(self, agent: str) -> Life:
        with self._lock:
            return replace(self._life.get(agent) or Life())

    def wakeable(self, agent: str, paths: Iterable[str]) -> str:
        """`yes`, `unverified` or `no` for `agent` whose live delivery paths are `paths`."""
        return wakeable(paths, self.life(agent).reacted_ms, self.clock(), self.window_s)


def wakeable(paths: Iterable[str], reacted_ms: int | None, now_ms: int, window_s: int) -> str:
    """`no` without a live push path; `yes` when the agent reacted to a push within the
    window; else `unverified` (a live path, no reaction seen yet)."""
    if not PUSH_PATHS.intersection(paths):
        return "no"
    if reacted_ms is not None and now_ms - reacted_ms <= window_s * 1000:
        return "yes"
    return "unverified"


def _mark(ident: str, agent: str, column: str, at: str, path: str | None) -> sql.Mark:
    if column == "pushed_at":
        return sql.Mark(ident, agent, pushed_at=at, pushed_path=path)
    if column == "seen_at":
        return sql.Mark(ident, agent, seen_at=at)
    return sql.Mark(ident, agent, acked_at=at)


def earliest(a: sql.Mark, b: sql.Mark) -> sql.Mark:
    """The merge of two marks of one (event, recipient): the earliest time per column."""
    pushed, path = a.pushed_at, a.pushed_path
    if b.pushed_at is not None and (pushed is None or b.pushed_at < pushed):
        pushed, path = b.pushed_at, b.pushed_path
    return sql.Mark(
        a.event_id,
        a.recipient,
        pushed_at=pushed,
        pushed_path=path,
        seen_at=_min(a.seen_at, b.seen_at),
        acked_at=_min(a.acked_at, b.acked_at),
    )


def _min(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else min(a, b)


def addressed(events: Iterable[Any], agent: str) -> list[str]:
    """The ids of `events` (public dicts or Events) delivered to `agent`."""
    rows = [e if isinstance(e, dict) else _routing(e) for e in events]
    return [r["id"] for r in rows if _to(r, agent)]


def _to(row: dict[str, Any], agent: str) -> bool:
    """Whether an event reaches `agent`: addressed to it, or to '*' and not its own."""
    to = row.get("to_agent")
    return to == agent or (to == "*" and row["from_agent"] != agent)


def _routing(event: Any) -> dict[str, Any]:
    return {"id": event.id, "to_agent": event.to_agent, "from_agent": event.from_agent}


def status(store: LogStore, event_id: str) -> dict[str, Any]:
    """{event_id, recipients: [{recipient, pushed_at, pushed_path, seen_at, acked_at}], count}
    for a held event (NotFoundError naming event_id otherwise)."""
    store.event_get(event_id)
    with store.snapshot() as ex:
        marks = sql.of_event(ex, event_id)
    rows = [
        {
            "recipient": m.recipient,
            "pushed_at": m.pushed_at,
            "pushed_path": m.pushed_path,
            "seen_at": m.seen_at,
            "acked_at": m.acked_at,
        }
        for m in marks
    ]
    return {"event_id": event_id, "recipients": rows, "count": len(rows)}


# ----------------------------------------------------------------------------- per store
_LEDGERS: weakref.WeakKeyDictionary[LogStore, Ledger] = weakref.WeakKeyDictionary()
_LEDGERS_LOCK = threading.Lock()


_BY_REGISTRY: weakref.WeakKeyDictionary[Registry, Ledger] = weakref.WeakKeyDictionary()


def enable(store: LogStore, **kwargs: Any) -> Ledger | None:
    """Record deliveries for `store` in this process (the hub, a local client); the ledger,
    or None for a read-only store. Settings given replace the ledger's; a hub gives its
    presence `registry` (wakeable, the sender's warning) and `window_s`."""
    if store.read_only:
        return None
    with _LEDGERS_LOCK:
        found = _LEDGERS.get(store)
        if found is None or found.closed:
            found = _LEDGERS[store] = Ledger(store, **kwargs)
        else:
            for key, value in kwargs.items():
                setattr(found, key, value)
        if found.registry is not None:
            _BY_REGISTRY[found.registry] = found
        return found


def of(store: LogStore) -> Ledger | None:
    """The ledger recording for `store` in this process, if any."""
    return _LEDGERS.get(store)


def disable(store: LogStore) -> None:
    """Stop recording for `store` (its queued marks written first)."""
    with _LEDGERS_LOCK:
        found = _LEDGERS.pop(store, None)
    if found is not None:
        found.close()


def current_path() -> str | None:
    """The delivery path of the running call (`delivering`), or None."""
    return _PATH.get()


def for_registry(registry: Registry) -> Ledger | None:
    """The ledger a hub gave this presence table (wakeable's push and life memory)."""
    return _BY_REGISTRY.get(registry)


def status_of(store: LogStore, event_id: Any) -> dict[str, Any]:
    """`delivery_status`: the ledger's rows of a held event, with this process's queued marks."""
    from mempalace_logstream import validation as v

    ident = v.required_routing("event_id", event_id)
    ledger = _LEDGERS.get(store)
    return status(store, ident) if ledger is None else ledger.status(ident)
