"""The lean local writer (issue 25, store/lean_write.py): `append`, `ack` and the task moves
on a local SQLite log through the store's own write path, with the store's SQL text kept in a
generated table instead of SQLAlchemy.

Its SQL is the store's (regenerated and compared); twin logs written through `LocalClient`
and through the lean writer answer alike and hold the same rows, refusals and errors
included; it loads no SQLAlchemy, pydantic or surface library; what it does not cover
writes nothing and says `Unplanned`."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import agents, errors, operations, schema
from mempalace_logstream import op_handlers as handlers
from mempalace_logstream.backends import base, sqlite_write_sql, sqlite_writer
from mempalace_logstream.backends.sqlite import SqliteBackend
from mempalace_logstream.operations import LocalClient
from mempalace_logstream.store import LogStore, blobs, identity, lean_write, rows
from mempalace_logstream.store.lean_write import LeanWriter, Unplanned, open_lean_writer
from tests.conftest import REPO

HEAVY = ("sqlalchemy", "pydantic", "typer", "click", "rich", "fastapi", "starlette", "mcp")
Call = Callable[..., dict[str, Any]]


def url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def new_log(path: Path) -> str:
    LogStore.open(str(path)).close()
    return url(path)


@pytest.fixture(params=[False, True], ids=["plain", "keyed"])
def twins(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, LocalClient, Path, LeanWriter]]:
    """Two new logs; "keyed": alice and bob hold keys (RFC 0008), so their writes are
    signed, judged and their names checked against the keyring."""
    full_db, lean_db = tmp_path / "full" / "log.sqlite3", tmp_path / "lean" / "log.sqlite3"
    for db in (full_db, lean_db):
        db.parent.mkdir()
        new_log(db)
        if request.param:
            with LogStore.open(str(db)) as store:
                for name in ("alice", "bob"):
                    agents.add(store, name)
    lean = open_lean_writer(url(lean_db))
    assert lean is not None
    client = LocalClient(LogStore.open(str(full_db)))
    try:
        yield full_db, client, lean_db, lean
    finally:
        client.close()
        lean.close()


# ----------------------------------------------------------------------------- one SQL


def test_the_generated_sql_is_the_stores_own() -> None:
    """sqlite_write_sql.py holds what a real store compiles for the lean writer's calls, and
    the operation table's parameters; if either changed, regenerate:
    python -m mempalace_logstream.store.lean_write (then ruff format it)."""
    kept = {
        name: getattr(sqlite_write_sql, name)
        for name in ("SCHEMA_HEAD", "SPLIT_INBOX", "OPERATIONS", "STATEMENTS")
    }
    assert lean_write.generate() == kept
    params = operations.params()
    for op, (table, mutating) in sqlite_write_sql.OPERATIONS.items():
        assert table == params[op]
        assert mutating == (op in operations.MUTATING)


@pytest.mark.parametrize("op", sorted(sqlite_write_sql.OPERATIONS))
def test_the_argument_check_is_the_operation_tables(op: str) -> None:
    """The lean writer's check (the generated parameter table, no pydantic) keeps and refuses
    what `operations.check_args` (the pydantic models' table) keeps and refuses."""
    table, mutating = sqlite_write_sql.OPERATIONS[op]
    required = [name for name, needed in table.items() if needed]
    full = {name: "x" for name in table}
    cases = [
        full,
        {**full, "nope": 1},  # not a parameter
        {name: "x" for name in required},
        {name: None for name in table},  # None is "not given": every required one missing
        *({k: v for k, v in full.items() if k != name} for name in required),
    ]
    for args in cases:
        want = outcome(operations.check_args, op, dict(args))
        assert outcome(handlers.checked, op, table, dict(args), mutating) == want


def outcome(run: Callable[..., Any], *args: Any) -> Any:
    try:
        return run(*args)
    except errors.LogstreamError as exc:
        return (type(exc).__name__, exc.message, exc.field)


def test_the_spelled_out_names_are_the_schemas() -> None:
    """The write path names columns and tables without building the schema's Tables."""
    names = tuple(c.name for c in schema.events.c if c.name != "idempotency_key")
    assert base.EVENT_COL_NAMES == names
    assert [c.name for c in base.EVENT_COLS] == list(names)
    assert rows.ARTIFACT_COLS == [schema.artifacts.c[n] for n in rows.ARTIFACT_COL_NAMES]
    assert sqlite_writer.EVENTS_TABLE == schema.events.name
    assert sqlite_writer.SqliteFileWriter.split_inbox == SqliteBackend.split_inbox


# ----------------------------------------------------------------------------- twins

ID = re.compile(r"\b(?:evt|art|rep|task)_[0-9A-Za-z]+(?:_[0-9a-f]+)?\b|ed25519:[0-9a-f]{32}")
STAMPS = (
    (re.compile(r"\b\d{13}-\d{6}-"), "HLC-"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), "TIME"),
    (re.compile(r"\b1\d{12}\b"), "MS"),
    # an Ed25519 signature and public key (each log has its own keys)
    (re.compile(r"(?<![\w-])[\w-]{86}(?![\w-])"), "SIG"),
    (re.compile(r"(?<![\w-])[\w-]{43}(?![\w-])"), "PUBLIC_KEY"),
)


