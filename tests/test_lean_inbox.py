"""The lean inbox reader of the hook path (issue 13, store/lean.py): a local SQLite log read
with the stdlib `sqlite3` through the store's page rule and the store's own SQL text.

It imports no SQLAlchemy, typer, FastAPI or MCP; it answers exactly as the store does over
any log (a hypothesis-generated one: types, recipients, senders, artifacts, cursors), through
`event_list` and through the whole inbox delivery; a missing, foreign, newer-schema or older
file gets the store's answer; its SQL is the store's, regenerated from a real store."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore, agents, errors, migrate
from mempalace_logstream import hook as hook_mod
from mempalace_logstream import inbox as inbox_mod
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends import sqlite_inbox_sql
from mempalace_logstream.backends.queries import identity as id_queries
from mempalace_logstream.backends.queries import log as log_queries
from mempalace_logstream.migrate import KNOWN_REVISIONS
from mempalace_logstream.operations import LocalClient
from mempalace_logstream.store import lean, marks
from tests.conftest import REPO, run_cli
from tests.test_inbox_hook import (
    PROMPT,
    context,
    cursor_of,
    hook,
    inbox_args,
    send,
    stdin_payload,
    typer_cli,
)

HEAVY = ("sqlalchemy", "typer", "click", "rich", "fastapi", "starlette", "mcp", "uvicorn")
AGENTS = ("alice", "bob", "carol")
TYPES = ("note", "task.request", "event.ack", "agent.status")


def url(path: Path | str) -> str:
    return f"sqlite:///{Path(path).resolve()}"


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[tuple[str, LogStore]]:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as s:
        yield db, s


# ----------------------------------------------------------------------------- one SQL


def test_the_generated_sql_is_the_stores_own() -> None:
    """sqlite_inbox_sql.py holds what a real store compiles for the inbox's reads today;
    if the store's SQL changed, regenerate: python -m mempalace_logstream.store.lean."""
    fresh = lean.generate()
    kept = {
        "SCHEMA_HEAD": sqlite_inbox_sql.SCHEMA_HEAD,
        "SPLIT_INBOX": sqlite_inbox_sql.SPLIT_INBOX,
        "STATEMENTS": sqlite_inbox_sql.STATEMENTS,
    }
    assert fresh == kept, "run `python -m mempalace_logstream.store.lean` and ruff format"
    # every page shape the inbox asks for: the tip, one agent (two legs), "*" (one value),
    # and the "agents have keys" probe of sender gating (one key_add)
    pages = {key for key in fresh["STATEMENTS"] if key[0] == log_queries.PAGE}
    inbox = {
        (log_queries.PAGE, (), 0, False, False, "desc", ()),
        (log_queries.PAGE, (("exclude_writer", 1),), 2, True, False, "asc", ()),
        (log_queries.PAGE, (("exclude_writer", 1),), 1, False, False, "asc", ()),
        (log_queries.PAGE, (("type", 1),), 0, False, False, "desc", ("type",)),
    }
    assert inbox <= pages
    # and those of `list`, `wait`, `tail` (issue 25): none or one filter of one value, either
    # order (each page filter, and to_agent: two legs): 2 x (1 + 8 + 1), two of them the inbox's
    assert len(pages | inbox) == 4 + 2 * (1 + 8 + 1) - 2
    # and the keyring's two reads, for the read marks (store/marks.py)
    assert {marks.MARKS_SQL, marks.KEY_EVENTS_SQL} <= set(fresh["STATEMENTS"])
    # under the keys of the statements' home (backends/queries), which lean.py names again
    assert (marks.MARKS_SQL, marks.KEY_EVENTS_SQL) == (id_queries.MARKS, id_queries.KEY_EVENTS)
    cursors = {log_queries.SEQ_OF, log_queries.ID_AT, (log_queries.TOP, True)}
    assert cursors <= set(fresh["STATEMENTS"])


# ----------------------------------------------------------------------------- imports


