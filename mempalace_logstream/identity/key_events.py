"""The metadata of key events (RFC 0008 "Key events"), built in one place for the writers
(`logstream agent add / rotate / revoke / trust`). Pure; the keyring reads the same names.
"""

from __future__ import annotations

from typing import Any

from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE, Role
from mempalace_logstream.identity.keys import PublicKey

STREAM = "identity"
ROOM = "keys"


def key_add_metadata(
    agent: str, public_key: PublicKey, *, role: Role = "agent", replaces: str | None = None
) -> dict[str, Any]:
    """Metadata of an `identity.key_add`: add (or, with `replaces`, rotate to) this key."""
    return {
        "agent": agent,
        "key_id": public_key.key_id,
        "public_key": public_key.to_text(),
        "role": role,
        "replaces": replaces,
    }


def key_revoke_metadata(agent: str, key_id: str, reason: str | None = None) -> dict[str, Any]:
    """Metadata of an `identity.key_revoke`: the key is revoked at the event's HLC."""
    return {"agent": agent, "key_id": key_id, "reason": reason}


__all__ = ["KEY_ADD", "KEY_REVOKE", "ROOM", "STREAM", "key_add_metadata", "key_revoke_metadata"]