def normalized(value: Any) -> str:
    """`value` as JSON with ids and key ids numbered by first appearance, stamps and
    signatures blanked."""
    text = json.dumps(value, sort_keys=True, default=str)
    seen: dict[str, str] = {}
    text = ID.sub(lambda m: seen.setdefault(m.group(0), f"ID{len(seen)}"), text)
    for pattern, blank in STAMPS:
        text = pattern.sub(blank, text)
    return text


def answer(call: Call, op: str, **args: Any) -> dict[str, Any]:
    """The answer, or the error's class, message and field."""
    try:
        return call(op, **args)
    except errors.LogstreamError as exc:
        return {"error": type(exc).__name__, "message": exc.message, "field": exc.field}


def script(call: Call) -> list[dict[str, Any]]:
    """What `logstream append`, `ack` and `task create|<move>|status` send, good and bad."""
    out: list[dict[str, Any]] = []

    def do(op: str, **args: Any) -> dict[str, Any]:
        got = answer(call, op, **args)
        out.append(got)
        return got

    where = {"stream": "project/x", "room": "r"}
    first = do("event_append", type="note", from_agent="alice", body="hi", **where)
    do("event_append", type="note", from_agent="alice", to_agent="bob", topic="t", **where)
    keyed = {"idempotency_key": "k1", "to_agent": "*", "metadata": {"a": 1}, **where}
    do("event_append", type="note", from_agent="alice", body="once", **keyed)
    do("event_append", type="note", from_agent="alice", body="once", **keyed)  # replayed
    do("event_append", type="note", from_agent="alice", body="other", **keyed)  # conflict
    do("event_append", type="note", from_agent="alice", **where, to="bob")  # unknown param
    do("event_append", type="note", from_agent="alice", stream="project/x")  # missing room
    do("event_append", type="", from_agent="alice", **where)  # the store's validation
    do("event_append", type="note", from_agent="al ice", **where)
    do("event_append", type="note", from_agent="alice", artifact_ids=["art_nope"], **where)
    do("event_ack", event_id=first["event"]["id"], from_agent="bob")
    do("event_ack", event_id="evt_unknown", from_agent="bob")
    task = {"project": "project/x", "from_agent": "alice", "to_agent": "bob", "goal": "g"}
    task |= {"branch": "main", "base_commit": "0" * 40, "done": "tests pass"}
    made = do("task_create", **task)
    ident = made["task_id"]
    do("task_update", task_id=ident, action="progress", from_agent="bob", progress=10)
    do("task_update", task_id=ident, action="claim", from_agent="carol")  # not addressed
    do("task_update", task_id=ident, action="claim", from_agent="bob")
    do("task_update", task_id=ident, action="progress", from_agent="bob", progress=40)
    do("task_update", task_id=ident, action="progress", from_agent="bob", progress=20)
    done = {"result": {"disposition": "partial"}, "body": "most of it"}
    do("task_update", task_id=ident, action="complete", from_agent="bob", **done)
    do("task_status", task_id=ident)
    do("task_status", task_id="task_unknown")
    return out


