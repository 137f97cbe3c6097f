"""Agents (RFC 0008): add, rotate and revoke agents' keys and tokens, trust admin keys.

The key facts travel in the log as key events signed by the admin key, so every replica learns
them through sync; the private keys stay in `<keys_dir>/<agent>.key` (0600) and the hub keeps
only token hashes (`agent_tokens`, local). `logstream agent …`, the hub and the tests call these;
the surfaces only translate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.identity import key_events, keys, tokens
from mempalace_logstream.identity.actor import ADMIN, ADMIN_NAME, acting_as
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE, KeyRecord, Keyring
from mempalace_logstream.models import Event
from mempalace_logstream.store import LogStore
from mempalace_logstream.store.identity import KEY_NAME_RE, KEY_SUFFIX


@dataclass(frozen=True)
class Minted:
    """What `add`/`rotate` made: the agent, its new key id, the token (shown once), the key
    file (None with `print_key`), the PEM when printed, and the key event written."""

    agent: str
    key_id: str
    token: str
    key_file: Path | None
    private_pem: str | None
    event_id: str
    admin_key_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "key_id": self.key_id,
            "token": self.token,
            "key_file": str(self.key_file) if self.key_file else None,
            "private_key": self.private_pem,
            "event_id": self.event_id,
            "admin_key_id": self.admin_key_id,
        }


def agent_name(value: Any) -> str:
    """A name that can be an agent's key file; ValidationError naming `agent` otherwise."""
    name = v.required_routing("agent", value)
    if not KEY_NAME_RE.match(name):
        raise v.fail(
            "agent",
            f"{name!r} must be 1 to 128 letters, digits, '.', '_', '@' or '-' "
            "(it names the agent's key file)",
        )
    if name == ADMIN_NAME:
        raise v.fail("agent", f"{ADMIN_NAME!r} names the palace's admin key; pick another name")
    return name


def _keys_dir(store: LogStore) -> Path:
    where = store.identity.keys_dir
    if where is None:
        raise errors.ValidationError(
            "this log has no keys directory: give --palace DIR (keys go to DIR/keys)",
            field="palace",
        )
    return where


def ensure_admin(store: LogStore) -> str:
    """The palace's admin key id, minting the key, pinning it and writing its self-signed
    key event on first use."""
    path = _keys_dir(store) / f"{ADMIN_NAME}{KEY_SUFFIX}"
    if path.exists():
        pair = keys.load_private_key(path)
    else:
        pair = keys.KeyPair.generate()
        keys.write_private_key(pair, path)
        store.identity.reload_keys()
    store.pin_admin(pair.key_id)
    ring = keyring(store)
    if ring.key(pair.key_id) is None:
        meta = key_events.key_add_metadata(ADMIN_NAME, pair.public, role="admin")
        _write_key_event(store, KEY_ADD, ADMIN_NAME, meta)
    return pair.key_id


def add(store: LogStore, agent: Any, *, print_key: bool = False) -> Minted:
    """A new agent: key pair, key event signed by the admin key, token hash stored."""
    name = agent_name(agent)
    admin_id = ensure_admin(store)
    if any(r.agent == name for r in keyring(store).records()):
        raise errors.ConflictError(
            f"agent {name!r} already has a key; use `logstream agent rotate {name}`",
            field="agent",
            ident=name,
        )
    return _mint(store, name, admin_id, replaces=None, print_key=print_key)


def rotate(store: LogStore, agent: Any, *, print_key: bool = False) -> Minted:
    """A new key and token for `agent`; the old key stays valid for what it already signed."""
    name = agent_name(agent)
    admin_id = ensure_admin(store)
    current = _current_key(store, name)
    old_file = _keys_dir(store) / f"{name}{KEY_SUFFIX}"
    if old_file.exists():
        os.replace(old_file, old_file.with_name(f"{name}.{current.key_id[8:]}.key.old"))
        store.identity.reload_keys()
    return _mint(store, name, admin_id, replaces=current.key_id, print_key=print_key)


