"""How text a sender controls is shown to a terminal or to a model (S-8.11): one set of pure
functions that every surface uses (the CLI's human output, channel mode, the inbox hook, the
MCP resources). Values are never dropped or changed, only written so that they cannot act.
Must not import anything from the package, or any library beyond the standard one.
"""

from __future__ import annotations

import json
import re
from typing import Any

# What a terminal would act on or hide rather than show: C0 controls but tab and newline,
# DEL, C1 controls (U+009B is a one-byte CSI), and the bidi marks, embeddings, overrides and
# isolates that reorder what is seen (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069).
HIDDEN = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_HIDDEN_RE = f"[{HIDDEN}]"
# A run of backslashes before a hidden character, or before text that reads like one of the
# escapes written for it (`x` + 2 or `u` + 4 lowercase hex digits): the run is doubled, so
# that a literal `\x1b` typed by a sender never looks like an escaped ESC.
_TERMINAL_RE = rf"(\\*)([{HIDDEN}])|(\\+)(?=x[0-9a-f]{{2}}|u[0-9a-f]{{4}})"
# The same for text that must stay on one line: tab and newline escaped too.
_LINE_RE = rf"(\\*)([\t\n{HIDDEN}])|(\\+)(?=x[0-9a-f]{{2}}|u[0-9a-f]{{4}})"
_UNESCAPE_RE = r"(\\+)(x[0-9a-f]{2}|u[0-9a-f]{4})"
# Characters that could end a tag or an attribute in text a model reads as markup, plus the
# line and paragraph separators: written as JSON \u escapes (still the same JSON value).
_MARKUP_RE = f"[<>&\u2028\u2029{HIDDEN}]"
_ATTRIBUTE_RE = f"[<>&\"'\u2028\u2029{HIDDEN}]"


def _re(pattern: str) -> re.Pattern[str]:
    """One of the patterns above, compiled on first use (`re` keeps it): a process compiles
    only those it shows text with (~1 ms for all six, paid by every CLI call: issue 25)."""
    return re.compile(pattern)


def _code(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def _terminal_sub(m: re.Match[str]) -> str:
    if m.group(2) is not None:
        return m.group(1) * 2 + _code(m.group(2))
    return m.group(3) * 2


def terminal(text: str) -> str:
    """`text` safe to print on a terminal: every hidden character (see HIDDEN) becomes a
    visible escape (`\\x1b`, `\\x9b`, `\\u202e`); tab, newline and everything else stay as
    they are. Reversible with `unescape`, so distinct texts never print the same."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text  # the common case, without compiling a pattern: printable ASCII hides none
    if not _re(_HIDDEN_RE).search(text) and "\\" not in text:
        return text  # nothing to do
    return _re(_TERMINAL_RE).sub(_terminal_sub, text)


def one_line(text: str) -> str:
    """`terminal(text)` with tab and newline escaped as well (`\\x09`, `\\x0a`): for a value
    shown inside one line. Reversible with `unescape` too."""
    if not _re(_LINE_RE).search(text):
        return text
    return _re(_LINE_RE).sub(_terminal_sub, text)


def _unescape_sub(m: re.Match[str]) -> str:
    run, tail = m.group(1), m.group(2)
    if len(run) % 2:
        return "\\" * (len(run) // 2) + chr(int(tail[1:], 16))
    return "\\" * (len(run) // 2) + tail


def unescape(text: str) -> str:
    """The text `terminal` was given: `unescape(terminal(t)) == t` for every string."""
    return _re(_UNESCAPE_RE).sub(_unescape_sub, text)


def _json_code(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def quoted(value: Any) -> str:
    """`value` as a JSON string literal for text a model reads: `json.loads` gives back the
    exact value, and it holds no `"` but its own quotes, no `<`, `>` or `&` (so it can never
    open or close a tag) and no hidden character."""
    return _re(_MARKUP_RE).sub(_json_code, json.dumps(str(value), ensure_ascii=False))


def attribute(value: Any) -> str:
    """`value` as the inside of a JSON string with `"` and `'` escaped too: safe as an
    attribute value of a tag; `json.loads('"' + attribute(v) + '"') == v`."""
    text = json.dumps(str(value), ensure_ascii=False)[1:-1].replace('\\"', '"')
    return _re(_ATTRIBUTE_RE).sub(_json_code, text)


def json_text(data: Any, *, indent: int | None = None, markup: bool = False) -> str:
    """`data` as JSON (compact unless `indent`) with every hidden character (and, with
    `markup`, `<`, `>`, `&` and the line separators) as a \\u escape: the same JSON value, safe
    on a terminal or for a model. (`--json` output stays plain `json.dumps`: exact bytes.)"""
    separators = (",", ":") if indent is None else None
    text = json.dumps(data, ensure_ascii=False, indent=indent, separators=separators)
    return _re(_MARKUP_RE if markup else _HIDDEN_RE).sub(_json_code, text)
