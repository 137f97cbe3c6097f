"""The statements of the task projection (RFC 0007): its rows (store/tasks.py), the fold's
checkpoints (task_cache.py), the reads of `task_status` / `task_list` (task_reads.py), what
`doctor` checks (task_health.py) and what the reminder loop reads (reminders.py).

The lifecycle's names (event types, states) are the caller's: they come in as values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor
from mempalace_logstream.backends.queries import by_dialect, entry_test, opaque_value

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
    from mempalace_logstream.backends.queries.log import EventSelect
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

LEASED = ("claimed", "working")  # the states whose lease runs: past it they read as open

# ----------------------------------------------------------------------------- the rows


def doc(ex: Executor, task_id: str) -> str | None:
    """The stored task document (`doc_json`) of `task_id`, or None."""
    rows = ex.rows("tasks.doc", _select_doc, {"id": task_id})
    return str(rows[0][0]) if rows else None


def _select_doc() -> sa.Select[Any]:
    return sa.select(schema.tasks.c.doc_json).where(schema.tasks.c.task_id == sa.bindparam("id"))


def columns() -> tuple[str, ...]:
    """The task row's columns, in the table's order."""
    return tuple(c.name for c in schema.tasks.c)


def insert(ex: Executor, row: dict[str, Any]) -> None:
    ex.insert("tasks.insert", "tasks", [row])


def update(ex: Executor, row: dict[str, Any]) -> None:
    """Every column of the row `row["task_id"]` set to `row`'s values."""
    params = {f"new_{k}": val for k, val in row.items() if k != "task_id"}
    ex.run("tasks.update", update_statement, {"id": row["task_id"], **params})


def update_statement() -> sa.Update:
    """`update`'s statement: parameters `id` and `new_<column>` for every other column (the
    bench times it alone: bench_tasks.py's move section)."""
    t = schema.tasks.c
    values: dict[str, Any] = {c: sa.bindparam(f"new_{c}") for c in columns() if c != "task_id"}
    return schema.tasks.update().where(t.task_id == sa.bindparam("id")).values(**values)


def clear(ex: Executor) -> None:
    """Delete every task row (a rebuild)."""
    ex.run("tasks.clear", lambda: schema.tasks.delete(), {})


def open_children(ex: Executor, parent_id: str, open_states: Sequence[str]) -> int:
    """How many tasks under `parent_id` are in one of `open_states`."""
    n = len(open_states)

    def build() -> sa.Select[Any]:
        t = schema.tasks.c
        # OR of equalities, not IN: the statement is compiled once, with no expanding list.
        still_open = sa.or_(*(t.state == sa.bindparam(f"s{i}") for i in range(n)))
        return (
            sa.select(sa.func.count())
            .select_from(schema.tasks)
            .where(t.parent_task_id == sa.bindparam("pid"), still_open)
        )

    params = {"pid": parent_id, **{f"s{i}": s for i, s in enumerate(open_states)}}
    return int(ex.rows(("tasks.open-children", n), build, params)[0][0])


def set_meta(ex: Executor, key: str, value: str) -> None:
    """The `logstream_meta` row `key` set to `value` (the fold's version)."""
    ex.run("tasks.meta-clear", _clear_meta, {"key": key})
    ex.insert("tasks.meta-insert", "logstream_meta", [{"key": key, "value": value}])


def _clear_meta() -> sa.Delete:
    return schema.meta.delete().where(schema.meta.c.key == sa.bindparam("key"))


# ----------------------------------------------------------------------------- threads


def thread(ex: Executor, select: EventSelect, task_id: str) -> Sequence[Any]:
    """The read rows of every event of a task's thread (its correlation id), in log order."""

    def build() -> sa.Select[Any]:
        return select(schema.events.c.correlation_id == sa.bindparam("cid")).order_by(
            schema.events.c.seq
        )

    return ex.rows("tasks.thread", build, {"cid": task_id})


