"""Per-agent bearer tokens: mint, hash for storage, verify in constant time.

A token is `lst_` + 43 base64url characters (256 random bits). The hub stores only
`sha256:<hex>` of it. Pure (no SQL, no surfaces); imports nothing from the package.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping

TOKEN_PREFIX = "lst_"
TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"^lst_[A-Za-z0-9_-]{43}$")
HASH_PREFIX = "sha256:"


def mint() -> str:
    """A fresh token. Show it once; store only `hash_token(token)`."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def is_token(text: object) -> bool:
    """Whether `text` has the shape of an agent token (secret scanners match the same)."""
    return isinstance(text, str) and TOKEN_RE.match(text) is not None


def hash_token(token: str) -> str:
    """The stored form. A plain SHA-256 suffices: the token has 256 bits of entropy."""
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def verify(token: str, stored_hash: str) -> bool:
    """Whether `token` hashes to `stored_hash`, compared in constant time."""
    return hmac.compare_digest(hash_token(token).encode(), stored_hash.encode())


def find_agent(token: str, hashes: Mapping[str, str] | Iterable[tuple[str, str]]) -> str | None:
    """The agent whose stored hash matches `token`, or None.

    Compares against every hash without stopping at a match, so the time taken says nothing
    about which agent (or whether any) matched.
    """
    pairs = hashes.items() if isinstance(hashes, Mapping) else hashes
    presented = hash_token(token).encode()
    found: str | None = None
    for agent, stored in pairs:
        if hmac.compare_digest(presented, stored.encode()) and found is None:
            found = agent
    return found
