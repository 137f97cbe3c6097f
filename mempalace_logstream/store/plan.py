"""The page rule, once, without SQLAlchemy: what a read returns given a cursor, a filter, an
order and a limit, and the one row -> `Event` conversion.

`read_page` is the algorithm of every page (S-5.1-S-5.3): after the cursor's seq, up to the
newest event below a window end, the filter of `FILTER_RULES`, limit + 1 rows to know whether
more remain, and the cursor of the newest event examined. It asks a `PageStatements` for four
statements; the store answers with its SQL compiled through SQLAlchemy (reads.py), the lean
inbox reader of the hook path with the same SQL text, kept as generated constants (lean.py).
`page_query` names a page's statement shape and binds its parameters, for both.
Must not import sqlalchemy, the backends or the rest of the store: the hook path imports it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mempalace_logstream import errors, lazy
from mempalace_logstream.models import EVENT_SPEC, NULLABLE_FIELDS, ROW_ERROR, Event, Page

if TYPE_CHECKING:
    from mempalace_logstream.store.filters import ReadRequest

# Read statements select the Event fields in declaration order, the artifact links column in
# the `artifact_ids` slot, so a row zips straight into an Event's __dict__.
EVENT_FIELDS = tuple(name for name, _spec in EVENT_SPEC)
SEQ_AT, ID_AT = EVENT_FIELDS.index("seq"), EVENT_FIELDS.index("id")
_OSEQ_AT, _LINKS_AT = EVENT_FIELDS.index("origin_seq"), EVENT_FIELDS.index("artifact_ids")
_BODY_AT = EVENT_FIELDS.index("body")
# A page row carries its artifact links as "position<RS>id<US>position<RS>id…" (control
# characters never occur in ids), so a read needs no second statement over the page's ids.
POS_SEP, LINK_SEP = "\x1e", "\x1f"
# An inbox read with up to this many to_agent values runs one index-ordered leg per value
# (on a backend with `split_inbox`); more values fall back to one IN list.
SPLIT_TO_AGENT_MAX = 8
# A page of fewer rows is type-tested (≤ ~3 µs) without asking whether its rows are known
# (`PageStatements.typed`): a wait or a feed reading the events just committed pays nothing
# for what only a page read again gains (issue 25).
TYPED_MIN_ROWS = 8

Row = Sequence[Any]
# A page statement's shape: which filter fields with how many values each, how many inbox
# values, one leg per inbox value or not, a since_created_at bound, the order, the columns
# left out (`read_page`: fixed by the filter or by the log's facts, filled in by the reader).
PageShape = tuple[tuple[tuple[str, int], ...], int, bool, bool, str, tuple[str, ...]]


def parse_links(links: str | None) -> tuple[str, ...]:
    """The artifact ids of a links column value, in position order."""
    if not links:
        return ()
    pairs = [item.split(POS_SEP, 1) for item in links.split(LINK_SEP)]
    return tuple(aid for _, aid in sorted(pairs, key=lambda p: int(p[0])))


def events_from_rows(
    rows: Sequence[Row], typed: bool = False, fixed: tuple[tuple[str, ...], Row] = ((), ())
) -> list[Event]:
    """Events from rows of the read columns (plain tuples or Rows): the one row -> Event.
    `typed`: the rows are known to hold only values of their columns' types
    (`PageStatements.typed`), and are not tested but for `body`, the one column a stored row
    may see change (a redaction's tombstone): the fill gives up on a body that is not text
    (None), and the page is tested row by row. `fixed`: (columns, values) the rows leave
    out (a page statement does not select them), each event takes the value (`read_page`).

    A frozen dataclass assigns every field through `object.__setattr__` in `__init__`; the
    rows are filled by `_fill_events` instead (~0.35 µs a row; `update(zip(...))` of the
    `__dict__` was ~1.2). A row whose values are not of their column's type (`repair_row`)
    reads with a `row_error`. The type test runs once over the whole page (~0.4 µs a row);
    only a page that fails it is tested row by row. `seq` is not tested on its own: it is
    the table's INTEGER PRIMARY KEY on SQLite (the rowid: nothing else can be stored there)
    and a BIGINT NOT NULL on PostgreSQL, so a stored row's `seq` is always an int.
    """
    if not rows:
        return []
    names, values = fixed
    if names:
        fill = _FILLS.get(names) or _fill_with(names)
        if typed or _plain_page(rows):
            filled = fill(rows, _Filling, Event, parse_links, values)
            if filled is not None:
                return filled
        rows = [_with_values(row, names, values) for row in rows]  # then tested as read
    elif typed or _plain_page(rows):
        filled = _fill_events(rows, _Filling, Event, parse_links, ())
        if filled is not None:
            return filled
    out: list[Event] = []
    for row in rows:
        problem = None
        if (
            not _PLAIN_TYPES.issuperset(map(type, row))
            or type(row[_OSEQ_AT]) is not int
            or type(row[SEQ_AT]) is not int
        ):
            row, problem = repair_row(EVENT_FIELDS, row)
        filled = _fill_events((row,), _Filling, Event, parse_links, ())
        if filled is None:  # (`repair_row` makes every text column text)
            raise AssertionError("a repaired row's body is not text")
        event = filled[0]
        if problem is not None:
            event.__dict__[ROW_ERROR] = problem
        out.append(event)
    return out


def _plain_page(rows: Sequence[Row]) -> bool:
    """The type test of a whole page: only text, NULL and integers, an integer origin_seq."""
    return _PLAIN_TYPES.issuperset(
        map(type, itertools.chain.from_iterable(rows))
    ) and _INT_TYPE.issuperset(map(type, map(_origin_seq_of, rows)))


def _with_values(row: Row, names: tuple[str, ...], values: Row) -> Row:
    """The whole row of the read columns: `row` without the columns `names`, their `values`
    put back in their places."""
    given = dict(zip(names, values, strict=True))
    rest = iter(row)
    return tuple(given[name] if name in given else next(rest) for name in EVENT_FIELDS)


class _Filling:
    """A plain object an Event is filled in before it becomes one: plain attribute stores
    (the interpreter's fastest), then `__class__ = Event`. Both classes are plain Python
    classes with an instance `__dict__` (the same layout), so the assignment is allowed and
    leaves an ordinary `Event` (the frozen dataclass forbids the stores, not the result)."""


def _events_filler(fixed: tuple[str, ...] = ()) -> Callable[..., list[Event] | None]:
    """`fill(rows, _Filling, Event, parse_links, values)`: an Event per row of the read
    columns, each value stored under its field's name (the links column as the artifact ids;
    a field of `fixed` is not in the rows and takes its value of `values`), generated once
    from `EVENT_FIELDS` (as `dataclasses` generates `__init__`): one unpacking per row, no
    `zip` and no per-field loop in Python (issue 25). None when a row's body is not text (a
    redaction behind the API: `events_from_rows` then tests the page), so that a reader may
    trust what it knows of a row's other columns whenever it read them (they never change)."""
    if any(EVENT_FIELDS.index(name) <= max(ID_AT, SEQ_AT, _OSEQ_AT) for name in fixed):
        raise ValueError("a fixed column must come after id, seq and origin_seq in a row")
    if "body" in fixed:
        raise ValueError("the body is read from every row (the fill tests its type)")
    names = [f"v{i}" for i, name in enumerate(EVENT_FIELDS) if name not in fixed]
    lines = ["def fill(rows, filling, event_type, parse_links, values):"]
    if fixed:
        lines.append(f"    ({', '.join(f'f{k}' for k in range(len(fixed)))},) = values")
    if "artifact_ids" in fixed:  # a links column left out: its ids, once for every row
        k = fixed.index("artifact_ids")
        lines.append(f"    f{k} = parse_links(f{k}) if f{k} else ()")
    lines += [
        "    out = []",
        "    append, text, type_of = out.append, str, type",
        f"    for ({', '.join(names)},) in rows:",
        f"        if type_of(v{_BODY_AT}) is not text:",
        "            return None",
        "        event = filling()",
    ]
    for i, name in enumerate(EVENT_FIELDS):
        if name in fixed:
            value = f"f{fixed.index(name)}"
        elif i == _LINKS_AT:
            value = f"parse_links(v{i}) if v{i} else ()"
        else:
            value = f"v{i}"
        lines.append(f"        event.{name} = {value}")
    lines += ["        event.__class__ = event_type", "        append(event)", "    return out"]
    scope: dict[str, Any] = {}
    exec("\n".join(lines), scope)  # noqa: S102 - our own text, from the field names
    fill: Callable[..., list[Event] | None] = scope["fill"]
    return fill


