"""An event's free texts as they are stored: its metadata JSON read back (`read_metadata`,
never an error, whatever a row holds) and a redacted body's tombstone (`tombstone`,
`parse_tombstone`, `body_digest`; RFC 0008). Pure: the standard library only.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

# Objects and arrays nest at most this deep in metadata (the top object is level 1). Far
# inside what every serializer on every surface handles (FastAPI's encoder fails near 250,
# Python's json near 1000), so no stored event can make a read fail (S-8.10).
MAX_METADATA_DEPTH = 64


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in a parsed JSON value (iterative: no recursion)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@functools.cache
def _decoder() -> json.JSONDecoder:
    """The decoder of `json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)`
    for a str without a BOM, made once (json.loads makes one per call with these options: a
    pulled page reads the metadata of thousands of events)."""
    return json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


def read_metadata(text: str) -> tuple[dict[str, Any], str | None]:
    """Stored metadata text as an object that every surface can serialize, plus a problem.

    Writes are validated, but a row may come from an older version, a legacy file or a hand
    edit: anything unreadable (not JSON, not an object, NaN/Infinity, nested deeper than
    MAX_METADATA_DEPTH) reads as `{}` with the reason, never as an error.
    """
    if text == "{}":
        return {}, None
    try:
        if not text.startswith("\ufeff"):
            value = _decoder().decode(text)
        else:  # a BOM, which json.loads refuses with its own message
            value = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        return {}, f"stored metadata is not readable JSON ({exc})"
    if not isinstance(value, dict):
        return {}, "stored metadata is not a JSON object"
    # str.count runs in C: only text with many brackets can be deep enough to need the walk.
    if text.count("{") + text.count("[") > MAX_METADATA_DEPTH:
        if json_depth(value) > MAX_METADATA_DEPTH:
            return {}, f"stored metadata nests deeper than {MAX_METADATA_DEPTH} levels"
    return value, None


# A redacted body (RFC 0008 "Redaction"): this prefix, then the canonical JSON of who redacted
# it, when, why, by which `event.redact`, and the SHA-256 of the body it replaced (which the
# signature covers, so the event still verifies).
TOMBSTONE_PREFIX = "[redacted] "
TOMBSTONE_KEYS = ("at", "body_sha256", "by", "event_id", "reason")
_HEX64 = r"^[0-9a-f]{64}$"  # compiled on first use (`re` keeps it): not at import (issue 25)


def tombstone(*, body_sha256: str, event_id: str, by: str, at: str, reason: str) -> str:
    """The body that replaces a redacted one."""
    doc = {"at": at, "body_sha256": body_sha256, "by": by, "event_id": event_id, "reason": reason}
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return TOMBSTONE_PREFIX + text


def parse_tombstone(body: str) -> dict[str, str] | None:
    """The redaction a tombstone body records, or None when `body` is not one."""
    if not body.startswith(TOMBSTONE_PREFIX):
        return None
    try:
        doc = json.loads(body[len(TOMBSTONE_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(doc, dict) or tuple(sorted(doc)) != TOMBSTONE_KEYS:
        return None
    if not all(isinstance(doc[k], str) for k in TOMBSTONE_KEYS):
        return None
    return doc if re.match(_HEX64, doc["body_sha256"]) else None


def body_digest(body: str) -> str:
    """The SHA-256 a body stands for: the original's for a tombstone, else its own (UTF-8).
    Raises UnicodeEncodeError for a lone surrogate."""
    doc = parse_tombstone(body)
    if doc is not None:
        return doc["body_sha256"]
    import hashlib  # here, not at import: OpenSSL's load is a tenth of the hook path's imports

    return hashlib.sha256(body.encode("utf-8")).hexdigest()