def table(db: Path, sql: str) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        return [list(r) for r in con.execute(sql)]
    finally:
        con.close()


def test_twin_logs_answer_and_hold_the_same(
    twins: tuple[Path, LocalClient, Path, LeanWriter],
) -> None:
    full_db, client, lean_db, lean = twins
    full_answers, lean_answers = script(client.call), script(lean.call)
    assert any("error" in a for a in full_answers)  # the refusals are part of the script
    for want, got in zip(full_answers, lean_answers, strict=True):
        assert normalized(got) == normalized(want)
    client.close()  # the ledger's marks written, as `logstream ack` leaves them
    lean.close()
    assert table(full_db, "SELECT count(*) FROM deliveries WHERE acked_at IS NOT NULL") == [[1]]
    for sql in (
        "SELECT * FROM events ORDER BY seq",
        "SELECT * FROM tasks ORDER BY task_id",
        "SELECT * FROM deliveries ORDER BY event_id, recipient",
        "SELECT * FROM logstream_meta WHERE key NOT IN ('replica_id') ORDER BY key",
    ):
        assert normalized(table(lean_db, sql)) == normalized(table(full_db, sql)), sql


# ----------------------------------------------------------------------------- lean


LEAN_RUN = """
import json, sys
from mempalace_logstream.store.lean_write import open_lean_writer
from mempalace_logstream.store.options import log_options
url, options = log_options(sys.argv[1], None, durability="normal")  # as the CLI opens it
w = open_lean_writer(url, **options)
sent = w.call("event_append", type="note", stream="s", room="r", from_agent="a", to_agent="b")
w.call("event_ack", event_id=sent["event"]["id"], from_agent="b")
w.close()
print(json.dumps(sorted(sys.modules)))
"""