def _first_fill(*args: Any) -> list[Event] | None:
    """`_fill_events` on its first call: generated then (`exec` compiles, ~2M instructions: a
    process that reads no row, a CLI append, never pays it; issue 25), then it is the name."""
    global _fill_events
    _fill_events = _events_filler()
    return _fill_events(*args)


_fill_events: Callable[..., list[Event] | None] = _first_fill
# The fill of each set of fixed columns read lately (`events_from_rows`).
_FILLS: dict[tuple[str, ...], Callable[..., list[Event] | None]] = {}


def _fill_with(fixed: tuple[str, ...]) -> Callable[..., list[Event] | None]:
    if len(_FILLS) >= 64:
        _FILLS.clear()
    fill = _FILLS[fixed] = _events_filler(fixed)
    return fill


class _PageFilling:
    """As `_Filling`, for a `Page`."""


def _page_maker() -> Callable[..., Page]:
    """`new_page(events, cursor, has_more, note, scanned_seq, preview, slim)`: a `Page` filled
    like an Event (`_events_filler`), the other fields at their defaults: a read makes one per
    call, and the frozen dataclass's `__init__` (one `object.__setattr__` per field) was ~3 µs
    of a 60 µs read (issue 25). Generated once from the fields of `Page`."""
    given = ("events", "cursor", "has_more", "note", "scanned_seq", "preview", "slim")
    fields = {name: default for name, default, _metadata in lazy.declared(Page)}
    if any(default is lazy.MISSING for name, default in fields.items() if name not in given):
        raise TypeError("a Page field without a plain default is not given by new_page")
    lines = [f"def new_page({', '.join(given)}):", "    page = filling()"]
    for name in fields:
        value = name if name in given else f"defaults[{name!r}]"
        lines.append(f"    page.{name} = {value}")
    lines += ["    page.__class__ = page_type", "    return page"]
    scope: dict[str, Any] = {
        "filling": _PageFilling,
        "page_type": Page,
        "defaults": {name: default for name, default in fields.items() if name not in given},
    }
    exec("\n".join(lines), scope)  # noqa: S102 - our own text, from the field names
    new_page: Callable[..., Page] = scope["new_page"]
    return new_page


