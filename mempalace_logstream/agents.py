"""Agents (RFC 0008): add, rotate and revoke agents' keys and tokens, trust admin keys.

The key facts travel in the log as key events signed by the admin key, so every replica learns
them through sync; the private keys stay in `<keys_dir>/<agent>.key` (0600) and the hub keeps
only token hashes (`agent_tokens`, local). `logstream agent …`, the hub and the tests call these;
the surfaces only translate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mempalace_logstream import errors, names
from mempalace_logstream import validation as v
from mempalace_logstream.identity import key_events, keys, tokens
from mempalace_logstream.identity.actor import ADMIN, ADMIN_NAME, acting_as
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE, KeyRecord, Keyring
from mempalace_logstream.models import Event
from mempalace_logstream.store import LogStore, Transaction
from mempalace_logstream.store.identity import KEY_SUFFIX, registered_names
from mempalace_logstream.tasks.guards import HUB_WRITER


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


def agent_name(value: Any, *, allow_unicode: bool = True) -> str:
    """A name that can be an agent's key file (`names.agent_name`); ValidationError
    naming `agent` otherwise. `allow_unicode`: managing an existing agent takes any name
    `agent add --allow-unicode` could have made."""
    name = names.agent_name(value, allow_unicode=allow_unicode)
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


def add(
    store: LogStore, agent: Any, *, print_key: bool = False, allow_unicode: bool = False
) -> Minted:
    """A new agent, or a new key for an agent whose keys were all revoked: key pair, key
    event signed by the admin key and token hash, committed together. The name is ASCII
    unless `allow_unicode`, and never a look-alike of another agent with a key."""
    name = agent_name(agent, allow_unicode=allow_unicode)
    if name == HUB_WRITER:  # its writes are never counted by a thread's budget
        raise v.fail(
            "agent",
            f"{HUB_WRITER!r} is the name the hub writes its reminders and notices under; "
            "pick another name",
        )
    admin_id = ensure_admin(store)
    names.check_lookalike("agent", name, registered_names(keyring(store)) | {HUB_WRITER})
    settle_key_files(store, name)
    if _live_keys(keyring(store), name):
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
    settle_key_files(store, name)
    current = _current_key(store, name)
    return _mint(store, name, admin_id, replaces=current.key_id, print_key=print_key)


def revoke(store: LogStore, agent: Any, *, reason: Any = None) -> dict[str, Any]:
    """Revoke `agent`'s current key (later events under it are refused) and drop its token,
    in one transaction; the key file is then moved aside (`NAME.<hex>.key.revoked`)."""
    name = agent_name(agent)
    why = v.routing("reason", reason) or "revoked"
    ensure_admin(store)
    settle_key_files(store, name)
    current = _current_key(store, name)
    meta = key_events.key_revoke_metadata(name, current.key_id, why)
    event = _commit_key_event(store, KEY_REVOKE, meta, None, {current.key_id})
    settle_key_files(store, name)
    return {"agent": name, "key_id": current.key_id, "event_id": event.id, "reason": why}


def settle_key_files(store: LogStore, agent: str | None = None) -> list[str]:
    """Finish what a crash after a key event's commit left undone in the keys directory (of
    `agent`, or of everyone): a staged key (`NAME.<hex>.key.pending`) the keyring holds as
    NAME's active key goes in place as `NAME.key` (the key there before is kept aside); a
    `NAME.key` whose key the keyring holds revoked goes aside. A staged key the keyring does
    not know (its transaction never committed, or has not yet) is left alone. Returns the
    files moved."""
    where = store.identity.keys_dir
    if where is None or not where.is_dir():
        return []
    ring, moved = keyring(store), []
    for staged in sorted(where.glob(f"{agent or '*'}.*{_PENDING}")):
        owner, key_id = _staged_name(staged)
        record = ring.key(key_id) if owner else None
        if owner is None or record is None or record.agent != owner:
            continue
        target = where / f"{owner}{KEY_SUFFIX}"
        if record.revoked_hlc is None:
            keys.install_key_file(staged, target, _set_aside(ring, target, key_id))
        else:  # staged for a key that has been replaced or revoked since
            keys.retire_key_file(staged, _aside(where, owner, key_id, "revoked"))
        moved.append(str(staged))
    for target in sorted(where.glob(f"{agent or '*'}{KEY_SUFFIX}")):
        retired = _set_aside(ring, target, None)
        if retired is not None and target.stem != ADMIN_NAME:
            keys.retire_key_file(target, retired)
            moved.append(str(target))
    if moved:
        store.identity.reload_keys()
    return moved


_PENDING = ".key.pending"


def _staged_name(path: Path) -> tuple[str | None, str]:
    """(agent, key id) of `NAME.<32 hex>.key.pending`; (None, "") for another file."""
    stem = path.name[: -len(_PENDING)]
    owner, _, hexid = stem.rpartition(".")
    if not owner or not keys.is_key_id(keys.KEY_ID_PREFIX + hexid):
        return None, ""
    return owner, keys.KEY_ID_PREFIX + hexid


def _aside(where: Path, name: str, key_id: str, why: str) -> Path:
    return where / f"{name}.{key_id[len(keys.KEY_ID_PREFIX) :]}.key.{why}"


def _set_aside(ring: Keyring, target: Path, incoming: str | None) -> Path | None:
    """Where the key file `target` (`NAME.key`) goes: aside as `.key.old` (rotated, or any
    other key when `incoming` takes its place) or `.key.revoked`; None when it stays (it is
    `incoming`, or with no `incoming` a key the keyring does not hold revoked)."""
    if not target.exists():
        return None
    held = keys.load_private_key(target).key_id
    record = ring.key(held)
    revoked = record is not None and record.revoked_hlc is not None
    if held == incoming or (incoming is None and not revoked):
        return None
    rotated = record is None or not revoked or record.revoke_reason == "rotated"
    return _aside(
        target.parent, target.name[: -len(KEY_SUFFIX)], held, "old" if rotated else "revoked"
    )


def listing(store: LogStore) -> list[dict[str, Any]]:
    """Every key the keyring accepted, with its agent, role, state; never a secret. Finishes
    an interrupted `add`/`rotate`/`revoke` first (`settle_key_files`)."""
    settle_key_files(store)
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


def _live_keys(ring: Keyring, name: str) -> set[str]:
    return {r.key_id for r in ring.records() if r.agent == name and r.revoked_hlc is None}


def _current_key(store: LogStore, name: str) -> KeyRecord:
    ring = keyring(store)
    live = [ring.key(k) for k in _live_keys(ring, name)]
    if not live:
        mine = sorted((r for r in ring.records() if r.agent == name), key=lambda r: r.added_hlc)
        retired = (
            f" (its key {mine[-1].key_id} was revoked: {mine[-1].revoke_reason or 'revoked'})"
            if mine
            else ""
        )
        raise errors.NotFoundError(
            f"agent {name!r} has no active key{retired}; give it one with "
            f"`logstream agent add {name}`",
            field="agent",
            ident=name,
        )
    return max((r for r in live if r is not None), key=lambda r: r.added_hlc)


def _mint(
    store: LogStore, name: str, admin_id: str, *, replaces: str | None, print_key: bool
) -> Minted:
    """A new key for `name`: staged as `NAME.<hex>.key.pending` (not loaded by anyone), the
    key event and the token hash committed in one transaction, then the staged file put in
    place (or, after a crash, by the next `settle_key_files`)."""
    pair = keys.KeyPair.generate()
    staged: Path | None = None
    if not print_key:
        staged = _aside(_keys_dir(store), name, pair.key_id, "pending")
        keys.write_private_key(pair, staged)
    meta = key_events.key_add_metadata(name, pair.public, role="agent", replaces=replaces)
    token = tokens.mint()
    try:
        expect = {replaces} if replaces else set()
        event = _commit_key_event(store, KEY_ADD, meta, tokens.hash_token(token), expect)
    except BaseException:
        if staged is not None:
            staged.unlink(missing_ok=True)
        raise
    settle_key_files(store, name)
    key_file = _keys_dir(store) / f"{name}{KEY_SUFFIX}" if staged else None
    pem = pair.private_pem().decode("ascii") if print_key else None
    return Minted(name, pair.key_id, token, key_file, pem, event.id, admin_id)


def _commit_key_event(
    store: LogStore, kind: str, meta: dict[str, Any], token_hash: str | None, expect: set[str]
) -> Event:
    """The key event and the agent's token hash (None: dropped) in one write transaction,
    refused (ConflictError) when the agent's active keys are no longer `expect` (another
    `agent` command committed since this one read them)."""
    name = meta["agent"]
    draft = store.draft_event(
        type=kind,
        stream=key_events.STREAM,
        room=key_events.ROOM,
        from_agent=ADMIN_NAME,
        metadata=meta,
        body=f"{kind} {name} {meta['key_id']}",
    )

    def work(tx: Transaction) -> Event:
        if _live_keys(tx.keyring(), name) != expect:
            raise errors.ConflictError(
                f"agent {name!r} changed while this command ran (another `logstream agent` "
                "command?); run it again",
                field="agent",
                ident=name,
            )
        event = tx.insert_event(draft)
        tx.set_agent_token(name, token_hash)
        return event

    with acting_as(ADMIN):
        return store.transaction(work)


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
