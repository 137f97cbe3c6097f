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

import contextlib
import contextvars
import itertools
import json
import operator
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from mempalace_logstream import errors, lazy, notify
from mempalace_logstream.backends.queries import ledger as sql
from mempalace_logstream.store.ids import now_text

if TYPE_CHECKING:
    import logging
    from dataclasses import dataclass

    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore
else:  # made a dataclass on first need (lazy.py): a write's ledger loads no dataclasses
    from mempalace_logstream.lazy import dataclass


def _log() -> "logging.Logger":
    """This module's logger, imported with the first warning: `logging` (~5 ms) is not
    loaded by a lean one-call write that warns nothing."""
    import logging

    return logging.getLogger(__name__)


FLUSH_S = 0.25
CLOSE_WAIT_S = 5.0
DEFAULT_WAKEABLE_WINDOW_S = 1_800
# Every delivery path an agent may announce; all but `hook` push to the agent.
PATHS = ("watch", "channel", "codex", "monitor", "sse", "hook")
PUSH_PATHS = frozenset(PATHS) - {"hook"}
DELIVERY_HEADER = "X-Logstream-Delivery"
OBSERVER = "none"  # a read that delivers to nobody (the dashboard, `X-Logstream-Delivery: none`)
WAKEABLE = ("yes", "unverified", "no")
MAX_PAGES = 4_096  # pages remembered as sorted out (per agent and column)
MAX_QUEUED = 100_000  # pages and acks kept for the next flush when one fails
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