def test_a_lean_append_and_ack_load_no_heavy_library(tmp_path: Path) -> None:
    new_log(tmp_path / "log.sqlite3")
    done = subprocess.run(
        [sys.executable, "-c", LEAN_RUN, str(tmp_path / "log.sqlite3")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    # Nor what only keys, digests and lease events need (~10 ms of CPU per process).
    assert [m for m in loaded if m in LAZY] == []
    assert table(tmp_path / "log.sqlite3", "SELECT type FROM events ORDER BY seq") == [
        ["note"],
        ["event.ack"],
    ]


# Loaded on first use only, never by a plain append or ack on a log without keys (issue 25):
# what keys, digests and lease events need.
LAZY = (
    "pathlib",
    "hashlib",
    "mempalace_logstream.leases.rules",
    "mempalace_logstream.store.leases",
)


def test_the_spelled_out_empty_digest_is_sha256s() -> None:
    assert blobs.EMPTY_SHA256 == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("spelling", ["log.sqlite3", "./a/../log.sqlite3", "~/x/log.sqlite3"])
def test_the_keys_path_is_the_keys_dir_pathlib_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """`keys_path_for` (os.path) names the directory `Path.resolve` and `expanduser` name,
    through a symbolic link too; `keys_dir_for` is it as a Path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "link")
    for url in (spelling, f"sqlite:///{spelling}"):
        want = Path(spelling).expanduser().resolve().parent / "keys"
        assert identity.keys_path_for(url) == str(want)
        assert identity.keys_dir_for(url) == want
    assert identity.keys_path_for("postgresql://h/db") is None
    palace = identity.keys_dir_for("postgresql://h/db", "~/p/")
    assert palace == Path("~/p/").expanduser() / "keys"
    assert identity.keys_path_for("postgresql://h/db", "~/p/") == str(palace)


# ----------------------------------------------------------------------------- refusals


def count(db: Path) -> int:
    return int(table(db, "SELECT count(*) FROM events")[0][0])


def test_what_the_store_must_open_is_none(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite3"
    assert open_lean_writer(url(db)) is None  # missing: `append` creates it
    assert not db.exists()
    assert open_lean_writer("postgresql+psycopg://u@h/db") is None
    assert open_lean_writer(url(db) + "?mode=ro") is None
    target = new_log(db)
    assert open_lean_writer(target, durability="fast") is None
    assert open_lean_writer(target, backdate_window_ms=-1) is None
    con = sqlite3.connect(db)
    con.execute("UPDATE alembic_version SET version_num = '0010'")  # an older schema
    con.commit()
    assert open_lean_writer(target) is None
    con.execute(f"UPDATE alembic_version SET version_num = '{sqlite_write_sql.SCHEMA_HEAD}'")
    con.execute("UPDATE logstream_meta SET value = 'old' WHERE key = 'tasks_fold'")
    con.commit()
    con.close()
    assert open_lean_writer(target) is None  # the store would rebuild the task projection
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a log")
    with pytest.raises(errors.StorageError, match="is not a logstream database"):
        open_lean_writer(url(foreign))


def test_a_log_it_cannot_read_is_named_as_the_store_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database error while opening says which database, as `LogStore.open` says it."""
    db = tmp_path / "log.sqlite3"
    target = new_log(db)

    def busy(_backend: Any) -> None:
        raise errors.StorageError("database busy: retry")

    monkeypatch.setattr(lean_write, "_ready", busy)
    with pytest.raises(errors.StorageError) as caught:
        open_lean_writer(target)
    assert caught.value.message == f"cannot open {db.resolve()}: database busy: retry"


def test_an_operation_or_shape_it_does_not_cover_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite3"
    lean = open_lean_writer(new_log(db))
    assert lean is not None
    try:
        with pytest.raises(Unplanned):
            lean.call("event_list", limit=1)
        with pytest.raises(Unplanned):
            lean.call("artifact_put", kind="note", content="x", created_by="a")
        compiler = lean.store.pipeline.sql
        del compiler.cache["tasks.insert"]  # a shape the table does not hold
        task = {"project": "project/x", "from_agent": "a", "to_agent": "b", "goal": "g"}
        task |= {"branch": "main", "base_commit": "0" * 40, "done": "d"}
        with pytest.raises(Unplanned, match="tasks.insert"):
            lean.call("task_create", **task)
        assert count(db) == 0
        sent = lean.call("event_append", type="note", stream="s", room="r", from_agent="a")
        assert sent["event"]["seq"] == 1  # the rolled-back attempt left nothing behind
    finally:
        lean.close()
    with LogStore.open(str(db)) as store:  # the store then takes the call
        assert store.task_list()["tasks"] == []
        assert store.tip()[0] == 1


def test_what_only_the_store_does_is_refused_by_name_on_the_lean_backend(tmp_path: Path) -> None:
    """The `Backend` calls the lean writer never makes (compiling, opening, migrating, doctor,
    stats) raise the store's StorageError naming the call; `SqliteWriter` alone is abstract."""
    backend = sqlite_writer.open_writer(new_log(tmp_path / "log.sqlite3"))
    assert backend is not None
    try:
        calls: dict[str, Callable[[], Any]] = {
            "sql_dialect": backend.sql_dialect,
            "check_log": lambda: backend.check_log(None, False),
            "lock_migrations": lambda: backend.lock_migrations(None, 1),
            "integrity_problems": lambda: backend.integrity_problems(None),
            "db_size": backend.db_size,
            "links_functions": lambda: backend.links_functions()[0]("x"),
        }
        for name, call in calls.items():
            with pytest.raises(errors.StorageError, match=f"^{name}: .*LogStore.open"):
                call()
    finally:
        backend.close()
    with pytest.raises(TypeError, match="abstract"):
        sqlite_writer.SqliteWriter()  # type: ignore[abstract]
