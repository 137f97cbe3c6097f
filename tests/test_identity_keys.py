"""Ed25519 key pairs: key ids, base64url, and private key files written 0600 atomically."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from mempalace_logstream.identity import keys
from mempalace_logstream.identity.keys import KeyFormatError, KeyPair, PublicKey

SEED = bytes(range(32))


def test_a_key_id_is_the_prefix_and_16_bytes_of_the_public_keys_sha256():
    pair = KeyPair.from_seed(SEED)
    digest = hashlib.sha256(pair.public.raw).hexdigest()
    assert pair.key_id == "ed25519:" + digest[:32]
    assert keys.is_key_id(pair.key_id)
    assert not keys.is_key_id("ed25519:" + digest[:31])
    assert not keys.is_key_id("ED25519:" + digest[:32])
    assert not keys.is_key_id(None)


def test_the_rfc_8032_seed_gives_its_published_public_key():
    # RFC 8032-style derivation for the seed 00..1f; the RFC 0008 vector quotes it.
    pair = KeyPair.from_seed(SEED)
    assert pair.public.raw.hex() == (
        "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    )
    assert pair.public.to_text() == "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"


def test_public_keys_round_trip_through_unpadded_base64url_only():
    public = KeyPair.from_seed(SEED).public  # its text holds a "_"
    text = public.to_text()
    assert len(text) == 43 and "=" not in text
    assert PublicKey.from_text(text) == public
    for bad in (text + "=", text[:-1], text + "A", text.replace("_", "/"), "", "!" * 43):
        with pytest.raises(KeyFormatError):
            PublicKey.from_text(bad)


def test_non_canonical_base64url_spellings_are_refused():
    text = KeyPair.from_seed(SEED).public.to_text()
    # The last character carries 2 unused bits; flipping one gives the same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = text[:-1] + alphabet[alphabet.index(text[-1]) + 1]
    with pytest.raises(KeyFormatError):
        PublicKey.from_text(sibling)


def test_signatures_verify_only_for_the_same_message_and_key():
    pair, other = KeyPair.generate(), KeyPair.generate()
    sig = pair.sign(b"message")
    assert len(sig) == keys.SIGNATURE_BYTES
    assert pair.public.verify(sig, b"message")
    assert not pair.public.verify(sig, b"messagf")
    assert not other.public.verify(sig, b"message")
    assert not pair.public.verify(sig[:-1], b"message")


def test_the_private_key_file_is_mode_0600_and_loads_back(tmp_path):
    pair = KeyPair.generate()
    path = tmp_path / "keys" / "alice.key"
    keys.write_private_key(pair, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.load_private_key(path).key_id == pair.key_id
    assert os.listdir(path.parent) == ["alice.key"]  # no temporary file left behind


def test_the_key_file_is_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        keys.write_private_key(KeyPair.generate(), tmp_path / "k.key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600


def test_an_existing_key_file_is_never_overwritten(tmp_path):
    path = tmp_path / "alice.key"
    first = KeyPair.generate()
    keys.write_private_key(first, path)
    with pytest.raises(FileExistsError):
        keys.write_private_key(KeyPair.generate(), path)
    assert keys.load_private_key(path).key_id == first.key_id
    assert os.listdir(tmp_path) == ["alice.key"]


def test_a_key_file_others_can_read_is_refused_on_load(tmp_path):
    path = tmp_path / "alice.key"
    keys.write_private_key(KeyPair.generate(), path)
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        keys.load_private_key(path)


def test_a_file_that_is_not_an_ed25519_pem_is_refused(tmp_path):
    path = tmp_path / "junk.key"
    path.write_bytes(b"not a key")
    path.chmod(0o600)
    with pytest.raises(KeyFormatError):
        keys.load_private_key(path)


def test_repr_never_shows_the_private_key():
    pair = KeyPair.from_seed(SEED)
    assert repr(pair) == f"KeyPair({pair.key_id})"
    assert SEED.hex() not in repr(pair)


def test_a_key_id_needs_exactly_32_public_key_bytes():
    with pytest.raises(KeyFormatError):
        keys.key_id(b"\x00" * 31)
