"""Lease globs (issue 22, RFC 0010): gitignore-style globs relative to a project root and their
symmetric overlap. The property: the overlap computed on the automata equals brute force, a
search for a common path over every file tree small enough to hold a witness, and matching a
generated file tree agrees with an independent regex translation."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import errors
from mempalace_logstream.leases import globs
from mempalace_logstream.leases import inputs as check


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("src/**", "src/auth.py", True),
        ("*.py", "src/a.py", True),
        ("src", "src/x/y.py", True),  # a directory means everything under it
        ("src/", "lib/src/a", True),  # slashless: at any depth, as gitignore
        ("/src", "lib/src/a", False),  # a leading slash anchors at the root
        ("docs/**", "src/a.py", False),
        ("src/*.py", "src/a/b.py", False),  # `*` stays within one segment
        ("src/**/test_*.py", "src/a/b/test_x.py", True),
        ("src/[ab].py", "src/[!a].py", True),
        ("src/[a].py", "src/[!a].py", False),
        ("src/?.py", "src/ab.py", False),
        ("**", "anything/at/all", True),
    ],
)
def test_overlap_examples_are_symmetric(a: str, b: str, expected: bool) -> None:
    assert globs.overlaps(a, b) is expected
    assert globs.overlaps(b, a) is expected


def test_a_path_is_matched_literally_with_its_metacharacters_escaped() -> None:
    assert globs.matches("src/[ab].py", "src/a.py")
    assert not globs.matches("src/[ab].py", "src/[ab].py")
    assert globs.matches("src/\\[ab].py", "src/[ab].py")
    assert globs.matches("*.py", "./deep/er/x.py")


@pytest.mark.parametrize(
    ("value", "message", "limit"),
    [
        ([], "paths must be a non-empty list of globs", None),
        (["a"] * 33, "paths has 33 globs; the limit is 32", 32),
        (["x" * 257], "paths has a glob of 257 characters; the limit is 256", 256),
        (
            ["src/[ab"],
            "paths glob 'src/[ab' has an unclosed character class ('[') in segment '[ab'",
            None,
        ),
        (
            ["../etc"],
            "paths glob '../etc' must stay inside the project root ('..' is not allowed)",
            None,
        ),
        (["//"], "paths glob '//' names no path (it is empty or only slashes)", None),
        ([3], "paths must hold strings (globs), not int", None),
    ],
)
def test_bad_globs_are_refused_naming_the_field_and_the_limit(
    value: object, message: str, limit: int | None
) -> None:
    with pytest.raises(errors.ValidationError) as info:
        check.paths(value)
    assert (str(info.value), info.value.field, info.value.limit) == (message, "paths", limit)


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        (0, "ttl_s is 0; it must be between 1 and 604800 seconds"),
        (604801, "ttl_s is 604801; it must be between 1 and 604800 seconds"),
        ("soon", "ttl_s must be an integer"),
    ],
)
def test_ttl_bounds_are_named(ttl: object, message: str) -> None:
    with pytest.raises(errors.ValidationError) as info:
        check.ttl_ms(ttl)
    assert str(info.value) == message and info.value.field == "ttl_s"


# ----------------------------------------------------------------------------- the property
# Globs of at most two segments over the letters a and b (c stands for "any other letter");
# every common path of two such globs has a witness of at most three segments of at most two
# letters, so the universe below holds one whenever one exists.
TOKENS = ["a", "b", "*", "?", "[ab]", "[!a]", "[!b]", "[a-b]"]
LETTERS = "abc"
SEGMENTS = ["".join(p) for n in (1, 2) for p in itertools.product(LETTERS, repeat=n)]
UNIVERSE = ["/".join(p) for n in (1, 2, 3) for p in itertools.product(SEGMENTS, repeat=n)]

segment = st.one_of(
    st.just("**"),
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=2).map("".join),
)
glob = st.tuples(st.booleans(), st.lists(segment, min_size=1, max_size=2).map("/".join)).map(
    lambda t: ("/" if t[0] else "") + t[1]
)


def reference(pattern: str) -> re.Pattern[str]:
    """An independent gitignore-style translation: it matches a prefix of `path + '/'` that
    ends at a segment boundary when the glob names the path or a directory above it."""
    anchored = pattern.startswith("/")
    parts = [p for p in pattern.split("/") if p]
    if len(parts) == 1 and not anchored and parts[0] != "**":
        parts = ["**", parts[0]]
    out = ""
    for part in parts:
        if part == "**":
            out += "(?:[^/]+/)*"
            continue
        seg = ""
        for token in re.findall(r"\[!?[^\]]+\]|.", part):
            if token == "*":
                seg += "[^/]*"
            elif token == "?":
                seg += "[^/]"
            elif token.startswith("[!"):
                seg += "[^/" + token[2:]
            elif token.startswith("["):
                seg += token
            else:
                seg += re.escape(token)
        out += seg + "/"
    return re.compile(out)


def named(pattern: str) -> set[str]:
    rx = reference(pattern)
    return {path for path in UNIVERSE if rx.match(path + "/")}


@settings(max_examples=500)  # pure and quick: many pairs
@given(glob, glob)
def test_computed_overlap_equals_brute_force_over_every_small_tree(a: str, b: str) -> None:
    expected = bool(named(a) & named(b))
    assert globs.overlaps(a, b) is expected
    assert globs.overlaps(b, a) is expected


@given(glob, st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=40))
def test_matching_a_generated_tree_equals_the_reference(a: str, tree: list[str]) -> None:
    rx = reference(a)
    for path in tree:
        assert globs.matches(a, path) is bool(rx.match(path + "/")), path
