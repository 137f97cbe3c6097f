"""Identity in the store (RFC 0008): agents' keys and key events, signing on append, the
verdict before anything is written, `verified` on reads. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mempalace_logstream import agents, errors
from mempalace_logstream.identity import tokens
from mempalace_logstream.identity.actor import ADMIN, Actor, acting_as
from mempalace_logstream.store import LogStore


@pytest.fixture
def store(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _note(store: LogStore, who: str, body: str = "hi", **extra: object) -> dict:
    return store.event_append(
        type="note", stream="s", room="r", from_agent=who, body=body, **extra
    ).to_dict()


def test_no_agents_everything_works_as_today(store: LogStore) -> None:
    out = _note(store, "alice")
    assert out["verified"] is None and out["sig"] is None and out["key_id"] is None
    assert store.event_list(limit=5).events[0].verified is None


def test_agent_add_signs_its_events_and_reads_verified(store: LogStore) -> None:
    minted = agents.add(store, "alice")
    assert tokens.is_token(minted.token)
    assert minted.key_file is not None
    assert stat.S_IMODE(os.stat(minted.key_file).st_mode) == 0o600
    out = _note(store, "alice")
    assert out["verified"] is True and out["key_id"] == minted.key_id
    # The key events themselves are signed by the admin key and read verified.
    key_events = store.event_list(stream="identity", limit=10).events
    assert {e.type for e in key_events} == {"identity.key_add"}
    assert all(e.verified for e in key_events)
    # An agent that never had a key stays unsigned.
    assert _note(store, "carol")["verified"] is None


def test_unsigned_from_an_agent_that_signs_is_refused(store: LogStore, tmp_path: Path) -> None:
    agents.add(store, "alice")
    before = store.event_list(limit=100).events
    keys_dir = tmp_path / "keys"
    (keys_dir / "alice.key").rename(tmp_path / "elsewhere.key")
    (keys_dir / "admin.key").rename(tmp_path / "admin-elsewhere.key")
    store.identity.reload_keys()
    with pytest.raises(errors.ForbiddenError) as info:
        _note(store, "alice")
    assert info.value.field == "from_agent"
    assert "signs every event since it got a key" in info.value.message
    assert store.event_list(limit=100).events == before  # nothing written


def test_a_token_agent_writes_as_itself_only(store: LogStore) -> None:
    agents.add(store, "alice")
    agents.add(store, "bob")
    with acting_as(Actor(agent="bob")):
        with pytest.raises(errors.ForbiddenError) as info:
            _note(store, "alice")
        assert info.value.field == "from_agent"
        assert _note(store, "bob")["verified"] is True
    # The admin acts for anyone; the event is signed by the admin key.
    with acting_as(ADMIN):
        out = _note(store, "alice")
    admin_id = agents.ensure_admin(store)
    assert out["verified"] is True and out["key_id"] == admin_id


def test_rotate_keeps_old_events_verified_and_revoke_refuses_later(store: LogStore) -> None:
    first = agents.add(store, "alice")
    old = _note(store, "alice", "before rotation")
    second = agents.rotate(store, "alice")
    assert second.key_id != first.key_id
    new = _note(store, "alice", "after rotation")
    assert new["key_id"] == second.key_id
    assert store.event_get(old["id"]).verified is True
    listed = {r["key_id"]: r for r in agents.listing(store)}
    assert listed[first.key_id]["state"] == "revoked"
    assert listed[second.key_id]["state"] == "active"
    revoked = agents.revoke(store, "alice", reason="laptop lost")
    assert revoked["key_id"] == second.key_id
    assert "alice" not in agents.token_hashes(store)
    # alice's own session cannot write any more (a local process holding the admin key
    # still can: it signs as the admin).
    with acting_as(Actor(agent="alice")), pytest.raises(errors.ForbiddenError):
        _note(store, "alice", "after revocation")
    assert _note(store, "alice", "by the admin")["key_id"] == agents.ensure_admin(store)


def test_tokens_are_stored_as_hashes_only(store: LogStore) -> None:
    minted = agents.add(store, "alice")
    hashes = agents.token_hashes(store)
    assert hashes["alice"].startswith("sha256:") and minted.token not in hashes["alice"]
    assert agents.agent_for_token(store, minted.token) == "alice"
    assert agents.agent_for_token(store, tokens.mint()) is None
    assert agents.agent_for_token(store, "not a token") is None


def test_agent_names_are_checked(store: LogStore) -> None:
    for bad, why in (("admin", "admin key"), ("../x", "letters"), ("", "agent")):
        with pytest.raises(errors.ValidationError) as info:
            agents.add(store, bad)
        assert info.value.field == "agent" and why in info.value.message
    agents.add(store, "alice")
    with pytest.raises(errors.ConflictError):
        agents.add(store, "alice")


def test_a_replica_without_the_pin_does_not_trust_the_admin(tmp_path: Path) -> None:
    """A log copied to a replica that pinned nothing: the key events are refused by its
    keyring, so alice's signed events cannot be judged genuine there (unknown key)."""
    a = LogStore.open(str(tmp_path / "a" / "log.sqlite3"))
    agents.add(a, "alice")
    ring = agents.keyring(a)
    assert {r.agent for r in ring.records()} == {"admin", "alice"}
    b = LogStore.open(str(tmp_path / "b" / "log.sqlite3"))
    assert b.pinned_admins() == []
    a.close(), b.close()


