"""The log's reads: the event read columns, the page and its three cursor statements (each
compiled once per store and run as precompiled text on a read snapshot), the doctor's scans,
the version vector and the counts of `stats`.

`select` (an `EventSelect`) is the store's `event_select`: the event read columns of the rows
matching its arguments (`read_columns`, built once per store with the backend's links
functions), the columns `events_from_rows` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Build, Compile, Executor, LinksFunctions

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:  # built into statements only (once per shape and store): not on the lean write path
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

# The store's `event_select(*where)`: the event read columns of the rows matching `where`.
EventSelect = Callable[..., "sa.Select[Any]"]
# A page's shape (`plan.page_query`): ((filter, n values)...), inbox values, split,
# since_created_at, order, the columns not selected (fixed by the filter or by the log's facts:
# `plan.read_page`).
PageShape = tuple[tuple[tuple[str, int], ...], int, bool, bool, str, tuple[str, ...]]
# filter name -> (the events column it tests, "in" | "not_in" | "inbox") (`FILTER_RULES`).
FilterRules = Mapping[str, tuple[str, str]]

SEQ_OF = "log.seq-of"
ID_AT = "log.id-at"
TOP = "log.top"  # (TOP, below nothing)
TIP_FACTS = "log.tip-facts"
# The page statement's columns: the links column's label (`links_column`), the others by name.
LINKS_LABEL = "artifact_links"
PAGE = "log.page"  # (PAGE, *shape): the key `plan.page_query` gives


# ----------------------------------------------------------------------------- columns


def links_column(links: LinksFunctions) -> sa.Label[Any]:
    """An event's artifact links as one column ("position<RS>id<US>…"), built with the
    backend's functions (char, string aggregate).

    The per-row lookup (a correlated subquery: an index probe of `event_artifacts` per row,
    ~0.2 µs of a SQLite page's ~2.6 µs a row) runs only when the log links any artifact: the
    guard is an uncorrelated subquery, which SQLite and PostgreSQL evaluate once per statement
    (issue 25)."""
    ea = schema.event_artifacts.alias("ea")
    char, agg = links
    item = sa.cast(ea.c.position, sa.Text) + char(sa.literal_column("30")) + ea.c.artifact_id
    link_sep = char(sa.literal_column("31"))
    per_row = sa.select(agg(item, link_sep)).where(ea.c.event_id == schema.events.c.id)
    any_link: sa.Exists = sa.select(schema.event_artifacts.c.event_id).exists()
    return sa.case((any_link, per_row.scalar_subquery())).label(LINKS_LABEL)


def read_columns(links: LinksFunctions, fields: Sequence[str]) -> list[sa.ColumnElement[Any]]:
    """The columns of `fields` (an Event's, in order), `artifact_ids` as the links column."""
    return [
        links_column(links) if name == "artifact_ids" else schema.events.c[name] for name in fields
    ]


# ----------------------------------------------------------------------------- a page


def _seq_of() -> sa.Select[Any]:
    return sa.select(schema.events.c.seq).where(schema.events.c.id == sa.bindparam("id"))


def seq_of_statement(compile: Compile) -> str:
    """The SQL text of `seq_of`: a log fact (`remember_log_facts`): an event's seq never
    changes (the table refuses UPDATE of it and DELETE), and a commit may add the event."""
    return compile(SEQ_OF, _seq_of, {})[0]


def seq_of(ex: Executor, ident: str) -> int | None:
    """The seq of the event `ident`, None if not held."""
    rows = ex.rows(SEQ_OF, _seq_of, {"id": ident})
    return int(rows[0][0]) if rows else None


def _id_at() -> sa.Select[Any]:
    return sa.select(schema.events.c.id).where(schema.events.c.seq == sa.bindparam("seq"))


def id_at(ex: Executor, seq: int) -> str | None:
    """The id of the event at `seq`."""
    rows = ex.rows(ID_AT, _id_at, {"seq": seq})
    return rows[0][0] if rows else None


def _top_all() -> sa.Select[Any]:
    return (
        sa.select(schema.events.c.seq, schema.events.c.id)
        .order_by(schema.events.c.seq.desc())
        .limit(1)
    )


def _top_below() -> sa.Select[Any]:
    return _top_all().where(schema.events.c.seq < sa.bindparam("hi"))


def tip_statement(compile: Compile) -> tuple[str, Mapping[str, Any]]:
    """The SQL text and parameters of `top(ex, None)`, the newest event: a log fact
    (`remember_log_facts`), which a read runs as is (`Reads`)."""
    return compile((TOP, True), _top_all, {})


def _tip_facts() -> sa.Select[Any]:
    e = schema.events.c
    linked = sa.select(schema.event_artifacts.c.event_id).exists().label("linked")
    # Any signed event: one probe of the partial index `ix_events_signed`, whose predicate
    # SQLite needs stated as written (an alias: not correlated with the tip's own row).
    s = schema.events.alias("s")
    signed = sa.select(s.c.seq).where(sa.text(schema.SIGNED_WHERE)).exists().label("signed")
    q = sa.select(e.seq, e.id, linked, signed)
    one: sa.ColumnElement[int] = sa.literal_column("1")
    zero: sa.ColumnElement[int] = sa.literal_column("0")
    return q.order_by(e.seq.desc()).limit(one).offset(zero)


def tip_facts_statement(compile: Compile) -> tuple[str, Mapping[str, Any]]:
    """The SQL text (no parameters) of a read's tip with the log's facts a page statement may
    use (`plan.read_page`): (seq, id) of the newest event, whether any event links an
    artifact and whether any is signed (`sig` or `key_id` set; one index probe each); no row
    on an empty log. A log fact (`remember_log_facts`), as the tip: run as is by a read
    (`Reads`). `event_artifacts` is append-only and an event's links are written in its
    transaction, its `sig` and `key_id` with its row (the table refuses any UPDATE but a
    redaction's body), and seq order is commit order, so what the tip's snapshot shows holds
    for every event up to the tip in a later snapshot too (PostgreSQL reads each statement at
    READ COMMITTED)."""
    return compile(TIP_FACTS, _tip_facts, {})


def top(ex: Executor, hi: int | None) -> Sequence[Any] | None:
    """(seq, id) of the newest event below `hi` (all events when None)."""
    if hi is None:
        rows = ex.rows((TOP, True), _top_all, {})
    else:
        rows = ex.rows((TOP, False), _top_below, {"hi": hi})
    return rows[0] if rows else None


def page_builder(select: EventSelect, rules: FilterRules, shape: PageShape) -> Build:
    """Makes the page statement of `shape`: matches in (lo, top], in seq order, `lim` rows.

    An inbox filter is `to_agent IN (X, '*')`; SQLite cannot read an IN list in the order of
    the (to_agent, seq) index, so it would collect every match and sort it (a temp B-tree:
    ~100k rows for one inbox on a 1M-event log). Split, one leg per value instead, each an
    index range already in seq order, merged by UNION ALL (MERGE, no sort) and stopped at the
    limit. The values are distinct, so the legs are disjoint: the same rows."""
    return lambda: _page_statement(select, rules, *shape)


def _page_statement(
    select: EventSelect,
    rules: FilterRules,
    shape: tuple[tuple[str, int], ...],
    n_to: int,
    split: bool,
    since_created: bool,
    order: str,
    fixed: tuple[str, ...],
) -> sa.Executable:
    where: list[sa.ColumnElement[bool]] = [
        schema.events.c.seq > sa.bindparam("lo"),
        schema.events.c.seq <= sa.bindparam("top"),
    ]
    if since_created:
        where.append(schema.events.c.created_at >= sa.bindparam("since_created_at"))
    for name, n in shape:
        column, how = rules[name]
        col = schema.events.c[column]
        binds: list[sa.BindParameter[Any]] = [sa.bindparam(f"{name}_{i}") for i in range(n)]
        if how == "not_in":
            where.append(col.not_in(binds))
        else:
            where.append(col == binds[0] if n == 1 else col.in_(binds))
    to_binds: list[sa.BindParameter[Any]] = [sa.bindparam(f"to_{i}") for i in range(n_to)]
    limit: sa.BindParameter[int] = sa.bindparam("lim")
    # SQLite's compiler writes OFFSET with a bound 0 unless given one: one parameter less to
    # bind per read (issue 25).
    no_offset: sa.ColumnElement[int] = sa.literal_column("0")
    left_out = {LINKS_LABEL if name == "artifact_ids" else name for name in fixed}

    def select_page(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
        q = select(*where)
        if not fixed:
            return q
        cols = [c for c in q.selected_columns if c.name not in left_out]
        return q.with_only_columns(*cols, maintain_column_froms=True)

    if not split:
        if to_binds:
            where.append(schema.events.c.to_agent.in_(to_binds))
        q = select_page(*where)
        q = q.order_by(schema.events.c.seq.asc() if order == "asc" else schema.events.c.seq.desc())
        return q.limit(limit).offset(no_offset)
    legs = [select_page(*where, schema.events.c.to_agent == b) for b in to_binds]
    merged = sa.union_all(*legs)
    seq = merged.selected_columns.seq
    return (
        merged.order_by(seq.asc() if order == "asc" else seq.desc()).limit(limit).offset(no_offset)
    )


# ----------------------------------------------------------------------------- scans


def chunk(ex: Executor, select: EventSelect, after: int, n: int) -> Sequence[Any]:
    """The event rows after seq `after`, in seq order, at most `n` (the doctor's walk)."""

    def build() -> sa.Select[Any]:
        q = select(schema.events.c.seq > sa.bindparam("after"))
        return q.order_by(schema.events.c.seq).limit(sa.bindparam("n"))

    return ex.rows("log.chunk", build, {"after": after, "n": n})


def is_empty(conn: sa.Connection) -> bool:
    """Whether the log holds no event."""
    return conn.execute(sa.select(schema.events.c.seq).limit(1)).first() is None


def version_vector(conn: sa.Connection) -> dict[str, int]:
    """{origin_replica: max origin_seq} over every event held here."""
    q = sa.select(schema.events.c.origin_replica, sa.func.max(schema.events.c.origin_seq))
    rows = conn.execute(q.group_by(schema.events.c.origin_replica)).all()
    return {r[0]: int(r[1]) for r in rows}


def totals(conn: sa.Connection) -> tuple[int, int, int, int]:
    """(events, artifacts, blobs, blob bytes) held here."""
    total = conn.execute(sa.select(sa.func.count()).select_from(schema.events)).scalar() or 0
    arts = conn.execute(sa.select(sa.func.count()).select_from(schema.artifacts)).scalar() or 0
    blobs = conn.execute(
        sa.select(
            sa.func.count(), sa.func.coalesce(sa.func.sum(schema.artifact_blobs.c.size_bytes), 0)
        )
    ).first()
    n_blobs, size = (int(blobs[0]), int(blobs[1])) if blobs else (0, 0)
    return int(total), int(arts), n_blobs, size


def most_common(conn: sa.Connection, column: str, limit: int = 100) -> dict[str, int]:
    """value -> count of the events column `column`, the `limit` most common values."""
    col = schema.events.c[column]
    q = sa.select(col, sa.func.count()).group_by(col).order_by(sa.func.count().desc())
    return {str(k): int(n) for k, n in conn.execute(q.limit(limit))}


def task_rows(ex: Executor, columns: Sequence[str]) -> Sequence[Any]:
    """Every task row: (task_id, doc_json, *columns) (the doctor's projection check)."""
    cols = [schema.tasks.c[c] for c in columns]
    key = ("log.task-rows", tuple(columns))
    return ex.rows(
        key, lambda: sa.select(schema.tasks.c.task_id, schema.tasks.c.doc_json, *cols), {}
    )


def requested_tasks(ex: Executor, request_type: str) -> list[str]:
    """The distinct correlation ids of the events of type `request_type` (the task ids)."""

    def build() -> sa.Select[Any]:
        c = schema.events.c
        where = (c.type == sa.bindparam("request_type"), c.correlation_id.is_not(None))
        return sa.select(c.correlation_id).where(*where).distinct()

    return [
        str(r[0]) for r in ex.rows("log.requested-tasks", build, {"request_type": request_type})
    ]


def body_tombstones(conn: sa.Connection, ids: Sequence[str], body: str) -> set[tuple[str, Any]]:
    """(event id, tombstone) of the body redactions (`part` is `body`) of the events `ids`."""
    r = schema.redactions.c
    q = sa.select(r.target_id, r.tombstone).where(r.target_id.in_(list(ids)), r.part == body)
    return {(str(row[0]), row[1]) for row in conn.execute(q).all()}
