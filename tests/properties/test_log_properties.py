"""Properties of the log on both backends: order, prefix stability, idempotence, exact bytes, HLC.

Each example is self-contained: it starts from the current tip of a store shared by the
examples of one test (hypothesis reuses the function-scoped `store` fixture), so nothing
assumes an empty log.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore, errors, hlc

# Database-backed properties run on both backends and commit durably on every append: a quarter
# of the profile's examples (dev 8, ci 15) keeps the suite fast; pure properties get them all.
SHARED = settings(
    max_examples=max(8, settings.default.max_examples // 4),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_UNIQUE = itertools.count()

# --------------------------------------------------------------------------- strategies

routing_text = (
    st.text(
        # Routing fields refuse invisible and direction-changing code points (issue 9, item 14).
        alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zl", "Zp")),
        min_size=1,
        max_size=24,
    )
    .map(str.strip)
    .filter(bool)
)
event_types = st.from_regex(r"\A[a-z0-9][a-z0-9_.-]{0,20}\Z")
body_text = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    st.lists(st.sampled_from(["\r\n", "\n", "\r", "a", "é", "✓", "\t", "😀", " ", "\x7f"])).map(
        "".join
    ),
)
json_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    json_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=12,
)
metadata_dicts = st.dictionaries(json_text, json_values, max_size=6)


@st.composite
def drafts(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": draw(event_types),
        "stream": draw(routing_text),
        "room": draw(routing_text),
        "from_agent": draw(routing_text),
        "body": draw(body_text),
    }
    for name in ("to_agent", "topic", "correlation_id"):
        value = draw(st.none() | routing_text | st.just("*"))
        if value is not None:
            out[name] = value
    status = draw(st.none() | st.sampled_from(["open", "claimed", "ready", "superseded"]))
    if status:
        out["status"] = status
    if draw(st.booleans()):
        out["metadata"] = draw(metadata_dicts)
    return out


def _read_after(store: LogStore, cursor: str | None) -> list[Any]:
    """Every event strictly after `cursor`, oldest first, following `cursor`/`has_more`."""
    out: list[Any] = []
    since = cursor
    while True:
        page = store.event_list(since_event_id=since, order="asc", limit=7)
        out.extend(page.events)
        if not page.has_more:
            return out
        since = page.cursor


def _tip(store: LogStore) -> str | None:
    return store.tip()[1]


def _same_fields(event: Any, draft: dict[str, Any]) -> None:
    for name in ("type", "stream", "room", "from_agent", "body", "to_agent", "topic", "status"):
        assert getattr(event, name) == draft.get(name, "" if name == "body" else None)
    expected = draft.get("metadata") or {}
    # Same keys in the same order, recursively: compare the canonical-free serializations.
    assert json.dumps(event.metadata) == json.dumps(expected)


# --------------------------------------------------------------------------- ordering


@SHARED
@given(batch=st.lists(drafts(), min_size=1, max_size=6))
def test_reads_return_appends_in_append_order_with_strictly_increasing_seq(store, batch):
    start = _tip(store)
    appended = [store.event_append(**d) for d in batch]
    read = _read_after(store, start)
    assert [e.id for e in read] == [e.id for e in appended]
    assert [e.to_dict() for e in read] == [e.to_dict() for e in appended]
    seqs = [e.seq for e in read]
    assert all(a < b for a, b in itertools.pairwise(seqs))
    for event, draft in zip(read, batch, strict=True):
        _same_fields(event, draft)


@SHARED
@given(
    first=st.lists(drafts(), min_size=1, max_size=4),
    later=st.lists(drafts(), min_size=1, max_size=4),
)
def test_later_appends_never_change_an_earlier_read(store, first, later):
    start = _tip(store)
    for d in first:
        store.event_append(**d)
    before = [e.to_dict() for e in _read_after(store, start)]
    newest_before = store.event_list(since_event_id=start, order="asc", limit=500).cursor
    for d in later:
        store.event_append(**d)
    after = [e.to_dict() for e in _read_after(store, start)]
    assert after[: len(before)] == before
    assert len(after) == len(before) + len(later)
    # The cursor of the first read still resumes exactly at the first new event.
    resumed = _read_after(store, newest_before)
    assert [e.to_dict() for e in resumed] == after[len(before) :]
    # A reader that has seen seq N never later sees a new event below N (S-2.4).
    assert min(e["seq"] for e in after[len(before) :]) > max(e["seq"] for e in before)


@st.composite
def routed_drafts(draw: st.DrawFn) -> dict[str, Any]:
    """Drafts from small vocabularies, so that random filters select something."""
    out: dict[str, Any] = {
        "type": draw(st.sampled_from(["task.request", "task.reply", "chat"])),
        "stream": draw(st.sampled_from(["s1", "s2"])),
        "room": draw(st.sampled_from(["r1", "r2"])),
        "from_agent": draw(st.sampled_from(["a", "b", "c"])),
    }
    to = draw(st.sampled_from([None, "a", "b", "c", "*"]))
    status = draw(st.sampled_from([None, "open", "ready"]))
    topic = draw(st.sampled_from([None, "t1"]))
    for name, value in (("to_agent", to), ("status", status), ("topic", topic)):
        if value is not None:
            out[name] = value
    return out


def _values(options: list[str]) -> st.SearchStrategy[Any]:
    return st.none() | st.sampled_from(options) | st.lists(st.sampled_from(options), max_size=3)


read_filters = st.fixed_dictionaries(
    {},
    optional={
        "type": _values(["task.request", "task.reply", "chat"]),
        "stream": _values(["s1", "s2"]),
        "room": _values(["r1", "r2"]),
        "to_agent": _values(["a", "b", "c", "*"]),
        "writer": _values(["a", "b", "c"]),
        "exclude_writer": _values(["a", "b"]),
        "status": _values(["open", "ready"]),
        "topic": _values(["t1"]),
    },
)


@SHARED
@given(
    batch=st.lists(routed_drafts(), min_size=1, max_size=12),
    filters=read_filters,
    limit=st.integers(min_value=1, max_value=5),
)
def test_filtered_pages_equal_the_filter_applied_to_the_whole_log(
    store, clock, batch, filters, limit
):
    from mempalace_logstream.store import Filters

    # The examples share one store on a stopped clock: each starts past the loop guards' pair
    # window, so the agents' messages of earlier examples never exhaust a pair budget here.
    clock.advance(store.task_settings.pair_window_ms + 1)
    start = store.event_append(type="marker", stream="marker", room="r", from_agent="m").id
    for d in batch:
        store.event_append(**d)
    everything = _read_after(store, start)
    rule = Filters.parse(**filters)
    expected = [e.id for e in everything if rule.matches(e)]
    # Ascending pages that follow `cursor` visit every match exactly once, in order.
    got, cursor, pages = [], start, 0
    while True:
        page = store.event_list(since_event_id=cursor, order="asc", limit=limit, **filters)
        got += [e.id for e in page.events]
        cursor, pages = page.cursor, pages + 1
        assert pages <= len(batch) + 1
        if not page.has_more:
            break
    assert got == expected
    # The last cursor is the newest event examined, filtered out or not: no backlog rescans.
    assert cursor == everything[-1].id
    # Descending: the newest `limit` matches, and has_more says whether older ones remain.
    desc = store.event_list(since_event_id=start, order="desc", limit=limit, **filters)
    assert [e.id for e in desc.events] == expected[::-1][:limit]
    assert desc.has_more == (len(expected) > limit)


# --------------------------------------------------------------------------- idempotence


@SHARED
@given(batch=st.lists(drafts(), min_size=1, max_size=5), data=st.data())
def test_retried_appends_return_the_original_event_and_write_nothing(store, batch, data):
    writer = f"idem-writer-{next(_UNIQUE)}"
    keyed = [{**d, "from_agent": writer, "idempotency_key": f"k{i}"} for i, d in enumerate(batch)]
    start = _tip(store)
    originals = [store.event_append(**d) for d in keyed]
    retries = data.draw(st.lists(st.sampled_from(range(len(keyed))), max_size=6))
    for i in retries:
        assert store.event_append(**keyed[i]) == originals[i]
    assert [e.id for e in _read_after(store, start)] == [e.id for e in originals]


@SHARED
@given(draft=drafts(), other_body=body_text)
def test_reusing_a_key_for_different_content_is_a_conflict_that_writes_nothing(
    store, draft, other_body
):
    writer = f"conflict-writer-{next(_UNIQUE)}"
    keyed = {**draft, "from_agent": writer, "idempotency_key": "the-key"}
    original = store.event_append(**keyed)
    changed = {**keyed, "body": other_body}
    if other_body == keyed["body"]:
        assert store.event_append(**changed) == original
        return
    with pytest.raises(errors.ConflictError, match="idempotency_key") as info:
        store.event_append(**changed)
    assert info.value.ident == original.id
    assert _read_after(store, original.id) == []


# --------------------------------------------------------------------------- exact bytes


@SHARED
@given(body=body_text, metadata=metadata_dicts)
def test_bodies_and_metadata_round_trip_exactly_with_key_order_kept(store, body, metadata):
    event = store.event_append(
        type="note.added", stream="s", room="r", from_agent="a", body=body, metadata=metadata
    )
    for got in (store.event_get(event.id), _read_after(store, None)[-1]):
        assert got.body == body
        assert json.dumps(got.metadata) == json.dumps(metadata)
        assert got.to_dict() == event.to_dict()


@SHARED
@given(
    content=st.one_of(
        st.binary(max_size=2048),
        body_text.map(lambda t: t.encode("utf-8")),
        st.lists(st.sampled_from([b"\r\n", b"\n", b"x", b"\x00", b"\xff", b"\xc3\xa9"])).map(
            b"".join
        ),
    ),
    kind=st.sampled_from(["patch", "file", "log", "json", "note"]),
)
def test_artifact_bytes_round_trip_exactly_binary_text_crlf_and_empty(store, content, kind):
    art = store.artifact_put(kind=kind, content=content, created_by="a")
    assert art.content is None
    assert art.sha256 == hashlib.sha256(content).hexdigest()
    assert art.size_bytes == len(content)
    got = store.artifact_get(art.id)
    assert got.content == content
    assert got.sha256 == art.sha256
    # On the wire: text as text, anything else as base64; both decode to the same bytes.
    wire = got.to_dict()
    if got.encoding == "utf-8":
        assert wire["content"].encode("utf-8") == content
    else:
        import base64

        assert base64.b64decode(wire["content"]) == content


@SHARED
@given(text=body_text)
def test_text_artifacts_round_trip_as_the_same_string(store, text):
    art = store.artifact_put(kind="note", content=text, created_by="a")
    got = store.artifact_get(art.id)
    assert got.encoding == "utf-8"
    assert got.content_text() == text
    assert got.content == text.encode("utf-8")


# --------------------------------------------------------------------------- HLC


class JumpingClock:
    def __init__(self) -> None:
        self.ms = 1_780_000_000_000

    def now_ms(self) -> int:
        return self.ms


wall_moves = st.lists(
    st.one_of(
        st.integers(min_value=-3_600_000, max_value=3_600_000),
        st.just(0),
        st.just(-1),
    ),
    min_size=1,
    max_size=40,
)


@given(moves=wall_moves)
def test_hlc_now_is_strictly_increasing_whatever_the_wall_clock_does(moves):
    wall = JumpingClock()
    clock = hlc.HybridClock("rep_" + "a" * 32, wall)
    stamps = []
    for move in moves:
        wall.ms += move
        stamps.append(clock.now())
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert all(hlc.is_valid(s) for s in stamps)


@given(
    moves=wall_moves,
    remote_offsets=st.lists(st.integers(min_value=-120_000, max_value=120_000), max_size=10),
    counter=st.integers(min_value=0, max_value=hlc.MAX_COUNTER),
)
def test_hlc_receive_orders_local_ticks_after_every_adopted_remote_stamp(
    moves, remote_offsets, counter
):
    wall = JumpingClock()
    clock = hlc.HybridClock("rep_" + "b" * 32, wall)
    last = clock.now()
    for i, move in enumerate(moves):
        wall.ms += move
        if i < len(remote_offsets):
            remote = hlc.Stamp(wall.ms + remote_offsets[i], counter, "rep_" + "c" * 32).render()
            adopted = clock.observe(remote)
            assert adopted == (remote_offsets[i] <= hlc.MAX_FUTURE_DRIFT_MS)
            tick = clock.now()
            if adopted:
                t, r = hlc.parse(tick), hlc.parse(remote)
                assert (t.wall_ms, t.counter) > (r.wall_ms, r.counter)
        else:
            tick = clock.now()
        assert tick > last
        last = tick


@pytest.fixture
def clocked_store(db_url):
    wall = JumpingClock()
    s = LogStore.open(db_url, clock=wall)
    yield s, wall
    s.close()


@SHARED
@given(moves=st.lists(st.integers(min_value=-600_000, max_value=600_000), min_size=1, max_size=8))
def test_appended_hlc_stamps_strictly_increase_in_seq_order_when_the_clock_jumps_back(
    clocked_store, moves
):
    store, wall = clocked_store
    start = _tip(store)
    for move in moves:
        wall.ms += move
        store.event_append(type="tick", stream="s", room="r", from_agent="a")
    read = _read_after(store, start)
    stamps = [e.hlc for e in read]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert all(hlc.parse(s).replica_id == store.replica_id for s in stamps)