def _modules_after(argv: list[str], stdin: bytes) -> tuple[dict[str, Any], bytes]:
    """Run the hook's fast path in a fresh interpreter; (what it reports, its stdout)."""
    code = (
        "import json, sys\n"
        "from mempalace_logstream import hook\n"
        "rc = hook.fast_path(sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "sys.stderr.write(json.dumps({'rc': rc, 'heavy': heavy}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        input=stdin,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.decode().splitlines()[-1]), proc.stdout


def test_the_lean_path_imports_no_sqlalchemy_typer_fastapi_or_mcp(
    sqlite_log: tuple[str, LogStore], tmp_path: Path
) -> None:
    db, store = sqlite_log
    state = tmp_path / "s.json"
    argv = inbox_args(db, state, "--hook", "claude")
    first, out = _modules_after(argv, stdin_payload(PROMPT))  # first run: the tip
    assert first == {"rc": 0, "heavy": []} and out == b""
    sent = send(store, "alice", "bob", "for the lean path")
    new, out = _modules_after(argv, stdin_payload(PROMPT))  # a message: printed, checkpointed
    assert new == {"rc": 0, "heavy": []}
    assert sent in context(subprocess.CompletedProcess([], 0, out, b""))
    assert cursor_of(state) == sent
    empty, out = _modules_after(argv, stdin_payload(PROMPT))  # nothing new
    assert empty == {"rc": 0, "heavy": []} and out == b""
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"cursor": "evt_gone", "agent": "bob"}))
    replay, out = _modules_after(inbox_args(db, stale, "--hook", "claude"), stdin_payload(PROMPT))
    assert replay == {"rc": 0, "heavy": []} and sent.encode() in out


def test_a_log_at_an_older_schema_is_left_to_the_store_which_migrates_it(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "old.sqlite3")
    engine = engine_mod.create_engine(db)
    try:
        migrate.upgrade(engine, KNOWN_REVISIONS[-2])
    finally:
        engine.dispose()
    assert lean.open_lean(url(db)) is None
    report, _out = _modules_after(inbox_args(db, tmp_path / "s.json"), b"")
    assert report == {"rc": 0, "heavy": ["sqlalchemy"]}  # read (and migrated) by the store
    assert lean.open_lean(url(db)) is not None  # at head now: the lean reader takes it


# ----------------------------------------------------------------------------- same answers

draft = st.fixed_dictionaries(
    {
        "type": st.sampled_from(TYPES),
        "from_agent": st.sampled_from(AGENTS),
        "to_agent": st.sampled_from((*AGENTS, "*", None)),
        "linked": st.booleans(),
        # the writer gets a key first (if it has none): its later events are signed and its
        # earlier ones read false (unsigned_name_signs) in both readers
        "keyed": st.integers(0, 5).map(lambda n: n == 0),
    }
)


def _fill(store: LogStore, drafts: list[dict[str, Any]]) -> list[str]:
    art = store.artifact_put(kind="file", created_by="alice", content=b"attached")
    ids = []
    keyed = {r.agent for r in agents.keyring(store).records()}
    for i, d in enumerate(drafts):
        if d.get("keyed") and d["from_agent"] not in keyed:
            agents.add(store, d["from_agent"])
            keyed.add(d["from_agent"])
        event = store.event_append(
            type=d["type"],
            stream="s",
            room="r",
            from_agent=d["from_agent"],
            to_agent=d["to_agent"],
            body=f"body {i}\nsecond line",
            artifact_ids=[art.id] if d["linked"] else None,
        )
        ids.append(event.id)
    return ids


