"""LogStore: the only code that runs SQL. Append, read, wait, artifacts, acks, patches, tasks.

Every public method validates first (nothing is written on bad input), runs in one transaction
and returns frozen models. Concurrent appends in one process are group-committed; seq is
assigned under the write lock, so seq order is commit order on every backend (S-2.4).
The class is assembled from one base per concern: pipeline.py (group commit), writes.py,
reads.py, stats.py; what differs between databases is behind `self.backend` (backends/).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import backends, config, errors, hlc, migrate, notify
from mempalace_logstream import validation as v
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.schema import SCHEMA_HEAD
from mempalace_logstream.store import tasks as task_rows
from mempalace_logstream.store.identity import Identity, keys_dir_for
from mempalace_logstream.store.ids import mint_replica_id
from mempalace_logstream.store.pipeline import Pending
from mempalace_logstream.store.reads import Reads
from mempalace_logstream.store.rows import read_columns
from mempalace_logstream.store.stats import Stats
from mempalace_logstream.store.task_cache import FoldCache
from mempalace_logstream.store.task_reads import TaskReads
from mempalace_logstream.store.writes import Writes
from mempalace_logstream.tasks import TaskSettings

REPLICA_ID_KEY = "replica_id"  # the meta row holding this database's replica id


class LogStore(Writes, Reads, Stats, TaskReads):
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
        task_settings: TaskSettings | None = None,
        keys_dir: Path | None = None,
        backdate_window_ms: int = config.DEFAULT_BACKDATE_WINDOW_MS,
        create: bool = True,
    ) -> None:
        if not 0 <= backdate_window_ms <= config.MAX_BACKDATE_WINDOW_MS:
            raise errors.ValidationError(
                f"backdate_window_ms is {backdate_window_ms}; it must be between 0 and "
                f"{config.MAX_BACKDATE_WINDOW_MS}",
                field="backdate_window_ms",
                limit=config.MAX_BACKDATE_WINDOW_MS,
            )
        # Sync apply holds an event signed by a key revoked here before it arrived, stamped
        # less than this before the revocation (RFC 0008 "Threat model": backdating).
        self.backdate_window_ms = backdate_window_ms
        self.engine = engine
        self.task_settings = task_settings or TaskSettings()
        self.task_folds = FoldCache()  # checkpoints for tasks whose events arrive late
        self.backend = backends.for_engine(engine)
        # The private keys this process signs with and the keyring it judges with (RFC 0008).
        self.identity = Identity(keys_dir, self.backend.links_functions()[1])
        self.dialect = self.backend.name
        self._writer = engine_mod.writer(engine)
        self.max_body_bytes = max_body_bytes
        self.max_artifact_bytes = max_artifact_bytes
        # A file this process may not write: no migration, only a schema check (and no writes).
        self.read_only = engine_mod.read_only_kind(engine) is not None
        self.created = engine_mod.was_created(engine)  # this open made a new log file
        before: str | None = SCHEMA_HEAD
        with self._storage_errors():
            if migrate_schema and not self.read_only:
                before = migrate.ensure_schema(engine, create=create)
            else:
                migrate.check_schema(engine)
            self.replica_id = self._load_replica_id()
        self.clock = hlc.HybridClock(self.replica_id, clock)
        self.notifier = notify.Notifier()
        self._change_watcher = self._make_change_watcher()
        self._notify_channel = self.backend.notify_channel
        if self._change_watcher is not None:
            self.notifier.attach(self._change_watcher)
        self._queue: list[Pending] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._closed = False
        # Precompiled SQL text per statement shape (see `_sql`).
        self._sql_dialect = self.backend.sql_dialect()
        self._sql_cache: dict[Any, tuple[str, dict[str, Any]]] = {}
        self._read_cols = read_columns(self.backend)
        # Write transactions committed by this store (one per group commit; read by tests
        # and `stats` to show that concurrent appends share commits).
        self.commits = 0
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

    def _load_replica_id(self) -> str:
        # A plain read first: every open (each CLI call) would otherwise queue for the write
        # lock behind busy writers just to read a value that is minted once.
        with self.engine.connect() as conn:
            held = meta_rows.value(conn, REPLICA_ID_KEY)
        if held is not None:
            return held
        if self.read_only:
            return ""  # minted by the first writer; a reader does not need one
        with self._writer.begin() as conn:
            self._lock_writes(conn)
            held = meta_rows.value(conn, REPLICA_ID_KEY)
            if held is not None:
                return held
            rid = mint_replica_id()
            meta_rows.insert(conn, REPLICA_ID_KEY, rid)
            return rid

    def _projection_is_stale(self, before: str | None) -> bool:
        with self._storage_errors(), self.engine.connect() as conn:
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
        with self._storage_errors():
            factory = self.backend.change_signal()
        return None if factory is None else notify.ChangeWatcher(self.notifier, factory)