def request_ids(ex: Executor, request_type: str) -> list[str]:
    """The correlation ids of every request event, in HLC order (parents before children)."""

    def build() -> sa.Select[Any]:
        return (
            sa.select(schema.events.c.correlation_id)
            .where(
                schema.events.c.type == sa.bindparam("type"),
                schema.events.c.correlation_id.is_not(None),
            )
            .order_by(schema.events.c.hlc, schema.events.c.id)
        )

    return [str(r[0]) for r in ex.rows("tasks.request-ids", build, {"type": request_type})]


def _upto() -> sa.ColumnElement[bool]:
    h: sa.BindParameter[str] = sa.bindparam("h")
    ident: sa.BindParameter[str] = sa.bindparam("id")
    return sa.or_(
        schema.events.c.hlc < h, sa.and_(schema.events.c.hlc == h, schema.events.c.id <= ident)
    )


def fold_count(ex: Executor, task_id: str, hlc: str, event_id: str) -> int:
    """How many events of the thread sort at or before (hlc, event_id)."""

    def build() -> sa.Select[Any]:
        return (
            sa.select(sa.func.count())
            .select_from(schema.events)
            .where(schema.events.c.correlation_id == sa.bindparam("cid"), _upto())
        )

    params = {"cid": task_id, "h": hlc, "id": event_id}
    return int(ex.rows("tasks.fold-count", build, params)[0][0])


def thread_count(ex: Executor, task_id: str) -> int:
    """How many events the thread holds."""

    def build() -> sa.Select[Any]:
        return (
            sa.select(sa.func.count())
            .select_from(schema.events)
            .where(schema.events.c.correlation_id == sa.bindparam("cid"))
        )

    return int(ex.rows("tasks.thread-count", build, {"cid": task_id})[0][0])


def fold_after(
    ex: Executor, select: EventSelect, task_id: str, hlc: str, event_id: str
) -> Sequence[Any]:
    """The read rows of the thread's events that sort after (hlc, event_id), unordered."""

    def build() -> sa.Select[Any]:
        return select(schema.events.c.correlation_id == sa.bindparam("cid"), sa.not_(_upto()))

    params = {"cid": task_id, "h": hlc, "id": event_id}
    return ex.rows("tasks.fold-after", build, params)


def fold_thread(ex: Executor, select: EventSelect, task_id: str) -> Sequence[Any]:
    """The read rows of the thread's events, unordered (the fold sorts them)."""

    def build() -> sa.Select[Any]:
        return select(schema.events.c.correlation_id == sa.bindparam("cid"))

    return ex.rows("tasks.fold-thread", build, {"cid": task_id})


def thread_ids(ex: Executor, task_id: str) -> tuple[list[str], list[str]]:
    """(event ids of the thread, artifact ids its events reference, with repeats), in HLC
    order."""

    def build_events() -> sa.Select[Any]:
        return (
            sa.select(schema.events.c.id)
            .where(schema.events.c.correlation_id == sa.bindparam("cid"))
            .order_by(schema.events.c.hlc, schema.events.c.id)
        )

    def build_artifacts() -> sa.Select[Any]:
        return (
            sa.select(schema.event_artifacts.c.artifact_id)
            .join(schema.events, schema.events.c.id == schema.event_artifacts.c.event_id)
            .where(schema.events.c.correlation_id == sa.bindparam("cid"))
            .order_by(schema.events.c.hlc, schema.events.c.id, schema.event_artifacts.c.position)
        )

    ids = [r[0] for r in ex.rows("tasks.thread-ids", build_events, {"cid": task_id})]
    arts = [r[0] for r in ex.rows("tasks.thread-arts", build_artifacts, {"cid": task_id})]
    return ids, arts


# ----------------------------------------------------------------------------- reads


def texts(ex: Executor, request_id: str, question_id: str, cap: int | None) -> Sequence[Any]:
    """(id, body) of the two events, each body cut to `cap` + 1 characters when `cap`."""
    params: dict[str, Any] = {"r": request_id, "q": question_id}
    if cap:
        params["cap"] = cap
    build = _texts_capped if cap else _texts_whole
    return ex.rows(("tasks.texts", bool(cap)), build, params)


