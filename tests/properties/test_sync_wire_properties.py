"""Properties of the sync wire decoders (issue 9, items 7, 9, 10, 13): whatever a peer sends,
they answer a value or a SyncError/ValidationError naming the field, never a crash, and the
memory guard's cheap bound is never below the truth."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import LogStore, errors, replication, schema, sync
from mempalace_logstream.http.sync_routes import int_param

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=40,
)


def nodes(value: Any) -> int:
    """Values and keys a decoded JSON document holds."""
    if isinstance(value, list):
        return 1 + sum(nodes(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(1 + nodes(v) for v in value.values())
    return 1


@given(JSON, st.booleans(), st.booleans())
def test_the_value_bound_is_never_below_what_json_decodes_to(value, compact, ascii_) -> None:
    seps = (",", ":") if compact else (", ", ": ")
    raw = json.dumps(value, separators=seps, ensure_ascii=ascii_).encode()
    exact = sync.json_values_bound(raw, strings=False)
    assert nodes(json.loads(raw)) <= exact <= sync.json_values_bound(raw)


@pytest.fixture(scope="module")
def peer():
    p = sync.HttpPeer("http://u:pw-secret@127.0.0.1:9", max_response_bytes=64 * 1024)
    yield p
    p.close()


@given(raw=st.binary(max_size=300) | st.integers(1, 50_000).map(lambda n: b"[" * n))
def test_any_response_body_decodes_or_is_a_sync_error(peer, raw: bytes) -> None:
    try:
        peer._decode(bytearray(raw), "/sync/ops")
    except errors.SyncError as exc:
        assert exc.message.startswith(("http://127.0.0.1:9/sync/ops: not JSON", "http://127.0.0"))


@given(
    user=st.text("abcXYZ019-._~%!$&'()*+,;=", min_size=1, max_size=12),
    password=st.text("XYZ!$&'()*+;~%:@", min_size=3, max_size=20),  # not in hosts/paths
    host=st.sampled_from(["127.0.0.1:8765", "hub.example", "[::1]:9"]),
    path=st.sampled_from(["", "/", "/x/y?q=1#f"]),
    scheme=st.sampled_from(["http", "https"]),
)
def test_credentials_never_survive_redaction(user, password, host, path, scheme) -> None:
    url = f"{scheme}://{user}:{password}@{host}{path}"
    shown = sync.redact_url(url)
    assert shown == f"{scheme}://{host}{path}"
    assert sync.redact_url(shown) == shown
    scrubbed = sync.HttpPeer(url)
    try:
        assert scrubbed._scrub(f"error at {url}") == f"error at {scheme}://***@{host}{path}"
    finally:
        scrubbed.close()


@given(st.dictionaries(st.text(max_size=40), JSON, max_size=4) | JSON)
def test_any_version_vector_body_parses_or_is_a_sync_error(body) -> None:
    class Named:
        name = url = "peer"

    try:
        rid, rvv, fps = sync._parse_vector(body, Named())  # type: ignore[arg-type]
    except errors.SyncError as exc:
        assert exc.message.startswith("peer: bad version vector: ")
        return
    for n in rvv.values():
        assert 0 <= n <= replication.MAX_SEQ
    for n, s1, s2 in (fps or {}).values():
        assert 0 <= n <= replication.MAX_SEQ and 0 <= s1 < replication.FP_P1
        assert 0 <= s2 < replication.FP_P2


POSITIONS = st.sets(st.integers(1, 2**63 - 1) | st.integers(1, 200), max_size=30)


@given(POSITIONS, POSITIONS)
def test_position_fingerprints_tell_sets_apart_and_subtract_by_range(a, b) -> None:
    assert (replication.fp_of(a) == replication.fp_of(b)) == (a == b)
    cut = sorted(a)[len(a) // 2] if a else 0
    low = replication.fp_of(p for p in a if p <= cut)
    assert replication.fp_between(low, replication.fp_of(a)) == replication.fp_of(
        p for p in a if p > cut
    )
    wire = list(replication.fp_of(a))
    assert sync.fingerprint(wire) == tuple(wire)


@given(st.integers(1, 2**63 - 1), st.integers(-3, 300), st.integers(1, 2**63 - 1))
def test_a_span_of_positions_fingerprints_as_its_positions_one_by_one(first, n, shift) -> None:
    """`fp_span` (closed form: a peer's top may be far ahead) is `fp_of` the range."""
    assert replication.fp_span(first, first + n - 1) == replication.fp_of(range(first, first + n))
    assert replication.fp_span(shift, shift + 10**15)[0] == 10**15 + 1  # no loop over it


@given(st.integers(-(2**64), 2**64) | st.integers(0, 9).map(lambda n: 2**63 - 1 + n))
def test_a_vector_entry_past_64_bits_is_refused(n: int) -> None:
    class Named:
        name = url = "peer"

    body = {"replica_id": "rep_" + "a" * 32, "version_vector": {"rep_" + "b" * 32: n}}
    if 0 <= n <= replication.MAX_SEQ:
        assert sync._parse_vector(body, Named())[1] == {"rep_" + "b" * 32: n}  # type: ignore[arg-type]
    else:
        with pytest.raises(errors.SyncError, match="version_vector value"):
            sync._parse_vector(body, Named())  # type: ignore[arg-type]


@given(st.text(max_size=60) | st.integers().map(str))
def test_integer_query_parameters_fit_64_bits_or_are_400s_naming_them(raw: str) -> None:
    try:
        n = int_param("after", raw, 0)
    except errors.ValidationError as exc:
        assert exc.field == "after"
        return
    assert -replication.MAX_SEQ - 1 <= n <= replication.MAX_SEQ


@pytest.fixture(scope="module")
def store():
    from mempalace_logstream import migrate
    from mempalace_logstream.backends import engine as engine_mod

    d = Path(tempfile.mkdtemp(prefix="wire-"))
    eng = engine_mod.create_engine(f"sqlite:///{d / 'x.sqlite3'}")
    migrate.upgrade(eng)
    eng.dispose()
    s = LogStore.open(str(d / "x.sqlite3"), durability="normal")
    yield s
    s.close()
    shutil.rmtree(d, ignore_errors=True)


@given(
    st.text("0123456789abcdef", min_size=32, max_size=32),
    st.sets(st.integers(1, 2**63 - 1), max_size=20),
    st.integers(0, 2**63 - 1),
)
def test_the_store_fingerprints_exactly_the_positions_it_holds(store, hexid, positions, upto):
    origin = "rep_" + hexid
    wires = [
        {
            "id": f"evt_20260101T000000_{hexid[:8]}{p:016x}",
            "origin_replica": origin,
            "origin_seq": p,
            "hlc": f"1700000000000-000000-{origin}",
            "type": "note",
            "stream": "s",
            "room": "r",
            "from_agent": "a",
            "body": "b",
            "created_at": "2026-01-01T00:00:00Z",
            "metadata": {},
            "artifact_ids": [],
        }
        for p in positions
    ]
    replication.apply_remote_events(store, wires)
    with store.engine.connect() as conn:
        c = schema.events.c
        query = sa.select(c.origin_seq).where(c.origin_replica == origin)
        held = {r[0] for r in conn.execute(query)}
    assert replication.fingerprint_upto(store, origin, upto) == replication.fp_of(
        p for p in held if p <= upto
    )


@given(seq=st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False))
def test_origin_seq_is_accepted_exactly_when_it_is_a_positive_64_bit_integer(store, seq) -> None:
    origin = "rep_" + "d" * 32
    wire = {
        "id": "evt_20260101T000000_wire",
        "origin_replica": origin,
        "origin_seq": seq,
        "hlc": f"1700000000000-000000-{origin}",
        "type": "note",
        "stream": "s",
        "room": "r",
        "from_agent": "a",
        "body": "b",
        "created_at": "2026-01-01T00:00:00Z",
        "metadata": {},
        "artifact_ids": [],
    }
    ok = (isinstance(seq, int) or seq.is_integer()) and 1 <= int(seq) <= replication.MAX_SEQ
    try:
        replication.parse_remote_event(store, wire)
    except errors.ValidationError as exc:
        assert not ok and exc.field == "origin_seq"
    else:
        assert ok