def test_a_key_added_after_plain_appends_signs_the_next_append(
    store: LogStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log without agents' keys: after the first, a local process's appends of a (writer,
    type) already found plain are written without asking `seal` again (issue 25). A key added
    builds a new keyring, which forgets them: the next append of that writer is signed, a
    look-alike of its name is refused, and after a revocation an unsigned one is refused."""
    sealed: list[str] = []
    seal = store.identity.seal
    monkeypatch.setattr(
        store.identity,
        "seal",
        lambda ex, sel, e, *a: (sealed.append(e.from_agent), seal(ex, sel, e, *a))[1],
    )
    for i in range(3):
        assert _note(store, "alice", str(i))["sig"] is None
    assert _note(store, "carol")["sig"] is None
    assert sealed == ["alice", "carol"]  # asked once per (writer, type)
    minted = agents.add(store, "alice")
    out = _note(store, "alice", "after the key")
    assert out["key_id"] == minted.key_id and out["verified"] is True
    with pytest.raises(errors.ValidationError) as info:
        _note(store, "aIice", "look-alike")  # capital I for l
    assert info.value.field == "from_agent"
    assert _note(store, "carol")["sig"] is None  # still unsigned: carol has no key
    # The keyring has keys: asked each time (the look-alike was refused before its seal).
    assert [w for w in sealed[2:] if w != "admin"] == ["alice", "carol"]
    agents.revoke(store, "alice", reason="gone")
    (store.identity.keys_dir / "admin.key").unlink()  # nothing left here to sign for alice
    store.identity.reload_keys()
    with pytest.raises(errors.ForbiddenError):
        _note(store, "alice", "after revocation")


def test_a_key_added_by_another_process_signs_the_next_plain_append(tmp_path: Path) -> None:
    """The plain pairs are kept per keyring: a key event another store (process) commits is
    read with the next write's keyring, and the writer it names signs from then on."""
    path, keys_dir = str(tmp_path / "log.sqlite3"), tmp_path / "keys"
    with LogStore.open(path) as ours, LogStore.open(path) as theirs:
        for s in (ours, theirs):
            s.identity.keys_dir = keys_dir
            s.identity.reload_keys()
        assert _note(ours, "alice", "1")["sig"] is None
        assert _note(ours, "alice", "2")["sig"] is None
        minted = agents.add(theirs, "alice")
        out = _note(ours, "alice", "3")
        assert out["key_id"] == minted.key_id and out["verified"] is True
