"""Read filters and read requests: the filter rules described once (`FILTER_RULES`), from
which both the page's SQL (reads.py) and the in-memory `Filters.matches` derive.

`Filters` and `ReadRequest` are frozen dataclasses made on first need (lazy.py): a read
validates, fills and replaces them through `lazy.instance`/`lazy.replace` without loading
`dataclasses` (the inbox and the task commands, issue 25)."""

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from mempalace_logstream import lazy
from mempalace_logstream import validation as v
from mempalace_logstream.lazy import Record
from mempalace_logstream.models import Event

if TYPE_CHECKING:
    from dataclasses import dataclass, replace
else:
    from mempalace_logstream.lazy import dataclass, replace

FROM_AGENT_NOTE = (
    "from_agent is your identity on reads and does not filter; pass writer=<agent> to filter "
    "by author"
)
# The read filters, described once: field -> (the events column it tests, how). "in": the
# column is one of the values; "not_in": none of them; "inbox": one of them or "*" (broadcast).
# The SQL of a page (`backends/queries/log.py`) and `Filters.matches` both derive from it.
FILTER_RULES: dict[str, tuple[str, str]] = {
    "stream": ("stream", "in"),
    "room": ("room", "in"),
    "topic": ("topic", "in"),
    "type": ("type", "in"),
    "correlation_id": ("correlation_id", "in"),
    "status": ("status", "in"),
    "writer": ("from_agent", "in"),
    "exclude_writer": ("from_agent", "not_in"),
    "to_agent": ("to_agent", "inbox"),
}
# (columns, their values) a page statement leaves out, the reader filling the values in.
FixedColumns = tuple[tuple[str, ...], tuple[str | None, ...]]
PAGE_FILTERS = tuple(name for name, (_, how) in FILTER_RULES.items() if how != "inbox")


@dataclass(frozen=True, kw_only=True)
class Filters(Record):
    """Validated read filters (S-5.1): OR within a field, AND across fields."""

    stream: tuple[str, ...] | None = None
    room: tuple[str, ...] | None = None
    topic: tuple[str, ...] | None = None
    type: tuple[str, ...] | None = None
    to_agent: tuple[str, ...] | None = None
    writer: tuple[str, ...] | None = None
    exclude_writer: tuple[str, ...] | None = None
    correlation_id: tuple[str, ...] | None = None
    status: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, **raw: Any) -> "Filters":
        given = {
            name: v.filter_values(name, raw[name])
            for name in v.FILTER_FIELDS
            if raw.get(name) is not None
        }
        return lazy.instance(cls, **given) if given else NO_FILTERS

    def matches(self, event: Event) -> bool:
        """`FILTER_RULES` evaluated in Python (SSE fan-out, the hub's waits): the page's SQL
        rules. The rules that have values are resolved once per Filters (`_rules`): a hub
        matches each new event against every open wait and subscriber."""
        for column, values, how in self._rules:
            value = getattr(event, column)
            if how == "not_in":
                if value in values:
                    return False
            elif value not in values and not (how == "inbox" and value == "*"):
                return False
        return True

    @functools.cached_property
    def _rules(self) -> tuple[tuple[str, frozenset[str], str], ...]:
        return tuple(
            (column, frozenset(values), how)
            for name, (column, how) in FILTER_RULES.items()
            if (values := getattr(self, name))
        )


