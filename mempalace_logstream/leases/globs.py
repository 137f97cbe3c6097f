"""Lease paths (issue 22): gitignore-style globs relative to a project root, and whether two
of them can name a common path (symmetric overlap: `src/**` vs `src/auth.py`, `*.py` vs
`src/a.py`). Pure: the standard library only (the harness hook reads it on the lean path).

A glob is split on `/` into segments; `**` is any number of segments, `*` any run of
characters within one, `?` one character, `[...]` a class (`[!...]` or `[^...]` negated). A glob
without a `/` (other than a trailing one) matches at any depth, as in gitignore; a leading `/`
anchors it at the root. Whatever a glob names, everything under it is named too (a directory
means all its files). Overlap is decided on the automata, never by listing files.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar

MAX_GLOB_CHARS = 256  # a routing value's limit: a glob is one
STAR = "**"  # the segment token for "any number of segments"
WILD = "*?[\\"  # where a glob's literal prefix ends (an escape too: the prefix stays short)
T = TypeVar("T")


class CharClass(NamedTuple):  # not a dataclass: the PreToolUse hook imports no dataclasses
    """A `[...]` class: the (lo, hi) code point ranges it lists, negated or not."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool

    def has(self, code: int) -> bool:
        inside = any(lo <= code <= hi for lo, hi in self.ranges)
        return inside != self.negated


# A character token: a literal (str of length 1), "?" as None, a class, or "*" (any run).
CharToken = str | None | CharClass
ANY_RUN = "*"


class GlobError(ValueError):
    """A glob that cannot be read (an unclosed class, an empty segment list)."""


def normalize(glob: str) -> str:
    """The glob as it is stored: `./` and duplicate or trailing slashes dropped, a slashless
    glob made to match at any depth (`*.py` is `**/*.py`), a leading `/` dropped."""
    text = glob.strip()
    anchored = text.startswith("/")
    while text.startswith("./"):
        text = text[2:]
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts:
        raise GlobError("names no path (it is empty or only slashes)")
    if ".." in parts:
        raise GlobError("must stay inside the project root ('..' is not allowed)")
    if len(parts) == 1 and not anchored and parts[0] != STAR:
        parts = [STAR, parts[0]]
    return "/".join(parts)


def segments(glob: str) -> tuple[tuple[CharToken, ...] | str, ...]:
    """A normalized glob's tokens: `STAR` or one segment's character tokens, with the implicit
    trailing `**` (everything under what it names)."""
    return _segments(normalize(glob))


@functools.lru_cache(maxsize=4096)
def _segments(norm: str) -> tuple[tuple[CharToken, ...] | str, ...]:
    out: list[tuple[CharToken, ...] | str] = []
    for part in norm.split("/"):
        token = STAR if part == STAR else _chars(part)
        if not (token == STAR and out and out[-1] == STAR):
            out.append(token)
    if out[-1] != STAR:
        out.append(STAR)
    return tuple(out)


def literal(path: str) -> str:
    """A path as a glob naming exactly it (and what is under it): metacharacters escaped."""
    parts = [p for p in path.strip().split("/") if p not in ("", ".")]
    if not parts:
        raise GlobError("names no path (it is empty or only slashes)")
    if ".." in parts:
        raise GlobError("must stay inside the project root ('..' is not allowed)")
    escaped = ["".join(f"[{c}]" if c in "*?[\\" else c for c in p) for p in parts]
    return "/" + "/".join(escaped)


