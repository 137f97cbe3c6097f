"""A writer's event fields checked, each by its rule of validation.py (the only home of the
rules): `event_fields`, and what makes a draft cheap on the write path (issue 25): the fields
to visit per set of names given, the text values each rule passed, and the clean values of
the text fields as a writer gave them before. Must not import sqlalchemy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from mempalace_logstream import validation as v


def event_fields(
    raw: Mapping[str, Any], max_body_bytes: int = v.DEFAULT_MAX_BODY_BYTES
) -> dict[str, Any]:
    """The fields a writer gives (`models.DRAFT_SPEC`), read from `raw` by their wire names and
    each checked by its rule, in `Event`'s order: {attribute: clean value}. A name in `raw`
    that is no such field is the caller's to refuse. Raises ValidationError naming the first
    bad field and its limit."""
    plan = _CHECKED.get(given := tuple(raw))
    if plan is None:  # the fields to visit (given, required, body) for these names given
        from mempalace_logstream.models import DRAFT_SPEC  # not at import: hook paths read none

        _LEFT_OUT.update((name, _NONE_CLEAN.get(rule)) for name, _wire, rule in DRAFT_SPEC)
        if len(_CHECKED) >= _TEXT_SEEN_MAX:  # writers give the same few sets of names
            _CHECKED.clear()
        checked = tuple(
            (name, wire, rule, _TEXT_SEEN.setdefault(rule, {}) if rule in v.TEXT_RULES else None)
            for name, wire, rule in DRAFT_SPEC
            if wire in raw or rule not in _NONE_CLEAN
        )
        text = tuple(f[1] for f in checked if f[3] is not None)
        # Their values by one C call when every one is among the names given (the plan is
        # these names': never a KeyError), a tuple of two or more (`itemgetter`'s).
        values_of: _Values | None = (
            itemgetter(*text) if len(text) > 1 and given_all(text, given) else None
        )
        others = tuple(f for f in checked if f[3] is None)
        plan = _CHECKED[given] = (checked, text, others, {}, values_of)
    checked, text, others, passed, values_of = plan
    # The text fields' values as a writer gave them before, all passed: their clean values
    # as they were (the writer's routing repeats from write to write; refusals are not kept).
    key: tuple[Any, ...] | None = (
        values_of(raw) if values_of is not None else tuple(map(raw.get, text))
    )
    try:
        hit = passed.get(key)  # type: ignore[arg-type]
    except TypeError:  # an unhashable value: its rule refuses it below
        key = hit = None
    out: dict[str, Any]
    if hit is not None:
        out = hit.copy()
    else:
        out, others = _LEFT_OUT.copy(), checked  # a field left out: its rule's answer to None
    for name, wire, rule, seen in others:
        value = raw.get(wire)
        if seen is not None and type(value) is str:
            # A value this rule passed before is clean as it was.
            clean = seen.get(value, _MISSING)
            if clean is _MISSING:
                clean = v.FIELD_RULES[rule](wire, value)
                if len(seen) >= _TEXT_SEEN_MAX:
                    seen.clear()
                seen[value] = clean
            out[name] = clean
        elif value is None and rule in _NONE_CLEAN:  # a field not given: its rule's answer
            out[name] = _NONE_CLEAN[rule]
        elif rule == "body":  # the store's own limit
            out[name] = v.body(value, max_body_bytes, wire)
        else:
            out[name] = v.FIELD_RULES[rule](wire, value)
    if others is checked and key is not None and all(type(k) is str for k in key):
        if len(passed) >= _TEXT_SEEN_MAX:
            passed.clear()
        passed[key] = out.copy()  # (its other fields are set anew by every draft)
    return out


# What each rule that lets a field be left out makes of a missing value (None), asked of the
# rule itself once: a draft gives most fields no value.
_NONE_CLEAN: dict[str, Any] = {
    rule: v.FIELD_RULES[rule](rule, None)
    for rule in ("routing", "status", "artifact_ids", "metadata")
}
# Text values the TEXT_RULES passed, rule -> {value: clean value}: memos cleared when full.
# A rule's result depends on the value alone; the field name only words errors.
_TEXT_SEEN: dict[str, dict[str, Any]] = {}
_TEXT_SEEN_MAX = 4096
_MISSING = object()
# names given -> (the fields to visit, the text ones' wire names, the other fields, the text
# values that passed -> the draft's values they make with the fields left out, the getter of
# the text values when the names given hold them all)
_Field = tuple[str, str, str, dict[str, Any] | None]  # name, wire name, rule, its text memo
_Values = Callable[[Mapping[str, Any]], tuple[Any, ...]]
_Plan = tuple[
    tuple[_Field, ...],
    tuple[str, ...],
    tuple[_Field, ...],
    dict[tuple[Any, ...], dict[str, Any]],
    _Values | None,
]
_CHECKED: dict[tuple[str, ...], _Plan] = {}
_LEFT_OUT: dict[str, Any] = {}  # every draft field's clean value when it is not given


def given_all(wires: tuple[str, ...], given: tuple[str, ...]) -> bool:
    """Whether every name of `wires` is among the names `given`."""
    return set(wires).issubset(given)
