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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream.backends.queries import artifacts as q

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream.backends import Executor

# hashlib.sha256(b"").hexdigest(), written out: importing hashlib costs a plain append ~4 ms
# of CPU (issue 25); tests/test_lean_write.py checks the two agree.
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
BODY = "body"  # the `part` of a body redaction (redactions rows); any other is an artifact id


# ----------------------------------------------------------------------------- writes


def blob_state(ex: Executor, sha256: str) -> tuple[int, int] | None:
    """(stored length, size_bytes) of the blob `sha256` (length 0: emptied, or empty
    content); None if it is not held."""
    return q.blob_state(ex, sha256)


def ensure(ex: Executor, sha256: str, size: int, content: bytes) -> tuple[int, int] | None:
    """Store the blob unless it is held (a redacted artifact from a peer brings no bytes: its
    blob is kept empty under its `size`); returns what was held before (`blob_state`)."""
    held = blob_state(ex, sha256)
    if held is None:
        q.insert_blob(ex, sha256, size, content)
    return held


def refill_after(ex: Executor, held: tuple[int, int] | None, sha256: str, data: bytes) -> None:
    """Put the bytes back into an emptied blob, once an unredacted artifact naming it was
    written here with `data` (its SHA-256 checked): `held` is what `ensure` returned. A blob
    kept under another size (a peer's redacted copy, before 0007) is left as it is."""
    if held is not None and held[0] == 0 and data and held[1] == len(data):
        q.fill_blob(ex, sha256, data)


def tombstone(ex: Executor, artifact_id: str, redaction_id: str, sha256: str) -> bool:
    """Record that `redaction_id` took effect on the artifact; True when the artifact was not
    redacted before (the part changed now)."""
    held = q.redaction_ids_of(ex, artifact_id)
    if redaction_id not in held:
        q.insert_redaction(ex, artifact_id, redaction_id, sha256)
    return not held


def empty_if_unnamed(ex: Executor, sha256: str) -> bool:
    """Empty the blob `sha256` when no unredacted artifact names it; whether it did."""
    if q.named_unredacted(ex, sha256):
        return False
    q.empty_blob(ex, sha256)
    return True


def is_redacted(ex: Executor, artifact_id: str) -> bool:
    return bool(q.redaction_ids_of(ex, artifact_id))


# ----------------------------------------------------------------------------- reads


def redactions_of_artifacts(conn: sa.Connection, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """artifact id -> {by, at, reason, event_id} of the earliest redaction that took effect
    on it (by its `created_at`, then id: the same on every replica), for the redacted ones."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out: dict[str, dict[str, str]] = {}
    for row in q.redactions_of_artifacts(conn, wanted):
        out.setdefault(str(row[0]), _doc(row[1:]))
    return out


def redaction_of_blob(conn: sa.Connection, sha256: str) -> dict[str, str] | None:
    """{by, at, reason, event_id} of the earliest redaction naming an artifact of the blob
    `sha256` (what an emptied blob that its own artifact's redaction does not explain shows)."""
    row = q.first_artifact_redaction(conn, sha256, BODY)
    return None if row is None else _doc(row)


def unredacted_on_empty_blobs(conn: sa.Connection, shas: Sequence[str]) -> list[str]:
    """The ids of unredacted artifacts whose (emptied) blob is among `shas` (doctor)."""
    if not shas:
        return []
    return q.unredacted_of_blobs(conn, shas)


def redacted_blob_shas(conn: sa.Connection) -> set[str]:
    """The sha256 of every blob that an artifact's redaction names."""
    return q.redacted_blob_shas(conn)


def _doc(row: Sequence[Any]) -> dict[str, str]:
    return {"by": row[0], "at": row[1], "reason": row[2], "event_id": row[3]}
