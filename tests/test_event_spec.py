"""One event spec (issue 21 item 1): every place that lists the event's fields derives it from
`models.Event`'s field specs, so a new field declared there reaches the table, the wire, the
signature, the sync rows, the draft and the remote checks, in one order."""

from __future__ import annotations

import dataclasses

import pytest

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.identity import signing
from mempalace_logstream.models import (
    CHECKED_FIELDS,
    CONTENT_FIELDS,
    DRAFT_FIELDS,
    EVENT_SPEC,
    NULLABLE_FIELDS,
    ROW_FIELDS,
    Event,
)
from mempalace_logstream.replication import wire
from mempalace_logstream.schema import FILTER_COLUMNS, events

NAMES = [name for name, _spec in EVENT_SPEC]
WIRE = {name: spec.wire or name for name, spec in EVENT_SPEC}


def test_the_spec_is_the_dataclass_in_declaration_order() -> None:
    assert NAMES == [f.name for f in dataclasses.fields(Event)]
    assert all(spec.doc for _name, spec in EVENT_SPEC), "every field says what it is"


def test_the_events_table_has_a_column_per_stored_field_with_its_nullability() -> None:
    stored = [name for name, spec in EVENT_SPEC if spec.kind != "links"]
    columns = [c.name for c in events.c if c.name != "idempotency_key"]
    assert columns[0] == "seq" and sorted(columns) == sorted(stored)
    for name in stored:
        assert events.c[name].nullable == (name in NULLABLE_FIELDS), name
    indexed = [name for name, spec in EVENT_SPEC if spec.indexed]
    assert list(FILTER_COLUMNS) == indexed  # each with its (column, seq) index
    for name in indexed:
        assert any([c.name for c in ix.columns] == [name, "seq"] for ix in events.indexes), name


def test_the_wire_the_sync_rows_and_the_signature_follow_the_spec() -> None:
    by_kind = {"seq": 1, "int": 1, "links": (), "text": None}
    values = {name: by_kind.get(spec.kind, f"k-{name}") for name, spec in EVENT_SPEC}
    required = {"type": "note", "stream": "s", "room": "r", "from_agent": "a", "body": "b"}
    stamp = {"created_at": "2026-12-04T00:00:00.000Z", "metadata_json": "{}"}
    event = Event(**{**values, **required, **stamp})
    shown = list(event.to_dict())
    assert shown[: len(NAMES)] == [WIRE[n] for n in NAMES]
    assert list(wire.ROW_COLUMNS) == list(ROW_FIELDS) == [WIRE[n] for n in NAMES if n != "seq"]
    content = [WIRE[n] for n, spec in EVENT_SPEC if spec.content]
    assert list(CONTENT_FIELDS) == content
    assert not {"seq", "sig", "key_id"} & set(content)  # local or the signature itself
    signed = set(signing.event_fields(event))
    assert set(content) - {"body"} <= signed, "a signature covers every content field"


def test_the_draft_and_the_remote_checks_use_the_spec_s_rules() -> None:
    assert set(DRAFT_FIELDS) <= set(NAMES)
    assert [n for n, _rule in CHECKED_FIELDS] == [n for n in NAMES if n in dict(CHECKED_FIELDS)]
    for name, rule in CHECKED_FIELDS:
        assert rule in v.FIELD_RULES, f"{name}: no validator for rule {rule!r}"


@pytest.mark.parametrize("name", [n for n, _rule in CHECKED_FIELDS])
def test_each_checked_field_refuses_a_control_character_naming_itself(name: str) -> None:
    rule = v.FIELD_RULES[dict(CHECKED_FIELDS)[name]]
    with pytest.raises(errors.ValidationError) as caught:
        rule(name, "bad\x00value")
    assert caught.value.field == name
