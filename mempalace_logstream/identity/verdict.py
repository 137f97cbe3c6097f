"""The verdict on one event: verified `True`, `None` (unsigned) or `False` with the reason.

A pure function of the event, its signature and key id, and the keyring (RFC 0008 "Verdicts
and the `verified` field"), so every replica holding the same key events reaches the same
verdict. No SQL, no surfaces.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from mempalace_logstream import hlc as hlc_mod
from mempalace_logstream import lazy
from mempalace_logstream.identity.keyring import (
    KEY_ADD,
    KEY_EVENT_TYPES,
    KEY_REVOKE,
    KeyRecord,
    Keyring,
    SignedEvent,
)
from mempalace_logstream.models import Event

if TYPE_CHECKING:
    from mempalace_logstream.identity import keys, signing
else:  # on first use: a log whose events are not signed never loads them (issue 25)
    keys = lazy.module("mempalace_logstream.identity.keys")
    signing = lazy.module("mempalace_logstream.identity.signing")

Code = Literal[
    "ok",
    "unsigned",
    "bad_signature",
    "revoked_key",
    "wrong_agent",
    "unsigned_required",
    "unknown_key",
    "not_admin",
    "malformed",
]


class Verdict(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """`verified` is what reads show; `code` and `reason` say why; `signer` is the verified
    writer (the agent whose key signed, or the admin key's name) for the rules to use."""

    verified: bool | None
    code: Code
    reason: str
    signer: str | None = None
    role: str | None = None

    @property
    def retryable(self) -> bool:
        """An unknown key may arrive in a later sync round: hold the event, do not drop it."""
        return self.code == "unknown_key"


# The verdict of every acceptable unsigned event (frozen: one shared instance).
UNSIGNED = Verdict(None, "unsigned", "unsigned")


def _false(code: Code, reason: str) -> Verdict:
    return Verdict(False, code, reason)


def verdict(
    event: Event,
    signature: str | None,
    key_id: str | None,
    keyring: Keyring,
    *,
    body_sha256: str | None = None,
    artifact_sha256s: Mapping[str, str] | None = None,
) -> Verdict:
    """Judge one event. `body_sha256` is the stored SHA-256 when the body was redacted;
    `artifact_sha256s` maps the event's artifact ids to their content SHA-256. Never raises."""
    if not hlc_mod.is_valid(event.hlc):
        return _false("malformed", f"{event.id}: malformed HLC {event.hlc!r}")
    if signature is None and key_id is None:
        return unsigned_verdict(event, keyring)
    if signature is None or key_id is None:
        return _false("malformed", f"{event.id}: a signature needs both sig and key_id")
    if not keys.is_key_id(key_id):
        return _false("malformed", f"{event.id}: key_id {key_id!r} is not ed25519:<32 hex>")
    signed = SignedEvent(
        event=event,
        sig=signature,
        key_id=key_id,
        body_sha256=body_sha256,
        artifact_sha256s=artifact_sha256s or {},
    )
    try:
        raw, message = signed.signature_bytes(), signed.payload()
    except keys.KeyFormatError as exc:
        return _false("malformed", f"{event.id}: the signature is not 64 bytes ({exc})")
    except signing.SigningError as exc:
        return _false("malformed", f"{event.id} cannot be encoded for verification: {exc}")
    record = keyring.key(key_id)
    if record is None:
        return _false("unknown_key", f"{event.id} is signed by {key_id}, unknown here (yet)")
    if not record.public_key.verify(raw, message):
        return _false("bad_signature", f"{event.id}: the signature by {key_id} does not verify")
    return _authority(event, record, keyring)


def own_verdict(event: Event, key_id: str, keyring: Keyring, minted: bool = False) -> Verdict:
    """The verdict on a signature this process has just made with `key_id` over `event`:
    the same as `verdict` without checking the signature again (it is genuine by
    construction), only whether the key may sign this event at its HLC. `minted`: the HLC
    is the one this store's clock just minted, well formed (`HybridClock.minted`)."""
    if not minted and not hlc_mod.is_valid(event.hlc):
        return _false("malformed", f"{event.id}: malformed HLC {event.hlc!r}")
    record = keyring.key(key_id)
    if record is None:
        return _false("unknown_key", f"{event.id} is signed by {key_id}, unknown here (yet)")
    return _authority(event, record, keyring)


def _authority(event: Event, record: KeyRecord, keyring: Keyring) -> Verdict:
    """A genuine signature: may this key sign this event at its HLC?"""
    # The one event a key may sign at its revocation HLC is the revocation itself (the type
    # is checked too: an id alone must never exempt an event from a revocation).
    is_own_revocation = event.type == KEY_REVOKE and record.revoked_by == event.id
    if not is_own_revocation and not keyring.is_valid(record.key_id, event.hlc):
        return _false(
            "revoked_key",
            f"{event.id} (HLC {event.hlc}) is signed by {record.key_id} of {record.agent}, "
            f"revoked at HLC {record.revoked_hlc} ({record.revoke_reason or 'no reason given'})",
        )
    if record.role == "admin":
        return Verdict(True, "ok", "signed by a trusted admin key", record.agent, "admin")
    if event.type == KEY_ADD or (event.type == KEY_REVOKE and not is_own_revocation):
        return _false("not_admin", f"{event.id}: only an admin key may sign {event.type}")
    if record.agent != event.from_agent:
        return _false(
            "wrong_agent",
            f"{event.id} claims from_agent {event.from_agent!r} "
            f"but {record.key_id} is {record.agent}'s",
        )
    return Verdict(True, "ok", f"signed by {record.agent}", record.agent, "agent")


def unsigned_verdict(event: Event, keyring: Keyring) -> Verdict:
    """`verdict` of an unsigned event whose HLC is known well formed (`own_verdict`'s
    `minted`)."""
    if event.type in KEY_EVENT_TYPES:
        return _false("unsigned_required", f"{event.id}: a {event.type} must be signed")
    if keyring.must_sign(event.from_agent, event.hlc):
        return _false(
            "unsigned_required",
            f"{event.id} is unsigned, but {event.from_agent} signs every event since it got a key",
        )
    return UNSIGNED
