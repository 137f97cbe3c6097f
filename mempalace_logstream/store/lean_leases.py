"""The lease check of the hook path (issue 22): `lease_check` on a local SQLite log read
without SQLAlchemy, with the store's rule and SQL.

One rule, not a copy: the decision is `leases.check.decide`, which the store's `lease_check`
calls too; the SQL text is the store's, compiled by SQLAlchemy for SQLite and kept in
backends/sqlite_lease_sql.py, which `python -m mempalace_logstream.store.lean_leases`
regenerates by running `lease_check` on a real store (tests/test_lease_hook.py fails when the
two differ). Anything the store would do beyond reading is left to it (`check` returns None):
a log whose schema is not the head this SQL was generated for, PostgreSQL, a URL with options.
Must not import sqlalchemy or the store's other modules (only in `generate`).
"""

from __future__ import annotations

import time
from typing import Any

from mempalace_logstream import validation as v
from mempalace_logstream.backends import sqlite_lease_sql as lease_sql
from mempalace_logstream.backends import sqlite_reader
from mempalace_logstream.backends.sqlite_reader import SnapshotQuery
from mempalace_logstream.leases import check as rule
from mempalace_logstream.leases import inputs
from mempalace_logstream.leases.rules import Lease
from mempalace_logstream.store.ids import project_stream


def check(
    target: str, durability: str, *, agent: Any, path: Any, project: Any = None
) -> dict[str, Any] | None:
    """What `lease_check` answers for these arguments on the log at `target` (the URL
    config.resolve_db makes), or None when the store must read it. Raises the store's
    errors for a missing file or a foreign one, and the same refusals of bad input."""
    who = v.required_routing("agent", agent)
    where = inputs.path(path)
    stream = project_stream(project)
    reader = sqlite_reader.open_reader(target, durability)
    if reader is None:
        return None
    try:
        if reader.schema_revision() != lease_sql.SCHEMA_HEAD:
            return None
        now = int(time.time() * 1000)
        with reader.snapshot() as query:
            held_key = ("leases.held", stream is not None)
            held = _leases(query, held_key, {"wall": now, "project": stream})
            lost = _leases(query, "leases.lost-of", {"agent": who, "wall": now})
            docs: dict[str, str | None] = {}

            def end(task_id: str) -> str | None:
                if task_id not in docs:
                    rows = _rows(query, "tasks.doc", {"id": task_id})
                    docs[task_id] = rule.ending_hlc(str(rows[0][0]) if rows else None)
                return docs[task_id]

            return rule.decide(
                who=who, where=where, stream=stream, now=now, held=held, lost=lost, end=end
            )
    finally:
        reader.close()


def _rows(query: SnapshotQuery, key: Any, params: dict[str, Any]) -> Any:
    sql, defaults = lease_sql.STATEMENTS[key]
    return query(sql, {**defaults, **params})


def _leases(query: SnapshotQuery, key: Any, params: dict[str, Any]) -> list[Lease]:
    return [
        rule.lease_of(dict(zip(lease_sql.COLUMNS, r, strict=True)))
        for r in _rows(query, key, params)
    ]


# ------------------------------------------------------------------ sqlite_lease_sql.py

KEYS = (("leases.held", True), ("leases.held", False), "leases.lost-of", "tasks.doc")


def generate() -> dict[str, Any]:
    """{SCHEMA_HEAD, COLUMNS, STATEMENTS} taken from a real store on SQLite: `lease_check`
    with and without a project, on a task's lease (its end is read), and every statement
    it compiled is kept. Imports SQLAlchemy and the store: never called on the hook path."""
    import tempfile

    from mempalace_logstream import workflows
    from mempalace_logstream.backends.queries import leases as sql
    from mempalace_logstream.schema import SCHEMA_HEAD
    from mempalace_logstream.store import lease_ops
    from mempalace_logstream.store.core import LogStore

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/log.sqlite3"
        with LogStore.open(path) as writer:
            task = workflows.task_create(
                writer,
                project="p",
                from_agent="lead",
                to_agent="*",
                goal="g",
                branch="main",
                base_commit="abcdef1",
                done="d",
            )
            lease_ops.lease_acquire(writer, agent="a", paths=["src/**"], task_id=task["task_id"])
        with LogStore.open(path, create=False) as store:  # a fresh store: only these reads
            for project in ("p", None):
                lease_ops.lease_check(store, agent="b", path="src/x.py", project=project)
            compiled = store.compiled_sql()
    return {
        "SCHEMA_HEAD": SCHEMA_HEAD,
        "COLUMNS": tuple(sql.columns()),
        "STATEMENTS": {key: compiled[key] for key in KEYS},
    }


def render(values: dict[str, Any]) -> str:
    """sqlite_lease_sql.py's text (run `ruff format` on it after writing)."""
    from mempalace_logstream.store import lean

    return lean.render_module(
        "python -m mempalace_logstream.store.lean_leases",
        "The SQLite statements of `lease_check`'s reads as the store compiles them, for\n"
        "store/lean_leases.py (the PreToolUse hook's lean path).",
        {"SCHEMA_HEAD": values["SCHEMA_HEAD"], "COLUMNS": values["COLUMNS"]},
        values["STATEMENTS"],
    )


GENERATED = lease_sql.__file__


if __name__ == "__main__":
    with open(GENERATED, "w", encoding="utf-8") as out:
        out.write(render(generate()))
    print(f"wrote {GENERATED}; now run `ruff format {GENERATED}`")
