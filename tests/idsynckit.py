"""Replicas with identities and a hostile one that forges (RFC 0008 "Threat model"), for the
sync verification tests: real SQLite files, each with its own keys directory; the hostile
replica's forgeries are written straight into its own database (as a tampered replica would
hold them) and served by an ordinary LocalPeer or hub."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import LogStore, agents, migrate
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.identity import keys, signing
from mempalace_logstream.identity.keyring import Keyring
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event
from mempalace_logstream.replication import verify
from mempalace_logstream.schema import events
from mempalace_logstream.store.identity import artifact_sha256s, signed

_TEMPLATE: Path | None = None

# What each forgery may be refused as, by a replica that knows more or less of the keyring
# (`unknown_key` = held until the key arrives).
FORGERY_CODES = {
    "own_key": {"wrong_agent", "revoked_key", "unknown_key"},
    "garbage": {"bad_signature", "unknown_key"},
    "alter": {"bad_signature", "unknown_key"},
    "replay": {"revoked_key", "unknown_key"},
    "strip": {"unsigned_required"},
    "unsigned": {"unsigned_required"},
    "key_event": {"not_admin", "revoked_key", "unknown_key"},
    # mallory's key signing a revocation of alice's key, or an admin-role key for herself
    "key_revoke": {"not_admin", "revoked_key", "unknown_key"},
    "key_admin": {"not_admin", "revoked_key", "unknown_key"},
}
KEY_FORGERIES = ("key_event", "key_revoke", "key_admin")


def template() -> Path:
    """One migrated file per session; replicas are copies (Alembic runs once)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        path = Path(tempfile.mkdtemp(prefix="idsync-tpl-")) / "template.sqlite3"
        eng = engine_mod.create_engine(f"sqlite:///{path}")
        migrate.upgrade(eng)
        eng.dispose()
        _TEMPLATE = path
    return _TEMPLATE


def replica(root: Path, name: str) -> LogStore:
    """A SQLite replica in `root/name/` (its keys in `root/name/keys`)."""
    where = root / name
    where.mkdir(parents=True, exist_ok=True)
    path = where / "log.sqlite3"
    shutil.copy(template(), path)
    return LogStore.open(str(path), durability="normal")


def note(store: LogStore, who: str, body: str = "hi") -> Event:
    return store.event_append(type="note", stream="s", room="r", from_agent=who, body=body)


@dataclass
class Team:
    """`origin` holds the admin key and the keys of alice and mallory; every other replica
    pins the admin key. `hostile` also holds mallory's key (mallory runs it)."""

    origin: LogStore
    admin_id: str
    mallory: keys.KeyPair
    forged: dict[str, str] = field(default_factory=dict)  # forged event id -> kind

    @classmethod
    def build(cls, origin: LogStore, hostile: LogStore, *others: LogStore) -> Team:
        admin_id = agents.ensure_admin(origin)
        agents.add(origin, "alice")
        agents.add(origin, "mallory")
        for s in (hostile, *others):
            agents.trust(s, admin_id)
        assert origin.identity.keys_dir is not None and hostile.identity.keys_dir is not None
        src = origin.identity.keys_dir / "mallory.key"
        hostile.identity.keys_dir.mkdir(parents=True, exist_ok=True)
        dst = hostile.identity.keys_dir / "mallory.key"
        shutil.copy(src, dst)
        dst.chmod(0o600)
        hostile.identity.reload_keys()
        return cls(origin, admin_id, keys.load_private_key(src), {})

    def honest_ring(self) -> Keyring:
        """The keyring the origin (holding every genuine key event) judges with."""
        return agents.keyring(self.origin)


def held(store: LogStore) -> list[Event]:
    return store.event_list(limit=500).events