def _texts_whole() -> sa.Select[Any]:
    where = sa.or_(schema.events.c.id == sa.bindparam("r"), schema.events.c.id == sa.bindparam("q"))
    return sa.select(schema.events.c.id, schema.events.c.body).where(where)


def _texts_capped() -> sa.Select[Any]:
    where = sa.or_(schema.events.c.id == sa.bindparam("r"), schema.events.c.id == sa.bindparam("q"))
    return sa.select(schema.events.c.id, _prefix()).where(where)


def _prefix() -> sa.ColumnElement[Any]:
    # One character past the cap, so that a cut can be told from a body of exactly `cap`.
    return sa.func.substr(schema.events.c.body, 1, sa.bindparam("cap") + 1)


def page_texts(ex: Executor, ids: list[str], cap: int) -> Sequence[Any]:
    """(id, body cut to `cap` + 1 characters) of the events `ids`, in one read. The ids go as
    one JSON array: one statement shape and one parameter for any page (an IN list of 50 ids
    and more was a shape per length, and psycopg parses a statement of over 50 parameters
    anew on every call: ~0.15 ms of a PostgreSQL `task_list`)."""
    params: dict[str, Any] = {"ids": json.dumps(ids), "cap": cap}
    return ex.rows("tasks.page-texts", _page_texts, params)


# The JSON array :ids as the outer loop of a join on the events' ids (on SQLite CROSS JOIN
# fixes the order, as ledger.py's page does).
_PAGE_IDS = {
    "sqlite": "json_each(:ids) AS j CROSS JOIN events AS e ON e.id = j.value",
    "postgresql": "json_array_elements_text(CAST(:ids AS json)) AS j(value)"
    " JOIN events AS e ON e.id = j.value",
}


def _page_texts() -> sa.Executable:
    texts = {
        d: f"SELECT e.id, substr(e.body, 1, :cap + 1) FROM {ids}" for d, ids in _PAGE_IDS.items()
    }
    executable: sa.Executable = by_dialect()(texts)
    return executable


def children(ex: Executor, parent_id: str) -> Sequence[Any]:
    """(task_id, doc_json) of the tasks under `parent_id`, oldest move first."""

    def build() -> sa.Select[Any]:
        t = schema.tasks.c
        return (
            sa.select(t.task_id, t.doc_json)
            .where(t.parent_task_id == sa.bindparam("pid"))
            .order_by(t.updated_seq)
        )

    return ex.rows("tasks.children", build, {"pid": parent_id})


def listing(
    ex: Executor,
    state: str | None,
    filters: dict[str, str],
    *,
    now_ms: int,
    before: int,
    n: int,
    states: tuple[str, ...],
) -> Sequence[Any]:
    """(updated_seq, doc_json) of up to `n` tasks moved before `before`, newest first, with
    `filters` (column -> value) and `state` (`open` includes held tasks whose lease passed at
    `now_ms`; None: any of `states`, every state a row may hold). `n` is a literal of the
    statement: one shape per `n` (the caller keeps them few)."""
    given = tuple(filters)
    params: dict[str, Any] = {**filters, "now": now_ms, "before": before}
    key = ("tasks.list", state, given, n)
    return ex.rows(key, lambda: _list_query(state, given, n, states), params)


