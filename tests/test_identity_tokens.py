"""Per-agent bearer tokens: shape, stored hash, constant-time verification."""

from __future__ import annotations

import hashlib
import hmac

from mempalace_logstream.identity import tokens


def test_a_minted_token_is_lst_and_43_base64url_characters():
    token = tokens.mint()
    assert token.startswith("lst_") and len(token) == 47
    assert tokens.is_token(token)
    assert not tokens.is_token(token[:-1])
    assert not tokens.is_token("xyz_" + token[4:])
    assert len({tokens.mint() for _ in range(100)}) == 100


def test_the_stored_form_is_the_sha256_of_the_token_never_the_token():
    token = tokens.mint()
    stored = tokens.hash_token(token)
    assert stored == "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    assert token not in stored


def test_verify_accepts_only_the_token_that_was_hashed():
    token = tokens.mint()
    stored = tokens.hash_token(token)
    assert tokens.verify(token, stored)
    assert not tokens.verify(tokens.mint(), stored)
    assert not tokens.verify(token[:-1], stored)
    assert not tokens.verify(token, stored[:-1])


def test_verify_and_lookup_compare_with_hmac_compare_digest(monkeypatch):
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    token = tokens.mint()
    assert tokens.verify(token, tokens.hash_token(token))
    assert len(calls) == 1
    calls.clear()
    hashes = {name: tokens.hash_token(tokens.mint()) for name in ("a", "b", "c", "d")}
    hashes["b"] = tokens.hash_token(token)
    assert tokens.find_agent(token, hashes) == "b"
    # No early exit: every stored hash is compared, whichever matched.
    assert len(calls) == len(hashes)


def test_lookup_finds_nobody_for_an_unknown_token():
    hashes = [("alice", tokens.hash_token(tokens.mint()))]
    assert tokens.find_agent(tokens.mint(), hashes) is None
    assert tokens.find_agent("", {}) is None