def rewrite(store: LogStore, event_id: str, **values: Any) -> Event:
    """Change a stored event's columns in place (a tampered database), return it read back."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS events_no_update")  # a hostile copy
        conn.execute(sa.update(events).where(events.c.id == event_id).values(**values))
    return store.event_get(event_id)


def resign(store: LogStore, event: Event, pair: keys.KeyPair) -> Event:
    with store.snapshot() as ex:
        shas = artifact_sha256s(ex, event.artifact_ids)
    return rewrite(store, event.id, sig=signing.sign_event(pair, event, shas), key_id=pair.key_id)


def forge(team: Team, hostile: LogStore, kind: str, *, after_hlc: str | None = None) -> str | None:
    """One forgery of `kind` held by the hostile replica; its event id (None if there is
    nothing to forge from). `after_hlc` stamps it just after that HLC (a replay after a
    revocation, an unsigned event after an agent got its key)."""
    ring = team.honest_ring()
    alice = next(r for r in ring.records() if r.agent == "alice")
    if kind in ("alter", "strip"):
        victims = [e for e in held(hostile) if e.sig is not None and e.id not in team.forged]
        if kind == "strip":
            victims = [e for e in victims if e.from_agent in ("alice", "mallory")]
        if not victims:
            return None
        victim = victims[len(team.forged) % len(victims)]
        if kind == "alter":
            rewrite(hostile, victim.id, body=victim.body + " (altered)")
        else:
            rewrite(hostile, victim.id, sig=None, key_id=None)
        team.forged[victim.id] = kind
        return victim.id
    base = note(hostile, "zed", f"forged {kind} {secrets.token_hex(4)}")
    values: dict[str, Any] = {"from_agent": "mallory" if kind == "replay" else "alice"}
    if after_hlc is not None:
        ms = int(after_hlc[:13]) + 1 + len(team.forged)
        values["hlc"] = f"{ms:013d}-000000-{hostile.replica_id}"
    if kind in KEY_FORGERIES:
        values.update(
            _key_forgery(kind, ring), stream="identity", room="keys", from_agent="mallory"
        )
    event = rewrite(hostile, base.id, **values)
    if kind in ("own_key", "replay", *KEY_FORGERIES):
        event = resign(hostile, event, team.mallory)
    elif kind == "garbage":
        sig = keys.b64url_encode(secrets.token_bytes(64))
        event = rewrite(hostile, event.id, sig=sig, key_id=alice.key_id)
    team.forged[event.id] = kind
    return event.id


def _key_forgery(kind: str, ring: Keyring) -> dict[str, Any]:
    """The type and metadata of a key event mallory's key signs (`KEY_FORGERIES`)."""
    import json

    from mempalace_logstream.identity.key_events import key_add_metadata, key_revoke_metadata

    fresh = keys.KeyPair.generate().public
    if kind == "key_revoke":
        live = [r for r in ring.records() if r.agent == "alice" and r.revoked_hlc is None]
        meta = key_revoke_metadata("alice", (live or list(ring.records()))[-1].key_id, "x")
        return {"type": "identity.key_revoke", "metadata_json": json.dumps(meta)}
    if kind == "key_admin":
        meta = key_add_metadata("mallory", fresh, role="admin")
    else:
        meta = key_add_metadata("mallory2", fresh)
    return {"type": "identity.key_add", "metadata_json": json.dumps(meta)}


def stored_signed_verify(team: Team, store: LogStore) -> list[str]:
    """The problems with `store`'s signed events under the honest keyring: none verify
    false, except events whose key was revoked at an HLC <= theirs (a late revocation:
    listed by `late_revoked` once the revocation reached `store`, and stored in good faith
    while it had not)."""
    ring = team.honest_ring()
    late = {x.event_id for x in verify.late_revoked(store)}
    with store.snapshot() as ex:
        own = store.identity.keyring(ex, store.event_select)
    late |= {
        e.id
        for e in held(store)
        if e.key_id is not None and (k := own.key(e.key_id)) is not None and k.revoked_hlc is None
    }
    problems = []
    with store.snapshot() as ex:
        for e in held(store):
            if e.sig is None:
                continue
            shas = artifact_sha256s(ex, e.artifact_ids)
            found = verdict(e, e.sig, e.key_id, ring, artifact_sha256s=shas)
            if found.verified is False and not (found.code == "revoked_key" and e.id in late):
                problems.append(f"{e.id}: {found.code} {found.reason}")
    return problems


__all__ = ["FORGERY_CODES", "KEY_FORGERIES", "Team", "forge", "held", "note", "replica", "signed"]