def _list_query(
    state: str | None, given: tuple[str, ...], rows: int, states: tuple[str, ...]
) -> sa.Executable:
    """Newest activity first, each leg an index-ordered range cut at the page, merged (an OR
    would sort every live task): one leg per state, on `(state, updated_seq)` (or
    `(to_agent, state, updated_seq)`, `(stream, state, updated_seq)`, a parent's
    `(parent_task_id, state, updated_seq, to_agent)`, which a listing naming a parent walks:
    `PARENT`), the only indexes ordered by `updated_seq` a state's leg can walk (the index
    on `updated_seq` alone is partial, `ix_tasks_any_state`, for the listing of any state
    with no filter, which states its predicate: a planner with statistics walked a plain
    one filtering the state, issue 25). `state=open` also holds claimed/working tasks whose
    lease has passed, found through `(state, lease_expires_ms)`; no state is every state
    (or, filtered by an agent and no parent, one leg on the agent's own index: `_OWN_ORDER`).
    SQLite merges the legs' keys, not their documents (`_merged_keys`).

    The plan must not depend on the values either: PostgreSQL plans a prepared statement
    (psycopg prepares a statement run 5 times) once for any values only when that plan
    costs no more than the ones it makes for each call's values, else it plans again at
    every call (~0.3 ms of server CPU for the `state=open` union). So the states and the
    page size are literals, and every value reaches PostgreSQL as an InitPlan `(SELECT $n)`,
    which a plan for the values cannot see into either (`_value`)."""
    t = schema.tasks.c

    def hidden(name: str) -> bool:  # a filter tested on the parent's rows, not walked
        return PARENT in given and name != PARENT

    passed = sa.and_(
        t.lease_expires_ms.is_not(None),
        # The range's lower end holds for any lease, and makes the pair a range, which
        # PostgreSQL estimates at 0.5 % of the rows when an end is unknown, not a third: a
        # held state's leg stays a small sort however many tasks are held (a plan's cost
        # over 100,000 would be compiled by JIT at every call).
        t.lease_expires_ms >= sa.literal_column(str(-(2**63))),
        t.lease_expires_ms <= _value("now", sa.BigInteger),
    )

    def leg(
        stored: str | None,
        *where: sa.ColumnElement[bool] | sa.TextClause,
        by_lease: bool = False,
        keys: bool = False,
    ) -> sa.Select[Any]:
        # `by_lease`: the few held tasks whose lease passed are found through (state,
        # lease_expires_ms); `updated_seq + 0` keeps a planner from walking every held task
        # in (state, updated_seq) order instead, and `column || ''` (the same test: NULL
        # stays NULL) one from walking every held task of an agent through (to_agent,
        # state, updated_seq) (issue 25: 1,000 heap rows, ~0.8 ms, for none).
        # A parent's leg walks `(parent_task_id, state, updated_seq, to_agent)` and tests the
        # other filters on its rows the same way: a planner could take an agent's or a
        # stream's index instead, and walk all of its tasks for a parent's few. The agent's
        # test reads the index entry's `to_agent` (`entry_test`: no row is read for a child
        # of another agent).
        seq = t.updated_seq + sa.literal_column("0") if by_lease else t.updated_seq
        filters = [
            entry_test()(t[name], _value(name, sa.Text))
            if name in PARENT_ENTRY and hidden(name) and not by_lease
            else (
                t[name].op("||")(sa.literal_column("''")) if by_lease or hidden(name) else t[name]
            )
            == _value(name, sa.Text)
            for name in given
        ]
        if stored is not None:
            where = (t.state == _literal(stored), *where)
        return (
            sa.select(t.updated_seq, _rowid().label("row") if keys else t.doc_json)
            .where(seq < _value("before", sa.BigInteger), *filters, *where)
            .order_by(seq.desc())
            .limit(sa.literal_column(str(rows)))
        )

    if state in LEASED:
        return leg(state, sa.not_(passed))
    if state is not None and state != "open":
        return leg(state)
    if state is None and not given:  # ix_tasks_any_state: its predicate, word for word
        return leg(None, sa.text(schema.TASKS_ANY_STATE_WHERE))
    if state is None and _OWN_ORDER & set(given) and PARENT not in given:
        return leg(None)  # (to_agent, updated_seq) or (requester, updated_seq)

    def legs(keys: bool) -> list[sa.Select[Any]]:
        if state == "open":
            held = [leg(h, passed, by_lease=True, keys=keys) for h in LEASED]
            return [leg("open", keys=keys), *held]
        return [leg(stored, keys=keys) for stored in states]

    union: sa.Executable = by_dialect()(
        {"postgresql": _merged(legs(False), rows), "sqlite": _merged_keys(legs(True), rows)}
    )
    return union


def _merged(legs: list[sa.Select[Any]], rows: int) -> sa.Select[Any]:
    """The legs' (updated_seq, doc_json), merged: the newest `rows`."""
    merged = sa.union_all(*(x.subquery().select() for x in legs)).subquery()
    return (
        sa.select(merged.c.updated_seq, merged.c.doc_json)
        .order_by(merged.c.updated_seq.desc())
        .limit(sa.literal_column(str(rows)))
    )


