"""The log's statements, by what they store (issue 21 item 2): every statement the store,
the replication and the importer run is built here, once, with SQLAlchemy Core (both dialects
compile it); what one dialect does differently stays in its backend module. The domain calls
the functions of these modules with an `Executor` (or a `sa.Connection`) and plain values,
and gets rows or values back; it never builds a statement. `tests/test_sql_homes.py` keeps it
so.

Each statement shape has one cache key, unique across these modules: the module's domain,
then the statement (`"tasks.chunk"`, `("sync.held-ids", n)` for an IN list of n values).
"""
