"""The commit pipeline: group commit, the write transaction's state, and how statements run.

Concurrent writers queue their work; one of them (the leader) runs the whole queue in one
transaction, each item in its own savepoint when several share it. Seq is assigned under the
backend's write lock, so seq order is commit order on every backend (S-2.4). Every write runs
here, on the backend's own DBAPI connection (`Backend.transaction`), with an `Executor`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mempalace_logstream import backends, errors, hlc, notify
from mempalace_logstream.backends import Backend, Compiler, Executor
from mempalace_logstream.backends.base import StateMoved, WriteTx
from mempalace_logstream.backends.queries import appends as sql
from mempalace_logstream.identity.keyring import KEY_EVENT_TYPES
from mempalace_logstream.models import Event
from mempalace_logstream.store.identity import Identity
from mempalace_logstream.store.marks import PIN_PREFIX
from mempalace_logstream.store.rows import events_from_rows, read_columns

if TYPE_CHECKING:
    import sqlalchemy as sa

# The work of one write: its statements through the executor, the transaction's state.
Work = Callable[[Executor, "TxState"], Any]


class Pending:
    """One caller's write in the queue (a plain slotted class: one is made per write)."""

    __slots__ = ("work", "on_bulk", "done", "result", "error", "wake", "lead", "abandoned")

    def __init__(self, work: Work, on_bulk: Callable[[], Any] | None = None) -> None:
        self.work = work
        self.on_bulk = on_bulk  # the rest of the work is long and frees the GIL
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        # The lock its caller sleeps on while another leads (held once: the caller's second
        # acquire blocks until the leader that settles the item, or hands it the lead, lets
        # it go). None for a caller that led at once.
        self.wake: Any = None
        self.lead = False  # handed the lead by the leader before it (under the queue lock)
        self.abandoned = False  # its caller stopped waiting (interrupted): never handed the lead


class TxState:
    """A write transaction's state (a plain class: nothing generated at import, issue 25)."""

    __slots__ = (
        "next_seq",
        "next_artifact_seq",
        "appended",
        "unchanged",
        "number",
        "marks",
        "generation",
        "checks",
    )

    def __init__(
        self,
        next_seq: int,
        next_artifact_seq: int,
        appended: list[Event] | None = None,
        unchanged: bool = False,  # nobody else committed since this store's last write
        number: int = 0,  # of this write transaction, from identity (its keyring cache's key)
        # The keyring's marks read with the starting state (None when that was skipped),
        # valid while identity's generation is `generation` (a key event or a rollback moves
        # it).
        marks: tuple[Any, Any] | None = None,
        generation: int = -1,
    ) -> None:
        self.next_seq, self.next_artifact_seq = next_seq, next_artifact_seq
        self.appended: list[Event] = [] if appended is None else appended
        self.unchanged, self.number, self.marks = unchanged, number, marks
        # A read that decides only whether to refuse may go with the COMMIT instead
        # (`Executor.check`): not in a batch run again (`StateMoved`), which reads.
        self.generation, self.checks = generation, False


