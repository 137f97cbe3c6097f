"""The only home of input rules (SPEC §4): raw values in, clean values or ValidationError out.

Every error names the field and the limit. Nothing is stripped silently except the surrounding
whitespace of routing fields (S-4.1); NUL and lone surrogates are rejected, never removed.
Must not import sqlalchemy or any surface.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, cast

from mempalace_logstream.errors import ValidationError
from mempalace_logstream.payload import MAX_METADATA_DEPTH, json_depth

MAX_ROUTING_CHARS = 256
MAX_TYPE_CHARS = 64
DEFAULT_MAX_BODY_BYTES = 256 * 1024
MAX_METADATA_BYTES = 64 * 1024
DEFAULT_MAX_ARTIFACT_BYTES = 4 * 1024 * 1024
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
DEFAULT_WAIT_MS = 60_000
MAX_WAIT_MS = 300_000
MAX_FILTER_VALUES = 64

STATUSES = (
    *("open", "claimed", "ready", "applied", "blocked", "failed", "superseded"),  # the reference
    *("working", "completed", "declined", "cancelled"),  # task states (RFC 0007)
)
ARTIFACT_KINDS = ("patch", "file", "log", "json", "note")
ENCODINGS = ("utf-8", "base64")
ORDERS = ("asc", "desc")
FILTER_FIELDS = (
    "stream",
    "room",
    "topic",
    "type",
    "to_agent",
    "writer",
    "exclude_writer",
    "correlation_id",
    "status",
)

# Patterns compiled on first use (`re` keeps them): not at import, where each was 0.5-1M
# instructions of every CLI call (issue 25).
_TYPE_RE = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
_HEX_RE = r"^[0-9a-fA-F]{7,64}$"
_REMOTE_ID_RE = r"^[A-Za-z0-9_.:-]{1,128}$"
_REPLICA_RE = r"^rep_(?:[0-9a-f]{12}|[0-9a-f]{32})$"
_CONTROL_RE = r"[\x00-\x1f\x7f]"
_DATE_RE = r"^\d{4}-\d{2}-\d{2}$"
_DATETIME_RE = r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(Z|\+00:00)$"


def has_control(value: str) -> bool:
    """Whether `value` holds a character below 0x20 or 0x7F (`_CONTROL_RE`). ASCII text is
    printable exactly when it holds none of them (every other ASCII character is a letter,
    digit, punctuation, symbol or the space): the pattern is compiled only for other text."""
    if value.isascii():
        return not value.isprintable()
    return re.search(_CONTROL_RE, value) is not None


def fail(field: str, message: str, limit: object = None) -> ValidationError:
    return ValidationError(f"{field} {message}", field=field, limit=limit)


def check_text(field: str, value: str) -> int:
    """Refuse text a column cannot hold: a NUL character or a lone surrogate. Its UTF-8 size."""
    if "\x00" in value:
        raise fail(field, "contains a NUL character; NUL is not allowed")
    if value.isascii():  # (a flag of the string: its UTF-8 size is its length, no copy made)
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise fail(field, "contains a lone surrogate; it must be valid Unicode text") from exc


# Invisible or direction-changing code points let a look-alike name coexist with the real
# one ("claude-laptop" and "claude-laptop" + U+200D): C0/C1 controls (Cc), format characters
# (Cf: bidi overrides and isolates, zero-width space/joiners, word joiner, BOM, soft hyphen),
# and the line and paragraph separators (Zl, Zp). Refused in routing fields, kept in bodies.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _check_visible(field: str, value: str) -> None:
    if value.isascii():
        return  # ASCII controls are refused by _CONTROL_RE with their own message
    for ch in value:
        if unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
            name = unicodedata.name(ch, "a control character")
            raise fail(
                field,
                f"contains U+{ord(ch):04X} ({name}); invisible and direction-changing "
                "characters are not allowed in routing fields",
            )


def routing(field: str, value: Any, *, required: bool = False) -> str | None:
    """A routing value (stream, room, agent, id, …): ≤256 chars, no control characters."""
    if value is None or value == "":
        if required:
            raise fail(field, "must be a non-empty string")
        return None
    if not isinstance(value, str):
        raise fail(field, f"must be a string, not {type(value).__name__}")
    check_text(field, value)
    # Control characters are refused before stripping: str.strip() would silently remove a
    # trailing newline or tab, and S-4 says bad characters are rejected, never stripped.
    if has_control(value):
        raise fail(field, "contains control characters (below 0x20 or 0x7F)")
    _check_visible(field, value)
    stripped = value.strip()
    if not stripped:
        raise fail(field, "must not be only whitespace")
    if len(stripped) > MAX_ROUTING_CHARS:
        raise fail(
            field,
            f"is {len(stripped)} characters; the limit is {MAX_ROUTING_CHARS} characters",
            MAX_ROUTING_CHARS,
        )
    return stripped


def required_routing(field: str, value: Any) -> str:
    return cast(str, routing(field, value, required=True))  # never None: required


def writer(field: str, value: Any) -> str:
    """The name a writer writes as (`from_agent`, `created_by`): a required routing value that
    is not `*`, the broadcast address (a reply or an ack to it would go to everyone)."""
    name = required_routing(field, value)
    if name == "*":
        raise fail(field, "is '*', the broadcast address; a writer writes under its own name")
    return name


def event_type(value: Any, field: str = "type") -> str:
    text = required_routing(field, value)
    if not re.match(_TYPE_RE, text):
        raise fail(
            field,
            f"{text!r} is not a valid event type (1-{MAX_TYPE_CHARS} chars: a lowercase letter "
            "or digit, then lowercase letters, digits, '.', '_', '-')",
            MAX_TYPE_CHARS,
        )
    return text


def status(value: Any, field: str = "status") -> str | None:
    text = routing(field, value)
    if text is None:
        return None
    if text not in STATUSES:
        raise fail(field, f"{text!r} is not one of {', '.join(STATUSES)}")
    return text


def body(value: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES, field: str = "body") -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(field, f"must be a string, not {type(value).__name__}")
    size = check_text(field, value)
    if size > max_bytes:
        raise fail(field, f"is {size} bytes; the limit is {max_bytes} bytes", max_bytes)
    return value


def metadata(value: Any, field: str = "metadata") -> str:
    """Serialize metadata with its key order kept; returns the JSON text to store."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise fail(field, f"is not valid JSON ({getattr(exc, 'msg', exc)})") from exc
        except RecursionError as exc:
            raise fail(
                field, f"nests deeper than {MAX_METADATA_DEPTH} levels", MAX_METADATA_DEPTH
            ) from exc
    if not isinstance(value, dict):
        raise fail(field, f"must be a JSON object, not {type(value).__name__}")
    try:
        text = _metadata_encoder().encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        _check_depth(field, value)  # the depth's refusal comes first
        raise fail(field, f"is not JSON-serializable ({exc})") from exc
    # The walks only where the text says they may find something (a pulled page checks
    # thousands of metadata objects): it nests at most as deep as its text has opening
    # brackets, and a string holds NUL only where the text has a \u0000 escape (a bracket
    # or a backslash in a string only adds to the count).
    if text.count("{") + text.count("[") > MAX_METADATA_DEPTH:
        _check_depth(field, value)
    size = check_text(field, text)
    if "\\u0000" in text:
        _check_json_strings(field, value)
    if size > MAX_METADATA_BYTES:
        raise fail(
            field,
            f"is {size} bytes serialized; the limit is {MAX_METADATA_BYTES} bytes",
            MAX_METADATA_BYTES,
        )
    return text


