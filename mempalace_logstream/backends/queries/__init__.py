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
    """The class of SQL text that differs by dialect (a JSON array as a table of ids: ledger.py,
    tasks.py), given as {dialect name: text}; made and registered with SQLAlchemy's compiler
    on the first build (not at import: the lean write path has no SQLAlchemy)."""
    import sqlalchemy as sa
    from sqlalchemy.ext.compiler import compiles
    from sqlalchemy.sql.expression import ClauseElement, Executable

    class ByDialect(Executable, ClauseElement):
        inherit_cache = False

        def __init__(self, texts: dict[str, str]) -> None:
            self.texts = texts

    @compiles(ByDialect)
    def _compile_by_dialect(element: ByDialect, compiler: Any, **kw: Any) -> str:
        text: str = compiler.process(sa.text(element.texts[compiler.dialect.name]), **kw)
        return text

    return ByDialect
