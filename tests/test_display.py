"""The escapers of `display` (issue 18, items 6 and 7): what a terminal or a model is shown of
text a sender controls. Properties: nothing hidden survives, and nothing is lost (every form
reverses to the exact value, so distinct inputs never print the same)."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import display

HIDDEN = re.compile(f"[{display.HIDDEN}]")
# Text rich in what matters here: backslashes, escape look-alikes, controls, bidi, quotes.
TRICKY = st.sampled_from(list("\\xuU0123456789abcdefABF\x1b\x07\x9b\x85\u202e\u2066\t\n\"<>&' "))
TEXT = st.text(alphabet=st.one_of(TRICKY, st.characters()), max_size=40)


@settings(max_examples=1_000)  # cheap, and the heart of item 7: more than the profile's 30
@given(TEXT)
def test_terminal_output_holds_no_hidden_character_and_reverses_exactly(text: str) -> None:
    shown = display.terminal(text)
    assert not HIDDEN.search(shown)
    assert display.unescape(shown) == text


@settings(max_examples=500)
@given(TEXT)
def test_one_line_output_holds_no_hidden_character_tab_or_newline_and_reverses(text: str) -> None:
    shown = display.one_line(text)
    assert not HIDDEN.search(shown) and "\n" not in shown and "\t" not in shown
    assert display.unescape(shown) == text


@given(TEXT, TEXT)
def test_distinct_texts_never_print_the_same(a: str, b: str) -> None:
    if a != b:
        assert display.terminal(a) != display.terminal(b)


@given(st.text(alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cc",))))
def test_text_without_controls_or_backslashes_prints_unchanged(text: str) -> None:
    if not HIDDEN.search(text):
        assert display.terminal(text) == text


def test_terminal_escapes_are_visible_and_tabs_and_newlines_stay() -> None:
    osc52 = "\x1b]52;c;ZXZpbA==\x07"
    assert display.terminal(osc52) == "\\x1b]52;c;ZXZpbA==\\x07"
    assert display.terminal("\x9b31m\u202egnp.exe\u2066") == "\\x9b31m\\u202egnp.exe\\u2066"
    assert display.terminal("a\tb\nc\x7f\r") == "a\tb\nc\\x7f\\x0d"
    # a sender's literal `\x1b` is told apart from a real ESC; other backslashes stay single
    assert display.terminal("\\x1b") == "\\\\x1b"
    assert display.terminal("C:\\Users\\me\\n.txt") == "C:\\Users\\me\\n.txt"


@settings(max_examples=1_000)
@given(TEXT)
def test_quoted_is_a_json_string_that_cannot_open_or_close_a_tag(value: str) -> None:
    q = display.quoted(value)
    assert json.loads(q) == value
    inner = re.sub(r"\\.", "", q[1:-1])
    assert '"' not in inner and not set("<>&") & set(q) and not HIDDEN.search(q)
    assert "\u2028" not in q and "\u2029" not in q


@given(TEXT)
def test_attribute_values_hold_no_quote_or_bracket_and_decode_exactly(value: str) -> None:
    a = display.attribute(value)
    assert json.loads('"' + a + '"') == value
    assert not set("<>&\"'") & set(a) and not HIDDEN.search(a)


def test_plain_values_are_unchanged_as_attributes_and_only_wrapped_when_quoted() -> None:
    for plain in ("task_x_1", "project/demo", "evt_20260101T000000_abc", "claude-laptop"):
        assert display.attribute(plain) == plain
        assert display.quoted(plain) == f'"{plain}"'


@given(st.dictionaries(TEXT, st.one_of(TEXT, st.integers(), st.lists(TEXT, max_size=3))))
def test_json_text_is_the_same_value_without_hidden_characters(data: dict) -> None:
    for markup in (False, True):
        text = display.json_text(data, markup=markup)
        assert json.loads(text) == data and not HIDDEN.search(text)
        assert not markup or not set("<>&") & set(text)
    assert json.loads(display.json_text(data, indent=2)) == data