def _check_depth(field: str, value: Any) -> None:
    depth = json_depth(value)
    if depth > MAX_METADATA_DEPTH:
        raise fail(
            field,
            f"nests {depth} levels deep; the limit is {MAX_METADATA_DEPTH} levels",
            MAX_METADATA_DEPTH,
        )


@functools.cache
def _metadata_encoder() -> json.JSONEncoder:
    """`json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)`'s
    encoder, made once (json.dumps makes one per call with options: a pulled page checks the
    metadata of thousands of events)."""
    return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _check_json_strings(field: str, value: Any) -> None:
    """NUL anywhere in metadata (keys or values) is refused; JSON would only escape it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise fail(field, "contains a NUL character; NUL is not allowed")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def artifact_ids(value: Any, field: str = "artifact_ids") -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise fail(field, "must be a list of artifact ids")
    out: list[str] = []
    for i, item in enumerate(value):
        ident = required_routing(f"{field}[{i}]", item)
        if ident not in out:
            out.append(ident)
    return tuple(out)


def artifact_kind(value: Any, field: str = "kind") -> str:
    text = required_routing(field, value)
    if text not in ARTIFACT_KINDS:
        raise fail(field, f"{text!r} is not one of {', '.join(ARTIFACT_KINDS)}")
    return text


def encoding(value: Any, field: str = "encoding") -> str | None:
    text = routing(field, value)
    if text is None:
        return None
    if text.lower() not in ENCODINGS:
        raise fail(field, f"{text!r} is not one of {', '.join(ENCODINGS)}")
    return text.lower()


def artifact_content(
    value: Any,
    enc: str | None = None,
    max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    field: str = "content",
) -> tuple[bytes, str]:
    """Artifact content as bytes plus its encoding. Text is utf-8, bytes or base64 are binary."""
    if value is None:
        raise fail(field, "is required")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            raw.decode("utf-8")
            is_text = b"\x00" not in raw
        except UnicodeDecodeError:
            if enc == "utf-8":
                raise fail(field, "is not valid UTF-8 (send it with encoding base64)") from None
            is_text = False
        # Raw bytes without an explicit encoding are sniffed: valid UTF-8 without NUL is
        # text, anything else is stored as binary (never rejected, never rewritten).
        kind = enc or ("utf-8" if is_text else "base64")
    elif isinstance(value, str):
        if enc == "base64":
            import base64  # here: a write loads neither (issue 25)
            import binascii

            try:
                raw = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError) as exc:
                raise fail(field, "is not valid base64") from exc
            kind = "base64"
        else:
            check_text(field, value)
            raw, kind = value.encode("utf-8"), "utf-8"
    else:
        raise fail(field, f"must be a string or bytes, not {type(value).__name__}")
    if kind == "utf-8" and b"\x00" in raw:
        raise fail(field, "contains a NUL character; send binary content with encoding base64")
    if len(raw) > max_bytes:
        raise fail(field, f"is {len(raw)} bytes; the limit is {max_bytes} bytes", max_bytes)
    return raw, kind


def patch_warnings(content: bytes) -> tuple[str, ...]:
    """Advisories about a patch (stored as given all the same): empty, no final newline, CRLF."""
    warnings = []
    if not content:
        warnings.append("patch is empty; there is nothing to apply")
    if content and not content.endswith(b"\n"):
        warnings.append("patch does not end with a newline; git apply will reject the last hunk")
    if b"\r" in content:
        warnings.append("patch contains carriage returns (CRLF); git apply often rejects them")
    return tuple(warnings)


def strict_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or value is None:
        raise fail(field, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise fail(field, "must be an integer")


def limit(value: Any, field: str = "limit") -> int:
    if value is None:
        return DEFAULT_LIST_LIMIT
    n = strict_int(field, value)
    if n < 1 or n > MAX_LIST_LIMIT:
        raise fail(field, f"is {n}; it must be between 1 and {MAX_LIST_LIMIT}", MAX_LIST_LIMIT)
    return n


def timeout_ms(value: Any, field: str = "timeout_ms") -> int:
    if value is None:
        return DEFAULT_WAIT_MS
    n = strict_int(field, value)
    if n < 0 or n > MAX_WAIT_MS:
        raise fail(field, f"is {n}; it must be between 0 and {MAX_WAIT_MS} ms", MAX_WAIT_MS)
    return n


def boolean(field: str, value: Any, default: bool = False) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    raise fail(field, "must be a boolean (true or false)")


def order(value: Any, field: str = "order") -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value.strip().lower() not in ORDERS:
        raise fail(field, f"must be 'asc' or 'desc', not {value!r}")
    return value.strip().lower()


def since_created_at(value: Any, field: str = "since_created_at") -> str | None:
    """A time window bound (never a cursor); returned as `YYYY-MM-DDTHH:MM:SS.000Z`."""
    text = routing(field, value)
    if text is None:
        return None
    try:
        if re.match(_DATE_RE, text):
            dt = datetime.strptime(text, "%Y-%m-%d")
        else:
            m = re.match(_DATETIME_RE, text)
            if not m:
                raise ValueError(text)
            dt = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    except ValueError as exc:
        raise fail(
            field,
            f"{text!r} is not YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DDTHH:MM:SS+00:00",
        ) from exc
    return dt.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def filter_values(field: str, value: Any) -> tuple[str, ...] | None:
    """A filter that may be repeated: OR within the field; None means no filter.

    An empty value is refused, never read as "no filter": `to_agent=""` matching everyone's
    mail would be the opposite of what was asked.
    """
    if value is None:
        return None
    items: Iterable[Any] = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise fail(field, "must be a string or a list of strings")
    check = {"type": event_type, "status": status}.get(field)
    out: list[str] = []
    for item in items:
        if item is None or (isinstance(item, str) and not item.strip()):
            raise fail(field, "is empty; give a value or leave the filter out")
        clean = check(item, field) if check else required_routing(field, item)
        if clean is not None and clean not in out:
            out.append(clean)
    if len(out) > MAX_FILTER_VALUES:
        raise fail(
            field, f"has {len(out)} values; the limit is {MAX_FILTER_VALUES}", MAX_FILTER_VALUES
        )
    return tuple(out) or None


def base_commit_hex(value: Any, field: str = "base_commit") -> str:
    text = required_routing(field, value)
    if not re.match(_HEX_RE, text):
        raise fail(
            field,
            f"{text!r} must be a hexadecimal Git object id (7-64 characters), not a branch or tag",
            64,
        )
    return text.lower()


def non_blank_text(field: str, value: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> str:
    """Free text kept verbatim (goal, done): required, not only whitespace."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise fail(field, "must not be empty")
    return body(value, max_bytes, field)