class CommitPipeline:
    """The write path shared by every store operation (a part of `LogStore`): the queue and
    leader of group commit, the write transaction's state, the statements compiled once per
    store (`sql`), and the SQLAlchemy engine for the reads that are not snapshots."""

    def __init__(
        self,
        engine: sa.Engine,
        backend: Backend,
        *,
        identity: Identity,
        clock: hlc.HybridClock,
        notifier: notify.Notifier,
        replica_id: str,
        compiler: Compiler | None = None,
    ) -> None:
        self.engine, self.backend = engine, backend
        self.identity, self.clock, self.notifier = identity, clock, notifier
        self.replica_id = replica_id
        # Write transactions committed (one per group commit; read by tests and benches to
        # show that concurrent appends share commits).
        self.commits = 0
        self._queue: list[Pending] = []
        self._queue_lock = threading.Lock()
        self._leading = False  # a caller leads (runs the queue); the others sleep (`write`)
        # Gathering a batch (`_gather`): the callers writing when the last batch ended.
        self._callers = 0
        self._arrived = threading.Condition(self._queue_lock)  # notified while gathering
        self._gathering = False
        self._gather_s: float = getattr(backend, "gather_s", 0.0)
        self._commit_lock = threading.Lock()
        self.closed = False
        # (SQL text, parameters) of a statement shape, compiled once per store (or served
        # from the lean writer's generated table: store/lean_write.py).
        self.sql = compiler if compiler is not None else Compiler(backend.sql_dialect())
        self._state: tuple[str, Any] | None = None  # the starting-state query, compiled once

    def close(self) -> None:
        """Refuse new work, then close the backend's connections once the leader is done."""
        self.closed = True
        with self._commit_lock:
            self.backend.close()

    # ----------------------------------------------------------------- public plumbing
    # What the store's other parts, replication and the importer use: no module outside
    # the store touches its private members (tests/test_layers.py).

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        """A SQLAlchemy connection for reads, database errors mapped to StorageError."""
        with self.storage_errors(), self.engine.connect() as conn:
            yield conn

    def storage_errors(self) -> contextlib.AbstractContextManager[None]:
        """Database errors (SQLAlchemy's, or the driver's) become StorageError."""
        return backends.wrap_exceptions(self.backend.driver_errors)

    def compiled_sql(self) -> dict[Any, tuple[str, dict[str, Any]]]:
        """Every statement shape this store compiled so far: key -> (SQL text, the values of
        its own literals). store/lean.py keeps the inbox's reads from it for the hook path."""
        return dict(self.sql.cache)

    def write(self, work: Work, on_bulk: Callable[[], Any] | None = None) -> Any:
        """Run `work(ex, state)` in a write transaction, group-committed with concurrent
        callers, and return its result: the one runner of every write. `on_bulk` is called
        when the rest of the transaction is long work that releases the GIL (a sync page).
        Raises what `work` raises (its savepoint rolled back), or StorageError."""
        if self.closed:
            raise errors.StorageError("the store is closed")
        with self._queue_lock:
            # A lone writer (nobody leads or queued, no batch to gather, the commit lock free:
            # not held by `close` or a test holding the leader seat) runs its work at once,
            # without the queue, a `Pending` or the batch loop (issue 25).
            if (
                not self._leading
                and not self._queue
                and not (self._callers > 1 and self._gather_s)
                and self._commit_lock.acquire(False)
            ):
                self._leading = True
                item = None
            else:
                item = Pending(work, on_bulk)
                self._queue.append(item)
                if self._gathering:
                    self._arrived.notify()
                if self._leading:
                    wake = item.wake = _allocate_lock()
                    wake.acquire()
                else:
                    wake = None
                    self._leading = True
        if item is None:  # alone, under the commit lock; then the lead handed on as `_lead`
            try:
                return self._commit(work, on_bulk, None)
            finally:
                self._commit_lock.release()
                with self._queue_lock:
                    handed = not self._queue  # nobody came meanwhile: `_hand_on` of nobody
                    if handed:
                        self._callers, self._leading = 1, False
                if not handed:  # (a settled caller of its own: nobody to wake)
                    self._hand_on([Pending(work)])
        if wake is not None:
            # Woken once: by the leader that settled the item (it returns at once, without
            # queueing for the commit lock behind the next transaction: a convoy that kept
            # batches at 1-2 items when commits take round trips), or by the one that handed
            # it the lead. Nobody else wakes: no herd of callers woken to sleep again.
            try:
                wake.acquire()
            except BaseException:  # interrupted: the lead is not left with nobody to take it
                with self._queue_lock:
                    item.abandoned = True
                    handed = item.lead
                if handed and not item.done:
                    self._lead()
                raise
        if not item.done:
            self._lead()
        if item.error is not None:
            raise item.error
        return item.result

    def _lead(self) -> None:
        """Run the queue as one transaction, then wake the callers it settled and hand the lead
        to the first caller that queued meanwhile (or let it go: a lone writer wakes nobody)."""
        batch: list[Pending] = []
        try:
            with self._commit_lock:
                if self._callers > 1 and self._gather_s:
                    self._gather()
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._run_batch(batch)
        finally:
            self._hand_on(batch)

    def _hand_on(self, batch: list[Pending]) -> None:
        """After a batch: wake the callers it settled and hand the lead to the first caller
        that queued meanwhile (or let it go: a lone writer wakes nobody)."""
        with self._queue_lock:
            queue = self._queue
            if queue:
                self._callers = len(batch) + len(queue)
                heir = next((q for q in queue if not q.abandoned), None)
            else:
                self._callers, heir = len(batch), None
            if heir is None:
                self._leading = False  # the next caller leads
            else:
                heir.lead = True
        for settled in batch:
            if settled.wake is not None and not settled.lead:  # (an heir woke already)
                settled.wake.release()
        if heir is not None:
            heir.wake.release()

    def _gather(self) -> None:
        """Wait (at most the backend's `gather_s`) until as many callers have queued as were
        writing when the last batch ended (its callers and the ones queued then): the callers
        it settled are on their way back. Without it, concurrent writers split into batches
        that take turns: 8 writers made batches of 4 (or 1 and 8) on PostgreSQL."""
        deadline = time.monotonic() + self._gather_s
        with self._arrived:
            self._gathering = True
            try:
                while len(self._queue) < self._callers:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._arrived.wait(left)
            finally:
                self._gathering = False

    # ----------------------------------------------------------------- the runner

    def _transaction(self) -> contextlib.AbstractContextManager[WriteTx]:
        """The backend's write transaction (a test may run another), which reads the
        starting state unless its counters are known."""
        return self.backend.transaction(self._state or self._state_statement())

    def _state_statement(self) -> tuple[str, Any]:
        """The starting-state query (compiled on the first write: a reader never needs it)."""
        if self._state is None:
            agg = self.backend.links_functions()[1]
            self._state = sql.tx_state_statement(
                self.sql, self.replica_id, KEY_EVENT_TYPES, PIN_PREFIX, agg
            )
        return self._state

    def _run_batch(self, batch: list[Pending]) -> None:
        """The batch's transaction (`_commit`). Every item is settled however it ends (a
        failed commit wrote nobody in the batch)."""
        try:
            self._commit(None, None, batch)
        except BaseException as exc:  # the commit failed: nobody in the batch was written
            for item in batch:
                if item.error is None:
                    item.error = exc
                    item.result = None
        finally:
            for item in batch:
                item.done = True

    def _commit(self, work: Any, on_bulk: Any, batch: list[Pending] | None) -> Any:
        """One transaction, under the commit lock: the write lock, the state query, then
        `work` alone (`batch` None: a lone writer's, its result returned) or each item of
        `batch` (one SAVEPOINT per item when several share the commit), COMMIT (run once more
        when an optimistic begin finds another writer's commit: `_again`); driver errors
        become StorageError. Waiters are woken once if anything was appended.
        (Plain try blocks, no context managers of our own: this runs once per commit.)"""
        result: Any = None
        try:
            for again in (False, True):
                try:
                    with self._transaction() as tx:
                        state = self._start(tx)
                        state.number, state.generation = self.identity.begin_transaction()
                        state.checks = not again
                        if batch is None:
                            ex = self.backend.executor(tx.db, self.sql, on_bulk)
                            result = work(ex, state)
                        else:
                            savepoint = len(batch) > 1
                            for item in batch:
                                self._run_item(tx.db, state, item, savepoint)
                        tx.counters = (state.next_seq, state.next_artifact_seq)
                        tx.appended = bool(state.appended)
                    break
                except StateMoved as moved:  # PostgreSQL's optimistic begin: run it again
                    if again:  # the second reads the state: it cannot move (still, no loop)
                        raise errors.StorageError("the write state moved twice") from moved
                    self._again(batch)
        except Exception as exc:
            mapped = backends.storage_error(exc, self.backend.driver_errors)
            if mapped is None:
                raise
            raise mapped from exc
        self.commits += 1
        if state.appended:
            self.notifier.bump()
        return result

    def _again(self, batch: list[Pending] | None) -> None:
        """Unsettle `batch` (if any) to run it again: a transaction that assumed nobody else
        committed since our last commit found otherwise and wrote nothing (`StateMoved`,
        PostgreSQL's optimistic begin); the next one reads the state."""
        for item in batch or ():
            item.result = item.error = None
        self.identity.moved()  # its keyring may be the one of before the other commit

    def _run_item(self, db: Any, state: TxState, item: Pending, savepoint: bool) -> None:
        """Run one item of the batch. When several share the commit (`savepoint`), each runs
        in its own savepoint: a failing item (bad reference, idempotency conflict, even a
        database error on its rows) is rolled back alone and reported to its caller; the
        others still commit. Alone in its transaction, what it raises ends the transaction."""
        ex = self.backend.executor(db, self.sql, item.on_bulk)
        if not savepoint:
            item.result = item.work(ex, state)
            return
        snapshot = (state.next_seq, state.next_artifact_seq, len(state.appended))
        try:
            with self.backend.savepoint(db):
                item.result = item.work(ex, state)
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

    def _start(self, tx: WriteTx) -> TxState:
        """The transaction's starting counters. `tx.known`: nobody committed since our last
        commit, so our counters are exact and the clock is already past every stamp in the
        file; the state query is skipped."""
        known = tx.known
        if known is not None:
            return TxState(known[0], known[1], None, True)
        row = tx.state_row
        if row is None:  # a transaction that did not run it (a test's)
            row = self.backend.query(tx.db)(*self._state_statement())[0]
        max_seq, max_art, top, own, key_top, pins = row
        # Other processes append too: never tick below the newest stamp in the file.
        self.clock.seed(own)
        if top:
            self.clock.observe(top)
        return TxState((max_seq or 0) + 1, (max_art or 0) + 1, marks=(key_top, pins))

    @functools.cached_property
    def _read_cols(self) -> list[sa.ColumnElement[Any]]:
        """The Event read columns, built with the first statement that reads events."""
        return read_columns(self.backend)

    def event_select(self, *where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        """The Event columns (`events_from_rows` reads them) of the rows matching `where`."""
        return sql.select_events(self._read_cols, *where)

    def event_by_id(self, ex: Executor, ident: str, *, field: str) -> Event:
        """The event `ident` read through `ex`; NotFoundError naming `field` if unknown."""
        rows = sql.event_by_id(ex, self.event_select, ident)
        if not rows:
            raise errors.NotFoundError(f"{field} {ident!r} not found", field=field, ident=ident)
        return events_from_rows(rows)[0]
