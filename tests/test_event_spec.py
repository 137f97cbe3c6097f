"""One event spec (issue 21 item 1): every place that lists the event's fields derives it from
`models.Event`'s field specs, so a new field declared there reaches the table, the wire, the
signature, the sync rows, the draft and the remote checks, in one order."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest

from mempalace_logstream import errors, op_params, operations
from mempalace_logstream import validation as v
from mempalace_logstream.identity import signing
from mempalace_logstream.models import (
    CHECKED_FIELDS,
    CONTENT_FIELDS,
    DRAFT_FIELDS,
    DRAFT_SPEC,
    EVENT_SPEC,
    NULLABLE_FIELDS,
    REQUIRED_RULES,
    ROW_FIELDS,
    Event,
    EventArgs,
    EventDraft,
)
from mempalace_logstream.replication import wire
from mempalace_logstream.schema import FILTER_COLUMNS, events
from mempalace_logstream.store import LogStore
from mempalace_logstream.store.filters import ReadArgs, ReadRequest
from mempalace_logstream.store.task_reads import TaskReads
from mempalace_logstream.store.writes import Writes

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
    # Every field a writer gives is checked by a rule, the store sets every other one.
    assert DRAFT_FIELDS == tuple(n for n, _rule in CHECKED_FIELDS)
    assert [(n, w, r) for n, w, r in DRAFT_SPEC] == [(n, WIRE[n], r) for n, r in CHECKED_FIELDS]


# What a writer gives, spelled by hand once for mypy (`EventArgs`), is the spec's draft: the
# same names in the same order, required exactly where the rule refuses a missing value.
def test_the_writer_s_arguments_are_the_spec_s_draft_fields() -> None:
    hints = typing.get_type_hints(EventArgs, include_extras=True)
    wires = [wire for _n, wire, _r in DRAFT_SPEC]
    assert list(hints) == [*wires, "idempotency_key"]
    required = {k for k, hint in hints.items() if typing.get_origin(hint) is typing.Required}
    assert required == {wire for _n, wire, rule in DRAFT_SPEC if rule in REQUIRED_RULES}
    assert all(dict(EVENT_SPEC)[name].param for name in DRAFT_FIELDS), "each is described"


def test_a_draft_holds_exactly_the_spec_s_draft_fields(store: LogStore) -> None:
    draft = store.draft_event(type="note", stream="s", room="r", from_agent="a", metadata={})
    assert tuple(draft.values) == DRAFT_FIELDS
    assert draft["metadata_json"] == "{}" and draft["artifact_ids"] == () and draft["body"] == ""
    assert all(draft[n] is None for n in NULLABLE_FIELDS & set(DRAFT_FIELDS))
    with pytest.raises(errors.ValidationError, match="bogus") as caught:
        store.draft_event(type="note", stream="s", room="r", from_agent="a", bogus=1)  # type: ignore[call-arg]
    assert caught.value.field == "bogus"
    with pytest.raises(ValueError, match="body"):
        EventDraft(values={n: draft[n] for n in DRAFT_FIELDS if n != "body"})
    stored = store.event_append(type="note", stream="s", room="r", from_agent="a", branch="b")
    assert {n: getattr(stored, n) for n in DRAFT_FIELDS} == {**draft.values, "branch": "b"}


def test_the_append_operation_s_parameters_are_derived_from_the_spec() -> None:
    fields = op_params.EventAppend.model_fields
    assert list(fields) == [*(given for _n, given, _r in DRAFT_SPEC), "idempotency_key"]
    for name, given, rule in DRAFT_SPEC:
        assert fields[given].description is not None
        assert fields[given].description.startswith(dict(EVENT_SPEC)[name].param), given
        assert fields[given].is_required() == (rule in REQUIRED_RULES), given
    # The core takes exactly these (the operation spec's test holds the surfaces to them).
    params = operations.OPERATIONS["event_append"].required()
    hints = typing.get_type_hints(EventArgs, include_extras=True)
    assert list(params) == list(hints)


# The facades of `LogStore` take the parameters of what they call (mypy checks the keyword
# names at the store; `inspect.signature` shows them).
@pytest.mark.parametrize(
    ("facade", "target"),
    [
        (LogStore.draft_artifact, Writes.draft_artifact),
        (LogStore.artifact_put, Writes.draft_artifact),
        (LogStore.task_list, TaskReads.task_list),
    ],
)
def test_the_store_s_facades_show_the_parameters_they_pass_on(facade: Any, target: Any) -> None:
    shown = inspect.signature(facade).parameters
    assert list(shown) == list(inspect.signature(target).parameters)


def test_the_read_arguments_are_the_read_request_s_fields_and_the_filters() -> None:
    names = set(typing.get_type_hints(ReadArgs))
    request = set(ReadRequest.__dataclass_fields__) - {"filters", "note"}
    assert names == request | set(v.FILTER_FIELDS) | {"from_agent"}


@pytest.mark.parametrize("name", [n for n, _rule in CHECKED_FIELDS])
def test_each_checked_field_refuses_a_control_character_naming_itself(name: str) -> None:
    rule = v.FIELD_RULES[dict(CHECKED_FIELDS)[name]]
    with pytest.raises(errors.ValidationError) as caught:
        rule(name, "bad\x00value")
    assert caught.value.field == name
