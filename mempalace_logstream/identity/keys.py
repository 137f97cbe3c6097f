"""Ed25519 key pairs: generate, write the private key 0600 atomically, load, export, key id.

Key ids are `ed25519:` + the first 16 bytes of SHA-256(raw public key) in hex (RFC 0008).
Public keys and signatures travel as base64url without padding. No SQL, no surfaces.
`cryptography` is imported on first use (a sign, a verify, a key loaded): a reader that only
folds stored key events (the hook's lean inbox reader) never pays for it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

KEY_ID_PREFIX = "ed25519:"
KEY_ID_RE = re.compile(r"^ed25519:[0-9a-f]{32}$")
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_B64URL_RE = re.compile(r"^[A-Za-z0-9_-]*$")


class KeyFormatError(ValueError):
    """A key, key id or signature is not in its RFC 0008 form."""


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str, *, size: int) -> bytes:
    """Decode unpadded base64url of exactly `size` bytes; KeyFormatError otherwise."""
    if not isinstance(text, str) or not _B64URL_RE.match(text):
        raise KeyFormatError("not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise KeyFormatError("not unpadded base64url") from exc
    # Only the canonical spelling is accepted, so one value has one text (no malleability).
    if len(raw) != size or b64url_encode(raw) != text:
        raise KeyFormatError(f"expected {size} bytes in canonical base64url")
    return raw


def key_id(public_key: bytes) -> str:
    """The key id of a raw 32-byte Ed25519 public key."""
    if len(public_key) != PUBLIC_KEY_BYTES:
        raise KeyFormatError(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes")
    import hashlib  # here: a log without keys never loads it (the lean writer, issue 25)

    return KEY_ID_PREFIX + hashlib.sha256(public_key).digest()[:16].hex()


def is_key_id(text: object) -> bool:
    return isinstance(text, str) and KEY_ID_RE.match(text) is not None


@dataclass(frozen=True)
class PublicKey:
    """A verifying key: the raw bytes and the derived id."""

    raw: bytes

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        return cls(b64url_decode(text, size=PUBLIC_KEY_BYTES))

    @property
    def key_id(self) -> str:
        return key_id(self.raw)

    def to_text(self) -> str:
        return b64url_encode(self.raw)

    @functools.cached_property
    def _loaded(self) -> Ed25519PublicKey:
        # Loaded once per key: the keyring verifies many events with the same key.
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(self.raw)

    def verify(self, signature: bytes, message: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._loaded.verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


class KeyPair:
    """An Ed25519 private key with its public half. Never printed by repr()."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private = private
        raw = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public = PublicKey(raw)

    @classmethod
    def generate(cls) -> KeyPair:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> KeyPair:
        """The key pair of a 32-byte RFC 8032 seed (known-answer tests)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def __repr__(self) -> str:
        return f"KeyPair({self.key_id})"

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    def private_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def write_private_key(pair: KeyPair, path: Path) -> None:
    """Write the private key to `path` (PKCS#8 PEM), readable by its owner only (0600).

    Atomic: a temporary file created 0600 in the same directory is fsynced and renamed over
    `path`, so no reader ever sees a partial key and no moment exists with wider permissions.
    Refuses to replace an existing file (FileExistsError): a key is never silently lost.
    """
    if path.exists():
        raise FileExistsError(f"{path} already exists; refusing to overwrite a private key")
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pair.private_pem())
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)  # unlike rename, fails if `path` appeared meanwhile
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(path.parent)  # the new name survives a power loss


def install_key_file(staged: Path, path: Path, retired: Path | None = None) -> None:
    """Put the key file `staged` in place at `path` in one atomic rename; the key `path` held
    before is kept as `retired` first (a second name for it, so `path` never goes missing).

    Idempotent after a crash at any point: an existing `retired` is left as it is, and a
    `staged` already moved (gone) is not an error when `path` exists.
    """
    if retired is not None and path.exists():
        with contextlib.suppress(FileExistsError):
            os.link(path, retired)
    if staged.exists() or not path.exists():
        os.replace(staged, path)
    _fsync_dir(path.parent)


def retire_key_file(path: Path, retired: Path) -> None:
    """Move a key file that no longer signs out of the way (`path` -> `retired`)."""
    if path.exists():
        os.replace(path, retired)
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_private_key(path: Path) -> KeyPair:
    """Load a key written by `write_private_key`.

    Raises KeyFormatError if it is not an Ed25519 key, PermissionError if group or others may
    read it (as ssh does: a key others could read must be treated as leaked).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if path.stat().st_mode & 0o077:
        raise PermissionError(f"{path} is readable by others; chmod 600 it (and consider rotating)")
    try:
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except ValueError as exc:
        raise KeyFormatError(f"{path} is not a PEM private key") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyFormatError(f"{path} does not hold an Ed25519 key")
    return KeyPair(private)
