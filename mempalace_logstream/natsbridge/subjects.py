"""Subjects and headers of a bridged event (RFC 0011): pure, no NATS client.

A subject is `<prefix>.<origin>.<stream>.<to>`, one token per routing value. NATS forbids
spaces, `.`, `*` and `>` in a token and recommends at most 16 tokens and fewer than 256
characters, while our routing values may hold all of those and be 256 characters long. So a
value made only of `[A-Za-z0-9-]` plus `_` not in first place, at most `PLAIN_MAX` characters,
is its own token; anything else is `_h` and 24 hex digits of its sha256; a broadcast (`*`) is
the reserved `_all` and an empty value `_none`. No plain value starts with `_`, so the
reserved tokens never meet a value. The full values travel in the headers (percent-encoded,
a header is one line of ASCII) and in the payload, which is what the consumer imports: a
token only routes, it is never read back.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote

PLAIN_MAX = 40
HASH_HEX = 24  # 96 bits: a collision only widens a filter; the headers hold the value
BROADCAST = "_all"
NONE = "_none"
_PLAIN = re.compile(rf"[A-Za-z0-9-][A-Za-z0-9_-]{{0,{PLAIN_MAX - 1}}}")
_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}(\.[A-Za-z0-9_-]{1,32}){0,3}")

MSG_ID = "Nats-Msg-Id"
H_ORIGIN = "Logstream-Origin"
H_ORIGIN_SEQ = "Logstream-Origin-Seq"
H_STREAM = "Logstream-Stream"
H_TO = "Logstream-To"


def token(value: str | None) -> str:
    """The subject token of one routing value."""
    if value is None or value == "":
        return NONE
    if value == "*":
        return BROADCAST
    if _PLAIN.fullmatch(value):
        return value
    return "_h" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:HASH_HEX]


def check_prefix(prefix: str) -> str:
    """The subject prefix: 1 to 4 tokens of `[A-Za-z0-9_-]`, each ≤32 characters; raises
    ValueError naming the rule."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"--prefix {prefix!r} must be 1 to 4 dot-separated tokens of letters, digits, "
            "'_' and '-' (each at most 32 characters)"
        )
    return prefix


def subject(prefix: str, origin: str, stream: str, to_agent: str | None) -> str:
    """`<prefix>.<origin>.<stream>.<to>`: at most 7 tokens and 4·33 + 3·41 < 256 characters."""
    return ".".join((prefix, token(origin), token(stream), token(to_agent)))


def subject_of(prefix: str, event: dict[str, Any]) -> str | None:
    """The subject an event object must arrive on, or None when its routing values are not
    strings (the consumer refuses such a message as malformed)."""
    origin, stream, to = event.get("origin_replica"), event.get("stream"), event.get("to_agent")
    if not isinstance(origin, str) or not isinstance(stream, str):
        return None
    if to is not None and not isinstance(to, str):
        return None
    return subject(prefix, origin, stream, to)


def inbox_filters(prefix: str, agent: str) -> list[str]:
    """The subjects an agent's own consumer follows: its inbox and the broadcasts."""
    return [f"{prefix}.*.*.{token(agent)}", f"{prefix}.*.*.{BROADCAST}"]


def headers(event: dict[str, Any]) -> dict[str, str]:
    """`Nats-Msg-Id` (the event id: JetStream drops a republish within its window) and the
    full routing values, percent-encoded."""
    out = {
        MSG_ID: str(event["id"]),
        H_ORIGIN: quote(str(event["origin_replica"]), safe=""),
        H_ORIGIN_SEQ: str(event["origin_seq"]),
        H_STREAM: quote(str(event["stream"]), safe=""),
    }
    if event.get("to_agent"):
        out[H_TO] = quote(str(event["to_agent"]), safe="")
    return out
