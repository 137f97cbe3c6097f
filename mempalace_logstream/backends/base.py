"""The storage seam: what differs between the SQLite and the PostgreSQL backend.

`Backend` is the protocol the store talks to; `sqlite.py` and `postgres.py` implement it, and
no other module names a dialect. Every write transaction and read snapshot of the store runs
on the backend's own DBAPI connections (`transaction`, `savepoint`, `reading`); an `Executor`
runs the statements of one of them by statement shape (compiled once per store, see
`Compiler`). `statement_hooks` observe the statements the store runs. `storage_error` is the
one mapping of database errors to `StorageError`.
"""

from __future__ import annotations

import abc
import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mempalace_logstream import errors, lazy
from mempalace_logstream.backends.sqlite_file import storage_message

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import notify, schema

    EVENT_COLS: list[sa.Column[Any]]
else:  # built into statements only (once per shape and store): not on the lean write path
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

# Build a statement (called once per shape and store).
Build = Callable[[], Any]
# (SQL text, parameters) of a statement shape: a `Compiler`.
Compile = Callable[[Any, Build, Mapping[str, Any]], tuple[str, Mapping[str, Any]]]
# One precompiled statement: (SQL text, its parameters).
Statement = tuple[str, Mapping[str, Any]]
# Run one precompiled SQL text with a parameter dict (or a sequence, for a statement compiled
# with positional parameters), return all rows as tuples.
Query = Callable[[str, Any], Sequence[Sequence[Any]]]
# Told of each statement the store runs: (SQL text, what the driver binds: a mapping or a
# sequence, or a list of those when the statement runs once per row).
StatementHook = Callable[[str, Any], None]
# The SQL functions of the artifact links column: (char(code), string aggregate(item, sep)).
LinksFunctions = tuple[Callable[..., Any], Callable[..., Any]]

IN_MAX = 512  # values per IN list; lists are padded to a power of two (few SQL shapes)
# The events table's columns but the idempotency key, in the table's order: what a read row
# holds and an insert gives first. Spelled out so the write path needs no Table
# (tests/test_lean_write.py holds it equal to schema.events); `EVENT_COLS` are the Columns.
EVENT_COL_NAMES = (
    "seq",
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "body",
    "created_at",
    "metadata_json",
    "sig",
    "key_id",
)
# What an insert of events gives (`Executor.insert_events`): the read columns, then the key.
EVENT_INSERT_COL_NAMES = (*EVENT_COL_NAMES, "idempotency_key")


class Backend(Protocol):
    """What the store asks of the database behind one engine (one instance per store).

    Operations: a write transaction under the write lock (`transaction`), a savepoint in it,
    a read snapshot (`reading`), and the executor of either; the rest describes the database.
    """

    name: str  # the SQLAlchemy dialect name, reported by `stats`
    driver_errors: tuple[type[BaseException], ...]  # what the DBAPI driver raises
    notify_channel: str | None  # where appends announce themselves, if anywhere
    split_inbox: bool  # an inbox read runs one index-ordered leg per to_agent value
    # One chunk of a compact sync page (`/sync/ops_rows`) serialized by the database, or
    # None: (rows as UTF-8 JSON, count, last origin_seq, body+metadata chars).
    rows_json_sql: str | None
    # Called with every statement the store runs on the backend's connections (reads and
    # writes; not BEGIN, COMMIT or SAVEPOINT): tracing, query-plan tests, benchmarks. Add and
    # remove a hook with the list's `append` and `remove`; with none, nothing is called.
    statement_hooks: list[StatementHook]

    def sql_dialect(self) -> sa.Dialect:
        """The dialect the store compiles its statements with."""

    def links_functions(self) -> LinksFunctions:
        """The SQL functions that aggregate an event's artifact links into one column."""

    def describe(self) -> str:
        """The database as named in error messages."""

    def check_log(self, conn: sa.Connection, create: bool) -> None:
        """Asked when the database holds no log at the schema head: refuse a target where a
        log cannot be (PostgreSQL: a search_path naming no schema that exists), and, for a
        reader (`create` False), a database that holds no log at all (nothing is created).
        SQLite decides both at the file, before any engine (backends/engine.py)."""

    def lock_migrations(self, conn: sa.Connection, key: int) -> None:
        """Serialize schema migrations of concurrent openers (held to commit)."""

    def change_signal(self) -> Callable[[], notify.ChangeSignal] | None:
        """The cross-process change signal's factory, or None when nothing can signal."""

    def integrity_problems(self, conn: sa.Connection) -> tuple[str, list[str]]:
        """The database's own integrity check (`logstream doctor`): what was checked, and the
        problems found ([] when healthy)."""

    def before_redaction(self) -> str | None:
        """SQL run in a redaction's transaction before it overwrites content, or None."""

    def transaction(
        self, state: Statement | None = None
    ) -> contextlib.AbstractContextManager[WriteTx]:
        """A write transaction on the writer's connection, under the write lock that makes
        seq order commit order, committed when the block ends (rolled back if it raises);
        appends are announced with the commit (`WriteTx.appended`). `state` (the pipeline's
        starting-state query) is run first unless the counters are `known`; its row is
        `WriteTx.state_row`. Writes may be sent late (with the next read, the savepoint's end
        or the COMMIT: PostgreSQL batches them), never out of order."""

    def savepoint(self, db: Any) -> contextlib.AbstractContextManager[None]:
        """A savepoint in `db`'s transaction, rolled back alone if the block raises."""

    def reading(self) -> contextlib.AbstractContextManager[Query]:
        """The reads of one call on one of the backend's reader connections: one snapshot on
        SQLite; on PostgreSQL at READ COMMITTED each statement reads its own (as it would in a
        transaction block at that level)."""

    def remember_log_facts(self, statements: Iterable[str]) -> None:
        """SQL texts whose rows depend only on what the log holds and their parameters: a
        backend that can tell nothing was committed since (SQLite's `data_version`) answers
        them again, for the same parameters, from its reader connection's last result."""

    def executor(
        self, db: Any, compile: Compile, on_bulk: Callable[[], Any] | None = None
    ) -> Executor:
        """The statements of one write transaction on `db`; `on_bulk` is called when the
        rest of the transaction is long work that releases the GIL (a big sync page)."""

    def query(self, db: Any) -> Query:
        """Precompiled text on `db`."""

    def db_size(self) -> int | None:
        """The log's size in bytes."""

    def close(self) -> None:
        """Release what the backend holds (the writer's connection)."""