def _answer(client: Any, args: dict[str, Any]) -> Any:
    try:
        return client.call("event_list", **args)
    except errors.LogstreamError as exc:
        return (type(exc).__name__, exc.message)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    drafts=st.lists(draft, max_size=25),
    agent=st.sampled_from((*AGENTS, "*")),
    cursors=st.lists(st.integers(-2, 30), min_size=1, max_size=4),
    limit=st.integers(1, 6),
)
def test_lean_and_store_answer_alike_over_any_log(
    drafts: list[dict[str, Any]], agent: str, cursors: list[int], limit: int
) -> None:
    """`event_list` as the inbox calls it (the tip; the inbox after a cursor: an event of the
    log, none, one it does not hold), the same page dict from both readers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/log.sqlite3"
        with LogStore.open(path) as store:
            ids = _fill(store, drafts)
            reader = lean.open_lean(url(path))
            assert reader is not None
            full = LocalClient(store)
            try:
                calls: list[dict[str, Any]] = [{"limit": 1, "order": "desc"}]
                for c in cursors:
                    since = (
                        None if c == -1 else "evt_unknown" if c == -2 or c >= len(ids) else ids[c]
                    )
                    calls.append(
                        {
                            "to_agent": [agent],
                            "exclude_writer": [agent],
                            "limit": limit,
                            "since_event_id": since,
                            "order": "asc",
                        }
                    )
                for args in calls:
                    assert _answer(reader, args) == _answer(full, args), args
            finally:
                reader.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.lists(st.lists(draft, max_size=6), min_size=1, max_size=5),
    agent=st.sampled_from(AGENTS),
    from_start=st.booleans(),
    limit=st.integers(1, 4),
    as_json=st.booleans(),
    allow_unverified=st.booleans(),
)
def test_lean_and_store_deliver_alike_call_after_call(
    batches: list[list[dict[str, Any]]],
    agent: str,
    from_start: bool,
    limit: int,
    as_json: bool,
    allow_unverified: bool,
) -> None:
    """The whole inbox delivery, call after call with appends in between: the same output,
    notes and saved cursor from both readers, each with its own state file (sender gating
    and marks included once writers have keys)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/log.sqlite3"
        with LogStore.open(path) as store:
            full = LocalClient(store)
            opts = {
                name: inbox_mod.InboxOptions.parse(
                    agent=agent,
                    state_file=f"{tmp}/{name}.json",
                    from_start=from_start,
                    limit=limit,
                    as_json=as_json,
                    allow_unverified=allow_unverified,
                    target=url(path),
                )
                for name in ("lean", "full")
            }
            for batch in batches:
                _fill(store, batch)
                seen: dict[str, list[str]] = {}
                for name in ("lean", "full"):
                    out: list[str] = []
                    reader = lean.open_lean(url(path))
                    assert reader is not None
                    client = reader if name == "lean" else full
                    try:
                        assert inbox_mod.deliver(client, opts[name], out.append, out.append) == 0
                    finally:
                        reader.close()
                    state = json.loads(Path(f"{tmp}/{name}.json").read_text())
                    seen[name] = [*out, state["cursor"], state["agent"]]
                assert seen["lean"] == seen["full"]