def revoke(store: LogStore, agent: Any, *, reason: Any = None) -> dict[str, Any]:
    """Revoke `agent`'s current key (later events under it are refused) and drop its token."""
    name = agent_name(agent)
    why = v.routing("reason", reason) or "revoked"
    ensure_admin(store)
    current = _current_key(store, name)
    meta = key_events.key_revoke_metadata(name, current.key_id, why)
    event = _write_key_event(store, KEY_REVOKE, ADMIN_NAME, meta)
    set_token(store, name, None)
    key_file = _keys_dir(store) / f"{name}{KEY_SUFFIX}"
    if key_file.exists():
        os.replace(key_file, key_file.with_name(f"{name}.{current.key_id[8:]}.key.revoked"))
        store.identity.reload_keys()
    return {"agent": name, "key_id": current.key_id, "event_id": event.id, "reason": why}


def listing(store: LogStore) -> list[dict[str, Any]]:
    """Every key the keyring accepted, with its agent, role, state; never a secret."""
    with_token = set(token_hashes(store))
    held = store.identity.pairs()
    out = []
    for r in sorted(keyring(store).records(), key=lambda r: (r.agent, r.added_hlc)):
        out.append(
            {
                "agent": r.agent,
                "role": r.role,
                "key_id": r.key_id,
                "state": "revoked" if r.revoked_hlc else "active",
                "added_hlc": r.added_hlc,
                "revoked_hlc": r.revoked_hlc,
                "revoke_reason": r.revoke_reason,
                "key_held_here": r.agent in held and held[r.agent].key_id == r.key_id,
                "token": r.agent in with_token and r.revoked_hlc is None,
            }
        )
    return out


def keyring(store: LogStore) -> Keyring:
    """The store's keyring as of now."""
    with store.snapshot() as ex:
        return store.identity.keyring(ex, store.event_select)


def _current_key(store: LogStore, name: str) -> KeyRecord:
    live = [r for r in keyring(store).records() if r.agent == name and r.revoked_hlc is None]
    if not live:
        raise errors.NotFoundError(
            f"agent {name!r} has no active key; add it with `logstream agent add {name}`",
            field="agent",
            ident=name,
        )
    return max(live, key=lambda r: r.added_hlc)


def _mint(
    store: LogStore, name: str, admin_id: str, *, replaces: str | None, print_key: bool
) -> Minted:
    pair = keys.KeyPair.generate()
    key_file: Path | None = None
    if not print_key:
        key_file = _keys_dir(store) / f"{name}{KEY_SUFFIX}"
        keys.write_private_key(pair, key_file)
        store.identity.reload_keys()
    meta = key_events.key_add_metadata(name, pair.public, role="agent", replaces=replaces)
    event = _write_key_event(store, KEY_ADD, ADMIN_NAME, meta)
    token = tokens.mint()
    set_token(store, name, tokens.hash_token(token))
    pem = pair.private_pem().decode("ascii") if print_key else None
    return Minted(name, pair.key_id, token, key_file, pem, event.id, admin_id)


def _write_key_event(store: LogStore, kind: str, writer: str, meta: dict[str, Any]) -> Event:
    with acting_as(ADMIN):
        return store.event_append(
            type=kind,
            stream=key_events.STREAM,
            room=key_events.ROOM,
            from_agent=writer,
            metadata=meta,
            body=f"{kind} {meta['agent']} {meta['key_id']}",
        )


# ---------------------------------------------------------------------- tokens (hub-local)
def set_token(store: LogStore, agent: str, token_hash: str | None) -> None:
    """Store (or, with None, drop) the hash of `agent`'s token on this hub."""
    store.set_agent_token(agent, token_hash)


def token_hashes(store: LogStore) -> dict[str, str]:
    """agent -> stored token hash (what the hub compares a presented token against)."""
    return store.agent_token_hashes()


def identity_in_use(store: LogStore) -> bool:
    """Whether the log holds any key event: then a hub answers a request without a token
    with 401, even when no agent token is left (RFC 0008 "The surfaces")."""
    with store.snapshot() as ex:
        return store.identity.any_key_event(ex)


def agent_for_token(store: LogStore, token: str) -> str | None:
    """The agent a presented token belongs to, or None (constant time over all hashes)."""
    if not tokens.is_token(token):
        return None
    return tokens.find_agent(token, token_hashes(store))


def trust(store: LogStore, key_id: Any, *, trusted: bool = True) -> dict[str, Any]:
    """Pin (or unpin) an admin key id on this replica."""
    changed = store.pin_admin(key_id, pinned=trusted)
    return {"key_id": key_id, "pinned": trusted, "changed": changed}
