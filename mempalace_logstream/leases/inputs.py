"""The input rules of the lease operations (issue 22): every refusal names the field and the
limit. Pure: validation and the glob rules."""

from __future__ import annotations

from typing import Any

from mempalace_logstream import validation as v
from mempalace_logstream.leases import globs, rules

MAX_GLOBS = 32  # per lease
MAX_GLOB_CHARS = globs.MAX_GLOB_CHARS
MIN_TTL_S = rules.MIN_TTL_MS // 1000
MAX_TTL_S = rules.MAX_TTL_MS // 1000  # a week, as task leases
DEFAULT_TTL_S = 30 * 60
MAX_REASON_CHARS = 1000


def paths(value: Any, field: str = "paths") -> tuple[str, ...]:
    """1 to MAX_GLOBS globs (a string is one), each 1 to MAX_GLOB_CHARS characters, readable,
    inside the project root; normalized (globs.normalize), duplicates dropped, order kept."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise v.fail(field, "must be a non-empty list of globs")
    if len(items) > MAX_GLOBS:
        raise v.fail(field, f"has {len(items)} globs; the limit is {MAX_GLOBS}", MAX_GLOBS)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise v.fail(field, f"must hold strings (globs), not {type(item).__name__}")
        if len(item.strip()) > MAX_GLOB_CHARS:
            raise v.fail(
                field,
                f"has a glob of {len(item.strip())} characters; the limit is {MAX_GLOB_CHARS}",
                MAX_GLOB_CHARS,
            )
        text = v.required_routing(field, item)
        try:
            norm = globs.normalize(text)
            globs.segments(norm)
        except globs.GlobError as exc:
            raise v.fail(field, f"glob {text!r} {exc}") from None
        if norm not in out:
            out.append(norm)
    return tuple(out)


def path(value: Any, field: str = "path") -> str:
    """One path to check (relative to the project root)."""
    text = v.required_routing(field, value)
    try:
        globs.literal(text)
    except globs.GlobError as exc:
        raise v.fail(field, f"{text!r} {exc}") from None
    return text


def ttl_ms(value: Any, field: str = "ttl_s") -> int:
    """A lease's time to live in seconds (MIN_TTL_S to MAX_TTL_S; default DEFAULT_TTL_S), as ms."""
    if value is None:
        return DEFAULT_TTL_S * 1000
    n = v.strict_int(field, value)
    if n < MIN_TTL_S or n > MAX_TTL_S:
        raise v.fail(
            field, f"is {n}; it must be between {MIN_TTL_S} and {MAX_TTL_S} seconds", MAX_TTL_S
        )
    return n * 1000


def reason(value: Any, field: str = "reason") -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise v.fail(field, f"must be a string, not {type(value).__name__}")
    v.check_text(field, value)
    if len(value) > MAX_REASON_CHARS:
        raise v.fail(
            field,
            f"is {len(value)} characters; the limit is {MAX_REASON_CHARS} characters",
            MAX_REASON_CHARS,
        )
    return value.strip()