def test_a_read_without_planned_sql_goes_to_the_store(
    sqlite_log: tuple[str, LogStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, store = sqlite_log
    state = tmp_path / "s.json"
    sent = send(store, "alice", "bob", "still delivered")
    out: list[str] = []
    monkeypatch.setattr(hook_mod, "_write", out.append)
    monkeypatch.setattr(sqlite_inbox_sql, "STATEMENTS", {})
    code = hook_mod.run_inbox(agent="bob", state_file=str(state), from_start=True, db=db)
    assert code == 0 and len(out) == 1 and sent in out[0]
    assert cursor_of(state) == sent
    reader = lean.open_lean(url(db))
    assert reader is not None
    with pytest.raises(lean.Unplanned):
        reader.call("event_list", limit=1)
    reader.close()


# ----------------------------------------------------------------------------- refusals


def _foreign_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "missing": tmp_path / "missing.sqlite3",
        "empty": tmp_path / "empty.sqlite3",
        "text": tmp_path / "notes.txt",
        "directory": tmp_path / "adir",
        "other sqlite": tmp_path / "other.sqlite3",
        "newer schema": tmp_path / "newer.sqlite3",
    }
    files["empty"].write_bytes(b"")
    files["text"].write_text("not a database\n" * 10)
    files["directory"].mkdir()
    with sqlite3.connect(files["other sqlite"]) as conn:
        conn.execute("CREATE TABLE things (x)")
    with LogStore.open(str(files["newer schema"])) as s:
        send(s, "alice", "bob")
    with sqlite3.connect(files["newer schema"]) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    return files


def test_missing_foreign_and_newer_logs_get_the_stores_errors(tmp_path: Path) -> None:
    """The lean path (`python -m`) and the store path (the typer command) refuse alike, with
    the same exit code and text, plain and --json; nothing is printed on stdout."""
    cases = ((("--hook", "claude"), stdin_payload(PROMPT)), (("--json",), b""))
    for what, path in _foreign_files(tmp_path).items():
        state = tmp_path / f"{path.name}.json"
        for extra, stdin in cases:
            args = inbox_args(str(path), state, *extra)
            lean_run, full = run_cli(*args, input=stdin), typer_cli(*args, stdin=stdin)
            assert lean_run.returncode == full.returncode == 1, (what, lean_run.stderr)
            assert lean_run.stderr == full.stderr, what
            assert lean_run.stdout == full.stdout == b""
        assert not state.exists()  # nothing checkpointed


def test_the_lean_reader_raises_the_stores_errors_in_process(tmp_path: Path) -> None:
    for what, path in _foreign_files(tmp_path).items():
        if what == "newer schema":
            assert lean.open_lean(url(path)) is None  # the store refuses it, with its text
            with pytest.raises(errors.SchemaVersionError) as full_exc:
                LogStore.open(str(path), create=False)
            assert "newer than this mempalace-logstream" in full_exc.value.message
            continue
        with pytest.raises(errors.LogstreamError) as lean_exc:
            lean.open_lean(url(path))
        with pytest.raises(errors.LogstreamError) as full_exc:
            LogStore.open(url(path), create=False)
        assert type(lean_exc.value) is type(full_exc.value), what
        assert lean_exc.value.message == full_exc.value.message, what


# ----------------------------------------------------------------------------- checkpoint


def test_a_call_whose_cursor_did_not_move_leaves_the_state_file_alone(
    sqlite_log: tuple[str, LogStore], tmp_path: Path
) -> None:
    """No new event at all: no checkpoint (its two fsyncs were most of an empty call's
    time); an event for someone else moves the cursor, which is saved as before."""
    db, store = sqlite_log
    state = tmp_path / "s.json"
    send(store, "alice", "bob")
    assert hook(db, state).stdout == b""  # first run: the tip, saved
    saved = state.stat().st_ino, state.read_bytes()
    again = hook(db, state)
    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")
    assert (state.stat().st_ino, state.read_bytes()) == saved  # not rewritten
    other = send(store, "dave", "eve")
    assert hook(db, state).stdout == b""
    assert state.stat().st_ino != saved[0] and cursor_of(state) == other
    mail = send(store, "alice", "bob")
    assert mail in context(hook(db, state)) and cursor_of(state) == mail


def test_settings_check_the_task_lease_bounds_only_when_a_lease_is_set() -> None:
    """`Settings.from_env` runs on every hook call; the tasks package loads only when
    MEMPALACE_LOGSTREAM_TASK_LEASE_MS is set, and the bounds are the same."""
    code = (
        "import sys\n"
        "from mempalace_logstream import config, errors\n"
        "assert config.Settings.from_env({}).task_lease_ms == 900000\n"
        "assert 'mempalace_logstream.tasks' not in sys.modules\n"
        "try:\n"
        "    config.Settings.from_env({'MEMPALACE_LOGSTREAM_TASK_LEASE_MS': '999'})\n"
        "except errors.ValidationError as exc:\n"
        "    print(exc.message)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=True,
    )
    from mempalace_logstream.tasks.model import MAX_LEASE_MS, MIN_LEASE_MS

    assert proc.stdout.decode().strip() == (
        f"MEMPALACE_LOGSTREAM_TASK_LEASE_MS=999 must be between {MIN_LEASE_MS} and {MAX_LEASE_MS}"
    )
