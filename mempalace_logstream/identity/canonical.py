"""RFC 8785 JSON Canonicalization Scheme (JCS): the bytes that event signatures cover.

Pure. JCS numbers are IEEE doubles: an integer a double cannot hold exactly is refused rather
than rounded, so two different values never canonicalize (and so sign) the same.
Imports nothing from the package.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 256  # far above metadata's 64 levels, far below Python's recursion limit


class CanonicalizationError(ValueError):
    """The value has no RFC 8785 canonical form (NaN, infinity, an integer no double holds,
    a lone surrogate)."""


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 serialization of a parsed JSON value, as UTF-8 bytes.

    Raises CanonicalizationError for values JCS cannot represent, and for arrays and objects
    nested deeper than MAX_DEPTH (metadata is limited to 64 levels on write; a hostile
    peer's deeper value must fail cleanly, never with RecursionError).
    """
    parts: list[str] = []
    _write(value, parts, 0)
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(f"a string holds a lone surrogate ({exc.reason})") from exc


def _write(value: Any, out: list[str], depth: int) -> None:
    if type(value) is str:
        out.append(_string(value))
    elif isinstance(value, dict):
        _write_object(value, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise CanonicalizationError(f"arrays and objects nest deeper than {MAX_DEPTH}")
        out.append("[")
        for n, element in enumerate(value):
            if n:
                out.append(",")
            _write(element, out, depth + 1)
        out.append("]")
    else:
        out.append(_scalar(value))


def _write_object(obj: dict[Any, Any], out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CanonicalizationError(f"arrays and objects nest deeper than {MAX_DEPTH}")
    for key in obj:
        if not isinstance(key, str):
            raise CanonicalizationError(f"object key {key!r} is not a string")
    # JCS sorts by UTF-16 code units; for ASCII keys (the usual case) that is plain order.
    ascii_only = all(key.isascii() for key in obj)
    out.append("{")
    for n, key in enumerate(sorted(obj) if ascii_only else sorted(obj, key=_utf16_key)):
        out.append(("," if n else "") + _string(key) + ":")
        _write(obj[key], out, depth)
    out.append("}")


def _utf16_key(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare in code-unit order. surrogatepass: a lone surrogate
    # still sorts, and fails later, at the UTF-8 encode.
    return key.encode("utf-16-be", "surrogatepass")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return format_number(value)
    raise CanonicalizationError(f"{type(value).__name__} is not a JSON value")


# The stdlib's own string encoder with ensure_ascii off escapes exactly what JCS escapes:
# `"`, `\`, the short forms \b \t \n \f \r, other controls as lowercase \u00xx; `/` and
# everything else stay literal.
_string: Callable[[str], str] = json.encoder.encode_basestring


def _integer(value: int) -> str:
    if abs(value) <= MAX_SAFE_INTEGER:
        return str(value)
    try:
        double = float(value)
    except OverflowError:
        double = math.inf
    if math.isinf(double) or int(double) != value:
        raise CanonicalizationError(
            f"integer {value} is not exactly a double: JSON canonicalization would round it"
        )
    return format_number(double)


def format_number(value: float) -> str:
    """ECMAScript Number.prototype.toString of a double (RFC 8785 §3.2.2.3)."""
    if math.isnan(value) or math.isinf(value):
        raise CanonicalizationError(f"{value} is not a JSON number")
    if value == 0:
        return "0"  # also -0
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    k = len(digits)
    if k <= point <= 21:
        text = digits + "0" * (point - k)
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        exponent = point - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"
    return sign + text


def _shortest_digits(value: float) -> tuple[str, int]:
    """(digits, point): value = 0.digits × 10**point, digits the shortest round-trip string.

    repr() gives the shortest digit string that round-trips, choosing the closest one when
    several do: the same digits ECMAScript requires.
    """
    mantissa, _, exp_text = repr(value).partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    stripped = raw.lstrip("0")
    point = len(whole) + exponent - (len(raw) - len(stripped))
    return stripped.rstrip("0"), point
