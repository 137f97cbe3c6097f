"""LogStore: the only code that runs SQL. Append, read, wait, artifacts, acks, patches, tasks.

Every public method validates first (nothing is written on bad input), runs in one transaction
and returns frozen models. Concurrent appends in one process are group-committed; seq is
assigned under the write lock, so seq order is commit order on every backend (S-2.4).
`LogStore` is made of parts it constructs and holds, each given what it needs: `pipeline`
(pipeline.py: group commit, the write transaction's state, compiled statements), `identity`
(identity.py: keys and the keyring), `writes` (writes.py: drafts, `transaction`),
`reads` (reads.py), `task_reads` (task_reads.py) and `counts` (stats.py); every public method
is a short call into one of them. What differs between databases is behind `backend`
(backends/); the projections every append runs are the store's `projections` (projections.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, Unpack

import sqlalchemy as sa

from mempalace_logstream import backends, config, errors, hlc, migrate, notify
from mempalace_logstream import validation as v
from mempalace_logstream.backends import Executor, QueryExecutor
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.models import Artifact, ArtifactDraft, Event, EventArgs, EventDraft, Page
from mempalace_logstream.schema import SCHEMA_HEAD
from mempalace_logstream.store import tasks as task_rows
from mempalace_logstream.store.filters import ReadArgs, ReadRequest, read_request
from mempalace_logstream.store.identity import Identity, keys_dir_for
from mempalace_logstream.store.ids import REPLICA_ID_KEY, mint_replica_id
from mempalace_logstream.store.pipeline import CommitPipeline
from mempalace_logstream.store.projections import Projection, Projections
from mempalace_logstream.store.reads import Reads
from mempalace_logstream.store.signatures import takes_args_of
from mempalace_logstream.store.stats import Stats
from mempalace_logstream.store.task_cache import FoldCache
from mempalace_logstream.store.task_reads import TaskReads
from mempalace_logstream.store.writes import Transaction, Writes
from mempalace_logstream.tasks import TaskSettings

T = TypeVar("T")


class LogStore:
    """The append-only event and artifact store (SQLite file or PostgreSQL).

    Thread-safe; one instance per process per database is the intended use. Errors raised:
    `ValidationError` (bad input, nothing written), `NotFoundError`, `ConflictError`,
    `StorageError`.
    """

    # The commit pipeline this store builds (a subclass may change how it commits: tests).
    pipeline_class: type[CommitPipeline] = CommitPipeline

    def __init__(
        self,
        engine: sa.Engine,
        *,
        clock: hlc.Clock | None = None,
        max_body_bytes: int = v.DEFAULT_MAX_BODY_BYTES,
        max_artifact_bytes: int = v.DEFAULT_MAX_ARTIFACT_BYTES,
        migrate_schema: bool = True,
        task_settings: TaskSettings | None = None,
        keys_dir: Path | str | None = None,
        backdate_window_ms: int = config.DEFAULT_BACKDATE_WINDOW_MS,
        create: bool = True,
        projections: Iterable[Projection] | None = None,
    ) -> None:
        _check_backdate_window(backdate_window_ms)
        # Sync apply holds an event signed by a key revoked here before it arrived, stamped
        # less than this before the revocation (RFC 0008 "Threat model": backdating).
        self.backdate_window_ms = backdate_window_ms
        self.engine = engine
        self.task_settings = task_settings or TaskSettings()
        self.task_folds = FoldCache()  # checkpoints for tasks whose events arrive late
        # What every append runs, in order, whatever its origin (`projections.defaults()`:
        # tasks, then redactions, unless given); `store.projections.register(p)` adds one.
        self.projections = Projections(projections)
        self.backend = backend = backends.for_engine(engine)
        self.dialect = backend.name
        # The private keys this process signs with and the keyring it judges with (RFC 0008).
        self.identity = Identity(keys_dir, backend.links_functions()[1])
        # A file this process may not write: no migration, only a schema check (and no writes).
        self.read_only = engine_mod.read_only_kind(engine) is not None
        self.created = engine_mod.was_created(engine)  # this open made a new log file
        before: str | None = SCHEMA_HEAD
        with backends.wrap_exceptions(backend.driver_errors):
            if migrate_schema and not self.read_only:
                before = migrate.ensure_schema(engine, create=create)
            else:
                migrate.check_schema(engine)
            self.replica_id = self._load_replica_id()
        self.clock = hlc.HybridClock(self.replica_id, clock)
        self.notifier = notify.Notifier()
        self.pipeline = self.pipeline_class(
            engine,
            backend,
            identity=self.identity,
            clock=self.clock,
            notifier=self.notifier,
            replica_id=self.replica_id,
        )
        self._change_watcher = self._make_change_watcher()
        self._notify_channel = backend.notify_channel
        if self._change_watcher is not None:
            self.notifier.attach(self._change_watcher)
        self.writes = Writes(
            self,
            self.pipeline,
            max_body_bytes=max_body_bytes,
            max_artifact_bytes=max_artifact_bytes,
        )
        self.reads = Reads(self.pipeline, self.identity, self.notifier)
        self.task_reads = TaskReads(self.reads, self.clock, self.task_settings)
        self.counts = Stats(self.pipeline, self.replica_id)
        if migrate_schema and not self.read_only and self._projection_is_stale(before):
            # A log migrated here (or adopted), or whose rows an older fold wrote: derive the
            # projection once (the rebuild records the fold's version).
            self.rebuild_tasks()

    @classmethod
    def open(
        cls, url: str, *, durability: str = "full", create: bool = True, **kwargs: Any
    ) -> LogStore:
        """Open (and migrate) the store at a SQLAlchemy URL or SQLite file path.

        `create=False` (readers) refuses a missing SQLite file, or a PostgreSQL database
        (schema) without a log, instead of making an empty log;
        a file that is not a logstream database is refused either way; a file this process
        may not write opens read-only (see backends/engine.py). Errors name the database."""
        engine = engine_mod.create_engine(url, durability=durability, create=create)
        kwargs.setdefault("keys_dir", keys_dir_for(url))
        try:
            return cls(engine, create=create, **kwargs)
        except errors.StorageError as exc:
            engine.dispose()
            where = backends.for_engine(engine).describe()
            if where in exc.message:
                raise
            raise type(exc)(f"cannot open {where}: {exc.message}") from exc
        except BaseException:  # a reader refused (no log here), an interrupt: no pooled leak
            engine.dispose()
            raise

    def close(self) -> None:
        if self.pipeline.closed:
            return
        if self._change_watcher is not None:
            self._change_watcher.stop()
        self.pipeline.close()
        self.engine.dispose()

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- reads (store.reads)

    def event_get(self, event_id: Any) -> Event:
        """The event `event_id` (marked as its key's revocations judge it); NotFoundError."""
        return self.reads.event_get(event_id)

    def snapshot(self) -> contextlib.AbstractContextManager[QueryExecutor]:
        """One read snapshot whose executor runs statement shapes compiled once per store."""
        return self.reads.snapshot()

    def tip(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        return self.reads.tip()

    def event_list(self, **args: Unpack[ReadArgs]) -> Page:
        """Read events (S-5.1–S-5.3; `filters.ReadArgs` names the arguments)."""
        return self.reads.list_args(args)

    def read_request(self, **raw: Unpack[ReadArgs]) -> ReadRequest:
        """Validate the raw read arguments shared by list, wait, watch and SSE."""
        return read_request(**raw)

    def read(self, req: ReadRequest, after_seq: int | None = None) -> Page:
        """One read of a validated request; `after_seq` (a Page's `scanned_seq`) resumes it."""
        return self.reads.read(req, after_seq)

    def event_wait(self, *, timeout_ms: Any = None, **args: Unpack[ReadArgs]) -> Page:
        """Matches after the cursor at once, else block until one arrives (S-5.4;
        `Reads.event_wait`)."""
        return self.reads.event_wait(timeout_ms=timeout_ms, **args)

    # ----------------------------------------------------------------- counts, tasks

    def version_vector(self) -> dict[str, int]:
        """{origin_replica: max origin_seq} over every event held here."""
        return self.counts.version_vector()

    def stats(self) -> dict[str, Any]:
        """Counts per stream, type and writer, totals, database size and replica estate."""
        return self.counts.stats()

    def task_status(self, task_id: Any) -> dict[str, Any]:
        """{task: …}: the derived state, children, the thread's event and artifact ids."""
        return self.task_reads.task_status(task_id)

    def task_brief(self, task_id: Any) -> dict[str, Any]:
        """The derived state alone (no children, no thread): what a move needs and returns."""
        return self.task_reads.task_brief(task_id)

    @takes_args_of(TaskReads.task_list)
    def task_list(self, **args: Any) -> dict[str, Any]:
        """Tasks, most recently moved first (`TaskReads.task_list` names the arguments)."""
        return self.task_reads.task_list(**args)

    def rebuild_tasks(self) -> int:
        """Recompute the task projection from the log alone; returns how many tasks."""
        return self.writes.transaction(lambda tx: task_rows.rebuild(tx, self.task_settings))

    # ----------------------------------------------------------------- writes (store.writes)

    def transaction(
        self, work: Callable[[Transaction], T], on_bulk: Callable[[], Any] | None = None
    ) -> T:
        """Run `work(tx)` in a group-committed write transaction and return its result
        (`Writes.transaction`): every write of the store goes through here."""
        return self.writes.transaction(work, on_bulk)

    def draft_event(self, **fields: Unpack[EventArgs]) -> EventDraft:
        """Validate raw event fields (S-4; `models.EventArgs` names them) into a draft."""
        return self.writes.draft_of(fields)

    def event_append(self, **fields: Unpack[EventArgs]) -> Event:
        """Append one event, idempotent per (from_agent, idempotency_key) (`Writes`)."""
        return self.writes.append_of(fields)

    @takes_args_of(Writes.draft_artifact)
    def draft_artifact(self, **fields: Any) -> ArtifactDraft:
        """Validate raw artifact fields into a draft (`Writes.draft_artifact` names them)."""
        return self.writes.draft_artifact(**fields)

    @takes_args_of(Writes.draft_artifact)
    def artifact_put(self, **fields: Any) -> Artifact:
        """Store an artifact byte-exact; content is kept once per sha256. Returns no content."""
        return self.writes.artifact_put(**fields)

    def artifact_get(self, artifact_id: Any) -> Artifact:
        """The artifact with its exact content; NotFoundError if unknown."""
        return self.writes.artifact_get(artifact_id)

    def pinned_admins(self) -> list[str]:
        """The admin key ids this replica trusts as roots (RFC 0008 "Admin key")."""
        return self.writes.pinned_admins()

    def pin_admin(self, key_id: Any, *, pinned: bool = True) -> bool:
        """Trust (or stop trusting) an admin key id as a root; whether anything changed."""
        return self.writes.pin_admin(key_id, pinned=pinned)

    def set_agent_token(self, agent: str, token_hash: str | None) -> None:
        """Store (or, with None, drop) the hash of `agent`'s bearer token (local, RFC 0008)."""
        self.writes.set_agent_token(agent, token_hash)

    def agent_token_hashes(self) -> dict[str, str]:
        """agent -> the stored hash of its token."""
        return self.writes.agent_token_hashes()

    # ----------------------------------------------------------------- plumbing (store.pipeline)
    # What replication, the importer and the store's own modules use.

    def connect(self) -> contextlib.AbstractContextManager[sa.Connection]:
        """A SQLAlchemy connection for reads, database errors mapped to StorageError."""
        return self.pipeline.connect()

    def compiled(
        self, key: Any, build: Callable[[], Any], params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        """(SQL text, parameters) of a statement shape, compiled once per store."""
        return self.pipeline.sql(key, build, params)

    def compiled_sql(self) -> dict[Any, tuple[str, dict[str, Any]]]:
        """Every statement shape this store compiled so far (`CommitPipeline.compiled_sql`)."""
        return self.pipeline.compiled_sql()

    def event_select(self, *where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        """The Event columns (`events_from_rows` reads them) of the rows matching `where`."""
        return self.pipeline.event_select(*where)

    def event_by_id(self, ex: Executor, ident: str, *, field: str) -> Event:
        """The event `ident` read through `ex`; NotFoundError naming `field` if unknown."""
        return self.pipeline.event_by_id(ex, ident, field=field)

    @property
    def max_body_bytes(self) -> int:
        """The largest event body this store takes (a peer's events are checked too)."""
        return self.writes.max_body_bytes

    @property
    def max_artifact_bytes(self) -> int:
        """The largest artifact this store takes."""
        return self.writes.max_artifact_bytes

    @property
    def commits(self) -> int:
        """Write transactions committed by this store (one per group commit)."""
        return self.pipeline.commits

    def _load_replica_id(self) -> str:
        # A plain read first: every open (each CLI call) would otherwise queue for the write
        # lock behind busy writers just to read a value that is minted once.
        with self.engine.connect() as conn:
            held = meta_rows.value(conn, REPLICA_ID_KEY)
        if held is not None:
            return held
        if self.read_only:
            return ""  # minted by the first writer; a reader does not need one
        # The backend's write transaction, as the pipeline runs it (which needs the replica
        # id, for its clock, before it can exist): minted once, under the write lock.
        backend = self.backend
        with backend.transaction() as tx:
            ex = backend.executor(tx.db, backends.Compiler(backend.sql_dialect()))
            held = meta_rows.get(ex, REPLICA_ID_KEY)
            if held is None:
                held = mint_replica_id()
                meta_rows.insert(ex, REPLICA_ID_KEY, held)
        return held

    def _projection_is_stale(self, before: str | None) -> bool:
        with self.pipeline.connect() as conn:
            version = meta_rows.value(conn, task_rows.FOLD_VERSION_KEY)
            if version == task_rows.FOLD_VERSION and before == SCHEMA_HEAD:
                return False
            empty = log_rows.is_empty(conn)
        if version is None and empty:  # a new log: nothing to fold, record the version
            self.transaction(task_rows.mark_fold_version)
            return False
        return True

    def _make_change_watcher(self) -> notify.ChangeWatcher | None:
        """The cross-process wake-up signal: one thread per store, running while anyone waits."""
        with self.pipeline.storage_errors():
            factory = self.backend.change_signal()
        return None if factory is None else notify.ChangeWatcher(self.notifier, factory)


def _check_backdate_window(ms: int) -> None:
    if not 0 <= ms <= config.MAX_BACKDATE_WINDOW_MS:
        raise errors.ValidationError(
            f"backdate_window_ms is {ms}; it must be between 0 and {config.MAX_BACKDATE_WINDOW_MS}",
            field="backdate_window_ms",
            limit=config.MAX_BACKDATE_WINDOW_MS,
        )
