"""The lean local writer (issue 25): `logstream append`, `ack` and the task moves on a local
SQLite log without SQLAlchemy, pydantic or typer, through the store's own write path.

One rule, not a copy. A write runs the store's modules: `Writes` (drafts, validation),
`Transaction` and `append` (the `Local` origin: names, identity sealing, numbering), the
registered projections (the task fold, redactions, leases) and the loop guards, in the
`CommitPipeline`, on the SQLite backend's own write transaction (backends/sqlite_writer.py:
BEGIN IMMEDIATE and its retry, `data_version`, the executor). The operation's handler and
argument check are the operation table's (op_handlers.py), with the parameter table that
`operations.params()` derives from the pydantic models kept in the generated module. What is
different is only where a statement's SQL text comes from: backends/sqlite_write_sql.py,
what a real store compiled for the same calls (`python -m mempalace_logstream.store.lean_write`
regenerates it; tests/test_lean_write.py fails when the two differ), instead of SQLAlchemy.

Anything else is left to the store, before anything is written: `open_lean_writer` is None
for PostgreSQL, a URL with options, a missing file (the store creates it), a file this process
may not write, a schema that is not the head the SQL was generated for, a log without a
replica id or whose task projection the store would rebuild; `call` raises `Unplanned` for an
operation it does not serve, and a statement shape missing from the table raises `Unplanned`
inside the write transaction, which rolls it back. The caller then runs the store.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from mempalace_logstream import config, delivery_hook, errors, hlc, lazy, notify
from mempalace_logstream import op_handlers as handlers
from mempalace_logstream import validation as v
from mempalace_logstream.backends import sqlite_write_sql as generated
from mempalace_logstream.backends import sqlite_writer
from mempalace_logstream.backends.base import Build, Compiler, QueryExecutor
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.backends.sqlite_reader import SqliteReader
from mempalace_logstream.backends.sqlite_writer import SqliteFileWriter
from mempalace_logstream.models import Event, EventDraft
from mempalace_logstream.store import tasks as task_rows
from mempalace_logstream.store.identity import Identity, keys_path_for
from mempalace_logstream.store.ids import REPLICA_ID_KEY
from mempalace_logstream.store.pipeline import CommitPipeline
from mempalace_logstream.store.projections import Projections
from mempalace_logstream.store.unplanned import Unplanned
from mempalace_logstream.store.writes import Transaction, Writes

if TYPE_CHECKING:
    from pathlib import Path

    import sqlalchemy as sa

    from mempalace_logstream.backends.base import Executor
    from mempalace_logstream.store.core import LogStore
    from mempalace_logstream.store.reads import Reads
    from mempalace_logstream.store.task_cache import FoldCache
    from mempalace_logstream.store.task_reads import TaskReads
    from mempalace_logstream.tasks import TaskSettings

__all__ = ["LeanWriter", "Unplanned", "open_lean_writer"]

T = TypeVar("T")


def open_lean_writer(
    target: str,
    durability: str = "full",
    *,
    keys_dir: Path | None = None,
    max_body_bytes: int = v.DEFAULT_MAX_BODY_BYTES,
    max_artifact_bytes: int = v.DEFAULT_MAX_ARTIFACT_BYTES,
    task_settings: TaskSettings | None = None,
    backdate_window_ms: int = config.DEFAULT_BACKDATE_WINDOW_MS,
) -> LeanWriter | None:
    """A lean writer of the log at `target` (`sqlite:///PATH`, as config.resolve_db makes
    it), or None when the store must open it (see the module's docstring). The keyword
    arguments are `LogStore.open`'s (keys_dir defaults the same way): a command passes what
    `store.options.log_options` gives, as the CLI's `open_store` does. Raises the store's
    StorageError for a file that is not a log."""
    if not 0 <= backdate_window_ms <= config.MAX_BACKDATE_WINDOW_MS:
        return None  # the store refuses it, in its words
    backend = sqlite_writer.open_writer(target, durability)
    if backend is None:
        return None
    try:
        replica_id = _ready(backend)
    except errors.StorageError as exc:  # as `LogStore.open` names the database it could not open
        backend.close()
        where = backend.describe()
        if where in exc.message:
            raise
        raise type(exc)(f"cannot open {where}: {exc.message}") from exc
    except BaseException:
        backend.close()
        raise
    if replica_id is None:
        backend.close()
        return None
    store = LeanStore(
        backend,
        replica_id,
        keys_dir=keys_dir if keys_dir is not None else keys_path_for(target),
        max_body_bytes=max_body_bytes,
        max_artifact_bytes=max_artifact_bytes,
        task_settings=task_settings,
    )
    store.backdate_window_ms = backdate_window_ms
    return LeanWriter(store)


def _ready(backend: SqliteFileWriter) -> str | None:
    """The log's replica id when the store would open it as it is (no migration, no replica
    id to mint, no task projection to rebuild: `LogStore.__init__`), else None."""
    reader = SqliteReader(backend.db)
    if reader.schema_revision() != generated.SCHEMA_HEAD:
        return None
    with backend.reading() as query:
        ex = QueryExecutor(query, TableCompiler())
        replica_id = meta_rows.get(ex, REPLICA_ID_KEY)
        fold = meta_rows.get(ex, task_rows.FOLD_VERSION_KEY)
    return replica_id if fold == task_rows.FOLD_VERSION else None


class LeanWriter:
    """`call(op, **args)`: what `operations.LocalClient(store).call(op, **args)` answers,
    for the operations of `generated.OPERATIONS`; `close()` writes the delivery ledger's
    marks and closes the connection, as `LocalClient.close` does. The ledger is enabled
    before the first call that leaves a mark it writes (`delivery_hook.records`: an ack);
    a write's sign of life is memory only, lost with a one-call process either way, so a
    plain append never loads the ledger (issue 25)."""

    def __init__(self, store: LeanStore) -> None:
        self.store = store
        self.recording = False

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        spec = generated.OPERATIONS.get(name)
        if spec is None:
            raise Unplanned(f"{name}: not an operation the lean writer serves")
        table, mutating = spec
        clean = handlers.checked(name, table, args, mutating)
        if not self.recording and delivery_hook.records(name):
            from mempalace_logstream import deliveries

            deliveries.enable(self.store.as_log_store(), background=False)  # `close` writes
            self.recording = True
        return handlers.run(self.store.as_log_store(), name, clean)

    def close(self) -> None:
        if self.recording:
            from mempalace_logstream import deliveries

            deliveries.disable(self.store.as_log_store())
        self.store.close()


class LeanStore:
    """The parts of a `LogStore` its write path reaches (`tx.store`, the handlers, the
    ledger), each built by its own class as `LogStore.__init__` builds it, on a `SqliteFileWriter`
    backend and the generated SQL. The methods are `LogStore`'s one-line delegations."""

    read_only = False
    created = False
    backdate_window_ms = config.DEFAULT_BACKDATE_WINDOW_MS

    def __init__(
        self,
        backend: SqliteFileWriter,
        replica_id: str,
        *,
        keys_dir: Path | str | None,
        max_body_bytes: int,
        max_artifact_bytes: int,
        task_settings: TaskSettings | None,
    ) -> None:
        self.backend, self.replica_id = backend, replica_id
        self.dialect = backend.name
        self._task_settings = task_settings
        self.projections = Projections()
        self.identity = Identity(keys_dir, backend.links_functions()[1])
        self.clock = hlc.HybridClock(replica_id, None)
        self.notifier = notify.Notifier()
        self.pipeline = CommitPipeline(
            cast("sa.Engine", _NoEngine()),
            backend,
            identity=self.identity,
            clock=self.clock,
            notifier=self.notifier,
            replica_id=replica_id,
            compiler=TableCompiler(),
        )
        self.writes = Writes(
            self.as_log_store(),
            self.pipeline,
            max_body_bytes=max_body_bytes,
            max_artifact_bytes=max_artifact_bytes,
        )

    # The task settings, the readers and the fold cache, made on first use: an append that
    # reads nothing back and moves no task never loads them (issue 25).
    @functools.cached_property
    def task_settings(self) -> TaskSettings:
        from mempalace_logstream.tasks import TaskSettings

        # `TaskSettings()` without making the dataclass (a loop guard reads the values only)
        return self._task_settings or lazy.instance(TaskSettings)

    @functools.cached_property
    def reads(self) -> Reads:
        from mempalace_logstream.store.reads import Reads

        return Reads(self.pipeline, self.identity, self.notifier)

    @functools.cached_property
    def task_reads(self) -> TaskReads:
        from mempalace_logstream.store.task_reads import TaskReads

        return TaskReads(self.reads, self.clock, self.task_settings)

    @functools.cached_property
    def task_folds(self) -> FoldCache:
        from mempalace_logstream.store.task_cache import FoldCache

        return FoldCache()

    def as_log_store(self) -> LogStore:
        """This, where the store's modules name the type they are handed (they read only
        the parts above: tests/test_lean_write.py runs them against LocalClient's answers)."""
        return cast("LogStore", self)

    def close(self) -> None:
        self.pipeline.close()

    def transaction(
        self, work: Callable[[Transaction], T], on_bulk: Callable[[], Any] | None = None
    ) -> T:
        return self.writes.transaction(work, on_bulk)

    def draft_event(self, **fields: Any) -> EventDraft:
        return self.writes.draft_of(fields)

    def event_append(self, **fields: Any) -> Event:
        return self.writes.append_of(fields)

    def snapshot(self) -> contextlib.AbstractContextManager[QueryExecutor]:
        return self.reads.snapshot()

    def event_get(self, event_id: Any) -> Event:
        return self.reads.event_get(event_id)

    def task_status(self, task_id: Any) -> dict[str, Any]:
        return self.task_reads.task_status(task_id)

    def task_brief(self, task_id: Any) -> dict[str, Any]:
        return self.task_reads.task_brief(task_id)

    def event_select(self, *where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        return self.pipeline.event_select(*where)

    def event_by_id(self, ex: Executor, ident: str, *, field: str) -> Event:
        return self.pipeline.event_by_id(ex, ident, field=field)

    @property
    def max_body_bytes(self) -> int:
        return self.writes.max_body_bytes

    @property
    def max_artifact_bytes(self) -> int:
        return self.writes.max_artifact_bytes


class TableCompiler(Compiler):
    """The store's `Compiler` whose every shape was compiled by a real store beforehand
    (backends/sqlite_write_sql.py): a shape missing there is `Unplanned`, never built."""

    def __init__(self) -> None:
        self.cache = dict(generated.STATEMENTS)

    def compile_new(self, key: Any, build: Build) -> tuple[str, dict[str, Any]]:
        raise Unplanned(f"no generated SQLite statement for {key!r}")


class _NoEngine:
    """The pipeline's SQLAlchemy engine, for reads outside a snapshot: none here."""

    def connect(self) -> Any:
        raise Unplanned("a read through SQLAlchemy")


# ----------------------------------------------------------------- sqlite_write_sql.py

# The operations served, as the CLI's `append`, `ack`, `task create|<move>` and `task status`
# call them (cli/events.py, cli/tasks.py through `shared.run`).
LEAN_OPS = ("event_append", "event_ack", "task_create", "task_update", "task_status")


def generate() -> dict[str, Any]:
    """{SCHEMA_HEAD, SPLIT_INBOX, OPERATIONS, STATEMENTS} from a real store on SQLite: the
    calls `_exercise` makes through `operations.LocalClient` (by writers without keys, then
    with keys), and every statement the store compiled for them; OPERATIONS is
    `operations.params()` (the pydantic models' table) and whether each writes. Imports
    SQLAlchemy and the store: never called on the write path."""
    import tempfile

    from mempalace_logstream import agents, operations
    from mempalace_logstream.backends.sqlite import SqliteBackend
    from mempalace_logstream.schema import SCHEMA_HEAD
    from mempalace_logstream.store.core import LogStore

    statements: dict[Any, tuple[str, dict[str, Any]]] = {}
    for keyed in (False, True):  # writers without keys, and with (signed, judged: RFC 0008)
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/log.sqlite3"
            with LogStore.open(path) as made:  # made and migrated: the next open finds it ready
                for name in ("a", "b") if keyed else ():
                    agents.add(made, name)
            store = LogStore.open(path)
            client = operations.LocalClient(store)
            try:
                _exercise(client.call)
            finally:
                client.close()  # the delivery ledger's flush compiles its statement too
            statements |= store.compiled_sql()
            with LogStore.open(path) as opened, opened.snapshot() as ex:
                for key in (REPLICA_ID_KEY, task_rows.FOLD_VERSION_KEY):  # what `_ready` reads
                    meta_rows.get(ex, key)
                statements |= opened.compiled_sql()
    params = operations.params()
    return {
        "SCHEMA_HEAD": SCHEMA_HEAD,
        "SPLIT_INBOX": SqliteBackend.split_inbox,
        "OPERATIONS": {op: (params[op], op in operations.MUTATING) for op in LEAN_OPS},
        "STATEMENTS": statements,
    }


def _exercise(call: Callable[..., dict[str, Any]]) -> None:
    """The lean writer's calls, in each shape its statements take: an append alone, with
    every optional field, to '*', replayed by idempotency key, referencing an artifact; an
    ack; a task created, claimed, moved and completed, and its status."""
    where = {"stream": "project/x", "room": "r"}
    first = call("event_append", type="note", from_agent="a", body="hi", **where)
    full: dict[str, Any] = {"to_agent": "b", "topic": "t", "correlation_id": "c1"}
    full["status"] = "open"
    full |= {"branch": "main", "base_commit": "0" * 40, "metadata": {"k": 1}}
    for _ in range(2):  # the replay finds the first
        call("event_append", type="note", from_agent="a", idempotency_key="k", **full, **where)
    call("event_append", type="note", from_agent="a", to_agent="*", **where)
    art = call("artifact_put", kind="note", content="x", created_by="a")["artifact"]["id"]
    call("event_append", type="note", from_agent="a", artifact_ids=[art], **where)
    call("event_ack", event_id=first["event"]["id"], from_agent="b")
    task = call(
        "task_create",
        project="project/x",
        from_agent="a",
        to_agent="b",
        goal="g",
        branch="main",
        base_commit="0" * 40,
        done="d",
    )["task_id"]
    refused = (  # moves the row refuses, and one only the thread decides (a keyed log)
        {"action": "progress", "from_agent": "b", "progress": 10},
        {"action": "claim", "from_agent": "c"},
    )
    for move in refused:
        with contextlib.suppress(errors.LogstreamError):
            call("task_update", task_id=task, **move)
    call("task_update", task_id=task, action="claim", from_agent="b")
    call("task_update", task_id=task, action="progress", from_agent="b", progress=50)
    with contextlib.suppress(errors.LogstreamError):
        call("task_update", task_id=task, action="progress", from_agent="b", progress=20)
    done = {"result": {"disposition": "completed"}, "artifact_ids": [art]}
    call("task_update", task_id=task, action="complete", from_agent="b", **done)
    call("task_update", task_id=task, action="accept", from_agent="a")
    call("task_status", task_id=task)


GENERATED = generated.__file__


if __name__ == "__main__":
    from mempalace_logstream.store import lean

    about = (
        "The SQLite statements of the lean local writer's operations as the store compiles\n"
        "them (key -> (SQL text, default parameters)), and their parameter table, for\n"
        "store/lean_write.py."
    )
    values = generate()
    statements = values.pop("STATEMENTS")
    text = lean.render_module(
        "python -m mempalace_logstream.store.lean_write", about, values, statements
    )
    with open(GENERATED, "w", encoding="utf-8") as out:
        out.write(text)
    print(f"wrote {GENERATED}; now run `ruff format {GENERATED}`")