@dataclass(frozen=True, kw_only=True)
class ReadRequest(Record):
    filters: Filters
    since_event_id: str | None = None
    before_event_id: str | None = None
    since_created_at: str | None = None
    limit: int = v.DEFAULT_LIST_LIMIT
    order: str | None = None
    preview: bool = False
    slim: bool = False
    note: str | None = None

    def replace(self, **changes: Any) -> "ReadRequest":
        return replace(self, **changes)

    @functools.cached_property
    def page_binds(self) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...], dict[str, Any]]:
        """What a page statement takes from the request (`plan.page_query`, which adds the
        bounds and the limit): the filter fields given with how many values each, the inbox
        values (the agents asked for, then "*"), and the named parameters `<field>_<i>` per
        filter value, `to_<i>` per inbox value, since_created_at. Worked out once per request
        (`read_request` gives a repeated read the same request)."""
        f = self.filters
        fields: list[tuple[str, int]] = []
        params: dict[str, Any] = {}
        for name in PAGE_FILTERS:
            values = getattr(f, name)
            if values:
                fields.append((name, len(values)))
                params.update((f"{name}_{i}", value) for i, value in enumerate(values))
        to_values = tuple(dict.fromkeys((*f.to_agent, "*"))) if f.to_agent else ()
        params.update((f"to_{i}", value) for i, value in enumerate(to_values))
        if self.since_created_at:
            params["since_created_at"] = self.since_created_at
        return tuple(fields), to_values, params

    @functools.cached_property
    def fixed_columns(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(columns, their values): each column the filters fix to one value (an "in" rule
        given one value). A page statement does not select it and the row reader fills the
        value in (issue 25: a page of one correlation id or type reads no copy of it per row,
        nor a NULL: each column of a row is a step in `sqlite3`, ~0.04 µs even for NULL)."""
        fields, _, binds = self.page_binds
        if not fields:
            return (), ()
        fixed = [
            (FILTER_RULES[name][0], binds[f"{name}_0"])
            for name, n in fields
            if n == 1 and FILTER_RULES[name][1] == "in"
        ]
        return tuple(c for c, _ in fixed), tuple(value for _, value in fixed)

    @functools.cached_property
    def fixed_plain(self) -> FixedColumns:
        """`fixed_columns` and the columns no event of the log sets: the links column, `sig`
        and `key_id` (their values None). What a page leaves out (`plan.read_page` decides
        when), made once per request (issue 25: a read builds no tuple for it; a poll after a
        moving cursor, a new request each read, builds this one alone)."""
        return self._fixed_with(("artifact_ids", "sig", "key_id"))

    @functools.cached_property
    def fixed_unlinked(self) -> FixedColumns:
        """`fixed_plain` on a log that holds a signed event: without the links column only."""
        return self._fixed_with(("artifact_ids",))

    @functools.cached_property
    def fixed_unsigned(self) -> FixedColumns:
        """`fixed_plain` on a log that links an artifact: without `sig` and `key_id` only."""
        return self._fixed_with(("sig", "key_id"))

    def _fixed_with(self, more: tuple[str, ...]) -> FixedColumns:
        columns, values = self.fixed_columns
        return (*columns, *more), (*values, *(None,) * len(more))


class ReadArgs(TypedDict, total=False):
    """The raw arguments of a read (`LogStore.event_list`, `event_wait`, `read_request`), any
    values: `read_request` checks them. Listed for mypy, which checks callers' keyword names;
    tests/test_event_spec.py holds it to `ReadRequest` and `validation.FILTER_FIELDS`."""

    stream: Any
    room: Any
    topic: Any
    type: Any
    to_agent: Any
    writer: Any
    exclude_writer: Any
    correlation_id: Any
    status: Any
    from_agent: Any
    since_event_id: Any
    before_event_id: Any
    since_created_at: Any
    limit: Any
    order: Any
    preview: Any
    slim: Any


NO_FILTERS = lazy.instance(Filters)
# The names a read takes: the request's fields, the filters, and from_agent (a note, no filter).
_READ_PARAMETERS = frozenset(
    (*(name for name, *_ in lazy.declared(ReadRequest)), *v.FILTER_FIELDS, "from_agent")
)


# Validated requests by their raw arguments (`read_request`): an agent or a hub asks the same
# few reads again and again. Only arguments of these exact types are remembered (a key holds
# each value's type: `limit=True` must not find the request of `limit=1`).
_REMEMBERED_TYPES = frozenset({str, int, bool, type(None)})
# Of those, the types whose values equal no value of another of them (`True == 1`): arguments
# of only these are keyed by their items alone (issue 25: no type tuple built per read).
_ITEM_KEYED = (str, int, type(None))
_REMEMBERED_MAX = 256
_remembered: dict[tuple[Any, ...], ReadRequest] = {}


def read_request(**raw: Any) -> ReadRequest:
    """Validate the raw read arguments shared by list, wait, watch, SSE and the inbox.

    Validation is a pure function of the arguments and a `ReadRequest` is frozen, so a request
    validated before is given again (issue 25: ~0.5 µs instead of ~6 for a repeated read)."""
    return request_of(raw)


def request_of(raw: Mapping[str, Any]) -> ReadRequest:
    """`read_request` of the arguments already in a dict (not changed): a caller that took
    them as `**args` passes its own dict, not a copy (issue 25)."""
    key: tuple[Any, ...] = tuple(raw.items())
    for value in raw.values():
        if type(value) not in _ITEM_KEYED:
            break
    else:  # str, int and None values: equal values are of equal types, the items are the key
        req = _remembered.get(key)
        if req is None:
            req = _remembered_new(raw, key)
        return req
    if _REMEMBERED_TYPES.issuperset(map(type, raw.values())):
        # A bool among them: each value's type is in the key (never equal to an items key,
        # whose members are all pairs).
        key = (*key, *map(type, raw.values()))
        req = _remembered.get(key)
        if req is None:
            req = _remembered_new(raw, key)
        return req
    return _validate(raw)


def _remembered_new(raw: Mapping[str, Any], key: tuple[Any, ...]) -> ReadRequest:
    req = _validate(raw)
    if len(_remembered) >= _REMEMBERED_MAX:
        _remembered.clear()
    _remembered[key] = req
    return req


def _validate(raw: Mapping[str, Any]) -> ReadRequest:
    unknown = raw.keys() - _READ_PARAMETERS
    if unknown:
        name = sorted(unknown)[0]
        raise v.fail(name, "is not a known parameter")
    filters = Filters.parse(**raw)
    since = raw.get("since_event_id")
    since_clean = (
        "tip"
        if isinstance(since, str) and since.strip() == "tip"
        else v.routing("since_event_id", since)
    )
    from_agent = v.routing("from_agent", raw.get("from_agent"))
    return lazy.instance(
        ReadRequest,
        filters=filters,
        since_event_id=since_clean,
        before_event_id=v.routing("before_event_id", raw.get("before_event_id")),
        since_created_at=v.since_created_at(raw.get("since_created_at")),
        limit=v.limit(raw.get("limit")),
        order=v.order(raw.get("order")),
        preview=v.boolean("preview", raw.get("preview")),
        slim=v.boolean("slim", raw.get("slim")),
        note=FROM_AGENT_NOTE if from_agent and not filters.writer else None,
    )
