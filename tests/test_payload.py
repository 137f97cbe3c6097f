"""payload.read_metadata: stored metadata text read back, never an error, with the reason of
anything unreadable; its shared decoder answers as `json.loads` with the same options did."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import payload


def loads_oracle(text: Any) -> tuple[dict[str, Any], str | None]:
    """read_metadata as it was written, one `json.loads` (and one decoder) per call."""
    if text == "{}":
        return {}, None
    try:
        value = json.loads(
            text, parse_float=payload._finite_float, parse_constant=payload._no_constant
        )
    except (ValueError, RecursionError) as exc:
        return {}, f"stored metadata is not readable JSON ({exc})"
    if not isinstance(value, dict):
        return {}, "stored metadata is not a JSON object"
    if payload.json_depth(value) > payload.MAX_METADATA_DEPTH:
        return {}, f"stored metadata nests deeper than {payload.MAX_METADATA_DEPTH} levels"
    return value, None


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{"progress":3,"step":1.5,"note":"café ✓"}',
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":1e999}',
        "\ufeff{}",  # a BOM: json.loads's own refusal, word for word
        '\ufeff{"a":1}',
        "[1,2]",
        '"text"',
        "not json",
        '{"a":1} trailing',
        " {} ",
        "{" * 70 + "}" * 70,
        '{"a":' * 65 + "1" + "}" * 65,
        '{"a":' * 64 + "1" + "}" * 64,
    ],
)
def test_read_metadata_answers_as_json_loads_did(text: Any) -> None:
    assert payload.read_metadata(text) == loads_oracle(text)


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=20,
    )
)
def test_read_metadata_of_any_json_answers_as_json_loads_did(value: Any) -> None:
    text = json.dumps({"v": value}, ensure_ascii=False)  # NaN and Infinity included
    assert payload.read_metadata(text) == loads_oracle(text)
