"""Parameters inlined as literals into the text the PostgreSQL writer sends (issue 25): its
queued writes, its reads' `EXECUTE`s and its optimistic check travel as one simple-protocol
message, which carries no bound parameters.

psycopg's `ClientCursor.mogrify` costs ~50 µs of CPU per statement (its dumpers, per
parameter): about a third of an append's client CPU. A statement's text is split once at its
placeholders (`Inline.text`), and the values the writer sends (str, int, None) are quoted
here; any other value goes through psycopg's dumper, one value at a time. Quoting a string
by doubling its quotes is PostgreSQL's rule when `standard_conforming_strings` is on (the
default since 9.1); a server with it off gets psycopg's quoting for every value.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s|%s")
MAX_TEMPLATES = 512  # statement shapes kept split (more are split on every use)


class Inline:
    """The literal text of statements with their parameters, on one connection."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.mogrify = psycopg.ClientCursor(db)
        conforming = db.info.parameter_status("standard_conforming_strings")
        self.plain = conforming == "on"
        self.templates: dict[str, tuple[str, tuple[Any, ...]]] = {}

    def text(self, sql: str, params: Any) -> str:
        """`sql` (psycopg's `%s` or `%(name)s` placeholders) with `params` as literals."""
        if not self.plain:
            return self.mogrify.mogrify(sql, params)
        held = self.templates.get(sql)
        if held is None:
            parts, keys = _split(sql)
            braced = [p.replace("{", "{{").replace("}", "}}") for p in parts]
            held = ("{}".join(braced), keys)
            if len(self.templates) < MAX_TEMPLATES:
                self.templates[sql] = held
        form, keys = held
        value = self.value
        return form.format(*[value(params[k]) for k in keys])

    def value(self, value: Any) -> str:
        """One parameter as a literal."""
        kind = type(value)
        if kind is str:
            text: str = value
            if "\x00" not in text and self.plain:  # NUL: psycopg's error
                if "\\" in text:  # an escape string: right whatever the setting says now
                    return f" E'{text.replace(_BACKSLASH, _BACKSLASHES).replace(_QUOTE, _QUOTES)}'"
                return f"'{text.replace(_QUOTE, _QUOTES)}'"
        elif kind is int:
            # A space before a minus: `x-%s` must not become the comment `x--1`.
            return str(value) if value >= 0 else f" {value}"
        elif value is None:
            return "NULL"
        return self.mogrify.mogrify("%s", (value,))


_QUOTE, _QUOTES, _BACKSLASH, _BACKSLASHES = "'", "''", "\\", "\\\\"


def _split(sql: str) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The text between `sql`'s placeholders (`%%` as `%`), and each placeholder's key: its
    name, or its position among the `%s` ones."""
    parts, keys, chunk, at, position = [], [], [], 0, 0
    for match in _PLACEHOLDER.finditer(sql):
        chunk.append(sql[at : match.start()])
        at = match.end()
        if match.group(0) == "%%":
            chunk.append("%")
            continue
        parts.append("".join(chunk))
        chunk = []
        if match.group(1) is not None:
            keys.append(match.group(1))
        else:
            keys.append(position)
            position += 1
    chunk.append(sql[at:])
    parts.append("".join(chunk))
    return tuple(parts), tuple(keys)
