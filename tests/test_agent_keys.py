"""`logstream agent add / rotate / revoke` are crash-atomic (issue 18 item 10): the key event
and the token hash change in one transaction, a failure at the token write leaves no
half-rotated agent, a kill -9 after the commit is finished by the next `agent` command; a
revoked agent can be given a new key with `agent add`. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mempalace_logstream import agents, cli, errors
from mempalace_logstream.identity import keys, tokens
from mempalace_logstream.identity.actor import Actor, acting_as
from mempalace_logstream.store import LogStore
from tests.conftest import REPO


@pytest.fixture
def store(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _note(store: LogStore, who: str, body: str = "hi") -> dict:
    with acting_as(Actor(agent=who)):
        return store.event_append(
            type="note", stream="s", room="r", from_agent=who, body=body
        ).to_dict()


def _active(store: LogStore, who: str) -> list[str]:
    return [
        r["key_id"] for r in agents.listing(store) if r["agent"] == who and r["state"] == "active"
    ]


@contextmanager
def failing_token_writes(store: LogStore, op: str) -> Iterator[None]:
    """A disk that fails at the token write: a trigger aborts every `op` (INSERT or DELETE)
    on agent_tokens, as an I/O error at that statement would."""
    with store.engine.begin() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.exec_driver_sql(
                f"CREATE TRIGGER fail_tokens BEFORE {op} ON agent_tokens "
                "BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END"
            )
        else:
            conn.exec_driver_sql(
                "CREATE FUNCTION fail_tokens() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'disk I/O error (injected)'; END $$ LANGUAGE plpgsql"
            )
            conn.exec_driver_sql(
                f"CREATE TRIGGER fail_tokens BEFORE {op} ON agent_tokens "
                "FOR EACH ROW EXECUTE FUNCTION fail_tokens()"
            )
    try:
        yield
    finally:
        with store.engine.begin() as conn:
            if store.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("DROP TRIGGER fail_tokens")
            else:
                conn.exec_driver_sql("DROP TRIGGER fail_tokens ON agent_tokens")
                conn.exec_driver_sql("DROP FUNCTION fail_tokens()")


def _key_events(store: LogStore) -> list[str]:
    return [e.id for e in store.event_list(stream="identity", limit=100).events]


def test_a_failing_token_write_leaves_the_rotation_undone(store: LogStore, tmp_path: Path) -> None:
    first = agents.add(store, "alice")
    before = _key_events(store)
    with failing_token_writes(store, "INSERT"), pytest.raises(errors.StorageError):
        agents.rotate(store, "alice")
    # Nothing happened: no key event, the old key is the one active key, the old token is
    # still alice's, the key file is the old key, and alice still writes signed with it.
    assert _key_events(store) == before
    assert _active(store, "alice") == [first.key_id]
    assert agents.agent_for_token(store, first.token) == "alice"
    key_file = tmp_path / "keys" / "alice.key"
    assert keys.load_private_key(key_file).key_id == first.key_id
    assert sorted(p.name for p in key_file.parent.iterdir()) == ["admin.key", "alice.key"]
    assert _note(store, "alice")["key_id"] == first.key_id
    # The disk is back: the rotation runs, in one piece.
    second = agents.rotate(store, "alice")
    assert _active(store, "alice") == [second.key_id]
    assert agents.agent_for_token(store, first.token) is None
    assert agents.agent_for_token(store, second.token) == "alice"
    assert _note(store, "alice")["key_id"] == second.key_id


def test_a_failing_token_drop_leaves_the_revocation_undone(store: LogStore) -> None:
    first = agents.add(store, "alice")
    before = _key_events(store)
    with failing_token_writes(store, "DELETE"), pytest.raises(errors.StorageError):
        agents.revoke(store, "alice", reason="laptop lost")
    assert _key_events(store) == before
    assert _active(store, "alice") == [first.key_id]
    assert agents.agent_for_token(store, first.token) == "alice"
    assert _note(store, "alice")["verified"] is True
    agents.revoke(store, "alice", reason="laptop lost")
    assert _active(store, "alice") == []
    assert agents.agent_for_token(store, first.token) is None


def test_a_failing_token_write_leaves_no_half_added_agent(store: LogStore, tmp_path: Path) -> None:
    agents.ensure_admin(store)
    before = _key_events(store)
    with failing_token_writes(store, "INSERT"), pytest.raises(errors.StorageError):
        agents.add(store, "alice")
    assert _key_events(store) == before
    assert [r for r in agents.listing(store) if r["agent"] == "alice"] == []
    assert not (tmp_path / "keys" / "alice.key").exists()
    minted = agents.add(store, "alice")  # nothing left behind blocks a second try
    assert _note(store, "alice")["key_id"] == minted.key_id


KILL_AFTER_COMMIT = """
import os, signal, sys
from mempalace_logstream import LogStore, agents
from mempalace_logstream.identity import keys
store = LogStore.open(sys.argv[1])
store.identity.keys_dir = __import__("pathlib").Path(sys.argv[2])
real = store.transaction
def commit_then_die(work, *a, **k):
    out = real(work, *a, **k)
    if sys.argv[3] == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return out