def _first_new_page(*args: Any) -> Page:
    """`new_page` on its first call: generated then (as `_fill_events`), then it is the name."""
    global new_page
    new_page = _page_maker()
    return new_page(*args)


new_page: Callable[..., Page] = _first_new_page
_origin_seq_of = operator.itemgetter(_OSEQ_AT)
_INT_TYPE = frozenset({int})


# The type of each read column's value as the store writes it (None too where it is nullable),
# for the event fields and the columns of a compact sync row. SQLite keeps whatever storage
# class a writer behind the API chose (a BLOB in a text column, text in an integer one), and
# such a row must read with an error, never fail its page (S-8.10).
_INTEGER_COLUMNS = frozenset(name for name, spec in EVENT_SPEC if spec.kind in ("seq", "int"))
# The links column (artifact_ids) is NULL for an event without artifacts.
_NULLABLE_COLUMNS = NULLABLE_FIELDS | {"artifact_ids"}
# The quick test of a row (~1 µs): only text, NULL and integers, and an integer origin_seq
# (seq is SQLite's rowid, always an integer). A number in a text column passes it, but cannot
# be stored: SQLite's text affinity turns it into text, PostgreSQL refuses it.
_PLAIN_TYPES = frozenset({str, int, type(None)})


def repair_row(names: Sequence[str], row: Row) -> tuple[Row, str | None]:
    """`row` (values of the columns `names`) with every value of the wrong type replaced, and
    what was wrong (None when nothing was: the row's type signature is then remembered)."""
    values = list(row)
    problems = []
    for i, name in enumerate(names):
        value = values[i]
        if name in _INTEGER_COLUMNS:
            if type(value) is not int:
                values[i] = 0
                problems.append(f"{name} is stored as {_storage_class(value)}, not an integer")
        elif type(value) is not str and not (value is None and name in _NULLABLE_COLUMNS):
            values[i], how = _as_text(name, value)
            problems.append(f"{name} is stored as {_storage_class(value)}, not text ({how})")
    if not problems:
        return row, None
    return tuple(values), "; ".join(problems)


