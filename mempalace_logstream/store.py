"""LogStore: the only code that runs SQL. Append, read, wait, artifacts, acks, patches, tasks.

Every public method validates first (nothing is written on bad input), runs in one transaction
and returns frozen models. Concurrent appends in one process are group-committed; seq is
assigned under the write lock, so seq order is commit order on every backend (S-2.4).
Must not import fastapi, sse_starlette, typer, mcp or httpx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import backends, errors, hlc, migrate, notify
from mempalace_logstream import engine as engine_mod
from mempalace_logstream import validation as v
from mempalace_logstream.backends import Backend, CoreExecutor, Executor, QueryExecutor
from mempalace_logstream.backends.base import EVENT_COL_NAMES as _EVENT_COL_NAMES
from mempalace_logstream.backends.base import EVENT_COLS
from mempalace_logstream.backends.base import Query as _Query
from mempalace_logstream.models import Artifact, ArtifactDraft, Event, EventDraft, Page
from mempalace_logstream.schema import artifact_blobs, artifacts, event_artifacts, events, meta

_EVENT_COLS = EVENT_COLS  # the events columns but idempotency_key (tests read them)
FROM_AGENT_NOTE = (
    "from_agent is your identity on reads and does not filter; pass writer=<agent> to filter "
    "by author"
)
# An inbox read with up to this many to_agent values runs one index-ordered leg per value
# (see LogStore._page_query); more values fall back to one IN list.
_SPLIT_TO_AGENT_MAX = 8
# The newest seq, artifact seq and HLC stamp, read at the start of every write transaction.
_TX_STATE_QUERY = sa.select(
    sa.select(sa.func.max(events.c.seq)).scalar_subquery(),
    sa.select(sa.func.max(artifacts.c.seq)).scalar_subquery(),
    sa.select(sa.func.max(events.c.hlc)).scalar_subquery(),
    # Our own newest stamp (the origin index finds it): adopted even when it is more than 60 s
    # ahead of the wall clock, so the HLC never goes backwards across restarts.
    sa.select(events.c.hlc)
    .where(events.c.origin_replica == sa.bindparam("own_replica"))
    .order_by(events.c.origin_seq.desc())
    .limit(1)
    .scalar_subquery(),
)
# Hot statements are compiled once per store from the Core tables above and run as plain SQL
# text: on a backend's fast path through its DBAPI connection (no SQLAlchemy per statement),
# elsewhere through `exec_driver_sql`.
# Read statements select the Event fields in declaration order, the artifact links column in
# the `artifact_ids` slot, so a row zips straight into an Event's __dict__.
_EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(Event))
_SEQ_AT, _ID_AT = _EVENT_FIELDS.index("seq"), _EVENT_FIELDS.index("id")
_OSEQ_AT, _LINKS_AT = _EVENT_FIELDS.index("origin_seq"), _EVENT_FIELDS.index("artifact_ids")
# A page row carries its artifact links as "position<RS>id<US>position<RS>id…" (control
# characters never occur in ids), so a read needs no second statement over the page's ids.
_POS_SEP, _LINK_SEP = "\x1e", "\x1f"
# The read filters, described once: field -> (the events column it tests, how). "in": the
# column is one of the values; "not_in": none of them; "inbox": one of them or "*" (broadcast).
# The SQL of a page (`LogStore._page_statement`) and `Filters.matches` both derive from it.
FILTER_RULES: dict[str, tuple[str, str]] = {
    "stream": ("stream", "in"),
    "room": ("room", "in"),
    "topic": ("topic", "in"),
    "type": ("type", "in"),
    "correlation_id": ("correlation_id", "in"),
    "status": ("status", "in"),
    "writer": ("from_agent", "in"),
    "exclude_writer": ("from_agent", "not_in"),
    "to_agent": ("to_agent", "inbox"),
}
# An artifact row in the order `_artifact_from_row` reads it.
ARTIFACT_COLS = [
    artifacts.c[name]
    for name in (
        "id",
        "kind",
        "sha256",
        "size_bytes",
        "encoding",
        "created_by",
        "created_at",
        "origin_replica",
        "metadata_json",
    )
]
_PAGE_FILTERS = tuple(name for name, (_, how) in FILTER_RULES.items() if how != "inbox")


def links_column(backend: Backend) -> sa.Label[Any]:
    """An event's artifact links as one column ("position<RS>id<US>…"), built with the
    backend's string aggregate."""
    ea = event_artifacts.alias("ea")
    char, agg = backend.links_functions()
    item = sa.cast(ea.c.position, sa.Text) + char(sa.literal_column("30")) + ea.c.artifact_id
    link_sep = char(sa.literal_column("31"))
    return (
        sa.select(agg(item, link_sep))
        .where(ea.c.event_id == events.c.id)
        .scalar_subquery()
        .label("artifact_links")
    )


def _artifact_ids(links: str | None) -> tuple[str, ...]:
    if not links:
        return ()
    pairs = [item.split(_POS_SEP, 1) for item in links.split(_LINK_SEP)]
    return tuple(aid for _, aid in sorted(pairs, key=lambda p: int(p[0])))


def _read_columns(backend: Backend) -> list[sa.ColumnElement[Any]]:
    cols: list[sa.ColumnElement[Any]] = []
    for name in _EVENT_FIELDS:
        cols.append(links_column(backend) if name == "artifact_ids" else events.c[name])
    return cols


def _events_from_rows(rows: Sequence[Sequence[Any]]) -> list[Event]:
    """Events from rows of `_read_columns` (plain tuples or Rows): the one row -> Event.

    A frozen dataclass assigns every field through `object.__setattr__` in `__init__`; filling
    `__dict__` directly builds the same object ~6x faster (a page has up to 500 of them).
    """
    out = []
    new, names = object.__new__, _EVENT_FIELDS
    for row in rows:
        event = new(Event)
        values = event.__dict__
        values.update(zip(names, row, strict=True))
        values["seq"], values["origin_seq"] = int(row[_SEQ_AT]), int(row[_OSEQ_AT])
        values["artifact_ids"] = _artifact_ids(row[_LINKS_AT])
        out.append(event)
    return out


