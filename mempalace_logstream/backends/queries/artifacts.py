"""Artifacts and their blobs under per-artifact redaction (store/blobs.py says the rules): the
blob's state, its insert, refill and emptying, the `artifact_redactions` rows, and the reads
of the redactions that took effect on artifacts (the doctor's among them).

The write statements take the transaction's executor; the reads take a connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Executor

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")

# ----------------------------------------------------------------------------- writes


def _select_state() -> sa.Select[Any]:
    col = schema.artifact_blobs.c
    return sa.select(sa.func.length(col.content), col.size_bytes).where(
        col.sha256 == sa.bindparam("sha")
    )


def blob_state(ex: Executor, sha256: str) -> tuple[int, int] | None:
    """(stored length, size_bytes) of the blob `sha256`; None if it is not held."""
    rows = ex.rows("artifacts.blob-state", _select_state, {"sha": sha256})
    return None if not rows else (int(rows[0][0]), int(rows[0][1]))


def insert_blob(ex: Executor, sha256: str, size: int, content: bytes) -> None:
    row = {"sha256": sha256, "size_bytes": size, "content": content}
    ex.insert("artifacts.insert-blob", "artifact_blobs", [row])


def _update_content() -> sa.Update:
    return (
        sa.update(schema.artifact_blobs)
        .where(schema.artifact_blobs.c.sha256 == sa.bindparam("sha"))
        .values(content=sa.bindparam("fill"))
    )


def fill_blob(ex: Executor, sha256: str, data: bytes) -> None:
    """Put `data` back into the emptied blob `sha256`."""
    ex.run("artifacts.blob-fill", _update_content, {"sha": sha256, "fill": data})


def empty_blob(ex: Executor, sha256: str) -> None:
    """Empty the blob `sha256` (its size is kept)."""
    ex.run("artifacts.blob-empty", _update_content, {"sha": sha256, "fill": b""})


def _select_of_artifact() -> sa.Select[Any]:
    t = schema.artifact_redactions.c
    return sa.select(t.redaction_id).where(t.artifact_id == sa.bindparam("art"))


def redaction_ids_of(ex: Executor, artifact_id: str) -> list[str]:
    """The ids of the redactions that took effect on the artifact (`artifact_redactions`)."""
    rows = ex.rows("artifacts.redactions-of", _select_of_artifact, {"art": artifact_id})
    return [str(r[0]) for r in rows]


def insert_redaction(ex: Executor, artifact_id: str, redaction_id: str, sha256: str) -> None:
    """Record that `redaction_id` took effect on the artifact."""
    row = {"artifact_id": artifact_id, "redaction_id": redaction_id, "sha256": sha256}
    ex.insert("artifacts.insert-redaction", "artifact_redactions", [row])


def _unredacted() -> sa.ColumnElement[bool]:
    t = schema.artifact_redactions.c
    return ~sa.select(t.artifact_id).where(t.artifact_id == schema.artifacts.c.id).exists()


def _select_unredacted() -> sa.Select[Any]:
    return (
        sa.select(schema.artifacts.c.id)
        .where(schema.artifacts.c.sha256 == sa.bindparam("sha"), _unredacted())
        .limit(1)
    )


def named_unredacted(ex: Executor, sha256: str) -> bool:
    """Whether an unredacted artifact names the blob `sha256`."""
    return bool(ex.rows("artifacts.blob-unredacted", _select_unredacted, {"sha": sha256}))


# ----------------------------------------------------------------------------- reads


def redactions_of_artifacts(conn: sa.Connection, ids: Sequence[str]) -> list[Sequence[Any]]:
    """(artifact id, redacted_by, redacted_at, reason, redaction_id) of each redaction that took
    effect on the artifacts `ids`, by `redacted_at`, then id."""
    t, r = schema.artifact_redactions.c, schema.redactions.c
    q = (
        sa.select(t.artifact_id, r.redacted_by, r.redacted_at, r.reason, r.redaction_id)
        .join(schema.redactions, sa.and_(r.redaction_id == t.redaction_id, r.part == t.artifact_id))
        .where(t.artifact_id.in_(list(ids)))
        .order_by(r.redacted_at, r.redaction_id)
    )
    return list(conn.execute(q))


def first_artifact_redaction(conn: sa.Connection, sha256: str, body: str) -> Sequence[Any] | None:
    """(redacted_by, redacted_at, reason, redaction_id) of the earliest redaction of an
    artifact part (`part` not `body`) of the blob `sha256`."""
    r = schema.redactions.c
    return conn.execute(
        sa.select(r.redacted_by, r.redacted_at, r.reason, r.redaction_id)
        .where(r.sha256 == sha256, r.part != body)
        .order_by(r.redacted_at, r.redaction_id)
        .limit(1)
    ).first()


def unredacted_of_blobs(conn: sa.Connection, shas: Sequence[str]) -> list[str]:
    """The ids of unredacted artifacts whose blob is among `shas`, in id order."""
    q = (
        sa.select(schema.artifacts.c.id)
        .where(schema.artifacts.c.sha256.in_(list(shas)), _unredacted())
        .order_by(schema.artifacts.c.id)
    )
    return [str(r[0]) for r in conn.execute(q)]


def redacted_blob_shas(conn: sa.Connection) -> set[str]:
    """The sha256 of every blob that an artifact's redaction names."""
    return {
        str(r[0]) for r in conn.execute(sa.select(schema.artifact_redactions.c.sha256).distinct())
    }


def blob_chunk(conn: sa.Connection, after: str, n: int) -> list[Sequence[Any]]:
    """(sha256, content) of at most `n` blobs after `after`, by sha256 (the doctor's walk)."""
    c = schema.artifact_blobs.c
    q = sa.select(c.sha256, c.content).where(c.sha256 > after).order_by(c.sha256).limit(n)
    return list(conn.execute(q).all())


def sha256s_of(conn: sa.Connection, ids: Sequence[str]) -> set[str]:
    """The sha256 of the artifacts `ids`."""
    q = sa.select(schema.artifacts.c.sha256).where(schema.artifacts.c.id.in_(list(ids)))
    return {str(r[0]) for r in conn.execute(q)}


def redacted_by(conn: sa.Connection, redaction_id: str) -> set[str]:
    """The ids of the artifacts on which the redaction `redaction_id` took effect."""
    t = schema.artifact_redactions.c
    rows = conn.execute(sa.select(t.artifact_id).where(t.redaction_id == redaction_id))
    return {str(r[0]) for r in rows}
