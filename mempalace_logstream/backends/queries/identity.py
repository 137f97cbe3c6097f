"""The keyring's reads (RFC 0008): the marks the store caches its keyring on, the key events,
and the content SHA-256 of the artifacts a signature covers. The marks and the key events are
read by the hook path's lean reader too, under the same keys (store/marks.py names them, and
backends/sqlite_inbox_sql.py holds their SQLite text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Compile, Executor

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

MARKS = "identity.marks"
KEY_EVENTS = "identity.key-events"
# The key event types (`identity.keyring.KEY_EVENT_TYPES`), given by the caller: named binds
# with their values, not an expanding IN (statements here are compiled once).
KeyTypes = Sequence[str]


def _is_key_event(key_types: KeyTypes) -> sa.ColumnElement[bool]:
    kinds: list[sa.BindParameter[str]] = [
        sa.bindparam(f"key_type_{i}", t) for i, t in enumerate(key_types)
    ]
    return schema.events.c.type.in_(kinds)


def marks(ex: Executor, key_types: KeyTypes, pin_prefix: str, agg: Any) -> tuple[Any, Any]:
    """(the newest key event's id, the keys of the meta rows under `pin_prefix` joined by
    ","; `agg` is the backend's string aggregate): what a cached keyring was built from. An
    id, not a seq: a key event rolled back never comes back under its id, while its seq is
    reused."""
    row = ex.rows(MARKS, _marks_builder(key_types, pin_prefix, agg), {})[0]
    return row[0], row[1]


def marks_statement(
    compile: Compile, key_types: KeyTypes, pin_prefix: str, agg: Any
) -> tuple[str, Mapping[str, Any]]:
    """The SQL text and parameters of `marks`: a log fact (`remember_log_facts`)."""
    return compile(MARKS, _marks_builder(key_types, pin_prefix, agg), {})


def _marks_builder(key_types: KeyTypes, pin_prefix: str, agg: Any) -> Callable[[], sa.Select[Any]]:
    return lambda: sa.select(*marks_columns(key_types, pin_prefix, agg))


def marks_columns(
    key_types: KeyTypes, pin_prefix: str, agg: Any
) -> tuple[sa.ScalarSelect[Any], sa.ScalarSelect[Any]]:
    """The two columns of `marks`, for a statement that reads them with others too (the
    write transaction's starting state: queries/appends.py)."""
    pinned = schema.meta.c.key.startswith(pin_prefix, autoescape=True)
    # The newest key event's seq: max(seq) of each key type, one (type, seq) index lookup
    # each, then the row by its key. An ORDER BY over the IN would sort the key events in a
    # temporary B-tree on every read that probes; one max(seq) over the IN, PostgreSQL answers
    # by walking the whole primary key backwards (a full scan while a log has no key event:
    # 2 ms at 6,000 events, issue 25).
    legs = [
        sa.select(sa.func.max(schema.events.c.seq).label("seq")).where(
            schema.events.c.type == sa.bindparam(f"key_type_{i}", t)
        )
        for i, t in enumerate(key_types)
    ]
    per_type = sa.union_all(*legs).subquery()
    top = sa.select(sa.func.max(per_type.c.seq))
    newest = sa.select(schema.events.c.id).where(schema.events.c.seq == top.scalar_subquery())
    return (
        newest.scalar_subquery(),
        sa.select(agg(schema.meta.c.key, sa.literal(","))).where(pinned).scalar_subquery(),
    )


def key_events(
    ex: Executor, key_types: KeyTypes, select: Callable[..., sa.Select[Any]]
) -> Sequence[Any]:
    """The rows (`select`: the store's event read columns) of the key events, in seq order."""
    return ex.rows(
        KEY_EVENTS, lambda: select(_is_key_event(key_types)).order_by(schema.events.c.seq), {}
    )


def any_key_event(ex: Executor, key_types: KeyTypes) -> bool:
    """Whether the log holds any key event."""

    def build() -> sa.Select[Any]:
        return sa.select(schema.events.c.id).where(_is_key_event(key_types)).limit(1)

    return bool(ex.rows("identity.any-key-event", build, {}))


def artifact_sha256s(ex: Executor, ids: Sequence[str]) -> dict[str, str]:
    """artifact id -> its content SHA-256, for the distinct `ids` held here."""
    n = len(ids)
    params = {f"a{i}": aid for i, aid in enumerate(ids)}

    def build() -> sa.Select[Any]:
        binds: list[sa.BindParameter[Any]] = [sa.bindparam(f"a{i}") for i in range(n)]
        return sa.select(schema.artifacts.c.id, schema.artifacts.c.sha256).where(
            schema.artifacts.c.id.in_(binds)
        )

    rows = ex.rows(("identity.artifact-sha256", n), build, params)
    return {str(r[0]): str(r[1]) for r in rows}
