"""Every limit of SPEC §4 at the boundary and one past it, on the Python API, on both backends.

Each refusal must name the field (and the limit where there is one) and write nothing: the
event, artifact, blob and link counts are unchanged afterwards.
"""

from __future__ import annotations

import json
import secrets
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import LogStore, errors, validation, workflows
from mempalace_logstream import validation as v
from mempalace_logstream.schema import artifact_blobs, artifacts, event_artifacts, events

KIB = 1024
BASE = {"type": "note.added", "stream": "s", "room": "r", "from_agent": "a"}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])
def module_url(request, tmp_path_factory):
    """One database per backend for the whole module: every check here is self-contained."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('validation') / 'logstream.sqlite3'}"
    base = request.getfixturevalue("pg_database")
    schema = f"v_{secrets.token_hex(6)}"
    eng = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


@pytest.fixture(scope="module")
def store(module_url):
    with LogStore.open(module_url) as s:
        yield s


@pytest.fixture(scope="module")
def db_url(module_url):
    return module_url


def counts(store: LogStore) -> tuple[int, ...]:
    with store.engine.connect() as conn:
        return tuple(
            int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)
            for t in (events, artifacts, artifact_blobs, event_artifacts)
        )


def refused(
    store: LogStore, call: Callable[[], Any], field: str, *, limit: object = None, exc=None
) -> errors.LogstreamError:
    """Run `call`, expect a refusal naming `field` (and `limit`), and check nothing was written."""
    before = counts(store)
    with pytest.raises(exc or errors.ValidationError) as info:
        call()
    err = info.value
    assert err.field == field, (err.field, str(err))
    assert field in str(err)
    if limit is not None:
        assert str(limit) in str(err)
    assert counts(store) == before
    return err


def append(store: LogStore, **fields: Any):
    return store.event_append(**{**BASE, **fields})


# --------------------------------------------------------------------------- body


@pytest.mark.parametrize(
    "ok, too_big",
    [
        ("a" * (256 * KIB), "a" * (256 * KIB + 1)),
        ("é" * (128 * KIB), "é" * (128 * KIB) + "a"),  # 2-byte chars: the limit counts bytes
        ("a" * (256 * KIB - 4) + "😀", "a" * (256 * KIB - 3) + "😀"),  # a 4-byte char crosses it
    ],
    ids=["ascii", "two-byte", "four-byte"],
)
def test_body_limit_is_256_kib_of_utf8_bytes(store, ok, too_big):
    assert append(store, body=ok).body == ok
    err = refused(store, lambda: append(store, body=too_big), "body", limit=256 * KIB)
    assert f"is {len(too_big.encode())} bytes" in str(err)


def test_body_limit_is_configurable_per_store(db_url):
    with LogStore.open(db_url, max_body_bytes=10) as small:
        assert append(small, body="é" * 5).body == "é" * 5
        refused(small, lambda: append(small, body="é" * 6), "body", limit=10)


@pytest.mark.parametrize("bad", ["a\x00b", "\x00"], ids=["inner", "only"])
def test_nul_in_a_body_is_rejected_not_stripped(store, bad):
    refused(store, lambda: append(store, body=bad), "body")


@pytest.mark.parametrize("bad", ["\ud800", "x\udfffy"], ids=["high", "low"])
def test_lone_surrogates_in_a_body_are_rejected_not_stripped(store, bad):
    err = refused(store, lambda: append(store, body=bad), "body")
    assert "surrogate" in str(err)


def test_control_characters_other_than_nul_are_kept_in_a_body(store):
    body = "tab\there\r\nbell\x07 del\x7f end\n"
    assert store.event_get(append(store, body=body).id).body == body


@pytest.mark.parametrize("bad", [b"bytes", 42, ["x"]], ids=["bytes", "int", "list"])
def test_a_body_must_be_a_string(store, bad):
    refused(store, lambda: append(store, body=bad), "body")


# --------------------------------------------------------------------------- metadata


def _meta_of_size(n: int, char: str = "x") -> dict[str, str]:
    # '{"k":"' + value + '"}' is 8 bytes plus the value.
    value_bytes = n - 8
    return {"k": char * (value_bytes // len(char.encode()))}


def test_metadata_limit_is_64_kib_serialized(store):
    ok = _meta_of_size(64 * KIB)
    assert append(store, metadata=ok).metadata == ok
    refused(
        store,
        lambda: append(store, metadata=_meta_of_size(64 * KIB + 1)),
        "metadata",
        limit=64 * KIB,
    )
    # Multibyte characters count in bytes here too.
    ok_wide = _meta_of_size(64 * KIB, "é")
    assert append(store, metadata=ok_wide).metadata == ok_wide
    refused(
        store,
        lambda: append(store, metadata=_meta_of_size(64 * KIB + 2, "é")),
        "metadata",
        limit=64 * KIB,
    )


@pytest.mark.parametrize(
    "bad",
    [
        ["not", "an", "object"],
        "[1, 2]",
        "{not json",
        {"x": float("nan")},
        {"x": object()},
        {"nul": "a\x00b"},
        {"a\x00": 1},
        {"deep": [{"x": "\x00"}]},
        {"s": "\ud800"},
        '{"s": "\\ud800"}',
        '{"s": "\\u0000"}',
    ],
    ids=[
        "list",
        "json-list",
        "bad-json",
        "nan",
        "object",
        "nul-value",
        "nul-key",
        "nul-deep",
        "surrogate",
        "json-surrogate",
        "json-nul",
    ],
)
def test_bad_metadata_is_rejected(store, bad):
    refused(store, lambda: append(store, metadata=bad), "metadata")


def test_metadata_that_only_looks_like_an_escaped_nul_is_accepted(store):
    meta = {"path": "C:\\u0000\\dir"}  # a backslash followed by u0000, not a NUL
    assert append(store, metadata=meta).metadata == meta


def test_metadata_given_as_json_text_keeps_its_key_order(store):
    event = append(store, metadata='{"z": 1, "a": {"y": 2, "b": 3}}')
    assert event.metadata_json == '{"z":1,"a":{"y":2,"b":3}}'
    assert list(store.event_get(event.id).metadata) == ["z", "a"]


# --------------------------------------------------------------------------- routing fields

ROUTING_FIELDS = [
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "idempotency_key",
]


@pytest.mark.parametrize("field", ROUTING_FIELDS)
def test_routing_fields_allow_256_characters_and_refuse_257(store, field):
    ok = "é" * 255 + "/"  # characters, not bytes; '/' is allowed
    event = append(store, **{field: ok})
    if field != "idempotency_key":
        assert getattr(event, field) == ok
    refused(store, lambda: append(store, **{field: "x" * 257}), field, limit=256)


@pytest.mark.parametrize("field", ROUTING_FIELDS)
@pytest.mark.parametrize(
    "bad",
    ["a\nb", "a\tb", "a\x1fb", "a\x7fb", "ab\n", "\tab", "a\x00b"],
    ids=["newline", "tab", "unit-sep", "del", "trailing-newline", "leading-tab", "nul"],
)
def test_routing_fields_refuse_control_characters_and_nul(store, field, bad):
    err = refused(store, lambda: append(store, **{field: bad}), field)
    assert "control" in str(err) or "NUL" in str(err)


@pytest.mark.parametrize("field", ["stream", "from_agent", "to_agent"])
def test_routing_fields_refuse_lone_surrogates(store, field):
    refused(store, lambda: append(store, **{field: "agent\udc00"}), field)


INVISIBLE = [
    "\u0085",  # NEXT LINE, a C1 control
    "\u009b",  # CONTROL SEQUENCE INTRODUCER
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u200b",  # ZERO WIDTH SPACE
    "\u200d",  # ZERO WIDTH JOINER
    "\u2060",  # WORD JOINER
    "\ufeff",  # BOM
    "\u00ad",  # SOFT HYPHEN
    "\u2028",  # LINE SEPARATOR
    "\u2029",  # PARAGRAPH SEPARATOR
]


@pytest.mark.parametrize("field", ROUTING_FIELDS)
@pytest.mark.parametrize("ch", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_routing_fields_refuse_invisible_and_bidi_code_points(store, field, ch):
    err = refused(store, lambda: append(store, **{field: f"claude-laptop{ch}"}), field)
    assert f"U+{ord(ch):04X}" in str(err)
    refused(store, lambda: store.event_list(**{"to_agent": f"{ch}bob"}), "to_agent")


@pytest.mark.parametrize("ch", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_bodies_keep_invisible_code_points(store, ch):
    assert append(store, body=f"a{ch}b").body == f"a{ch}b"


@given(text=st.text(min_size=1, max_size=30))
def test_a_routing_value_is_refused_exactly_when_it_holds_an_invisible_code_point(text):
    bad = any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text)
    try:
        out = v.routing("room", text)
    except errors.ValidationError as exc:
        assert exc.field == "room"
        assert bad or not text.strip() or len(text.strip()) > 256
    else:
        assert not bad and out == text.strip()


def test_routing_fields_strip_surrounding_spaces_only(store):
    event = append(store, stream="  project/x  ", to_agent=" b ")
    assert (event.stream, event.to_agent) == ("project/x", "b")


@pytest.mark.parametrize("field", ["stream", "room", "from_agent"])
@pytest.mark.parametrize("bad", [None, "", "   ", 7], ids=["none", "empty", "blank", "int"])
def test_required_routing_fields_must_be_non_blank_strings(store, field, bad):
    refused(store, lambda: append(store, **{field: bad}), field)


@pytest.mark.parametrize("star", ["*", " * "], ids=["star", "padded"])
def test_a_writer_is_never_the_broadcast_address(store, star):
    """`*` is where a broadcast goes: an event written as `*` would have its replies and acks
    sent to everyone, so `from_agent` and `created_by` refuse it (the padded form strips to it)."""
    err = refused(store, lambda: append(store, from_agent=star), "from_agent")
    assert "broadcast address" in str(err)
    target = append(store).id
    refused(
        store,
        lambda: workflows.event_ack(store, event_id=target, from_agent=star),
        "from_agent",
    )
    refused(
        store,
        lambda: store.artifact_put(kind="note", content="x", created_by=star),
        "created_by",
    )
    assert append(store, to_agent="*").to_agent == "*"  # still an address
    assert append(store, from_agent="a*").from_agent == "a*"  # only `*` itself is refused


def test_artifact_created_by_and_ids_follow_the_routing_rules(store):
    art = store.artifact_put(kind="note", content="x", created_by="é" * 256)
    assert art.created_by == "é" * 256
    refused(
        store,
        lambda: store.artifact_put(kind="note", content="x", created_by="x" * 257),
        "created_by",
        limit=256,
    )
    refused(
        store, lambda: store.artifact_put(kind="note", content="x", created_by="a\nb"), "created_by"
    )
    refused(store, lambda: store.artifact_get("x" * 257), "artifact_id", limit=256)
    refused(store, lambda: store.event_get("evt\n1"), "event_id")
    refused(
        store,
        lambda: workflows.event_ack(store, event_id="x" * 257, from_agent="a"),
        "event_id",
        limit=256,
    )
    refused(store, lambda: store.event_list(since_event_id="x" * 257), "since_event_id", limit=256)
    refused(store, lambda: store.event_list(before_event_id="a\tb"), "before_event_id")


# --------------------------------------------------------------------------- type and status


@pytest.mark.parametrize(
    "ok",
    ["a", "0", "task.request", "a_b.c-d", "x" * 64, "9lives"],
)
def test_valid_event_types_are_accepted(store, ok):
    assert append(store, type=ok).type == ok


@pytest.mark.parametrize(
    "bad",
    ["x" * 65, "Task.Request", "_x", ".x", "-x", "a b", "a/b", "ä", "a\nb", "a\x00", "", None],
    ids=[
        "65",
        "upper",
        "underscore-first",
        "dot-first",
        "dash-first",
        "space",
        "slash",
        "non-ascii",
        "newline",
        "nul",
        "empty",
        "none",
    ],
)
def test_invalid_event_types_are_rejected(store, bad):
    err = refused(store, lambda: append(store, type=bad), "type")
    if bad == "x" * 65:
        assert "64" in str(err)


@pytest.mark.parametrize("status", validation.STATUSES)
def test_every_status_of_the_set_is_accepted(store, status):
    assert append(store, status=status).status == status


@pytest.mark.parametrize("bad", ["done", "OPEN", "open ish", "canceled", 1])
def test_statuses_outside_the_set_are_rejected(store, bad):
    err = refused(store, lambda: append(store, status=bad), "status")
    if isinstance(bad, str) and bad != "OPEN":
        assert "superseded" in str(err)  # the message lists the allowed set


# --------------------------------------------------------------------------- artifacts


@pytest.fixture(scope="module")
def small_artifacts(db_url):
    with LogStore.open(db_url, max_artifact_bytes=1024) as s:
        yield s


@pytest.mark.parametrize(
    "ok, too_big",
    [
        (b"x" * 1024, b"x" * 1025),
        ("é" * 512, "é" * 512 + "a"),
        (b"\xff" * 1024, b"\xff" * 1025),
    ],
    ids=["ascii-bytes", "two-byte-text", "binary"],
)
def test_artifact_limit_counts_bytes(small_artifacts, ok, too_big):
    store = small_artifacts
    art = store.artifact_put(kind="file", content=ok, created_by="a")
    assert art.size_bytes == 1024
    refused(
        store,
        lambda: store.artifact_put(kind="file", content=too_big, created_by="a"),
        "content",
        limit=1024,
    )


def test_the_real_4_mib_artifact_limit_holds_at_the_boundary(sqlite_store):
    # One real 4 MiB round trip (SQLite); the small-limit store covers both backends.
    store = sqlite_store
    four = 4 * 1024 * 1024
    art = store.artifact_put(kind="log", content=b"z" * four, created_by="a")
    assert art.size_bytes == four
    assert store.artifact_get(art.id).content == b"z" * four
    refused(
        store,
        lambda: store.artifact_put(kind="log", content=b"z" * (four + 1), created_by="a"),
        "content",
        limit=four,
    )


def test_empty_artifacts_are_legal(store):
    for content in ("", b""):
        art = store.artifact_put(kind="file", content=content, created_by="a")
        assert (art.size_bytes, art.encoding) == (0, "utf-8")
        assert store.artifact_get(art.id).content == b""


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kind": "binary"}, "kind"),
        ({"kind": None}, "kind"),
        ({"content": None}, "content"),
        ({"content": 12}, "content"),
        ({"content": "a\x00b"}, "content"),
        ({"content": "\ud800"}, "content"),
        ({"content": b"a\x00b", "encoding": "utf-8"}, "content"),
        ({"content": b"\xff", "encoding": "utf-8"}, "content"),
        ({"content": "not base64!", "encoding": "base64"}, "content"),
        ({"encoding": "latin-1"}, "encoding"),
        ({"created_by": ""}, "created_by"),
        ({"metadata": [1]}, "metadata"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_artifact_fields_are_rejected(store, kwargs, field):
    args = {"kind": "file", "content": "ok", "created_by": "a", **kwargs}
    refused(store, lambda: store.artifact_put(**args), field)


def test_binary_bytes_with_nul_are_stored_as_binary_not_rejected(store):
    art = store.artifact_put(kind="file", content=b"ab\x00c", created_by="a")
    assert art.encoding == "base64"
    assert store.artifact_get(art.id).content == b"ab\x00c"


def test_an_event_referencing_an_unknown_artifact_writes_nothing(store):
    art = store.artifact_put(kind="note", content="x", created_by="a")
    refused(
        store,
        lambda: append(store, artifact_ids=[art.id, "art_nope"]),
        "artifact_ids",
        exc=errors.NotFoundError,
    )
    refused(store, lambda: append(store, artifact_ids="art_x"), "artifact_ids")
    refused(store, lambda: append(store, artifact_ids=[""]), "artifact_ids[0]")


# --------------------------------------------------------------------------- patch_submit

PATCH = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"stream": "x" * 257}, "stream"),
        ({"stream": None}, "stream"),
        ({"room": "a\nb"}, "room"),
        ({"to_agent": "b\x00"}, "to_agent"),
        ({"topic": "t" * 257}, "topic"),
        ({"body": "\ud800"}, "body"),
        ({"metadata": {"x": float("inf")}}, "metadata"),
        ({"from_agent": ""}, "created_by"),
        ({"content": "a\x00"}, "content"),
        ({"branch": "b\tc"}, "branch"),
        ({"correlation_id": "c" * 300}, "correlation_id"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_patch_submit_with_a_bad_field_leaves_no_artifact(store, kwargs, field):
    args = {"content": PATCH, "from_agent": "a", "stream": "project/x", **kwargs}
    refused(store, lambda: workflows.patch_submit(store, **args), field)


def test_patch_submit_writes_artifact_and_event_together(store):
    before = counts(store)
    out = workflows.patch_submit(store, content="no newline\r\n+x", from_agent="a", stream="p")
    assert counts(store) == (before[0] + 1, before[1] + 1, before[2] + 1, before[3] + 1)
    assert out["event"].artifact_ids == (out["artifact"].id,)
    assert out["event"].type == "patch.ready" and out["event"].status == "ready"
    assert len(out["warnings"]) == 2
    assert store.artifact_get(out["artifact"].id).content == b"no newline\r\n+x"


# --------------------------------------------------------------------------- reads


@pytest.fixture(scope="module")
def one_event(store):
    return append(store, stream="reads")


@pytest.mark.parametrize("ok", [1, 500, "7", 3.0])
def test_list_limit_accepts_1_to_500(store, one_event, ok):
    assert store.event_list(limit=ok, stream="reads").events


@pytest.mark.parametrize("bad", [0, 501, -1, True, False, "ten", 2.5, "1e3"])
def test_list_limit_refuses_everything_else(store, bad):
    err = refused(store, lambda: store.event_list(limit=bad), "limit")
    if bad in (0, 501, -1) and not isinstance(bad, bool):
        assert "500" in str(err)


@pytest.mark.parametrize("ok", [0, 300_000])
def test_wait_timeout_accepts_0_to_300000_ms(store, one_event, ok):
    page = store.event_wait(timeout_ms=ok, stream="reads")
    assert [e.id for e in page.events] == [one_event.id]


def test_wait_timeout_zero_checks_once_and_times_out(store):
    page = store.event_wait(timeout_ms=0, since_event_id="tip")
    assert page.timed_out and page.events == ()


@pytest.mark.parametrize("bad", [-1, 300_001, True, "soon", 1.5])
def test_wait_timeout_refuses_everything_else(store, bad):
    err = refused(store, lambda: store.event_wait(timeout_ms=bad), "timeout_ms")
    if bad in (-1, 300_001) and not isinstance(bad, bool):
        assert "300000" in str(err)


@pytest.mark.parametrize("ok", ["asc", "desc", "ASC", " Desc ", None, ""])
def test_order_accepts_asc_and_desc_in_any_case(store, ok):
    store.event_list(order=ok)


@pytest.mark.parametrize("bad", ["sideways", "ascending", 1, True])
def test_order_refuses_anything_else(store, bad):
    err = refused(store, lambda: store.event_list(order=bad), "order")
    assert "'asc' or 'desc'" in str(err)


@pytest.mark.parametrize(
    "ok", ["2026-01-02", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05+00:00", "2024-02-29"]
)
def test_since_created_at_accepts_the_three_utc_forms(store, ok):
    store.event_list(since_created_at=ok)


@pytest.mark.parametrize(
    "bad",
    [
        "2026-01",
        "2026-01-02T03:04:05",
        "2026-01-02T03:04:05+01:00",
        "2026-01-02T03:04:05.123Z",
        "2026-01-02 03:04:05Z",
        "2026-02-30",
        "2025-02-29",
        "yesterday",
        "20260102",
    ],
)
def test_since_created_at_refuses_other_forms(store, bad):
    refused(store, lambda: store.event_list(since_created_at=bad), "since_created_at")


@pytest.mark.parametrize("field", ["preview"])
@pytest.mark.parametrize("bad", [1, 0, "maybe", 2.0])
def test_booleans_are_not_integers(store, field, bad):
    refused(store, lambda: store.event_list(**{field: bad}), field)


@pytest.mark.parametrize(
    "field",
    [
        "stream",
        "type",
        "status",
        "to_agent",
        "writer",
        "exclude_writer",
        "correlation_id",
        "room",
        "topic",
    ],
)
def test_repeated_filters_validate_every_value(store, field):
    bad = "Bad Type" if field == "type" else ("nope" if field == "status" else "a\nb")
    ok = "x.y" if field == "type" else ("open" if field == "status" else "fine")
    refused(store, lambda: store.event_list(**{field: [ok, bad]}), field)


def test_unknown_read_parameters_are_named(store):
    refused(store, lambda: store.event_list(strem="x"), "strem")


def test_unknown_cursors_say_not_found(store):
    refused(
        store,
        lambda: store.event_list(since_event_id="evt_nope"),
        "since_event_id",
        exc=errors.NotFoundError,
    )
    refused(
        store,
        lambda: store.event_list(before_event_id="evt_nope"),
        "before_event_id",
        exc=errors.NotFoundError,
    )


# --------------------------------------------------------------------------- task_create

TASK = {
    "project": "Mem Palace",
    "from_agent": "lead",
    "to_agent": "worker",
    "goal": "Fix it",
    "branch": "main",
    "base_commit": "abcdef1",
    "done": "tests pass",
}


@pytest.mark.parametrize("ok", ["abcdef1", "ABCDEF1", "a" * 64, "0123456789abcdef" * 2])
def test_task_base_commit_accepts_7_to_64_hex(store, ok):
    out = workflows.task_create(store, **{**TASK, "base_commit": ok})
    assert out["task"].base_commit == ok.lower()


@pytest.mark.parametrize("bad", ["abcdef", "a" * 65, "main", "v1.2.3", "abcdefg", "", None])
def test_task_base_commit_refuses_anything_but_7_to_64_hex(store, bad):
    err = refused(
        store, lambda: workflows.task_create(store, **{**TASK, "base_commit": bad}), "base_commit"
    )
    if bad:
        assert "7-64" in str(err) or "hexadecimal" in str(err)


@pytest.mark.parametrize(
    "field, bad",
    [
        ("project", ""),
        ("from_agent", " "),
        ("to_agent", None),
        ("branch", ""),
        ("goal", "  "),
        ("done", None),
        ("goal", "a\x00"),
        ("project", "p" * 257),
    ],
)
def test_task_create_refuses_missing_or_bad_fields(store, field, bad):
    refused(store, lambda: workflows.task_create(store, **{**TASK, field: bad}), field)


def test_task_create_keeps_goal_and_done_verbatim(store):
    out = workflows.task_create(store, **{**TASK, "goal": "  Fix\r\nit  ", "done": "x\n"})
    body = out["task"].body
    assert "  Fix\r\nit  " in body and "Definition of done:\nx\n" in body
    assert out["task"].stream == "project/mem_palace"
    assert out["task"].correlation_id.startswith("task_fix_it_")


def metadata_oracle(value: Any, field: str = "metadata") -> str:
    """`validation.metadata` as it was written: the depth and NUL walks on every value (the
    function now walks only where its serialized text says a walk may find something)."""
    import json

    from mempalace_logstream.payload import MAX_METADATA_DEPTH, json_depth

    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise v.fail(field, f"is not valid JSON ({getattr(exc, 'msg', exc)})") from exc
        except RecursionError as exc:
            raise v.fail(
                field, f"nests deeper than {MAX_METADATA_DEPTH} levels", MAX_METADATA_DEPTH
            ) from exc
    if not isinstance(value, dict):
        raise v.fail(field, f"must be a JSON object, not {type(value).__name__}")
    depth = json_depth(value)
    if depth > MAX_METADATA_DEPTH:
        raise v.fail(
            field,
            f"nests {depth} levels deep; the limit is {MAX_METADATA_DEPTH} levels",
            MAX_METADATA_DEPTH,
        )
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise v.fail(field, f"is not JSON-serializable ({exc})") from exc
    v.check_text(field, text)
    v._check_json_strings(field, value)
    size = len(text.encode("utf-8"))
    if size > v.MAX_METADATA_BYTES:
        raise v.fail(
            field,
            f"is {size} bytes serialized; the limit is {v.MAX_METADATA_BYTES} bytes",
            v.MAX_METADATA_BYTES,
        )
    return text


def outcome_of(check: Callable[[Any], str], value: Any) -> tuple[str, Any]:
    try:
        return "ok", check(value)
    except errors.ValidationError as exc:
        return "refused", (exc.field, exc.limit, str(exc))


JSON_TEXT = st.text(alphabet=st.sampled_from(["a", "\x00", "\\", "u", "0", "é", "\ud800", "{"]))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3),
    max_leaves=12,
)


def nested(depth: int, leaf: Any = 1) -> dict[str, Any]:
    value: Any = leaf
    for _ in range(depth - 1):
        value = {"k": value}
    return {"k": value}


@given(value=st.dictionaries(JSON_TEXT, JSON_VALUES, max_size=4), ascii_only=st.booleans())
def test_metadata_as_text_or_object_is_judged_as_it_always_was(value, ascii_only):
    for raw in (value, json.dumps(value, ensure_ascii=ascii_only)):
        assert outcome_of(v.metadata, raw) == outcome_of(metadata_oracle, raw)


@pytest.mark.parametrize(
    "raw",
    [
        '{"a":"\\u0000"}',  # NUL by escape: refused
        '{"\\u0000":1}',
        '{"a":"\\\\u0000"}',  # a backslash and u0000: kept
        '{"a":"\x00"}',  # a raw control character: not JSON
        json.dumps(nested(64)),
        json.dumps(nested(65)),  # one level too deep
        json.dumps(nested(63, "{" * 10)),  # brackets in strings count, the depth is fine
        json.dumps(
            {
                "a": [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            []
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            }
        ),
        '{"a":NaN}',
        '{"a":"\\ud800"}',  # a lone surrogate by escape
        "[1]",
        "",
        '{"a":"' + "x" * (v.MAX_METADATA_BYTES) + '"}',
    ],
)
def test_metadata_edge_texts_are_judged_as_they_always_were(raw):
    assert outcome_of(v.metadata, raw) == outcome_of(metadata_oracle, raw)


@pytest.mark.parametrize(
    "raw",
    [
        {"a": "\x00"},
        {"\x00": 1},
        {"a": ["b", ("c", {"d": "e\x00"})]},
        {"a": "\\u0000"},  # a backslash and u0000: kept
        nested(64),
        nested(65),
        nested(65, float("nan")),  # too deep and not JSON: the depth is named first
        nested(65, object()),
        nested(3, float("nan")),
        nested(3, object()),
        nested(2000),  # past json's recursion: the depth is named
        {"a": (1, [2, {"b": None}])},
        {2: "a", None: "b", True: "c", 1.5: "d"},
        {("a",): 1},
        {"a": "\ud800"},
        {"a": "{[" * 40},
    ],
)
def test_metadata_edge_objects_are_judged_as_they_always_were(raw):
    assert outcome_of(v.metadata, raw) == outcome_of(metadata_oracle, raw)