class PageMark(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """The marks of one read (or push) of a page: one statement at the next flush."""

    column: str  # pushed_at or seen_at
    agent: str
    at: str
    path: str | None
    ids: tuple[str, ...]


@dataclass
class Life(lazy.Record):
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
        store: "LogStore",
        *,
        flush_s: float = FLUSH_S,
        clock: Callable[[], int] = _wall_ms,
        registry: "Registry | None" = None,
        window_s: int = DEFAULT_WAKEABLE_WINDOW_S,
        background: bool = True,
    ) -> None:
        self.store, self.flush_s, self.clock = store, flush_s, clock
        # False: no flusher thread, the marks are written by `close` (or `flush`) only: a
        # process that makes one call and exits (the lean writer) starts no thread for them.
        self.background = background
        self.registry, self.window_s = registry, window_s
        self._lock = threading.Lock()  # the read path's: the raw marks and the agents' lives
        # The flusher's (or a close's) sorting and writing: never held by a read.
        self._flush_lock = threading.Lock()
        # (event, recipient) -> the ack to merge (`sql.ROW` keys), the earliest kept
        self._queue: dict[tuple[str, str], dict[str, Any]] = {}
        # (column, agent, ms, path, the events' ids) as the calls left them
        self._raw: list[tuple[str, str, int, str | None, tuple[str, ...]]] = []
        # The pages sorted out, each one statement of the next flush.
        self._page_marks: list[PageMark] = []
        # (column, agent, the ids of a page) sorted out already: a re-read of it is skipped.
        self._pages: dict[tuple[str, str, tuple[str, ...]], int] = {}
        self._life: dict[str, Life] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flushes = 0  # transactions written (tests and the bench read it)

    # ------------------------------------------------------------------ marks
    # A mark costs the read little: its events' ids are kept (`_ids_of`); whom each event
    # reaches and what is recorded already are the flush's statement's, off the read path.
    def pushed(self, events: Sequence[Any], agent: str, path: str) -> None:
        """`events` (public dicts or Events) were handed to `agent`'s delivery path `path`: a
        push when any is addressed to it (a wait that timed out, or others' mail, is none)."""
        ids, tos, senders = _routing_of(events)
        if not any(_to(to, sender, agent) for to, sender in zip(tos, senders, strict=True)):
            return
        now = self.clock()
        with self._lock:
            life = self._life_of(agent)
            life.pushed_ms, life.pushed_path = now, path
            if life.pending_ms is None:
                life.pending_ms = now
            self._raw.append(("pushed_at", agent, now, path, ids))
        self._started()

    def seen(self, events: Sequence[Any], agent: str) -> None:
        """`agent` read `events` (a sign of life)."""
        now = self.alive(agent)
        if events:
            ids = _ids_of(events)
            with self._lock:
                self._raw.append(("seen_at", agent, now, None, ids))
            self._started()

    def acked(self, event_id: str, agent: str) -> None:
        """`agent` acked `event_id` (a sign of life)."""
        now = self.alive(agent)
        with self._lock:
            self._raw.append(("acked_at", agent, now, None, (event_id,)))
        self._started()

    def _sort_out(self) -> None:
        """The raw marks into the queues: a page's marks as one statement (the database reads
        whom each event reaches and keeps the earliest time), skipped when the same agent read
        the same page no later; an ack as a row. Under the flush lock only: a read waits for
        nothing but the swap of the raw list. Runs beside the reads (the GIL is shared), so it
        does no work per event."""
        with self._lock:
            raw, self._raw = self._raw, []
        pages, queue = self._pages, self._queue
        for column, agent, ms, path, ids in raw:
            at = now_text(ms)
            if column == "acked_at":
                key = (ids[0], agent)
                held = queue.get(key)
                if held is None or held["acked_at"] > at:
                    queue[key] = {**dict.fromkeys(sql.ROW), "event_id": ids[0]}
                    queue[key].update(recipient=agent, acked_at=at)
                continue
            # The same page read again by the same agent, no earlier, changes nothing.
            page = (column, agent, ids)
            held_ms = pages.get(page)
            if held_ms is not None and held_ms <= ms:
                continue
            if held_ms is None and len(pages) >= MAX_PAGES:
                pages.pop(next(iter(pages)))
            pages[page] = ms
            self._page_marks.append(PageMark(column, agent, at, path, ids))

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
            life = self._life[agent] = lazy.instance(Life)  # `Life()`, no dataclasses
        return life

    # ------------------------------------------------------------------ flushing
    def _started(self) -> None:
        if self.background and self._thread is None and not self._stop.is_set():
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="logstream-ledger", daemon=True
                    )
                    notify.start_deaf(self._thread)  # a Ctrl-C is the main thread's

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()

    def flush(self) -> int:
        """Write what is queued in one transaction; returns how many events and acks it
        named (the database keeps, of each, what reaches the reader and is earlier)."""
        with self._flush_lock:
            self._sort_out()
            pages, self._page_marks = self._page_marks, []
            acks, self._queue = list(self._queue.values()), {}
            if not pages and not acks:
                return 0

            def write(tx: Any) -> None:
                for m in pages:
                    ids = json.dumps(m.ids)
                    sql.mark_page(tx.ex, m.column, m.agent, m.at, m.path, ids)
                sql.merge(tx.ex, acks)

            try:
                self.store.transaction(write)
            except errors.LogstreamError as exc:
                self._requeue(pages, acks, exc)
                return 0
            self.flushes += 1
            return sum(len(m.ids) for m in pages) + len(acks)

    def _requeue(
        self, pages: list[PageMark], acks: list[dict[str, Any]], exc: BaseException
    ) -> None:
        """A flush failed (a full disk, a lost connection): its marks wait for the next one,
        up to MAX_QUEUED pages and acks; once the ledger or the store is closed they are lost."""
        if self.closed or self.store.pipeline.closed:
            _log().warning(
                "delivery ledger: %d mark(s) not recorded: %s", len(pages) + len(acks), exc
            )
            return
        kept_pages, kept_acks = pages[-MAX_QUEUED:], acks[-MAX_QUEUED:]
        dropped = len(pages) + len(acks) - len(kept_pages) - len(kept_acks)
        _log().warning(
            "delivery ledger: flush failed (%s); %d mark(s) kept for the next one, %d dropped",
            exc,
            len(kept_pages) + len(kept_acks),
            dropped,
        )
        self._page_marks = kept_pages + self._page_marks
        self._queue = {(m["event_id"], m["recipient"]): m for m in kept_acks}

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

    def recall(self) -> int:
        """Learn from the ledger's table each agent's last push and last read or ack, where
        this process knows less (a hub restarted, or pushes through another hub of a
        PostgreSQL log): `wakeable` then survives a restart. Memory wins when it is newer; the
        path of a recalled push is not kept. Returns how many agents it told something."""
        with self.store.snapshot() as ex:
            rows = sql.last_marks(ex)
        told = 0
        with self._lock:
            for agent, pushed_at, life_at in rows:
                told += _recall(self._life_of(agent), _ms(pushed_at), _ms(life_at))
        return told

    def life(self, agent: str) -> Life:
        with self._lock:
            held = self._life.get(agent)
            return lazy.instance(Life, **(vars(held) if held else {}))  # a copy

    def wakeable(self, agent: str, paths: Iterable[str]) -> str:
        """`yes`, `unverified` or `no` for `agent` whose live delivery paths are `paths`."""
        return wakeable(paths, self.life(agent).reacted_ms, self.clock(), self.window_s)