store.transaction = commit_then_die
if sys.argv[3] == "before":
    keys.write_private_key = lambda pair, path: os.kill(os.getpid(), signal.SIGKILL)
agents.rotate(store, "alice")
"""


def _rotate_and_die(store: LogStore, db_url: str, tmp_path: Path, when: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_COMMIT, db_url, str(tmp_path / "keys"), when],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()


def test_kill_9_after_the_commit_is_finished_by_the_next_agent_command(
    store: LogStore, db_url: str, tmp_path: Path
) -> None:
    first = agents.add(store, "alice")
    _rotate_and_die(store, db_url, tmp_path, "after")
    store.identity.reload_keys()
    listed = agents.listing(store)  # any agent command finishes the interrupted rotation
    rows = [r for r in listed if r["agent"] == "alice"]
    (new,) = [r for r in rows if r["state"] == "active"]
    assert new["key_id"] != first.key_id and new["key_held_here"] and new["token"]
    assert agents.agent_for_token(store, first.token) is None  # the token changed with it
    key_file = tmp_path / "keys" / "alice.key"
    assert keys.load_private_key(key_file).key_id == new["key_id"]
    assert _note(store, "alice")["key_id"] == new["key_id"]


def test_kill_9_before_the_commit_changes_nothing(
    store: LogStore, db_url: str, tmp_path: Path
) -> None:
    first = agents.add(store, "alice")
    before = _key_events(store)
    _rotate_and_die(store, db_url, tmp_path, "before")
    store.identity.reload_keys()
    assert _key_events(store) == before
    assert _active(store, "alice") == [first.key_id]
    assert agents.agent_for_token(store, first.token) == "alice"
    assert _note(store, "alice")["key_id"] == first.key_id


def test_a_revoked_agent_gets_a_new_key_with_add(store: LogStore, tmp_path: Path) -> None:
    first = agents.add(store, "alice")
    old = _note(store, "alice", "before the revocation")
    agents.revoke(store, "alice", reason="laptop lost")
    with pytest.raises(errors.NotFoundError) as info:
        agents.rotate(store, "alice")
    assert "logstream agent add alice" in info.value.message and "revoked" in info.value.message
    again = agents.add(store, "alice")
    assert again.key_id != first.key_id
    assert _active(store, "alice") == [again.key_id]
    assert _note(store, "alice", "with the new key")["key_id"] == again.key_id
    assert store.event_get(old["id"]).verified is True  # signed before the revocation
    states = {r["key_id"]: r["state"] for r in agents.listing(store) if r["agent"] == "alice"}
    assert states == {first.key_id: "revoked", again.key_id: "active"}
    names = {p.name for p in (tmp_path / "keys").iterdir()}
    assert names == {"admin.key", "alice.key", f"alice.{first.key_id[8:]}.key.revoked"}
    with pytest.raises(errors.ConflictError) as conflict:
        agents.add(store, "alice")
    assert "logstream agent rotate alice" in conflict.value.message


def test_the_cli_adds_a_revoked_agent_again(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "log.sqlite3")]
    run = CliRunner().invoke
    assert run(cli.app, ["agent", "add", "bob", *db]).exit_code == 0
    assert run(cli.app, ["agent", "revoke", "bob", "--reason", "left", *db]).exit_code == 0
    rotate = run(cli.app, ["agent", "rotate", "bob", *db])
    assert rotate.exit_code == 1 and "logstream agent add bob" in rotate.stderr
    added = run(cli.app, ["agent", "add", "bob", *db, "--json"])
    assert added.exit_code == 0, added.output
    assert tokens.is_token(json.loads(added.stdout)["token"])


def test_two_rotations_at_once_leave_one_active_key(
    store: LogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotation checks, inside its transaction, that the key it replaces is still the
    active one: a second `rotate` that read the same key is refused, never a second key."""
    agents.add(store, "alice")
    stale = agents.keyring(store)
    agents.rotate(store, "alice")
    monkeypatch.setattr(agents, "keyring", lambda s: stale)  # it read before the first commit
    with pytest.raises(errors.ConflictError) as info:
        agents.rotate(store, "alice")
    assert "run it again" in info.value.message
    monkeypatch.undo()
    assert len(_active(store, "alice")) == 1
