"""RFC 8785 JSON Canonicalization Scheme (JCS): the bytes that event signatures cover.

Pure. JCS numbers are IEEE doubles: an integer a double cannot hold exactly is refused rather
than rounded, so two different values never canonicalize (and so sign) the same.
Imports nothing from the package.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1


class CanonicalizationError(ValueError):
    """The value has no RFC 8785 canonical form (NaN, infinity, an integer no double holds,
    a lone surrogate)."""


def canonicalize(value: Any) -> bytes:
    """The RFC 8785 serialization of a parsed JSON value, as UTF-8 bytes.

    Raises CanonicalizationError for values JCS cannot represent.
    """
    parts: list[str] = []
    _write(value, parts)
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(f"a string holds a lone surrogate ({exc.reason})") from exc


def _write(value: Any, out: list[str]) -> None:
    # Explicit stack instead of recursion: metadata nests up to 64 levels, but a hostile peer's
    # value may nest deeper, and the encoder must fail cleanly, not with RecursionError.
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            out.append(item.text)
        elif isinstance(item, dict):
            stack.extend(reversed(_object_items(item)))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(_array_items(item)))
        else:
            out.append(_scalar(item))


class _Literal:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _object_items(obj: dict[Any, Any]) -> list[Any]:
    for key in obj:
        if not isinstance(key, str):
            raise CanonicalizationError(f"object key {key!r} is not a string")
    items: list[Any] = [_Literal("{")]
    for n, key in enumerate(sorted(obj, key=_utf16_key)):
        prefix = "," if n else ""
        items += [_Literal(prefix + _string(key) + ":"), obj[key]]
    items.append(_Literal("}"))
    return items


def _array_items(arr: list[Any] | tuple[Any, ...]) -> list[Any]:
    items: list[Any] = [_Literal("[")]
    for n, element in enumerate(arr):
        if n:
            items.append(_Literal(","))
        items.append(element)
    items.append(_Literal("]"))
    return items


def _utf16_key(key: str) -> bytes:
    # JCS sorts by UTF-16 code units; big-endian UTF-16 bytes compare in that order.
    # surrogatepass: a lone surrogate still sorts, and fails later, at the UTF-8 encode.
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


def _string(value: str) -> str:
    # Python's encoder escapes exactly what JCS escapes when ensure_ascii is off: `"`, `\`,
    # the short forms \b \t \n \f \r, other controls as lowercase \u00xx; `/` stays as is.
    return json.dumps(value, ensure_ascii=False)


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
