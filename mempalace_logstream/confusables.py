"""When two names look alike (issue 18 item 13): a name's skeleton, after Unicode TR39
("Security Mechanisms") in spirit, and the scripts a name mixes. Pure data and functions; the
rules and their error texts are `validation.py`'s. Imports nothing of the package.

The skeleton folds what a reader cannot tell apart in a terminal or a chat window: the
compatibility forms (NFKD: fullwidth, ligatures, mathematical letters), combining marks, the
Cyrillic, Greek and Armenian letters drawn like Latin ones, `I`/`1`/`|` against `l`, `0`
against `o`, `rn` against `m`, `vv` against `w`; then case. It is not TR39's whole table (that
needs the Unicode data file), only the confusables that fit in an agent's name; two names with
the same skeleton, or equal but for case, are look-alikes.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable

# One character -> what it is mistaken for (before case folding), as pairs of strings of the
# same length: the look-alikes, then the letters they pass for.
_LOOK_ALIKES = (
    ("авезіјкмнопрстухѕьһԁԛԝӏүɡ", "abe3ijkmhonpctyxsbhdqwlyg"),  # Cyrillic, lowercase
    ("АВЕЗІЈКМНОРСТХЅҮӀ", "ABE3lJKMHOPCTXSYl"),  # Cyrillic, capitals
    ("αβγεικνορτυχω", "abyeikvoptuxw"),  # Greek, lowercase
    ("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHlKMNOPTYX"),  # Greek, capitals
    ("օսցıɩɑʏ", "ougiiay"),  # Armenian, and Latin letters drawn like others
    ("I1|0O", "llloo"),  # ASCII shapes
)
_TABLE = str.maketrans(
    {a: b for look, like in _LOOK_ALIKES for a, b in zip(look, like, strict=True)}
)
_PAIRS = (("rn", "m"), ("vv", "w"))

# Scripts a name may mix (Unicode TR39's "highly restrictive" level): Latin with the CJK
# scripts; every other script stands alone.
_CJK = frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO"})
_SCRIPT_WORDS = {"CJK": "HAN", "KATAKANA-HIRAGANA": "KATAKANA"}


def skeleton(name: str) -> str:
    """What `name` looks like: names with the same skeleton are look-alikes."""
    decomposed = unicodedata.normalize("NFKD", name)
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    out = bare.translate(_TABLE)
    for pair, single in _PAIRS:
        out = out.replace(pair, single)
    return out.casefold()


@functools.lru_cache(maxsize=16)
def index(names: frozenset[str]) -> dict[str, str]:
    """skeleton -> name, and `casefold:` + the folded name -> name, for names known to be
    distinct people (one per entry; cached per set of names)."""
    out: dict[str, str] = {}
    for name in sorted(names):
        out.setdefault(skeleton(name), name)
        out.setdefault("casefold:" + name.casefold(), name)
    return out


def lookalike(name: str, names: frozenset[str]) -> str | None:
    """The name of `names` that `name` looks like without being it, or None."""
    if not names or name in names:
        return None
    found = index(names)
    return found.get(skeleton(name)) or found.get("casefold:" + name.casefold())


def first_odd(name: str, other: str) -> str | None:
    """The first character of `name` that sets it apart from `other`: its first non-ASCII
    character, else where the two first differ (None when nothing tells them apart)."""
    for ch in name:
        if not ch.isascii():
            return ch
    for a, b in zip(name, other, strict=False):
        if a != b:
            return a
    return None


def scripts(name: str) -> list[str]:
    """The scripts of the letters of `name`, sorted (digits and punctuation have none)."""
    found = set()
    for ch in name:
        if ch.isalpha():
            word = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
            found.add(_SCRIPT_WORDS.get(word, word))
    return sorted(found)


def is_mixed(found: Iterable[str]) -> bool:
    """Whether a name of these scripts mixes them in a way TR39 restricts."""
    kinds = set(found)
    return len(kinds) > 1 and not kinds <= _CJK
