"""RFC 8785 (JCS) canonicalization: the RFC's own examples, its refusals, and properties."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream.identity.canonical import (
    MAX_DEPTH,
    CanonicalizationError,
    canonicalize,
    format_number,
)

# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
NUMBER_EXAMPLES = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def _double(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


@pytest.mark.parametrize(("bits", "text"), NUMBER_EXAMPLES)
def test_numbers_serialize_as_rfc_8785_appendix_b(bits, text):
    assert format_number(_double(bits)) == text
    assert canonicalize(_double(bits)) == text.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_nan_and_infinities_have_no_canonical_form(bits):
    with pytest.raises(CanonicalizationError):
        canonicalize(_double(bits))


def test_the_rfc_3_2_2_example_canonicalizes_to_the_rfc_output():
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(json.loads(text)) == expected.encode("utf-8")


def test_object_keys_sort_by_utf16_code_units_as_in_rfc_3_2_3():
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(json.loads(canonicalize(value)))
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+FB33 in UTF-16 (not in
    # code points): the one place a Python sort by str would get JCS wrong.
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_integers_are_doubles_and_the_ones_a_double_would_round_are_refused():
    assert canonicalize(2**53 - 1) == b"9007199254740991"
    assert canonicalize(-(2**53 - 1)) == b"-9007199254740991"
    # Exactly representable: written as that double, the same bytes as from 2.0**64.
    assert canonicalize(2**53) == b"9007199254740992"
    assert canonicalize(2**64) == canonicalize(2.0**64) == b"18446744073709552000"
    for value in (2**53 + 1, -(2**53 + 1), 18446744073709552000, 10**400):
        with pytest.raises(CanonicalizationError, match="not exactly a double"):
            canonicalize({"n": value})


def test_lone_surrogates_and_non_json_values_are_refused():
    for bad in ("\ud800", {"\udc00": 1}, {1: "x"}, b"bytes", {1.5}):
        with pytest.raises(CanonicalizationError):
            canonicalize(bad)


def test_booleans_are_literals_not_integers():
    assert canonicalize([True, False, 1, 0, None]) == b"[true,false,1,0,null]"


def test_nesting_up_to_the_limit_works_and_deeper_fails_cleanly():
    value: object = []
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    assert canonicalize(value) == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    for deeper in ([value], {"k": value}):
        with pytest.raises(CanonicalizationError, match="nest deeper"):
            canonicalize(deeper)
    very_deep: object = {}
    for _ in range(50_000):
        very_deep = {"k": very_deep}
    with pytest.raises(CanonicalizationError, match="nest deeper"):
        canonicalize(very_deep)


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values, st.sampled_from([None, 0, 2, "\t"]), st.booleans())
def test_re_encoding_with_other_whitespace_or_key_order_canonicalizes_the_same(
    value, indent, sort_keys
):
    try:
        reencoded = json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=True)
    except ValueError:  # lone surrogates cannot be re-encoded either way
        return
    try:
        expected = canonicalize(value)
    except CanonicalizationError:
        return
    assert canonicalize(json.loads(reencoded)) == expected


@given(json_values)
def test_canonical_output_is_json_that_a_double_parser_reads_back_to_the_same_bytes(value):
    try:
        out = canonicalize(value)
    except CanonicalizationError:
        return
    assert canonicalize(json.loads(out, parse_int=float)) == out


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_round_trips_through_its_canonical_text(value):
    text = format_number(value)
    assert float(text) == value or (value == 0 and float(text) == 0)
    assert " " not in text and (text == "0" or not text.lstrip("-").startswith("00"))
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        assert "." not in text and "e" not in text