def _chars(part: str) -> tuple[CharToken, ...]:
    out: list[CharToken] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            if not out or out[-1] != ANY_RUN:
                out.append(ANY_RUN)
            i += 1
        elif c == "?":
            out.append(None)
            i += 1
        elif c == "[":
            token, i = _char_class(part, i)
            out.append(token)
        elif c == "\\" and i + 1 < len(part):
            out.append(part[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return tuple(out)


def _char_class(part: str, start: int) -> tuple[CharClass, int]:
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    i += negated
    ranges: list[tuple[int, int]] = []
    first = True
    while i < len(part) and (part[i] != "]" or first):
        first = False
        lo = part[i]
        if i + 2 < len(part) and part[i + 1] == "-" and part[i + 2] != "]":
            ranges.append((ord(lo), ord(part[i + 2])))
            i += 3
        else:
            ranges.append((ord(lo), ord(lo)))
            i += 1
    if i >= len(part):
        raise GlobError(f"has an unclosed character class ('[') in segment {part!r}")
    return CharClass(tuple(ranges), negated), i + 1


# ----------------------------------------------------------------------------- overlap


def overlaps(a: str, b: str) -> bool:
    """Whether some path is named by both globs (symmetric; everything under a named path is
    named too). GlobError for a glob that cannot be read."""
    return _overlap(segments(a), segments(b))


def matches(glob: str, path: str) -> bool:
    """Whether `glob` names `path` or a directory above it (not a path below `path`: that is
    `overlaps(glob, literal(path))`)."""
    return _overlap(segments(glob), segments(literal(path))[:-1])


def _overlap(p: tuple[object, ...], q: tuple[object, ...]) -> bool:
    """The product of the two segment automata: a pair of positions is reachable when some
    path prefix takes both there; both at their end (their trailing `**`) means a common path."""
    todo, seen = [(0, 0)], {(0, 0)}
    while todo:
        i, j = todo.pop()
        if i == len(p) and j == len(q):
            return True
        nxt: list[tuple[int, int]] = []
        if i < len(p) and p[i] == STAR:
            nxt.append((i + 1, j))
        if j < len(q) and q[j] == STAR:
            nxt.append((i, j + 1))
        if i < len(p) and j < len(q) and _segment_pair(p[i], q[j]):
            nxt.append((i if p[i] == STAR else i + 1, j if q[j] == STAR else j + 1))
        for state in nxt:
            if state not in seen:
                seen.add(state)
                todo.append(state)
    return False


def _segment_pair(a: object, b: object) -> bool:
    if a == STAR and b == STAR:
        return False  # both may consume the same segments by skipping one (an epsilon move)
    if a == STAR or b == STAR:
        return True  # every segment glob names some non-empty segment
    assert isinstance(a, tuple) and isinstance(b, tuple)
    return _segment_overlap(a, b)


@functools.lru_cache(maxsize=8192)
def _segment_overlap(a: tuple[CharToken, ...], b: tuple[CharToken, ...]) -> bool:
    """Whether two segment globs share a non-empty string (the product of their automata)."""
    if all(t == ANY_RUN for t in a) and all(t == ANY_RUN for t in b):
        return True  # both match any segment
    todo, seen = [(0, 0)], {(0, 0)}
    while todo:
        i, j = todo.pop()
        if i == len(a) and j == len(b):
            return True
        nxt: list[tuple[int, int]] = []
        if i < len(a) and a[i] == ANY_RUN:
            nxt.append((i + 1, j))
        if j < len(b) and b[j] == ANY_RUN:
            nxt.append((i, j + 1))
        if i < len(a) and j < len(b) and (a[i] != ANY_RUN or b[j] != ANY_RUN):
            if _chars_meet(a[i], b[j]):
                nxt.append((i if a[i] == ANY_RUN else i + 1, j if b[j] == ANY_RUN else j + 1))
        for state in nxt:
            if state not in seen:
                seen.add(state)
                todo.append(state)
    return False


def _chars_meet(a: CharToken, b: CharToken) -> bool:
    """Whether one character (never `/`) is allowed by both tokens."""
    if a == ANY_RUN or a is None:
        return _allows_any(b)
    if b == ANY_RUN or b is None:
        return _allows_any(a)
    return any(_allows(a, c) and _allows(b, c) for c in _candidates(a, b))


def _allows_any(t: CharToken) -> bool:
    return not isinstance(t, CharClass) or any(_allows(t, c) for c in _candidates(t, t))


def _allows(t: CharToken, code: int) -> bool:
    if code == ord("/"):
        return False
    if isinstance(t, CharClass):
        return t.has(code)
    return t is None or t == ANY_RUN or (isinstance(t, str) and ord(t) == code)


def _candidates(a: CharToken, b: CharToken) -> set[int]:
    """Code points among which a character both allow exists, if any does: a set both allow
    is a union of intervals bounded at the tokens' range ends, so one of its ends is an end,
    one past an end, or (unbounded) a code point named by neither."""
    ends: set[int] = {ord("a"), 0x10FFFF}
    for t in (a, b):
        if isinstance(t, CharClass):
            for lo, hi in t.ranges:
                ends.update((lo - 1, lo, lo + 1, hi - 1, hi, hi + 1))
        elif isinstance(t, str) and t != ANY_RUN:
            ends.add(ord(t))
    return {c for c in ends if 0 < c <= 0x10FFFF}


# ------------------------------------------------------------------------ literal prefixes


@functools.lru_cache(maxsize=8192)
def literal_prefix(glob: str) -> str:
    """The text every path the glob names begins with: its normalized form up to the first
    wildcard (`*`, `?`, `[`, an escape), without the `/` before a `**` (`a/**` names `a`)."""
    norm = normalize(glob)
    cut = min((i for i, c in enumerate(norm) if c in WILD), default=len(norm))
    head = norm[:cut]
    if norm[cut : cut + 2] == STAR and (cut + 2 == len(norm) or norm[cut + 2] == "/"):
        head = head.removesuffix("/")  # `**` may name no segment at all
    return head


def may_overlap(a: str, b: str) -> bool:
    """False when the two globs cannot name a common path (a path that both name begins with
    both literal prefixes, so one of them begins the other); True says nothing."""
    pa, pb = literal_prefix(a), literal_prefix(b)
    return pa.startswith(pb) or pb.startswith(pa)


class PrefixIndex(Generic[T]):
    """Entries (each some globs and a value) indexed by their globs' literal prefixes, so that
    only candidates that can overlap are compared: `candidates(globs)` are the entries with a
    glob whose prefix begins a given glob's prefix or begins with it (no other entry can
    overlap them: `may_overlap`), `naming(path)` those with a glob whose prefix begins the
    path (no other can name it). In the order the entries were given, each once; the caller
    compares the candidates exactly (`overlaps`, `matches`)."""

    def __init__(self, entries: Iterable[tuple[Iterable[str], T]]) -> None:
        self._values: list[T] = []
        self._by_prefix: dict[str, list[int]] = {}
        for i, (entry_globs, value) in enumerate(entries):
            self._values.append(value)
            for glob in entry_globs:
                self._by_prefix.setdefault(literal_prefix(glob), []).append(i)
        self._sorted = sorted(self._by_prefix)

    def _beginning(self, text: str) -> Iterable[int]:
        """The entries with a prefix that begins `text` (or is it)."""
        for k in range(len(text) + 1):
            yield from self._by_prefix.get(text[:k], ())

    def _longer(self, prefix: str) -> Iterable[int]:
        """The entries with a prefix that begins with `prefix` and is longer."""
        at = bisect.bisect_right(self._sorted, prefix)
        while at < len(self._sorted) and self._sorted[at].startswith(prefix):
            yield from self._by_prefix[self._sorted[at]]
            at += 1

    def candidates(self, globs: Iterable[str]) -> list[T]:
        found: set[int] = set()
        for glob in globs:
            prefix = literal_prefix(glob)
            found.update(self._beginning(prefix))
            found.update(self._longer(prefix))
        return [self._values[i] for i in sorted(found)]

    def naming(self, path: str) -> list[T]:
        clean = "/".join(p for p in path.strip().split("/") if p not in ("", "."))
        return [self._values[i] for i in sorted(set(self._beginning(clean)))]