class StateMoved(BaseException):  # noqa: N818 (a signal to retry, not an error)
    """A write transaction that began without reading its starting state (it assumed nobody
    committed since its store's last commit: PostgreSQL's optimistic begin) found that
    another writer did. Nothing was written; the pipeline runs the batch again, reading the
    state. A BaseException: no item of a batch (nor its savepoint) may catch it."""


class WriteTx(Protocol):
    """One write transaction: its DBAPI connection, and the counters of the previous one if
    nobody committed since (`known`); the caller sets `counters` at the end."""

    db: Any
    known: tuple[int, int] | None
    state_row: Sequence[Any] | None  # the `state` query's row (None when it was not run)
    counters: tuple[int, int] | None
    appended: bool  # events were appended: announce them with the commit (PostgreSQL NOTIFY)


def observe(hooks: Sequence[StatementHook], sql: str, params: Any) -> None:
    """Tell every statement hook of `sql` (callers test `if hooks:` first: no call at all
    while nobody observes)."""
    for hook in tuple(hooks):
        hook(sql, params)


class Compiler:
    """(SQL text, parameters) of each statement shape, compiled once with one dialect (one
    per store: `CommitPipeline.sql`): `params` plus the values of the statement's own
    literals (a LIMIT 1 is a bound parameter too)."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self.dialect = dialect
        self.cache: dict[Any, tuple[str, dict[str, Any]]] = {}

    def __call__(
        self, key: Any, build: Build, params: Mapping[str, Any]
    ) -> tuple[str, Mapping[str, Any]]:
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self.compile_new(key, build)
        sql, defaults = hit
        return sql, ({**defaults, **params} if defaults else params)

    def compile_new(self, key: Any, build: Build) -> tuple[str, dict[str, Any]]:
        """(SQL text, the values of its own literals) of a shape not compiled yet."""
        compiled = build().compile(dialect=self.dialect)
        defaults = {k: v for k, v in compiled.params.items() if v is not None}
        return str(compiled), defaults


def storage_error(
    exc: BaseException, driver_errors: tuple[type[BaseException], ...] = ()
) -> errors.StorageError | None:
    """The StorageError for a database error (SQLAlchemy's or a DBAPI driver's), else None.
    SQLAlchemy's errors are asked about only once it is loaded (no process raises one before:
    a lean write never loads it to map a refusal)."""
    if isinstance(exc, errors.LogstreamError):
        return None
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.DBAPIError):
        return errors.StorageError(storage_message(exc.orig))
    if sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError):
        return errors.StorageError(f"database error: {exc}")
    if driver_errors and isinstance(exc, driver_errors):
        return errors.StorageError(storage_message(exc))
    return None


@contextlib.contextmanager
def wrap_exceptions(driver_errors: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Database errors raised inside become StorageError, chained with `from`."""
    try:
        yield
    except Exception as exc:
        mapped = storage_error(exc, driver_errors)
        if mapped is None:
            raise
        raise mapped from exc


def insert_into(table: str) -> sa.Insert:
    """The INSERT of every column of the schema's table named `table` (`Executor.insert`)."""
    return sa.insert(schema.metadata.tables[table])


def __getattr__(name: str) -> Any:
    """`EVENT_COLS`, the Columns of `EVENT_COL_NAMES`, made on first use (PEP 562)."""
    if name != "EVENT_COLS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cols = [schema.events.c[n] for n in EVENT_COL_NAMES]
    globals()[name] = cols
    return cols


