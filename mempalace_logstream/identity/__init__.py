"""Identity, the pure core (RFC 0008): canonical encoding, Ed25519 keys, bearer tokens,
event signatures, the keyring folded from key events, and the verdict on an event.

Must not import sqlalchemy, the store, the engine, the schema, notify, sync or any surface.
Names are loaded on first use (PEP 562): `identity.actor`, which the CLI's lean reads ask who
reads, comes without the keys and signatures (and their crypto library).
"""

from __future__ import annotations

import typing as _typing

from mempalace_logstream import lazy

if _typing.TYPE_CHECKING:
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

# name -> the module of this package that defines it, loaded on first access (PEP 562).
_LAZY: dict[str, str] = {
    "CanonicalizationError": "canonical",
    "canonicalize": "canonical",
    "key_add_metadata": "key_events",
    "key_revoke_metadata": "key_events",
    "KEY_ADD": "keyring",
    "KEY_REVOKE": "keyring",
    "KeyRecord": "keyring",
    "Keyring": "keyring",
    "Refusal": "keyring",
    "SignedEvent": "keyring",
    "KeyFormatError": "keys",
    "KeyPair": "keys",
    "PublicKey": "keys",
    "key_id": "keys",
    "load_private_key": "keys",
    "write_private_key": "keys",
    "DOMAIN": "signing",
    "SigningError": "signing",
    "body_sha256": "signing",
    "event_fields": "signing",
    "sign": "signing",
    "sign_event": "signing",
    "signing_payload": "signing",
    "verify": "signing",
    "Verdict": "verdict",
    "verdict": "verdict",
}

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


__getattr__ = lazy.attributes(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