def _recall(life: Life, pushed: int | None, seen: int | None) -> int:
    """Merge a recalled last push and last sign of life into `life`: 1 if it changed."""
    before = (life.pushed_ms, life.life_ms, life.reacted_ms, life.pending_ms)
    if pushed is not None and (life.pushed_ms is None or pushed > life.pushed_ms):
        life.pushed_ms, life.pushed_path = pushed, None
    if seen is not None and (life.life_ms is None or seen > life.life_ms):
        life.life_ms = seen
    if pushed is not None and seen is not None and seen >= pushed:
        if life.reacted_ms is None or seen > life.reacted_ms:
            life.reacted_ms = seen
        if life.pending_ms is not None and life.pending_ms <= seen:
            life.pending_ms = None
    elif pushed is not None and life.pending_ms is None and (life.life_ms or 0) < pushed:
        life.pending_ms = pushed
    return int(before != (life.pushed_ms, life.life_ms, life.reacted_ms, life.pending_ms))


def _ms(at: str | None) -> int | None:
    """Milliseconds of a ledger time (`now_text`), None for None or a text it cannot read."""
    if at is None:
        return None
    try:
        stamp = datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(stamp.timestamp() * 1000)


def wakeable(paths: Iterable[str], reacted_ms: int | None, now_ms: int, window_s: int) -> str:
    """`no` without a live push path; `yes` when the agent reacted to a push within the
    window; else `unverified` (a live path, no reaction seen yet)."""
    if not PUSH_PATHS.intersection(paths):
        return "no"
    if reacted_ms is not None and now_ms - reacted_ms <= window_s * 1000:
        return "yes"
    return "unverified"


# A mark keeps a read's event ids as a tuple of strings, not the events: holding a page of
# dicts until the flush makes the garbage collector run more often on the read path.
_ID, _FROM = operator.itemgetter("id"), operator.itemgetter("from_agent")


def _ids_of(events: Sequence[Any]) -> tuple[str, ...]:
    """The ids of `events` (public dicts or Events), in a C-level loop."""
    if events and type(events[0]) is dict:
        return tuple(map(_ID, events))
    return tuple(e.id for e in events)


def _routing_of(
    events: Sequence[Any],
) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]:
    """(ids, to_agent values, from_agent values) of `events` (public dicts, possibly slim, or
    Events), in C-level loops: whether a push reached its agent."""
    if events and type(events[0]) is dict:
        tos = tuple(map(dict.get, events, itertools.repeat("to_agent")))
        return tuple(map(_ID, events)), tos, tuple(map(_FROM, events))
    return (
        tuple(e.id for e in events),
        tuple(e.to_agent for e in events),
        tuple(e.from_agent for e in events),
    )


def _to(to: Any, sender: Any, agent: str) -> bool:
    """Whether an event reaches `agent`: addressed to it, or to '*' and not its own."""
    return bool(to == agent or (to == "*" and sender != agent))


def status(store: "LogStore", event_id: str) -> dict[str, Any]:
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
_LEDGERS: "weakref.WeakKeyDictionary[LogStore, Ledger]" = weakref.WeakKeyDictionary()
_LEDGERS_LOCK = threading.Lock()


_BY_REGISTRY: "weakref.WeakKeyDictionary[Registry, Ledger]" = weakref.WeakKeyDictionary()


def enable(store: "LogStore", **kwargs: Any) -> Ledger | None:
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
            if _BY_REGISTRY.get(found.registry) is not found:  # a hub's ledger, new here
                threading.Thread(target=_recall_quietly, args=(found,), daemon=True).start()
            _BY_REGISTRY[found.registry] = found
        return found


def _recall_quietly(ledger: Ledger) -> None:
    """`Ledger.recall` off the hub's start-up path; a failure costs only the recall."""
    try:
        ledger.recall()
    except errors.LogstreamError as exc:
        _log().warning("delivery ledger: last pushes not recalled: %s", exc)


def of(store: "LogStore") -> Ledger | None:
    """The ledger recording for `store` in this process, if any."""
    return _LEDGERS.get(store)


def disable(store: "LogStore") -> None:
    """Stop recording for `store` (its queued marks written first)."""
    with _LEDGERS_LOCK:
        found = _LEDGERS.pop(store, None)
    if found is not None:
        found.close()


def current_path() -> str | None:
    """The delivery path of the running call (`delivering`), or None."""
    return _PATH.get()


def for_registry(registry: "Registry") -> Ledger | None:
    """The ledger a hub gave this presence table (wakeable's push and life memory)."""
    return _BY_REGISTRY.get(registry)


def status_of(store: "LogStore", event_id: Any) -> dict[str, Any]:
    """`delivery_status`: the ledger's rows of a held event, with this process's queued marks."""
    from mempalace_logstream import validation as v

    ident = v.required_routing("event_id", event_id)
    ledger = _LEDGERS.get(store)
    return status(store, ident) if ledger is None else ledger.status(ident)
