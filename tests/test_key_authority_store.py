"""Only the admin writes key events, in the store itself (issue 18 item 1, RFC 0008 "Who
writes key events"): the rule every surface reaches, on SQLite and PostgreSQL. An agent actor
may revoke its own key only, signed with that key; an anonymous request writes none; a local
process writes them only with the admin key; an agent's write is never signed with the admin
key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, agents, errors
from mempalace_logstream.identity import key_events, keys
from mempalace_logstream.identity.actor import ANONYMOUS, Actor, acting_as
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE
from tests.test_key_authority import attacks, key_id_of, ring_view

# --------------------------------------------------------------------------- the core rule


@pytest.fixture
def keyed(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory, alice and
    bob added (the admin key is held here)."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    agents.add(store, "alice")
    agents.add(store, "bob")
    return store


def _append(store: LogStore, payload: dict[str, Any], who: str = "alice") -> Any:
    return store.event_append(from_agent=who, **payload)


def test_the_store_refuses_key_events_from_an_agent_actor(keyed: LogStore) -> None:
    ring, before = ring_view(keyed), keyed.stats()["events"]
    for name, payload in attacks(keyed, keys.KeyPair.generate()).items():
        with acting_as(Actor(agent="alice")), pytest.raises(errors.ForbiddenError) as info:
            _append(keyed, payload)
        assert info.value.field == "type", name
        with acting_as(ANONYMOUS), pytest.raises(errors.ForbiddenError):
            _append(keyed, payload, "admin")
    assert keyed.stats()["events"] == before
    assert ring_view(keyed) == ring
    # An agent writing as itself is signed by its own key; where that key is not held here
    # its write is refused (it must sign), never signed by the admin key instead.
    alice_file = keyed.identity.keys_dir / "alice.key"  # type: ignore[operator]
    os.replace(alice_file, alice_file.with_suffix(".away"))
    keyed.identity.reload_keys()
    with acting_as(Actor(agent="alice")), pytest.raises(errors.ForbiddenError) as info:
        keyed.event_append(type="note", stream="s", room="r", from_agent="alice")
    assert info.value.field == "from_agent"
    with acting_as(Actor(agent="bob")):
        own = keyed.event_append(type="note", stream="s", room="r", from_agent="bob")
    assert own.key_id == key_id_of(keyed, "bob")


def test_the_store_lets_an_agent_revoke_its_own_key_only(keyed: LogStore) -> None:
    alice_key, bob_key = key_id_of(keyed, "alice"), key_id_of(keyed, "bob")
    base = {"stream": "identity", "room": "keys", "type": KEY_REVOKE}
    with acting_as(Actor(agent="alice")), pytest.raises(errors.ForbiddenError):
        _append(keyed, {**base, "metadata": key_events.key_revoke_metadata("bob", bob_key)})
    with acting_as(Actor(agent="alice")), pytest.raises(errors.ForbiddenError):
        # alice's key id, but named as bob's: not her own key's revocation
        _append(keyed, {**base, "metadata": key_events.key_revoke_metadata("bob", alice_key)})
    with acting_as(Actor(agent="alice")):
        own = _append(
            keyed, {**base, "metadata": key_events.key_revoke_metadata("alice", alice_key)}
        )
    assert own.key_id == alice_key and own.verified is True
    assert agents.keyring(keyed).key(alice_key).revoked_by == own.id  # type: ignore[union-attr]
    assert agents.keyring(keyed).key(bob_key).revoked_hlc is None  # type: ignore[union-attr]


def test_a_local_process_writes_key_events_only_with_the_admin_key(
    keyed: LogStore, tmp_path: Path
) -> None:
    """No actor (a local process): trusted as the admin when it holds the admin key; without
    it, a key event is refused before anything is written."""
    dave = keys.KeyPair.generate()
    payload = {
        "type": KEY_ADD,
        "stream": "identity",
        "room": "keys",
        "metadata": key_events.key_add_metadata("dave", dave.public),
    }
    added = _append(keyed, payload, "admin")
    assert added.key_id == agents.ensure_admin(keyed)
    admin_file = keyed.identity.keys_dir / "admin.key"  # type: ignore[operator]
    os.replace(admin_file, tmp_path / "admin.key.away")
    keyed.identity.reload_keys()
    other = {**payload, "metadata": key_events.key_add_metadata("erin", dave.public)}
    before = keyed.stats()["events"]
    with pytest.raises(errors.ForbiddenError) as info:
        _append(keyed, other, "admin")
    assert info.value.field == "type"
    assert keyed.stats()["events"] == before
