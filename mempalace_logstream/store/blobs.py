"""Blobs under per-artifact redaction (RFC 0008 "Redaction", migration 0007).

Content is stored once per sha256, so artifacts of different writers can share a blob. A
redaction takes effect per artifact (an `artifact_redactions` row): such an artifact reads as
redacted whatever its blob holds. The blob itself is emptied only when every artifact naming
its sha256 is redacted, and an emptied blob is refilled when an unredacted artifact with its
bytes is written here (a local put, or an artifact from a peer). So every replica ends in the
same state whatever order the artifacts and redactions arrived in. The `artifact_blobs` update
trigger lets through exactly these two changes.

The write helpers take the transaction's executor; the reads take a connection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mempalace_logstream.schema import artifact_blobs, artifact_redactions, artifacts, redactions

if TYPE_CHECKING:
    from mempalace_logstream.backends import Executor

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
BODY = "body"  # the `part` of a body redaction (redactions rows); any other is an artifact id


# ----------------------------------------------------------------------------- writes


def blob_state(ex: Executor, sha256: str) -> tuple[int, int] | None:
    """(stored length, size_bytes) of the blob `sha256` (length 0: emptied, or empty
    content); None if it is not held."""
    rows = ex.rows("blob-state", _select_state, {"sha": sha256})
    return None if not rows else (int(rows[0][0]), int(rows[0][1]))


def ensure(ex: Executor, sha256: str, size: int, content: bytes) -> tuple[int, int] | None:
    """Store the blob unless it is held (a redacted artifact from a peer brings no bytes: its
    blob is kept empty under its `size`); returns what was held before (`blob_state`)."""
    held = blob_state(ex, sha256)
    if held is None:
        row = {"sha256": sha256, "size_bytes": size, "content": content}
        ex.insert("insert-blob", artifact_blobs, [row])
    return held


def refill_after(ex: Executor, held: tuple[int, int] | None, sha256: str, data: bytes) -> None:
    """Put the bytes back into an emptied blob, once an unredacted artifact naming it was
    written here with `data` (its SHA-256 checked): `held` is what `ensure` returned. A blob
    kept under another size (a peer's redacted copy, before 0007) is left as it is."""
    if held is not None and held[0] == 0 and data and held[1] == len(data):
        ex.run("blob-refill", _update_content, {"sha": sha256, "fill": data})


def tombstone(ex: Executor, artifact_id: str, redaction_id: str, sha256: str) -> bool:
    """Record that `redaction_id` took effect on the artifact; True when the artifact was not
    redacted before (the part changed now)."""
    held = ex.rows("artifact-redactions-of", _select_of_artifact, {"art": artifact_id})
    if not any(str(r[0]) == redaction_id for r in held):
        row = {"artifact_id": artifact_id, "redaction_id": redaction_id, "sha256": sha256}
        ex.insert("artifact-redaction-insert", artifact_redactions, [row])
    return not held


def empty_if_unnamed(ex: Executor, sha256: str) -> bool:
    """Empty the blob `sha256` when no unredacted artifact names it; whether it did."""
    if ex.rows("blob-unredacted", _select_unredacted, {"sha": sha256}):
        return False
    ex.run("blob-empty", _update_content, {"sha": sha256, "fill": b""})
    return True


def is_redacted(ex: Executor, artifact_id: str) -> bool:
    return bool(ex.rows("artifact-redactions-of", _select_of_artifact, {"art": artifact_id}))


# ----------------------------------------------------------------------------- reads


def redactions_of_artifacts(conn: sa.Connection, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """artifact id -> {by, at, reason, event_id} of the earliest redaction that took effect
    on it (by its `created_at`, then id: the same on every replica), for the redacted ones."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    t, r = artifact_redactions.c, redactions.c
    q = (
        sa.select(t.artifact_id, r.redacted_by, r.redacted_at, r.reason, r.redaction_id)
        .join(redactions, sa.and_(r.redaction_id == t.redaction_id, r.part == t.artifact_id))
        .where(t.artifact_id.in_(wanted))
        .order_by(r.redacted_at, r.redaction_id)
    )
    out: dict[str, dict[str, str]] = {}
    for row in conn.execute(q):
        out.setdefault(str(row[0]), _doc(row[1:]))
    return out


def redaction_of_blob(conn: sa.Connection, sha256: str) -> dict[str, str] | None:
    """{by, at, reason, event_id} of the earliest redaction naming an artifact of the blob
    `sha256` (what an emptied blob that its own artifact's redaction does not explain shows)."""
    row = conn.execute(
        sa.select(
            redactions.c.redacted_by,
            redactions.c.redacted_at,
            redactions.c.reason,
            redactions.c.redaction_id,
        )
        .where(redactions.c.sha256 == sha256, redactions.c.part != BODY)
        .order_by(redactions.c.redacted_at, redactions.c.redaction_id)
        .limit(1)
    ).first()
    return None if row is None else _doc(row)


def unredacted_on_empty_blobs(conn: sa.Connection, shas: Sequence[str]) -> list[str]:
    """The ids of unredacted artifacts whose (emptied) blob is among `shas` (doctor)."""
    if not shas:
        return []
    t = artifact_redactions.c
    redacted = sa.select(t.artifact_id).where(t.artifact_id == artifacts.c.id).exists()
    q = (
        sa.select(artifacts.c.id)
        .where(artifacts.c.sha256.in_(list(shas)), ~redacted)
        .order_by(artifacts.c.id)
    )
    return [str(r[0]) for r in conn.execute(q)]


def redacted_blob_shas(conn: sa.Connection) -> set[str]:
    """The sha256 of every blob that an artifact's redaction names."""
    return {str(r[0]) for r in conn.execute(sa.select(artifact_redactions.c.sha256).distinct())}


def _doc(row: Sequence[Any]) -> dict[str, str]:
    return {"by": row[0], "at": row[1], "reason": row[2], "event_id": row[3]}


# ----------------------------------------------------------------------------- statements


def _select_state() -> sa.Select[Any]:
    col = artifact_blobs.c
    return sa.select(sa.func.length(col.content), col.size_bytes).where(
        col.sha256 == sa.bindparam("sha")
    )


def _select_of_artifact() -> sa.Select[Any]:
    t = artifact_redactions.c
    return sa.select(t.redaction_id).where(t.artifact_id == sa.bindparam("art"))


def _select_unredacted() -> sa.Select[Any]:
    t = artifact_redactions.c
    redacted = sa.select(t.artifact_id).where(t.artifact_id == artifacts.c.id).exists()
    return (
        sa.select(artifacts.c.id)
        .where(artifacts.c.sha256 == sa.bindparam("sha"), ~redacted)
        .limit(1)
    )


def _update_content() -> sa.Update:
    return (
        sa.update(artifact_blobs)
        .where(artifact_blobs.c.sha256 == sa.bindparam("sha"))
        .values(content=sa.bindparam("fill"))
    )