def _storage_class(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"a BLOB of {len(value)} bytes"
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "TEXT"
    return "REAL" if isinstance(value, float) else "INTEGER"


def _as_text(name: str, value: Any) -> tuple[str | None, str]:
    """A text column's stand-in for `value`, and how it was made."""
    if name == "artifact_ids":
        return None, "its artifact ids are left out"
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8"), "read as its UTF-8 text"
        except UnicodeDecodeError:
            return "", "not UTF-8: read as empty"
    if value is None:
        return "", "read as empty"
    return str(value), "read as its text"


def page_query(
    req: ReadRequest,
    lo: int,
    top_seq: int,
    order: str,
    split_inbox: bool,
    split_max: int,
    fixed: tuple[str, ...] | None = None,
) -> tuple[tuple[Any, ...], PageShape, dict[str, Any]]:
    """(cache key, shape, parameters) of the page statement: matches in (lo, top_seq], in seq
    order, limit + 1 rows, without the columns `fixed` (`read_page`'s; by default those the
    filter fixes). Named parameters: lo, top, lim, `<field>_<i>` per filter value, `to_<i>`
    per inbox value (the agents asked for, then "*"), since_created_at."""
    fields, to_values, binds = req.page_binds
    params: dict[str, Any] = {"lo": lo, "top": top_seq, "lim": req.limit + 1, **binds}
    split = split_inbox and 1 < len(to_values) <= split_max
    if fixed is None:
        fixed = req.fixed_columns[0]
    shape: PageShape = (fields, len(to_values), split, bool(req.since_created_at), order, fixed)
    return ("log.page", *shape), shape, params


def wait_request(req: ReadRequest) -> ReadRequest:
    """A wait's request: oldest first unless it says otherwise (`event_wait`, S-5.4)."""
    return req if req.order is not None else req.replace(order="asc")


def unknown_event(field: str, ident: str) -> errors.NotFoundError:
    """A cursor (or window end) that names no event of this log."""
    return errors.NotFoundError(f"{field} {ident!r} not found", field=field, ident=ident)


class PageStatements(Protocol):
    """The four statements of a page, in one read snapshot."""

    def seq_of(self, ident: str, field: str) -> int:
        """The seq of event `ident`; NotFoundError naming `field` when the log lacks it."""

    def top(self, hi: int | None) -> Row | None:
        """(seq, id) of the newest event below seq `hi` (all events when None), and the log's
        facts after them if the statement reads them (`read_page`)."""

    def id_at(self, seq: int) -> str | None:
        """The id of the event at `seq`."""

    def page(
        self, req: ReadRequest, lo: int, top_seq: int, order: str, fixed: tuple[str, ...]
    ) -> Sequence[Row]:
        """The rows of `page_query`'s statement without the columns `fixed` (`read_page`'s)."""

    def typed(self, rows: Sequence[Row], low: int, high: int) -> bool:
        """Whether `rows` (`page`'s, of seqs low..high) are known to hold only values of their
        columns' types (S-8.10: else each is tested and a wrong one reads with `row_error`):
        a fact of the backend (PostgreSQL's column types) or of the log's seqs (SQLite)."""

    def tested(self, rows: Sequence[Row], low: int, high: int) -> None:
        """`rows` (`page`'s, of seqs low..high) passed the row reader's type test: the backend
        may remember it."""


def read_page(st: PageStatements, req: ReadRequest, after_seq: int | None = None) -> Page:
    """One page of a validated request; `after_seq` (a Page's `scanned_seq`) resumes it.

    Order: explicit `order` wins; else asc with a cursor, desc without. `cursor` is the newest
    event examined, filtered or not (the last row returned when an ascending page is cut)."""
    lo = after_seq if after_seq is not None else 0
    hi: int | None = None
    if after_seq is None and req.since_event_id not in (None, "tip"):
        lo = st.seq_of(req.since_event_id, "since_event_id")
    if req.before_event_id:
        hi = st.seq_of(req.before_event_id, "before_event_id")
    top = st.top(hi)
    if after_seq is None and req.since_event_id == "tip":
        lo = int(top[0]) if top else 0
    has_cursor = req.since_event_id is not None or after_seq is not None
    order = req.order or ("asc" if has_cursor else "desc")
    if top is None or (top_seq := int(top[0])) <= lo:
        cursor = st.id_at(lo) if lo else None
        return new_page((), cursor, False, req.note, lo, req.preview, req.slim)
    top_id = top[1]
    # The columns the page statement leaves out, each filled in by the reader: those the
    # filter fixes, and where the tip row carries the log's facts (`log.tip_facts_statement`:
    # its third and fourth values), the links column (NULL on every row) while no event links
    # an artifact and `sig`, `key_id` while no event is signed (issue 25: each column of each
    # row is a step of the `sqlite3` module, NULL too, ~0.08 µs). Written here, not in a
    # function: a read makes no call for it; each request works the columns and values out
    # once (`fixed_plain`, `fixed_unlinked`, `fixed_unsigned`).
    fixed: tuple[tuple[str, ...], Row] = req.fixed_columns
    if len(top) > 2:
        if not top[2]:
            fixed = req.fixed_unlinked if top[3] else req.fixed_plain
        elif not top[3]:
            fixed = req.fixed_unsigned
    rows = st.page(req, lo, top_seq, order, fixed[0])
    typed = False
    if len(rows) >= TYPED_MIN_ROWS:  # before any slicing: `typed` may look at the rows object
        # A stored row's seq is an int (`events_from_rows`).
        low, high = rows[0][SEQ_AT], rows[-1][SEQ_AT]
        if low > high:
            low, high = high, low
        typed = st.typed(rows, low, high)
        if not typed and _plain_page(rows):
            typed = True
            st.tested(rows, low, high)
    has_more = len(rows) > req.limit
    if has_more:
        rows = rows[: req.limit]
    if order == "asc" and has_more:
        scanned_seq, cursor = int(rows[-1][SEQ_AT]), rows[-1][ID_AT]
    else:
        scanned_seq, cursor = top_seq, top_id
    events = tuple(events_from_rows(rows, typed, fixed))
    return new_page(events, cursor, has_more, req.note, scanned_seq, req.preview, req.slim)
