"""The commit pipeline: group commit, the write transaction's state, and how statements run.

Concurrent writers queue their work; one of them (the leader) runs the whole queue in one
transaction, each item in its own savepoint when several share it. Seq is assigned under the
backend's write lock, so seq order is commit order on every backend (S-2.4). A batch whose
items all have a fast-path version runs on the backend's own DBAPI connection.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa

from mempalace_logstream import backends, errors, hlc, notify
from mempalace_logstream.backends import Backend, CoreExecutor, Executor, QueryExecutor
from mempalace_logstream.backends.queries import appends as sql
from mempalace_logstream.models import Event
from mempalace_logstream.store.identity import Identity
from mempalace_logstream.store.rows import events_from_rows


@dataclass
class Pending:
    fn: Callable[[sa.Connection, TxState], Any]
    # The same work on the backend's fast-path DBAPI connection (event_append, event_ack,
    # replication): used when every item of a batch has one; any other item sends the whole
    # batch down `fn`.
    raw: Callable[[Any, TxState], Any] | None = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class TxState:
    next_seq: int
    next_artifact_seq: int
    appended: list[Event] = field(default_factory=list)
    unchanged: bool = False  # nobody else committed since this store's last write (fast path)
    number: int = 0  # of this write transaction, from identity (its keyring cache's key)


T = TypeVar("T")


class CommitPipeline:
    """The write path shared by every store operation (a base of `LogStore`)."""

    engine: sa.Engine
    backend: Backend
    replica_id: str
    clock: hlc.HybridClock
    notifier: notify.Notifier
    commits: int
    _writer: sa.Engine
    _queue: list[Pending]
    _queue_lock: threading.Lock
    _commit_lock: threading.Lock
    _closed: bool
    _sql_dialect: sa.Dialect
    _sql_cache: dict[Any, tuple[str, dict[str, Any]]]
    _read_cols: list[sa.ColumnElement[Any]]
    identity: Identity

    # ----------------------------------------------------------------- public plumbing
    # What replication and the importer use: no module outside the store touches its
    # private members (tests/test_layers.py).

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        """A SQLAlchemy connection for reads, database errors mapped to StorageError."""
        with self._storage_errors(), self.engine.connect() as conn:
            yield conn

    def core_transaction(self, work: Callable[[sa.Connection, TxState], T]) -> T:
        """Run `work(conn, state)` in a group-committed write transaction on a SQLAlchemy
        connection (bulk work that needs the connection itself: the importer's COPY)."""
        result: T = self._submit(work)
        return result

    def uses_fast_path(self) -> bool:
        """Whether reads and writes run on the backend's own DBAPI path right now."""
        return self._fast_path()

    def compiled(
        self, key: Any, build: Callable[[], Any], params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """(SQL text, parameters) of a statement shape, compiled once per store."""
        return self._sql(key, build, params)

    def _storage_errors(self) -> contextlib.AbstractContextManager[None]:
        """Database errors (SQLAlchemy's, or the fast path's driver's) become StorageError."""
        return backends.wrap_exceptions(self.backend.driver_errors)

    def _lock_writes(self, conn: sa.Connection) -> None:
        self.backend.lock_writes(conn)

    def _submit(
        self,
        fn: Callable[[sa.Connection, TxState], Any],
        raw: Callable[[Any, TxState], Any] | None = None,
    ) -> Any:
        """Run `fn` in a write transaction, group-committed with concurrent callers.

        `raw`, when given, is the same work on the backend's fast-path DBAPI connection; the
        batch takes that path when every item has one (see `_fast_path`).
        """
        if self._closed:
            raise errors.StorageError("the store is closed")
        item = Pending(fn, raw)
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

    def _run_batch(self, batch: list[Pending]) -> None:
        with self._settling(batch) as appended:
            with self._storage_errors(), self._writer.begin() as conn:
                state = self._begin_state(conn)
                state.number = self.identity.begin_transaction()
                for item in batch:
                    self._run_item(conn, state, item, savepoint=len(batch) > 1)
                if state.appended:
                    self.backend.after_appends(conn)
            self.commits += 1
            appended += state.appended

    @contextlib.contextmanager
    def _settling(self, batch: list[Pending]) -> Iterator[list[Event]]:
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
        self, conn: sa.Connection, state: TxState, item: Pending, savepoint: bool
    ) -> None:
        nested = conn.begin_nested if savepoint else None
        self._isolated(state, item, lambda: item.fn(conn, state), nested)

    def _run_raw_item(self, db: Any, state: TxState, item: Pending, savepoint: bool) -> None:
        fast = self.backend.fast_path()
        assert fast is not None and item.raw is not None
        raw = item.raw
        nested = functools.partial(fast.savepoint, db) if savepoint else None
        self._isolated(state, item, lambda: raw(db, state), nested)

    def _isolated(
        self,
        state: TxState,
        item: Pending,
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
            # The item may have read a keyring holding a key event it then rolled back. The
            # marks-keyed cache stays (the marks tell a rolled-back key event apart); the one
            # the write transactions reuse without marks is read again.
            self.identity.moved()

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

    def compiled_sql(self) -> dict[Any, tuple[str, dict[str, Any]]]:
        """Every statement shape this store compiled so far: key -> (SQL text, the values of
        its own literals). store/lean.py keeps the inbox's reads from it for the hook path."""
        return dict(self._sql_cache)

    def _run_raw_batch(self, batch: list[Pending]) -> None:
        """`_run_batch` on the fast path's DBAPI connection, with the same semantics: the
        write lock, the state query, one SAVEPOINT per item when several share the commit,
        COMMIT; driver errors become StorageError with the same texts."""
        fast = self.backend.fast_path()
        assert fast is not None
        with self._settling(batch) as appended:
            with self._storage_errors(), fast.transaction() as tx:
                state = self._fast_state(tx.db, tx.known)
                state.number = self.identity.begin_transaction()
                for item in batch:
                    self._run_raw_item(tx.db, state, item, savepoint=len(batch) > 1)
                tx.counters = (state.next_seq, state.next_artifact_seq)
                tx.appended = bool(state.appended)
            self.commits += 1
            appended += state.appended

    def _fast_state(self, db: Any, known: tuple[int, int] | None) -> TxState:
        """The transaction's starting counters. `known`: nobody committed since our last
        commit, so our counters are exact and the clock is already past every stamp in the
        file; the state query is skipped."""
        if known is not None:
            return TxState(next_seq=known[0], next_artifact_seq=known[1], unchanged=True)
        fast = self.backend.fast_path()
        assert fast is not None
        return self._state_from(
            *sql.tx_state(QueryExecutor(fast.query(db), self._sql), self.replica_id)
        )

    def _state_from(self, max_seq: Any, max_art: Any, top: Any, own: Any) -> TxState:
        max_seq, max_art = max_seq or 0, max_art or 0
        # Other processes append too: never tick below the newest stamp in the file.
        self.clock.seed(own)
        if top:
            self.clock.observe(top)
        return TxState(next_seq=max_seq + 1, next_artifact_seq=max_art + 1)

    def _begin_state(self, conn: sa.Connection) -> TxState:
        self._lock_writes(conn)
        # One prebuilt statement, not three: it runs once per (group) commit.
        return self._state_from(*sql.tx_state(CoreExecutor(conn), self.replica_id))

    def _write(
        self,
        work: Callable[[Executor, TxState], Any],
        on_bulk: Callable[[], Any] | None = None,
    ) -> Any:
        """Run `work` with the statements of a group-committed write transaction: on the
        backend's fast path when it has one, else through SQLAlchemy. `on_bulk` is called by
        the fast path when the rest of the transaction is long work that releases the GIL."""
        fast = self.backend.fast_path()
        raw: Callable[[Any, TxState], Any] | None = None
        if fast is not None:

            def raw(db: Any, st: TxState) -> Any:
                return work(fast.executor(db, self._sql, on_bulk), st)

        return self._submit(lambda conn, st: work(CoreExecutor(conn), st), raw)

    def event_select(self, *where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        """The Event columns (`events_from_rows` reads them) of the rows matching `where`."""
        return sql.select_events(self._read_cols, *where)

    def event_by_id(self, ex: Executor, ident: str, *, field: str) -> Event:
        """The event `ident` read through `ex`; NotFoundError naming `field` if unknown."""
        rows = sql.event_by_id(ex, self.event_select, ident)
        if not rows:
            raise errors.NotFoundError(f"{field} {ident!r} not found", field=field, ident=ident)
        return events_from_rows(rows)[0]
