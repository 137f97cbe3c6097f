"""What an event signature covers (RFC 0008 "The canonical encoding"), sign and verify.

The message is the RFC 8785 canonical JSON of the immutable fields of `Event.content_key()`,
with the body and each artifact entering through their SHA-256 (a redacted body still
verifies), under a domain tag. Pure: no SQL, no surfaces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mempalace_logstream.identity import canonical, keys
from mempalace_logstream.models import CONTENT_FIELDS, EVENT_SPEC, Event
from mempalace_logstream.payload import read_metadata

DOMAIN = "mempalace-logstream/event-signature/v1"
# Event.content_key() order; body and artifact_ids are signed through their SHA-256.
SIGNED_FIELDS = tuple(name for name in CONTENT_FIELDS if name != "body")
# The signed text fields (created_at included), and those of them that may be null.
_TEXT = {name for name, spec in EVENT_SPEC if spec.kind in ("key", "text")}
STRING_FIELDS = tuple(
    n for n, s in EVENT_SPEC if n in _TEXT and n in SIGNED_FIELDS and not s.nullable
)
OPTIONAL_FIELDS = tuple(
    n for n, s in EVENT_SPEC if n in _TEXT and n in SIGNED_FIELDS and s.nullable
)
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class SigningError(ValueError):
    """The event cannot be encoded for signing (a field missing or mistyped, metadata that
    has no canonical form, an artifact whose SHA-256 is unknown)."""


def body_sha256(body: str) -> str:
    """Lowercase hex SHA-256 of the body's UTF-8 bytes."""
    try:
        import hashlib  # here: hashlib is not loaded by a plain append (issue 25)

        return hashlib.sha256(body.encode("utf-8")).hexdigest()
    except UnicodeEncodeError as exc:
        raise SigningError("the body holds a lone surrogate") from exc


def event_fields(event: Event) -> dict[str, Any]:
    """The signed fields of a stored event, by their RFC 0008 names.

    Raises SigningError when the stored metadata is unreadable: reads show such metadata as
    `{}`, and a signature must never cover a stand-in for what is stored.
    """
    metadata, problem = read_metadata(event.metadata_json)
    if problem is not None:
        raise SigningError(f"{event.id}: {problem}")
    values = event.__dict__
    out = {name: values[name] for name in SIGNED_FIELDS if name != "metadata"}
    out["artifact_ids"] = list(event.artifact_ids)
    out["metadata"] = metadata
    return out


def signing_payload(
    event_fields: Mapping[str, Any], body_sha256: str, artifact_sha256s: Mapping[str, str]
) -> bytes:
    """The exact bytes an event signature covers.

    `event_fields` holds every name of SIGNED_FIELDS (other keys, such as `seq` or `body`,
    are ignored); `artifact_sha256s` maps each artifact id the event references to its
    content's hex SHA-256. Raises SigningError when the event cannot be encoded.
    """
    missing = [name for name in SIGNED_FIELDS if name not in event_fields]
    if missing:
        raise SigningError(f"missing signed fields: {', '.join(missing)}")
    obj: dict[str, Any] = {"domain": DOMAIN}
    for name in STRING_FIELDS:
        obj[name] = _string(event_fields, name)
    for name in OPTIONAL_FIELDS:
        value = event_fields[name]
        obj[name] = None if value is None else _string(event_fields, name)
    seq = event_fields["origin_seq"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise SigningError("origin_seq must be an integer")
    obj["origin_seq"] = seq
    if not isinstance(event_fields["metadata"], dict):
        raise SigningError("metadata must be a JSON object")
    obj["metadata"] = event_fields["metadata"]
    obj["body_sha256"] = _sha256(body_sha256, "body_sha256")
    obj["artifacts"] = _artifacts(event_fields["artifact_ids"], artifact_sha256s)
    try:
        return canonical.canonicalize(obj)
    except canonical.CanonicalizationError as exc:
        raise SigningError(f"no canonical form: {exc}") from exc


def _string(fields: Mapping[str, Any], name: str) -> str:
    value = fields[name]
    if not isinstance(value, str):
        raise SigningError(f"{name} must be a string")
    return value


def _sha256(value: object, name: str) -> str:
    if not isinstance(value, str) or not _SHA256_RE.match(value):
        raise SigningError(f"{name} must be 64 lowercase hex characters")
    return value


def _artifacts(ids: Any, sha256s: Mapping[str, str]) -> list[dict[str, str]]:
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, str) for i in ids):
        raise SigningError("artifact_ids must be a list of strings")
    unknown = sorted({i for i in ids if i not in sha256s})
    if unknown:
        raise SigningError(f"unknown SHA-256 for artifacts: {', '.join(unknown)}")
    ordered = sorted(ids, key=lambda i: i.encode("utf-16-be", "surrogatepass"))
    return [{"id": i, "sha256": _sha256(sha256s[i], f"sha256 of {i}")} for i in ordered]


def sign(
    pair: keys.KeyPair,
    event_fields: Mapping[str, Any],
    body_sha256: str,
    artifact_sha256s: Mapping[str, str],
) -> str:
    """The base64url (unpadded) Ed25519 signature of the event. Raises SigningError."""
    return keys.b64url_encode(
        pair.sign(signing_payload(event_fields, body_sha256, artifact_sha256s))
    )


def verify(
    public_key: keys.PublicKey,
    signature: str,
    event_fields: Mapping[str, Any],
    body_sha256: str,
    artifact_sha256s: Mapping[str, str],
) -> bool:
    """Whether `signature` is `public_key`'s signature of the event. Never raises for bad
    input: an undecodable signature or an unencodable event is simply not verified."""
    try:
        raw = keys.b64url_decode(signature, size=keys.SIGNATURE_BYTES)
        message = signing_payload(event_fields, body_sha256, artifact_sha256s)
    except (keys.KeyFormatError, SigningError):
        return False
    return public_key.verify(raw, message)


def sign_event(
    pair: keys.KeyPair, event: Event, artifact_sha256s: Mapping[str, str] | None = None
) -> str:
    """`sign` for a model Event (its body hashed here)."""
    return sign(pair, event_fields(event), body_sha256(event.body), artifact_sha256s or {})