def binds(n: int) -> list[sa.BindParameter[Any]]:
    return [sa.bindparam(f"v{i}") for i in range(n)]


def in_lists(values: Sequence[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(n, params v0..v{n-1}) per chunk of `values`: n is a power of two <= 512, the chunk
    padded with its last value (a repeat changes nothing in an IN list)."""
    for i in range(0, len(values), IN_MAX):
        chunk = values[i : i + IN_MAX]
        n = 1 << (len(chunk) - 1).bit_length()
        last = chunk[-1]
        yield n, {f"v{j}": chunk[j] if j < len(chunk) else last for j in range(n)}


class Executor(abc.ABC):
    """The statements of one transaction (or read snapshot), by statement shape: `key` names
    the shape, `build` makes it (once per store where the executor compiles)."""

    @abc.abstractmethod
    def rows(self, key: Any, build: Build, params: Mapping[str, Any]) -> Sequence[Any]: ...

    @abc.abstractmethod
    def run(self, key: Any, build: Build, params: Mapping[str, Any]) -> None: ...

    def run_many(self, key: Any, build: Build, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run one statement shape once per parameter dict of `rows` (a batch)."""
        for params in rows:
            self.run(key, build, params)

    def check(self, key: Any, build: Build, params: Mapping[str, Any]) -> bool:
        """Send the statement `build` (one value, which divides by zero to refuse) with the
        transaction's COMMIT instead of reading it now, if this executor can (PostgreSQL's
        writer: the refusal fails the message before the COMMIT, and the batch runs again,
        reading: `StateMoved`). False: not sent, the caller reads."""
        return False

    @abc.abstractmethod
    def insert(self, key: Any, table: str, rows: list[dict[str, Any]]) -> None:
        """INSERT rows giving every column of the table named `table` (a name, not the Table:
        the lean writer serves the statement by `key` without loading the schema)."""

    @abc.abstractmethod
    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        """INSERT events rows in `EVENT_INSERT_COL_NAMES` order."""

    def held_ids(self, ids: list[str]) -> set[str]:
        """The event ids among `ids` held here (distinct ids)."""
        out: set[str] = set()
        for n, params in in_lists(ids):

            def build(n: int = n) -> sa.Executable:
                return sa.select(schema.events.c.id).where(schema.events.c.id.in_(binds(n)))

            out.update(r[0] for r in self.rows(("sync-held-ids", n), build, params))
        return out


class DbapiExecutor(Executor):
    """Precompiled statements on a backend's own DBAPI connection (its `execute` returns a
    cursor), each told to the backend's statement hooks; a backend adds how it inserts
    events in bulk."""

    def __init__(self, db: Any, compile: Compile, hooks: Sequence[StatementHook] = ()) -> None:
        self.db, self.compile, self.hooks = db, compile, hooks

    def rows(self, key: Any, build: Build, params: Mapping[str, Any]) -> Sequence[Any]:
        sql, bound = self.compile(key, build, params)
        if self.hooks:
            observe(self.hooks, sql, bound)
        rows: Sequence[Any] = self.db.execute(sql, bound).fetchall()
        return rows

    def run(self, key: Any, build: Build, params: Mapping[str, Any]) -> None:
        sql, bound = self.compile(key, build, params)
        if self.hooks:
            observe(self.hooks, sql, bound)
        self.db.execute(sql, bound)

    def run_many(self, key: Any, build: Build, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        sql, defaults = self.compile(key, build, rows[0])
        extra = {k: v for k, v in defaults.items() if k not in rows[0]}
        bound = [{**extra, **r} for r in rows] if extra else rows
        if self.hooks:
            observe(self.hooks, sql, bound)
        with contextlib.closing(self.db.cursor()) as cur:
            cur.executemany(sql, bound)

    def insert(self, key: Any, table: str, rows: list[dict[str, Any]]) -> None:
        sql, _ = self.compile(key, lambda: insert_into(table), {})
        if self.hooks:
            observe(self.hooks, sql, rows[0] if len(rows) == 1 else rows)
        if len(rows) == 1:
            self.db.execute(sql, rows[0])
        else:
            with contextlib.closing(self.db.cursor()) as cur:
                cur.executemany(sql, rows)


class QueryExecutor(Executor):
    """Read-only statements as precompiled text through a `Query` (a read snapshot)."""

    def __init__(self, query: Query, compile: Compile) -> None:
        self.query, self.compile = query, compile

    def rows(self, key: Any, build: Build, params: Mapping[str, Any]) -> Sequence[Any]:
        return self.query(*self.compile(key, build, params))

    def run(self, key: Any, build: Build, params: Mapping[str, Any]) -> None:
        self.query(*self.compile(key, build, params))

    def insert(self, key: Any, table: str, rows: list[dict[str, Any]]) -> None:
        raise errors.StorageError("a read snapshot cannot write")

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        raise errors.StorageError("a read snapshot cannot write")
