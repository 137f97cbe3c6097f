"""The statements of redaction (store/redaction.py, RFC 0008 "Redaction"): the `redactions`
rows, the tombstone written over a body, an artifact's digest and creator, and the
redactions waiting for their target. The blobs' statements are the log's (blobs.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor, binds, in_lists

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")


def is_held(ex: Executor, redaction_id: str) -> bool:
    """Whether the `redactions` rows of `redaction_id` are held."""
    return bool(ex.rows("redactions.held", _select_held, {"id": redaction_id}))


def _select_held() -> sa.Select[Any]:
    return sa.select(schema.redactions.c.part).where(
        schema.redactions.c.redaction_id == sa.bindparam("id")
    )


def insert(ex: Executor, rows: list[dict[str, Any]]) -> None:
    """`redactions` rows (every column)."""
    ex.insert("redactions.insert", "redactions", rows)


def before(ex: Executor, statement: str) -> None:
    """Run the backend's statement that precedes a redaction's overwrite (`Backend.
    before_redaction`: one per backend, so one shape per store)."""
    ex.run("redactions.before", lambda: sa.text(statement), {})


def set_body(ex: Executor, event_id: str, tombstone: str) -> None:
    """The body of `event_id` replaced with its tombstone."""
    ex.run("redactions.body", _update_body, {"target": event_id, "tomb": tombstone})


def _update_body() -> sa.Update:
    return (
        sa.update(schema.events)
        .where(schema.events.c.id == sa.bindparam("target"))
        .values(body=sa.bindparam("tomb"))
    )


def artifact_sha(ex: Executor, artifact_id: str) -> tuple[str, str] | None:
    """(sha256, created_by) of the artifact, or None if it is not held."""
    rows = ex.rows("redactions.art-sha", _select_art_sha, {"id": artifact_id})
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


def _select_art_sha() -> sa.Select[Any]:
    return sa.select(schema.artifacts.c.sha256, schema.artifacts.c.created_by).where(
        schema.artifacts.c.id == sa.bindparam("id")
    )


def pending_for(ex: Executor, target_ids: list[str]) -> list[str]:
    """The redaction ids held here that name one of `target_ids` (distinct ids), with
    repeats (one per part). One probe first: most logs hold no redaction, and a peer's page
    would cost its thousands of ids in IN lists."""
    if not ex.rows("redactions.any", _select_any, {}):
        return []
    out: list[str] = []
    for n, params in in_lists(target_ids):

        def build(n: int = n) -> sa.Select[Any]:
            return sa.select(schema.redactions.c.redaction_id).where(
                schema.redactions.c.target_id.in_(binds(n))
            )

        out += [str(r[0]) for r in ex.rows(("redactions.pending", n), build, params)]
    return out


def _select_any() -> sa.Select[Any]:
    return sa.select(schema.redactions.c.redaction_id).limit(1)