def remote_id(field: str, value: Any) -> str:
    text = required_routing(field, value)
    if not re.match(_REMOTE_ID_RE, text):
        raise fail(field, f"{text!r} must be 1-128 characters of [A-Za-z0-9_.:-]", 128)
    return text


def replica_id(value: Any, field: str = "replica_id") -> str:
    text = required_routing(field, value)
    if not re.match(_REPLICA_RE, text):
        raise fail(field, f"{text!r} is not a replica id (rep_ + 12 or 32 lowercase hex)")
    return text


def token(value: str | None, field: str = "token") -> str | None:
    """A bearer token as given, or ValidationError when it is only whitespace: a blank token is
    a mistake (an unset variable in a script), refused like a missing one, never sent."""
    if value is not None and not value.strip():
        raise fail(field, "is blank (only whitespace); pass a real token or leave it out")
    return value


def idempotency_key(value: Any, field: str = "idempotency_key") -> str | None:
    return routing(field, value)


# The rule of each field a writer gives (`models.FieldSpec.check`), by name: one table for a
# local draft (`LogStore.draft_event`) and a remote event (`replication.checks`). Called with
# the field's wire name (errors name it) and the raw value; a missing value is None.
FIELD_RULES: dict[str, Callable[[str, Any], Any]] = {
    "type": lambda field, value: event_type(value, field),
    "required": required_routing,
    "writer": writer,
    "routing": routing,
    "status": lambda field, value: status(value, field),
    "artifact_ids": lambda field, value: artifact_ids(value, field),
    "body": lambda field, value: body(value, DEFAULT_MAX_BODY_BYTES, field),
    "metadata": lambda field, value: metadata(value, field),
}
# The rules whose clean value is a short string that depends on the value alone (a remote
# checker remembers them: routing values repeat from event to event).
TEXT_RULES = frozenset({"type", "required", "writer", "routing", "status"})