@functools.lru_cache(maxsize=4)
def _second_stamps(second: int) -> tuple[str, str]:
    """("YYYY-MM-DDTHH:MM:SS.", "YYYYMMDDTHHMMSS") of a UTC second: formatted once per second,
    not twice per append (strftime was a tenth of an append's CPU)."""
    dt = datetime.fromtimestamp(second, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S."), dt.strftime("%Y%m%dT%H%M%S")


def _now_text(ms: int) -> str:
    return f"{_second_stamps(ms // 1000)[0]}{ms % 1000:03d}Z"


def new_id(prefix: str, ms: int) -> str:
    return f"{prefix}_{_second_stamps(ms // 1000)[1]}_{secrets.token_hex(10)}"


def mint_replica_id() -> str:
    return f"rep_{secrets.token_hex(16)}"


def slug(text: str, fallback: str) -> str:
    out = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40].rstrip("_")
    return out or fallback


@dataclass(frozen=True, kw_only=True)
class Filters:
    """Validated read filters (S-5.1): OR within a field, AND across fields."""

    stream: tuple[str, ...] | None = None
    room: tuple[str, ...] | None = None
    topic: tuple[str, ...] | None = None
    type: tuple[str, ...] | None = None
    to_agent: tuple[str, ...] | None = None
    writer: tuple[str, ...] | None = None
    exclude_writer: tuple[str, ...] | None = None
    correlation_id: tuple[str, ...] | None = None
    status: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, **raw: Any) -> Filters:
        return cls(**{name: v.filter_values(name, raw.get(name)) for name in v.FILTER_FIELDS})

    def matches(self, event: Event) -> bool:
        """`FILTER_RULES` evaluated in Python (SSE fan-out, watch): the page's SQL rules."""
        for name, (column, how) in FILTER_RULES.items():
            values = getattr(self, name)
            if not values:
                continue
            value = getattr(event, column)
            if how == "not_in":
                if value in values:
                    return False
            elif value not in values and not (how == "inbox" and value == "*"):
                return False
        return True


@dataclass
class _Pending:
    fn: Callable[[sa.Connection, _TxState], Any]
    # The same work on the backend's fast-path DBAPI connection (event_append, event_ack,
    # replication): used when every item of a batch has one; any other item sends the whole
    # batch down `fn`.
    raw: Callable[[Any, _TxState], Any] | None = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class _TxState:
    next_seq: int
    next_artifact_seq: int
    appended: list[Event] = field(default_factory=list)


