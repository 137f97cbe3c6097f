"""The log's statements, by what they store (issue 21 item 2): every statement the store,
the replication and the importer run is built here, once, with SQLAlchemy Core (both dialects
compile it); what one dialect does differently stays in its backend module. The domain calls
the functions of these modules with an `Executor` (or a `sa.Connection`) and plain values,
and gets rows or values back; it never builds a statement. `tests/test_sql_homes.py` keeps it
so.

Each statement shape has one cache key, unique across these modules: the module's domain,
then the statement (`"tasks.chunk"`, `("sync.held-ids", n)` for an IN list of n values).
"""

import functools
from typing import Any


@functools.cache
def by_dialect() -> Any:
    """The class of SQL that differs by dialect (a JSON array as a table of ids: ledger.py,
    tasks.py), given as {dialect name: text or statement}; made and registered with
    SQLAlchemy's compiler on the first build (not at import: the lean write path has no
    SQLAlchemy)."""
    import sqlalchemy as sa
    from sqlalchemy.ext.compiler import compiles
    from sqlalchemy.sql.expression import ClauseElement, Executable

    class ByDialect(Executable, ClauseElement):
        inherit_cache = False

        def __init__(self, texts: dict[str, Any]) -> None:
            self.texts = texts

    @compiles(ByDialect)
    def _compile_by_dialect(element: ByDialect, compiler: Any, **kw: Any) -> str:
        sql = element.texts[compiler.dialect.name]
        text: str = compiler.process(sa.text(sql) if isinstance(sql, str) else sql, **kw)
        return text

    return ByDialect


@functools.cache
def opaque_value() -> Any:
    """The class of a bound value PostgreSQL's planner cannot see, `(SELECT CAST($n AS
    type))` (an InitPlan: a plan made for one call's values is then the plan made for any,
    and the session keeps the prepared statement's plan instead of planning each call:
    tasks.py's listing); elsewhere the plain bound parameter. Made and registered on the
    first build, as `by_dialect`."""
    import sqlalchemy as sa
    from sqlalchemy.ext.compiler import compiles
    from sqlalchemy.sql.expression import ColumnElement

    class OpaqueValue(ColumnElement[Any]):
        inherit_cache = False

        def __init__(self, param: sa.BindParameter[Any]) -> None:
            self.param = param
            self.type = param.type

    @compiles(OpaqueValue)
    def _plain(element: OpaqueValue, compiler: Any, **kw: Any) -> str:
        text: str = compiler.process(element.param, **kw)
        return text

    @compiles(OpaqueValue, "postgresql")
    def _hidden(element: OpaqueValue, compiler: Any, **kw: Any) -> str:
        inner = sa.select(sa.cast(element.param, element.type)).scalar_subquery()
        text: str = compiler.process(inner, **kw)
        return text

    return OpaqueValue


@functools.cache
def entry_test() -> Any:
    """The class of `column = value` tested on the entries of the index a statement walks,
    which carries `column` but is not walked by it (tasks.py: a parent's listing by agent,
    on `(parent_task_id, state, updated_seq, to_agent)`). SQLite: `column || ''` (the same
    test, NULL stays NULL), which no index on `column` can serve, so the planner keeps the
    walked index, and which SQLite reads from its entry before it seeks the row. PostgreSQL:
    the plain comparison, an index condition of the walked index, tested on its entries (a
    filter would fetch each row first). Made and registered on the first build, as
    `by_dialect`."""
    import sqlalchemy as sa
    from sqlalchemy.ext.compiler import compiles
    from sqlalchemy.sql.expression import ColumnElement

    class EntryTest(ColumnElement[bool]):
        inherit_cache = False
        type = sa.Boolean()

        def __init__(self, column: Any, value: Any) -> None:
            self.column, self.value = column, value

    @compiles(EntryTest)
    def _unwalkable(element: EntryTest, compiler: Any, **kw: Any) -> str:
        test = element.column.op("||")(sa.literal_column("''")) == element.value
        text: str = compiler.process(test, **kw)
        return text

    @compiles(EntryTest, "postgresql")
    def _index_condition(element: EntryTest, compiler: Any, **kw: Any) -> str:
        text: str = compiler.process(element.column == element.value, **kw)
        return text

    return EntryTest
