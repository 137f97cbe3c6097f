"""Identity, the pure core (RFC 0008): canonical encoding, Ed25519 keys, bearer tokens,
event signatures, the keyring folded from key events, and the verdict on an event.

Must not import sqlalchemy, the store, the engine, the schema, notify, sync or any surface.
"""

from __future__ import annotations

from mempalace_logstream.identity.canonical import CanonicalizationError, canonicalize
from mempalace_logstream.identity.key_events import key_add_metadata, key_revoke_metadata
from mempalace_logstream.identity.keyring import (
    KEY_ADD,
    KEY_REVOKE,
    KeyRecord,
    Keyring,
    Refusal,
    SignedEvent,
)
from mempalace_logstream.identity.keys import (
    KeyFormatError,
    KeyPair,
    PublicKey,
    key_id,
    load_private_key,
    write_private_key,
)
from mempalace_logstream.identity.signing import (
    DOMAIN,
    SigningError,
    body_sha256,
    event_fields,
    sign,
    sign_event,
    signing_payload,
    verify,
)
from mempalace_logstream.identity.verdict import Verdict, verdict

__all__ = [
    "DOMAIN",
    "KEY_ADD",
    "KEY_REVOKE",
    "CanonicalizationError",
    "KeyFormatError",
    "KeyPair",
    "KeyRecord",
    "Keyring",
    "PublicKey",
    "Refusal",
    "SignedEvent",
    "SigningError",
    "Verdict",
    "body_sha256",
    "canonicalize",
    "event_fields",
    "key_add_metadata",
    "key_id",
    "key_revoke_metadata",
    "load_private_key",
    "sign",
    "sign_event",
    "signing_payload",
    "verdict",
    "verify",
    "write_private_key",
]
