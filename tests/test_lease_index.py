"""The literal-prefix index of lease globs (issue 22, RFC 0010): an acquire compares its globs
only with the held leases whose literal prefix allows an overlap, a check only with those
whose prefix begins the path. The properties: every path a glob names begins with its literal
prefix (brute force over every small tree), and the indexed answers equal comparing every
pair (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream.leases import globs, rules
from tests.test_lease_glob import TOKENS, UNIVERSE, named

# Globs with literal segments too (the index's case: `src/**`, `src/a.py`), over the letters
# of test_lease_glob's universe, so that brute force can say what they name.
LITERALS = ["a", "b", "ab", "ba", "aa"]
segment = st.one_of(
    st.just("**"),
    st.sampled_from(LITERALS),
    st.lists(st.sampled_from([*TOKENS, "a", "b"]), min_size=1, max_size=2).map("".join),
)
glob = st.tuples(st.booleans(), st.lists(segment, min_size=1, max_size=3).map("/".join)).map(
    lambda t: ("/" if t[0] else "") + t[1]
)
entries = st.lists(st.lists(glob, min_size=1, max_size=3), min_size=0, max_size=12)


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("src/**", "src"),  # `**` may name no segment: `src` itself
        ("src/a.py", "src/a.py"),
        ("src/*.py", "src/"),
        ("src/**/test_*.py", "src"),
        ("*.py", ""),  # slashless: at any depth
        ("/src", "src"),
        ("src/[ab].py", "src/"),
        ("src/\\[x", "src/"),  # an escape ends it too (shorter is always safe)
    ],
)
def test_the_literal_prefix_is_the_text_before_the_first_wildcard(
    pattern: str, prefix: str
) -> None:
    assert globs.literal_prefix(pattern) == prefix


@settings(max_examples=300, deadline=None)
@given(glob)
def test_every_path_a_glob_names_begins_with_its_literal_prefix(pattern: str) -> None:
    prefix = globs.literal_prefix(pattern)
    assert all(path.startswith(prefix) for path in named(pattern))


@settings(max_examples=300, deadline=None)
@given(glob, glob)
def test_globs_whose_prefixes_exclude_each_other_never_overlap(a: str, b: str) -> None:
    if not globs.may_overlap(a, b):
        assert not named(a) & named(b)
        assert not globs.overlaps(a, b)


@settings(max_examples=300, deadline=None)
@given(entries, st.lists(glob, min_size=1, max_size=3))
def test_the_indexed_overlap_equals_comparing_every_pair(
    held: list[list[str]], mine: list[str]
) -> None:
    index = globs.PrefixIndex((tuple(paths), i) for i, paths in enumerate(held))

    def hits(i: int) -> bool:
        return any(globs.overlaps(a, b) for a in mine for b in held[i])

    pairwise = [i for i in range(len(held)) if hits(i)]
    assert [i for i in index.candidates(mine) if hits(i)] == pairwise


@settings(max_examples=300, deadline=None)
@given(entries, st.sampled_from(UNIVERSE))
def test_the_indexed_check_equals_matching_every_glob(held: list[list[str]], path: str) -> None:
    index = globs.PrefixIndex((tuple(paths), i) for i, paths in enumerate(held))

    def hits(i: int) -> bool:
        return any(globs.matches(g, path) for g in held[i])

    assert [i for i in index.naming(path) if hits(i)] == [i for i in range(len(held)) if hits(i)]
    assert [i for i in index.naming("./" + path) if hits(i)] == [
        i for i in range(len(held)) if hits(i)
    ]


def _lease(i: int, agent: str, paths: tuple[str, ...]) -> rules.Lease:
    return rules.Lease(
        lease_id=f"evt_{i:03d}",
        project="project/p",
        agent=agent,
        paths=paths,
        exclusive=True,
        reason="",
        task_id=None,
        fence=i + 1,
        acquired_hlc=f"{1_000_000 + i:013d}-000000-r",
        ttl_ms=60_000,
        expires_ms=2_000_000,
    )


@settings(max_examples=200, deadline=None)
@given(entries, st.lists(glob, min_size=1, max_size=3))
def test_blockers_are_the_pairwise_ones_in_the_order_held(
    held: list[list[str]], mine: list[str]
) -> None:
    leases = [
        _lease(i, agent, tuple(globs.normalize(g) for g in paths))
        for i, (agent, paths) in enumerate(zip(itertools.cycle("ab"), held, strict=False))
    ]
    move = rules.Move(
        kind="acquire",
        event_id="evt_new",
        agent="c",
        project="project/p",
        stamp=f"{1_500_000:013d}-000000-r",
        wall_ms=1_500_000,
        target="evt_new",
        paths=tuple(globs.normalize(g) for g in mine),
        ttl_ms=60_000,
    )
    pairwise = [
        (lease, pairs)
        for lease in leases
        if (pairs := [(a, b) for a in move.paths for b in lease.paths if globs.overlaps(a, b)])
    ]
    assert rules.blockers(leases, move, lambda _task: None) == pairwise