def _merged_keys(legs: list[sa.Select[Any]], rows: int) -> sa.Select[Any]:
    """SQLite's merge: the legs' (updated_seq, rowid), read from their indexes alone (an
    index holds the rowid), merged, and only the newest `rows` read from the table (every
    leg reading its page's documents was ~0.5 ms of the 9-leg listing of any state at
    100,000 tasks, issue 25). PostgreSQL keeps `_merged`: an index there holds no key of
    the row but the row's place, which a join cannot use."""
    merged = sa.union_all(*(x.subquery().select() for x in legs)).subquery()
    page = (
        sa.select(merged.c.updated_seq, merged.c.row)
        .order_by(merged.c.updated_seq.desc())
        .limit(sa.literal_column(str(rows)))
        .subquery("page")
    )
    return (
        sa.select(page.c.updated_seq, schema.tasks.c.doc_json)
        .select_from(page.join(schema.tasks, _rowid() == page.c.row))
        .order_by(page.c.updated_seq.desc())
    )


def _rowid() -> sa.ColumnElement[int]:
    """SQLite's key of a task row."""
    return sa.literal_column("tasks.rowid", sa.Integer)


# The filter whose index, `(parent_task_id, state, updated_seq, to_agent)` (0016), a listing
# naming it always walks: a parent's children are few next to an agent's or a stream's tasks.
PARENT = "parent_task_id"
# The filters that index carries, tested on its entries (`entry_test`).
PARENT_ENTRY = frozenset({"to_agent"})

# The filters with an index of their own ordered by `updated_seq`: a listing of any state
# with one of them is one leg on it (one per state would walk the agent's rows of each state
# not held, ~0.4 s on SQLite at 100,000 tasks).
_OWN_ORDER = frozenset({"to_agent", "requester"})


def _literal(word: str) -> sa.ColumnElement[Any]:
    """A state as an SQL string literal (a state is a plain lowercase word)."""
    if not (word.isascii() and word.isalpha() and word.islower()):
        raise ValueError(f"not a state: {word!r}")
    return sa.literal_column(f"'{word}'", sa.Text)


def _value(name: str, type_: Any) -> sa.ColumnElement[Any]:
    """The parameter `name`; on PostgreSQL as `(SELECT CAST($n AS type))`, an InitPlan whose
    value no plan sees (`_list_query`). SQLite plans a statement once, for any values."""
    opaque: sa.ColumnElement[Any] = opaque_value()(sa.bindparam(name, type_=type_))
    return opaque


def chunk(conn: sa.Connection, *, after: str, n: int) -> Sequence[Any]:
    """(task_id, parent_task_id, state, doc_json) of up to `n` tasks after `after`, by id."""
    t = schema.tasks.c
    query = (
        sa.select(t.task_id, t.parent_task_id, t.state, t.doc_json)
        .where(t.task_id > sa.bindparam("after"))
        .order_by(t.task_id)
        .limit(sa.bindparam("n"))
    )
    return conn.execute(query, {"after": after, "n": n}).all()


# ----------------------------------------------------------------------------- reminders


def docs_in_state(conn: sa.Connection, state: str, limit: int) -> list[str]:
    """The documents of up to `limit` tasks in `state`, oldest activity first."""
    t = schema.tasks.c
    query = sa.select(t.doc_json).where(t.state == state).order_by(t.updated_seq).limit(limit)
    return [str(r[0]) for r in conn.execute(query).all()]


def notes_of(conn: sa.Connection, task_id: str, writer: str, types: Sequence[str]) -> Sequence[Any]:
    """(id, type, hlc, metadata_json) of `writer`'s events of `types` on the thread of
    `task_id`, in log order."""
    c = schema.events.c
    query = (
        sa.select(c.id, c.type, c.hlc, c.metadata_json)
        .where(
            c.correlation_id == task_id,
            c.from_agent == writer,
            sa.or_(*(c.type == kind for kind in types)),
        )
        .order_by(c.seq)
    )
    return conn.execute(query).all()