class LogStore:
    """The append-only event and artifact store (SQLite file or PostgreSQL).

    Thread-safe; one instance per process per database is the intended use. Errors raised:
    `ValidationError` (bad input, nothing written), `NotFoundError`, `ConflictError`,
    `StorageError`.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: hlc.Clock | None = None,
        max_body_bytes: int = v.DEFAULT_MAX_BODY_BYTES,
        max_artifact_bytes: int = v.DEFAULT_MAX_ARTIFACT_BYTES,
        migrate_schema: bool = True,
    ) -> None:
        self.engine = engine
        self.backend = backends.for_engine(engine)
        self.dialect = self.backend.name
        self._writer = engine_mod.writer(engine)
        self.max_body_bytes = max_body_bytes
        self.max_artifact_bytes = max_artifact_bytes
        # A file this process may not write: no migration, only a schema check (and no writes).
        self.read_only = engine_mod.read_only_kind(engine) is not None
        self.created = engine_mod.was_created(engine)  # this open made a new log file
        with self._storage_errors():
            if migrate_schema and not self.read_only:
                migrate.ensure_schema(engine)
            else:
                migrate.check_schema(engine)
            self.replica_id = self._load_replica_id()
        self.clock = hlc.HybridClock(self.replica_id, clock)
        self.notifier = notify.Notifier()
        self._change_watcher = self._make_change_watcher()
        self._notify_channel = self.backend.notify_channel
        if self._change_watcher is not None:
            self.notifier.attach(self._change_watcher)
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._closed = False
        # Precompiled SQL text per statement shape (see `_sql`).
        self._sql_dialect = self.backend.sql_dialect()
        self._sql_cache: dict[Any, tuple[str, dict[str, Any]]] = {}
        self._read_cols = _read_columns(self.backend)
        # Write transactions committed by this store (one per group commit; read by tests
        # and `stats` to show that concurrent appends share commits).
        self.commits = 0

    @classmethod
    def open(
        cls, url: str, *, durability: str = "full", create: bool = True, **kwargs: Any
    ) -> LogStore:
        """Open (and migrate) the store at a SQLAlchemy URL or SQLite file path.

        `create=False` (readers) refuses a missing SQLite file instead of making an empty log;
        a file that is not a logstream database is refused either way; a file this process
        may not write opens read-only (see engine.py). Errors name the database."""
        engine = engine_mod.create_engine(url, durability=durability, create=create)
        try:
            return cls(engine, **kwargs)
        except errors.StorageError as exc:
            engine.dispose()
            where = backends.for_engine(engine).describe()
            if where in exc.message:
                raise
            raise type(exc)(f"cannot open {where}: {exc.message}") from exc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._change_watcher is not None:
            self._change_watcher.stop()
        with self._commit_lock:
            self.backend.close()
        self.engine.dispose()

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- plumbing

    def _storage_errors(self) -> contextlib.AbstractContextManager[None]:
        """Database errors (SQLAlchemy's, or the fast path's driver's) become StorageError."""
        return backends.wrap_exceptions(self.backend.driver_errors)

    def _load_replica_id(self) -> str:
        # A plain read first: every open (each CLI call) would otherwise queue for the write
        # lock behind busy writers just to read a value that is minted once.
        query = sa.select(meta.c.value).where(meta.c.key == "replica_id")
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row:
            return str(row[0])
        if self.read_only:
            return ""  # minted by the first writer; a reader does not need one
        with self._writer.begin() as conn:
            self._lock_writes(conn)
            row = conn.execute(query).first()
            if row:
                return str(row[0])
            rid = mint_replica_id()
            conn.execute(sa.insert(meta).values(key="replica_id", value=rid))
            return rid

    def _lock_writes(self, conn: sa.Connection) -> None:
        self.backend.lock_writes(conn)

    def _make_change_watcher(self) -> notify.ChangeWatcher | None:
        """The cross-process wake-up signal: one thread per store, running while anyone waits."""
        with self._storage_errors():
            factory = self.backend.change_signal()
        return None if factory is None else notify.ChangeWatcher(self.notifier, factory)

    def _submit(
        self,
        fn: Callable[[sa.Connection, _TxState], Any],
        raw: Callable[[Any, _TxState], Any] | None = None,
    ) -> Any:
        """Run `fn` in a write transaction, group-committed with concurrent callers.

        `raw`, when given, is the same work on the backend's fast-path DBAPI connection; the
        batch takes that path when every item has one (see `_fast_path`).
        """
        if self._closed:
            raise errors.StorageError("the store is closed")
        item = _Pending(fn, raw)
        with self._queue_lock:
            self._queue.append(item)
        with self._commit_lock:
            if not item.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                if self._fast_path() and all(i.raw is not None for i in batch):
                    self._run_raw_batch(batch)
                else:
                    self._run_batch(batch)
        if item.error is not None:
            raise item.error
        return item.result

    def _run_batch(self, batch: list[_Pending]) -> None:
        with self._settling(batch) as appended:
            with self._storage_errors(), self._writer.begin() as conn:
                state = self._begin_state(conn)
                for item in batch:
                    self._run_item(conn, state, item, savepoint=len(batch) > 1)
                if state.appended:
                    self.backend.after_appends(conn)
            self.commits += 1
            appended += state.appended

    @contextlib.contextmanager
    def _settling(self, batch: list[_Pending]) -> Iterator[list[Event]]:
        """Settle every item of a batch however its transaction ends; the body adds what it
        committed to the yielded list, and waiters are woken once if anything was."""
        appended: list[Event] = []
        try:
            yield appended
        except BaseException as exc:  # the commit failed: nobody in the batch was written
            appended.clear()
            for item in batch:
                if item.error is None:
                    item.error = exc
                    item.result = None
        finally:
            for item in batch:
                item.done = True
        if appended:
            self.notifier.bump()

    def _run_item(
        self, conn: sa.Connection, state: _TxState, item: _Pending, savepoint: bool
    ) -> None:
        nested = conn.begin_nested if savepoint else None
        self._isolated(state, item, lambda: item.fn(conn, state), nested)

    def _run_raw_item(self, db: Any, state: _TxState, item: _Pending, savepoint: bool) -> None:
        fast = self.backend.fast_path()
        assert fast is not None and item.raw is not None
        raw = item.raw
        nested = functools.partial(fast.savepoint, db) if savepoint else None
        self._isolated(state, item, lambda: raw(db, state), nested)

    def _isolated(
        self,
        state: _TxState,
        item: _Pending,
        run: Callable[[], Any],
        nested: Callable[[], contextlib.AbstractContextManager[Any]] | None,
    ) -> None:
        """Run one item of a batch. When several share the commit (`nested` is given), each
        runs in its own savepoint: a failing item (bad reference, idempotency conflict, even a
        database error on its rows) is rolled back alone and reported to its caller; the
        others still commit."""
        if nested is None:
            item.result = run()
            return
        snapshot = (state.next_seq, state.next_artifact_seq, len(state.appended))
        try:
            with nested():
                item.result = run()
        except Exception as exc:
            item.error = exc
            mapped = backends.storage_error(exc, self.backend.driver_errors)
            if mapped is not None:
                item.error = mapped
                mapped.__cause__ = exc
            state.next_seq, state.next_artifact_seq = snapshot[0], snapshot[1]
            del state.appended[snapshot[2] :]

    def _fast_path(self) -> bool:
        """Whether the backend's own DBAPI path is usable now (see its `fast_path`)."""
        return self.backend.fast_path() is not None

    def _sql(
        self, key: Any, build: Callable[[], sa.Executable], params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """(SQL text, parameters) of a statement shape compiled once per store; `params` plus
        the values of the statement's own literals (a LIMIT 1 is a bound parameter too)."""
        hit = self._sql_cache.get(key)
        if hit is None:
            compiled = build().compile(dialect=self._sql_dialect)  # type: ignore[attr-defined]
            defaults = {k: v for k, v in compiled.params.items() if v is not None}
            hit = self._sql_cache[key] = (str(compiled), defaults)
        sql, defaults = hit
        return sql, ({**defaults, **params} if defaults else params)

    def _run_raw_batch(self, batch: list[_Pending]) -> None:
        """`_run_batch` on the fast path's DBAPI connection, with the same semantics: the
        write lock, the state query, one SAVEPOINT per item when several share the commit,
        COMMIT; driver errors become StorageError with the same texts."""
        fast = self.backend.fast_path()
        assert fast is not None
        with self._settling(batch) as appended:
            with self._storage_errors(), fast.transaction() as tx:
                state = self._fast_state(tx.db, tx.known)
                for item in batch:
                    self._run_raw_item(tx.db, state, item, savepoint=len(batch) > 1)
                tx.counters = (state.next_seq, state.next_artifact_seq)
            self.commits += 1
            appended += state.appended

    def _fast_state(self, db: Any, known: tuple[int, int] | None) -> _TxState:
        """The transaction's starting counters. `known`: nobody committed since our last
        commit, so our counters are exact and the clock is already past every stamp in the
        file; the state query is skipped."""
        if known is not None:
            return _TxState(next_seq=known[0], next_artifact_seq=known[1])
        params = {"own_replica": self.replica_id}
        sql, params = self._sql("tx-state", lambda: _TX_STATE_QUERY, params)
        fast = self.backend.fast_path()
        assert fast is not None
        return self._state_from(*fast.query(db)(sql, params)[0])

    def _state_from(self, max_seq: Any, max_art: Any, top: Any, own: Any) -> _TxState:
        max_seq, max_art = max_seq or 0, max_art or 0
        # Other processes append too: never tick below the newest stamp in the file.
        self.clock.seed(own)
        if top:
            self.clock.observe(top)
        return _TxState(next_seq=max_seq + 1, next_artifact_seq=max_art + 1)

    def _begin_state(self, conn: sa.Connection) -> _TxState:
        self._lock_writes(conn)
        # One prebuilt statement, not three: this runs once per (group) commit, and each
        # separate SQLAlchemy execute cost ~0.2 ms of CPU, a third of a one-row append.
        row = conn.execute(_TX_STATE_QUERY, {"own_replica": self.replica_id}).one()
        return self._state_from(*row)

    # ----------------------------------------------------------------- events: write

    def draft_event(
        self,
        *,
        type: Any,
        stream: Any,
        room: Any,
        from_agent: Any,
        topic: Any = None,
        to_agent: Any = None,
        correlation_id: Any = None,
        branch: Any = None,
        base_commit: Any = None,
        status: Any = None,
        body: Any = "",
        metadata: Any = None,
        artifact_ids: Any = None,
        idempotency_key: Any = None,
    ) -> EventDraft:
        """Validate raw event fields (S-4) into a draft; raises ValidationError."""
        return EventDraft(
            type=v.event_type(type),
            stream=v.required_routing("stream", stream),
            room=v.required_routing("room", room),
            from_agent=v.required_routing("from_agent", from_agent),
            topic=v.routing("topic", topic),
            to_agent=v.routing("to_agent", to_agent),
            correlation_id=v.routing("correlation_id", correlation_id),
            branch=v.routing("branch", branch),
            base_commit=v.routing("base_commit", base_commit),
            status=v.status(status),
            body=v.body(body, self.max_body_bytes),
            metadata_json=v.metadata(metadata),
            artifact_ids=v.artifact_ids(artifact_ids),
            idempotency_key=v.idempotency_key(idempotency_key),
        )

    def event_append(self, **fields: Any) -> Event:
        """Append one event. Idempotent per (from_agent, idempotency_key).

        Referenced artifacts must exist. Durable at the configured level when it returns.
        Raises ValidationError, NotFoundError (unknown artifact), ConflictError (a reused
        idempotency key with different content).
        """
        draft = self.draft_event(**fields)
        return self._write(lambda ex, st: self._insert_event(ex, st, draft))

    def _write(
        self,
        work: Callable[[Executor, _TxState], Any],
        on_bulk: Callable[[], Any] | None = None,
    ) -> Any:
        """Run `work` with the statements of a group-committed write transaction: on the
        backend's fast path when it has one, else through SQLAlchemy. `on_bulk` is called by
        the fast path when the rest of the transaction is long work that releases the GIL."""
        fast = self.backend.fast_path()
        raw: Callable[[Any, _TxState], Any] | None = None
        if fast is not None:

            def raw(db: Any, st: _TxState) -> Any:
                return work(fast.executor(db, self._sql, on_bulk), st)

        return self._submit(lambda conn, st: work(CoreExecutor(conn), st), raw)

    def _insert_event(self, ex: Executor | sa.Connection, st: _TxState, draft: EventDraft) -> Event:
        """The one insert of a local event: the idempotent replay, the artifact references,
        the row and its links."""
        if isinstance(ex, sa.Connection):
            ex = CoreExecutor(ex)
        if draft.idempotency_key is not None:
            prior = self._find_idempotent(ex, draft)
            if prior is not None:
                return self._same_as_prior(prior, draft)
        for aid in draft.artifact_ids:
            if not ex.rows("artifact-exists", _artifact_exists, {"id": aid}):
                raise errors.NotFoundError(
                    f"artifact_ids references unknown artifact {aid!r}; put it first",
                    field="artifact_ids",
                    ident=aid,
                )
        event = self._new_event(st, draft)
        row = {name: event.__dict__[name] for name in _EVENT_COL_NAMES}
        row["idempotency_key"] = draft.idempotency_key
        ex.insert("insert-event", events, [row])
        if event.artifact_ids:
            links = [
                {"event_id": event.id, "artifact_id": a, "position": i}
                for i, a in enumerate(event.artifact_ids)
            ]
            ex.insert("insert-link", event_artifacts, links)
        st.next_seq += 1
        st.appended.append(event)
        return event

    def _new_event(self, st: _TxState, draft: EventDraft) -> Event:
        ms = self.clock.wall_clock.now_ms()
        seq = st.next_seq
        return Event(
            id=new_id("evt", ms),
            seq=seq,
            origin_replica=self.replica_id,
            origin_seq=seq,
            hlc=self.clock.now(),
            type=draft.type,
            stream=draft.stream,
            room=draft.room,
            topic=draft.topic,
            from_agent=draft.from_agent,
            to_agent=draft.to_agent,
            correlation_id=draft.correlation_id,
            branch=draft.branch,
            base_commit=draft.base_commit,
            status=draft.status,
            artifact_ids=draft.artifact_ids,
            body=draft.body,
            created_at=_now_text(ms),
            metadata_json=draft.metadata_json,
        )

    def _find_idempotent(self, ex: Executor, draft: EventDraft) -> Event | None:
        """The event stored earlier under the draft's (from_agent, idempotency_key)."""

        def build() -> sa.Select[Any]:
            return self._event_select(
                events.c.from_agent == sa.bindparam("from_agent"),
                events.c.idempotency_key == sa.bindparam("idempotency_key"),
            )

        params = {"from_agent": draft.from_agent, "idempotency_key": draft.idempotency_key}
        rows = ex.rows("idempotent", build, params)
        return _events_from_rows(rows)[0] if rows else None

    def _same_as_prior(self, prior: Event, draft: EventDraft) -> Event:
        """The earlier event of an idempotency key, or ConflictError if its content differs."""
        same = (
            prior.type,
            prior.stream,
            prior.room,
            prior.topic,
            prior.to_agent,
            prior.correlation_id,
            prior.branch,
            prior.base_commit,
            prior.status,
            prior.artifact_ids,
            prior.body,
            prior.metadata_json,
        ) == (
            draft.type,
            draft.stream,
            draft.room,
            draft.topic,
            draft.to_agent,
            draft.correlation_id,
            draft.branch,
            draft.base_commit,
            draft.status,
            draft.artifact_ids,
            draft.body,
            draft.metadata_json,
        )
        if not same:
            raise errors.ConflictError(
                f"idempotency_key {draft.idempotency_key!r} was already used by "
                f"{draft.from_agent!r} for a different event ({prior.id}); use a new key",
                field="idempotency_key",
                ident=prior.id,
            )
        return prior

    def event_ack(
        self,
        *,
        event_id: Any,
        from_agent: Any,
        status: Any = None,
        body: Any = "",
        topic: Any = None,
        metadata: Any = None,
        idempotency_key: Any = None,
    ) -> Event:
        """Acknowledge an event by appending `event.ack` (S-1.3); the target never changes."""
        target_id = v.required_routing("event_id", event_id)
        extra = v.metadata(metadata)
        base = self.draft_event(
            type="event.ack",
            stream="-",
            room="-",
            from_agent=from_agent,
            status=status,
            body=body,
            topic=topic,
            idempotency_key=idempotency_key,
        )

        def ack_draft(target: Event) -> EventDraft:
            meta_json = '{"ack_of":' + _json_str(target.id)
            meta_json += ("," + extra[1:]) if extra != "{}" else "}"
            draft = EventDraft(
                type="event.ack",
                stream=target.stream,
                room=target.room,
                from_agent=base.from_agent,
                topic=base.topic if base.topic is not None else target.topic,
                to_agent=target.from_agent,
                correlation_id=target.correlation_id or target.id,
                status=base.status,
                body=base.body,
                metadata_json=meta_json,
                idempotency_key=base.idempotency_key,
            )
            return draft

        def write(ex: Executor, st: _TxState) -> Event:
            target = self._event_by_id(ex, target_id, field="event_id")
            return self._insert_event(ex, st, ack_draft(target))

        return self._write(write)

    # ----------------------------------------------------------------- artifacts

    def draft_artifact(
        self,
        *,
        kind: Any,
        content: Any,
        created_by: Any,
        metadata: Any = None,
        encoding: Any = None,
        content_field: str = "content",
    ) -> ArtifactDraft:
        clean_kind = v.artifact_kind(kind)
        raw, enc = v.artifact_content(
            content, v.encoding(encoding), self.max_artifact_bytes, content_field
        )
        return ArtifactDraft(
            kind=clean_kind,
            content=raw,
            encoding=enc,
            created_by=v.required_routing("created_by", created_by),
            metadata_json=v.metadata(metadata),
            warnings=v.patch_warnings(raw) if clean_kind == "patch" else (),
        )

    def artifact_put(self, **fields: Any) -> Artifact:
        """Store an artifact byte-exact; content is kept once per sha256. Returns no content."""
        draft = self.draft_artifact(**fields)
        return self._write(lambda ex, st: self._insert_artifact(ex, st, draft))

    def _insert_artifact(
        self, ex: Executor | sa.Connection, st: _TxState, draft: ArtifactDraft
    ) -> Artifact:
        if isinstance(ex, sa.Connection):
            ex = CoreExecutor(ex)
        digest = hashlib.sha256(draft.content).hexdigest()
        self._ensure_blob(ex, digest, draft.content)
        ms = self.clock.wall_clock.now_ms()
        art = Artifact(
            id=new_id("art", ms),
            kind=draft.kind,
            sha256=digest,
            size_bytes=len(draft.content),
            encoding=draft.encoding,
            created_by=draft.created_by,
            created_at=_now_text(ms),
            origin_replica=self.replica_id,
            metadata_json=draft.metadata_json,
            warnings=draft.warnings,
        )
        self._write_artifact_row(ex, st, art)
        return art

    def _ensure_blob(self, ex: Executor, digest: str, content: bytes) -> None:
        """Store content once per sha256."""
        if not ex.rows("blob-exists", _blob_exists, {"sha": digest}):
            row = {"sha256": digest, "size_bytes": len(content), "content": content}
            ex.insert("insert-blob", artifact_blobs, [row])

    def _write_artifact_row(self, ex: Executor, st: _TxState, art: Artifact) -> None:
        """The artifacts row of `art` (local or replicated), with the next artifact seq."""
        row = {
            "id": art.id,
            "seq": st.next_artifact_seq,
            "kind": art.kind,
            "sha256": art.sha256,
            "size_bytes": art.size_bytes,
            "encoding": art.encoding,
            "created_by": art.created_by,
            "created_at": art.created_at,
            "origin_replica": art.origin_replica,
            "metadata_json": art.metadata_json,
        }
        ex.insert("insert-artifact", artifacts, [row])
        st.next_artifact_seq += 1

    def artifact_get(self, artifact_id: Any) -> Artifact:
        """The artifact with its exact content; NotFoundError if unknown."""
        ident = v.required_routing("artifact_id", artifact_id)
        with self._storage_errors(), self.engine.connect() as conn:
            row = conn.execute(
                sa.select(*ARTIFACT_COLS, artifact_blobs.c.content)
                .join(artifact_blobs, artifact_blobs.c.sha256 == artifacts.c.sha256)
                .where(artifacts.c.id == ident)
            ).first()
        if row is None:
            raise errors.NotFoundError(
                f"artifact {ident!r} not found", field="artifact_id", ident=ident
            )
        content = bytes(row[-1])
        # Re-hashed on every read (cheap next to the I/O): bytes changed behind the log are
        # never served under the original digest.
        actual = hashlib.sha256(content).hexdigest()
        if actual != row.sha256:
            raise errors.IntegrityError(
                f"artifact {ident!r} is corrupt: its stored content hashes to {actual}, not "
                f"its sha256 {row.sha256}; restore the database from a backup or a replica",
                ident=ident,
            )
        return _artifact_from_row(row, content)

    def patch_submit(
        self,
        *,
        content: Any,
        from_agent: Any,
        stream: Any,
        room: Any = "patches",
        topic: Any = None,
        to_agent: Any = None,
        correlation_id: Any = None,
        branch: Any = None,
        base_commit: Any = None,
        body: Any = "",
        metadata: Any = None,
        encoding: Any = None,
        idempotency_key: Any = None,
    ) -> dict[str, Any]:
        """Store a patch artifact and append `patch.ready` in ONE transaction (S-1.4).

        Every field is validated before anything is written. Returns {artifact, event,
        warnings}; warnings are advisories, the content is never rewritten.
        """
        art_draft = self.draft_artifact(
            kind="patch",
            content=content,
            created_by=from_agent,
            metadata=metadata,
            encoding=encoding,
        )
        ev_draft = self.draft_event(
            type="patch.ready",
            stream=stream,
            room=room,
            from_agent=from_agent,
            topic=topic,
            to_agent=to_agent,
            correlation_id=correlation_id,
            branch=branch,
            base_commit=base_commit,
            status="ready",
            body=body,
            metadata=metadata,
            idempotency_key=idempotency_key,
        )

        def write(ex: Executor, st: _TxState) -> tuple[Artifact, Event]:
            if ev_draft.idempotency_key is not None:
                prior = self._find_idempotent_patch(ex, ev_draft)
                if prior is not None:
                    # The same key with other patch bytes is a different submission.
                    if prior[0].sha256 != hashlib.sha256(art_draft.content).hexdigest():
                        raise errors.ConflictError(
                            f"idempotency_key {ev_draft.idempotency_key!r} was already used for "
                            f"a different patch ({prior[1].id}); use a new key",
                            field="idempotency_key",
                            ident=prior[1].id,
                        )
                    return prior
            art = self._insert_artifact(ex, st, art_draft)
            draft = EventDraft(**{**ev_draft.__dict__, "artifact_ids": (art.id,)})
            return art, self._insert_event(ex, st, draft)

        art, event = self._write(write)
        return {
            "artifact": art,
            "event": event,
            "warnings": list(art_draft.warnings),
        }

    def _find_idempotent_patch(
        self, ex: Executor, draft: EventDraft
    ) -> tuple[Artifact, Event] | None:
        prior = self._find_idempotent(ex, draft)
        if prior is None:
            return None
        if not prior.artifact_ids:
            raise errors.ConflictError(
                f"idempotency_key {draft.idempotency_key!r} was used for a non-patch event",
                field="idempotency_key",
                ident=prior.id,
            )
        full = EventDraft(**{**draft.__dict__, "artifact_ids": prior.artifact_ids})
        self._same_as_prior(prior, full)
        return self._artifact_meta(ex, prior.artifact_ids[0]), prior

    def _artifact_meta(self, ex: Executor, ident: str) -> Artifact:
        def build() -> sa.Select[Any]:
            return sa.select(*ARTIFACT_COLS).where(artifacts.c.id == sa.bindparam("id"))

        rows = ex.rows("artifact-meta", build, {"id": ident})
        if not rows:
            raise errors.NotFoundError(f"artifact {ident!r} not found", field="artifact_id")
        return _artifact_from_row(rows[0], None)

    # ----------------------------------------------------------------- tasks

    def task_create(
        self,
        *,
        project: Any,
        from_agent: Any,
        to_agent: Any,
        goal: Any,
        branch: Any,
        base_commit: Any,
        done: Any,
        parent_correlation_id: Any = None,
        idempotency_key: Any = None,
    ) -> dict[str, Any]:
        """Append a `task.request` (S-3.1) and return {task, handoff}."""
        clean_project = v.required_routing("project", project)
        clean_goal = v.non_blank_text("goal", goal)
        clean_done = v.non_blank_text("done", done)
        to = v.required_routing("to_agent", to_agent)
        v.required_routing("branch", branch)
        commit = v.base_commit_hex(base_commit)
        parent = v.routing("parent_correlation_id", parent_correlation_id)
        correlation = f"task_{slug(clean_goal, 'work')}_{secrets.token_hex(4)}"
        body = (
            f"Goal:\n{clean_goal}\n\nDefinition of done:\n{clean_done}\n\nDelivery:\n"
            "Claim this task (an event with status=claimed on this correlation_id), then submit "
            "a patch with mempalace_patch_submit, or reply with status=blocked or failed and "
            "the evidence."
        )
        meta_json = {"parent_correlation_id": parent} if parent else None
        task = self.event_append(
            type="task.request",
            stream=f"project/{slug(clean_project, 'project')}",
            room="delegation",
            from_agent=from_agent,
            to_agent=to,
            correlation_id=correlation,
            branch=branch,
            base_commit=commit,
            status="open",
            body=body,
            metadata=meta_json,
            idempotency_key=idempotency_key,
        )
        handoff = (
            f"Open MemPalace task {task.correlation_id} as {to}. Claim it, follow its exact "
            "definition of done, and deliver through the logstream."
        )
        return {"task": task, "handoff": handoff}

    # ----------------------------------------------------------------- events: read

    def event_get(self, event_id: Any) -> Event:
        ident = v.required_routing("event_id", event_id)
        with self._reading() as query:
            return self._event_by_id(QueryExecutor(query, self._sql), ident, field="event_id")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[_Query]:
        """One read snapshot that runs precompiled SQL text and returns plain rows.

        On the backend's fast path: its own DBAPI connection, no SQLAlchemy per statement.
        Otherwise (PostgreSQL, or an engine with cursor listeners): the same text through
        `exec_driver_sql`, so listeners see every statement.
        """
        fast = self.backend.fast_path()
        if fast is None:
            with self._storage_errors(), self.engine.connect() as conn:
                yield lambda sql, params: conn.exec_driver_sql(sql, dict(params)).all()
            return
        with fast.reading() as query:
            yield query

    def _event_select(self, *where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        """The Event columns (`_events_from_rows` reads them) of the rows matching `where`."""
        return sa.select(*self._read_cols).where(*where)

    def _event_by_id(self, ex: Executor, ident: str, *, field: str) -> Event:
        def build() -> sa.Select[Any]:
            return self._event_select(events.c.id == sa.bindparam("id"))

        rows = ex.rows("event-by-id", build, {"id": ident})
        if not rows:
            raise errors.NotFoundError(f"{field} {ident!r} not found", field=field, ident=ident)
        return _events_from_rows(rows)[0]

    def _hydrate(self, conn: sa.Connection, rows: Sequence[sa.Row[Any]]) -> list[Event]:
        """The Events of rows that carry an `id`, read again through SQLAlchemy."""
        ex = CoreExecutor(conn)
        return [self._event_by_id(ex, row.id, field="event_id") for row in rows]

    def _seq_of(self, query: _Query, ident: str, field: str) -> int:
        sql, params = self._sql(
            "seq-of",
            lambda: sa.select(events.c.seq).where(events.c.id == sa.bindparam("id")),
            {"id": ident},
        )
        rows = query(sql, params)
        if not rows:
            raise errors.NotFoundError(f"{field} {ident!r} not found", field=field, ident=ident)
        return int(rows[0][0])

    def tip(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        with self._reading() as query:
            row = self._top(query, None)
        return (int(row[0]), row[1]) if row else (0, None)

    def _top(self, query: _Query, hi: int | None) -> Sequence[Any] | None:
        """(seq, id) of the newest event below `hi` (all events when None)."""

        def build() -> sa.Select[Any]:
            q = sa.select(events.c.seq, events.c.id).order_by(events.c.seq.desc())
            q = q.limit(1)
            return q if hi is None else q.where(events.c.seq < sa.bindparam("hi"))

        sql, params = self._sql(("top", hi is None), build, {} if hi is None else {"hi": hi})
        rows = query(sql, params)
        return rows[0] if rows else None

    def event_list(
        self,
        *,
        since_event_id: Any = None,
        before_event_id: Any = None,
        since_created_at: Any = None,
        limit: Any = None,
        order: Any = None,
        preview: Any = False,
        from_agent: Any = None,
        **filters: Any,
    ) -> Page:
        """Read events (S-5.1–S-5.3). `cursor` is the newest event examined, filtered or not.

        Order: explicit `order` wins; else asc with a cursor, desc without. Raises
        ValidationError, NotFoundError for an unknown cursor.
        """
        req = self.read_request(
            since_event_id=since_event_id,
            before_event_id=before_event_id,
            since_created_at=since_created_at,
            limit=limit,
            order=order,
            preview=preview,
            from_agent=from_agent,
            **filters,
        )
        with self._reading() as query:
            return self._read(query, req)

    def read_request(self, **raw: Any) -> ReadRequest:
        """Validate the raw read arguments shared by list, wait, watch and SSE."""
        unknown = set(raw) - set(ReadRequest.__dataclass_fields__) - set(v.FILTER_FIELDS)
        unknown -= {"from_agent"}
        if unknown:
            name = sorted(unknown)[0]
            raise v.fail(name, "is not a known parameter")
        filters = Filters.parse(**{k: raw.get(k) for k in v.FILTER_FIELDS})
        since = raw.get("since_event_id")
        since_clean = (
            "tip"
            if isinstance(since, str) and since.strip() == "tip"
            else v.routing("since_event_id", since)
        )
        from_agent = v.routing("from_agent", raw.get("from_agent"))
        return ReadRequest(
            filters=filters,
            since_event_id=since_clean,
            before_event_id=v.routing("before_event_id", raw.get("before_event_id")),
            since_created_at=v.since_created_at(raw.get("since_created_at")),
            limit=v.limit(raw.get("limit")),
            order=v.order(raw.get("order")),
            preview=v.boolean("preview", raw.get("preview")),
            slim=v.boolean("slim", raw.get("slim")),
            note=FROM_AGENT_NOTE if from_agent and not filters.writer else None,
        )

    def read(self, req: ReadRequest, after_seq: int | None = None) -> Page:
        """One read of a validated request; `after_seq` (a Page's `scanned_seq`) resumes it.

        The building block of the hub's async waits and SSE feed, which wake on the notifier
        and call this from a worker thread. Raises NotFoundError for an unknown cursor.
        """
        with self._reading() as query:
            return self._read(query, req, after_seq=after_seq)

    def _read(self, query: _Query, req: ReadRequest, after_seq: int | None = None) -> Page:
        lo = after_seq if after_seq is not None else 0
        hi: int | None = None
        if after_seq is None and req.since_event_id not in (None, "tip"):
            lo = self._seq_of(query, req.since_event_id, "since_event_id")
        if req.before_event_id:
            hi = self._seq_of(query, req.before_event_id, "before_event_id")
        top = self._top(query, hi)
        if after_seq is None and req.since_event_id == "tip":
            lo = int(top[0]) if top else 0
        has_cursor = req.since_event_id is not None or after_seq is not None
        order = req.order or ("asc" if has_cursor else "desc")
        if top is None or int(top[0]) <= lo:
            cursor = self._id_at(query, lo) if lo else None
            return Page(
                events=(),
                cursor=cursor,
                has_more=False,
                note=req.note,
                scanned_seq=lo,
                preview=req.preview,
                slim=req.slim,
            )
        top_seq, top_id = int(top[0]), top[1]
        rows = query(*self._page_query(req, lo, top_seq, order))
        has_more = len(rows) > req.limit
        rows = rows[: req.limit]
        if order == "asc" and has_more:
            scanned_seq, cursor = int(rows[-1][_SEQ_AT]), rows[-1][_ID_AT]
        else:
            scanned_seq, cursor = top_seq, top_id
        return Page(
            events=tuple(_events_from_rows(rows)),
            cursor=cursor,
            has_more=has_more,
            note=req.note,
            scanned_seq=scanned_seq,
            preview=req.preview,
            slim=req.slim,
        )

    def _page_query(
        self, req: ReadRequest, lo: int, top_seq: int, order: str
    ) -> tuple[str, Mapping[str, Any]]:
        """The page: matches in (lo, top_seq], in seq order, limit + 1 rows, as (SQL, params).

        An inbox filter is `to_agent IN (X, '*')`; SQLite cannot read an IN list in the order
        of the (to_agent, seq) index, so it would collect every match and sort it (a temp
        B-tree: ~100k rows for one inbox on a 1M-event log). One leg per value instead, each an
        index range already in seq order, merged by UNION ALL (MERGE, no sort) and stopped at
        the limit. The values are distinct, so the legs are disjoint: the same rows.

        The SQL is compiled once per filter shape (which fields, how many values each) with
        named parameters, so a read costs no statement building or cache-key generation.
        """
        f = req.filters
        params: dict[str, Any] = {"lo": lo, "top": top_seq, "lim": req.limit + 1}
        shape: list[tuple[str, int]] = []
        for name in _PAGE_FILTERS:
            values = getattr(f, name)
            if values:
                shape.append((name, len(values)))
                params.update((f"{name}_{i}", value) for i, value in enumerate(values))
        to_values = tuple(dict.fromkeys((*f.to_agent, "*"))) if f.to_agent else ()
        params.update((f"to_{i}", value) for i, value in enumerate(to_values))
        if req.since_created_at:
            params["since_created_at"] = req.since_created_at
        split = self.backend.split_inbox and 1 < len(to_values) <= _SPLIT_TO_AGENT_MAX
        key = ("page", tuple(shape), len(to_values), split, bool(req.since_created_at), order)
        return self._sql(
            key,
            lambda: self._page_statement(
                tuple(shape), len(to_values), split, bool(req.since_created_at), order
            ),
            params,
        )

    def _page_statement(
        self,
        shape: tuple[tuple[str, int], ...],
        n_to: int,
        split: bool,
        since_created: bool,
        order: str,
    ) -> sa.Executable:
        where: list[sa.ColumnElement[bool]] = [
            events.c.seq > sa.bindparam("lo"),
            events.c.seq <= sa.bindparam("top"),
        ]
        if since_created:
            where.append(events.c.created_at >= sa.bindparam("since_created_at"))
        for name, n in shape:
            column, how = FILTER_RULES[name]
            col = events.c[column]
            binds = [sa.bindparam(f"{name}_{i}") for i in range(n)]
            if how == "not_in":
                where.append(col.not_in(binds))
            else:
                where.append(col == binds[0] if n == 1 else col.in_(binds))
        to_binds = [sa.bindparam(f"to_{i}") for i in range(n_to)]
        limit = sa.bindparam("lim")
        if not split:
            if to_binds:
                where.append(events.c.to_agent.in_(to_binds))
            q = self._event_select(*where)
            q = q.order_by(events.c.seq.asc() if order == "asc" else events.c.seq.desc())
            return q.limit(limit)
        legs = [self._event_select(*where, events.c.to_agent == b) for b in to_binds]
        merged = sa.union_all(*legs)
        seq = merged.selected_columns.seq
        return merged.order_by(seq.asc() if order == "asc" else seq.desc()).limit(limit)

    def _id_at(self, query: _Query, seq: int) -> str | None:
        sql, params = self._sql(
            "id-at",
            lambda: sa.select(events.c.id).where(events.c.seq == sa.bindparam("seq")),
            {"seq": seq},
        )
        rows = query(sql, params)
        return rows[0][0] if rows else None

    def event_wait(self, *, timeout_ms: Any = None, **read_args: Any) -> Page:
        """Return matches after the cursor at once, else block until one arrives (S-5.4).

        Without `since_event_id`, existing matches are returned at once; `"tip"` waits only for
        new events. A timeout is a normal result: `timed_out=True` and no events. Wake-up is
        push-based (notifier); the fallback re-check bounds the cost of a lost signal.
        """
        timeout = v.timeout_ms(timeout_ms) / 1000
        req = self.read_request(**read_args)
        if req.order is None:
            req = req.replace(order="asc")
        deadline = time.monotonic() + timeout
        # Take the notifier version before each read: a commit after it makes wait() return.
        seen = self.notifier.version
        page = self.read(req)
        if not page.events:  # compile the page statement now, not after the wake-up
            self._page_query(req, 0, 0, req.order or "asc")
        while not page.events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return page.replace(timed_out=True)
            self.notifier.wait(seen, min(remaining, notify.FALLBACK_CHECK_S))
            seen = self.notifier.version
            # Resume after everything examined so far (rejected rows included): no rescans.
            page = self.read(req, after_seq=page.scanned_seq)
        return page

    # ----------------------------------------------------------------- replication basics

    def version_vector(self) -> dict[str, int]:
        """{origin_replica: max origin_seq} over every event held here."""
        with self._storage_errors(), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(events.c.origin_replica, sa.func.max(events.c.origin_seq)).group_by(
                    events.c.origin_replica
                )
            ).all()
        return {r[0]: int(r[1]) for r in rows}

    def stats(self) -> dict[str, Any]:
        """Counts per stream, type and writer, totals, database size and replica estate."""
        with self._storage_errors(), self.engine.connect() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(events)).scalar() or 0
            arts = conn.execute(sa.select(sa.func.count()).select_from(artifacts)).scalar() or 0
            blobs = conn.execute(
                sa.select(
                    sa.func.count(), sa.func.coalesce(sa.func.sum(artifact_blobs.c.size_bytes), 0)
                )
            ).first()

            def per(col: sa.ColumnElement[Any]) -> dict[str, int]:
                q = sa.select(col, sa.func.count()).group_by(col).order_by(sa.func.count().desc())
                return {str(k): int(n) for k, n in conn.execute(q.limit(100))}

            out = {
                "replica_id": self.replica_id,
                "backend": self.dialect,
                "database": self.engine.url.render_as_string(hide_password=True),
                "events": int(total),
                "artifacts": int(arts),
                "artifact_blobs": int(blobs[0]) if blobs else 0,
                "artifact_bytes": int(blobs[1]) if blobs else 0,
                "per_stream": per(events.c.stream),
                "per_type": per(events.c.type),
                "per_writer": per(events.c.from_agent),
            }
        out["version_vector"] = self.version_vector()
        out["db_size_bytes"] = self._db_size()
        return out

    def _db_size(self) -> int | None:
        return self.backend.db_size()


@dataclass(frozen=True, kw_only=True)
class ReadRequest:
    filters: Filters
    since_event_id: str | None = None
    before_event_id: str | None = None
    since_created_at: str | None = None
    limit: int = v.DEFAULT_LIST_LIMIT
    order: str | None = None
    preview: bool = False
    slim: bool = False
    note: str | None = None

    def replace(self, **changes: Any) -> ReadRequest:
        from dataclasses import replace

        return replace(self, **changes)


def _json_str(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


def _artifact_exists() -> sa.Select[Any]:
    return sa.select(artifacts.c.id).where(artifacts.c.id == sa.bindparam("id"))


def _blob_exists() -> sa.Select[Any]:
    col = artifact_blobs.c.sha256
    return sa.select(col).where(col == sa.bindparam("sha"))


def _artifact_from_row(row: Sequence[Any], content: bytes | None) -> Artifact:
    """The Artifact of a row that starts with `ARTIFACT_COLS`."""
    return Artifact(
        id=row[0],
        kind=row[1],
        sha256=row[2],
        size_bytes=int(row[3]),
        encoding=row[4],
        created_by=row[5],
        created_at=row[6],
        origin_replica=row[7],
        metadata_json=row[8],
        content=content,
    )
