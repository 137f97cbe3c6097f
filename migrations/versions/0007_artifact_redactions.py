"""Per-artifact redaction (RFC 0008 "Redaction", issue 18): the `artifact_redactions` table and
a blob guard that counts artifacts instead of redactions.

Blobs are content-addressed: two writers' artifacts with the same bytes share one blob. A
redaction now takes effect on the artifacts it names that its writer created (or on any, for
the admin): one `artifact_redactions` row each, and such an artifact reads as redacted whatever
its blob holds. The blob is emptied only when every artifact naming its sha256 has a row, and
an emptied blob is refilled, with bytes of exactly its sha256 and size, when an unredacted
artifact with those bytes arrives. The `artifact_blobs` update trigger lets through exactly
these two changes (SQLite checks the SHA-256 with a function the store registers on every
connection, PostgreSQL with its own `sha256()`).

Blobs that a redaction of 0006 emptied get the rows of the artifacts the redaction named whose
writer created them or that the admin redacted; an emptied blob that an unredacted artifact
still names is what `logstream doctor` reports.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mempalace_logstream.backends.ddl import (
    append_only_ddl,
    blob_guard_ddl,
    drop_append_only_ddl,
    drop_blob_guard_ddl,
)

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")

# The redactions of 0006 that emptied a blob, and were the admin's or the artifact's writer's.
BACKFILL = (
    "INSERT INTO artifact_redactions (artifact_id, redaction_id, sha256) "
    "SELECT DISTINCT r.part, r.redaction_id, r.sha256 FROM redactions r "
    "JOIN artifacts a ON a.id = r.part AND a.sha256 = r.sha256 "
    "JOIN artifact_blobs b ON b.sha256 = r.sha256 "
    "JOIN event_artifacts l ON l.event_id = r.target_id AND l.artifact_id = r.part "
    "WHERE r.part <> 'body' AND {empty} AND r.redacted_by IN ('admin', a.created_by)"
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "artifact_redactions",
        sa.Column("artifact_id", Key, nullable=False),
        sa.Column("redaction_id", Key, nullable=False),
        sa.Column("sha256", Key, nullable=False),
        sa.PrimaryKeyConstraint("artifact_id", "redaction_id", name="pk_artifact_redactions"),
    )
    op.create_index("ix_artifact_redactions_sha256", "artifact_redactions", ["sha256"])
    empty = "length(b.content) = 0" if dialect == "sqlite" else "octet_length(b.content) = 0"
    op.execute(BACKFILL.format(empty=empty))
    for ddl in append_only_ddl(dialect, ("artifact_redactions",)):
        op.execute(ddl)
    for ddl in blob_guard_ddl(dialect):
        op.execute(ddl)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for ddl in drop_blob_guard_ddl(dialect):
        op.execute(ddl)
    for ddl in drop_append_only_ddl(dialect, ("artifact_redactions",), function=False):
        op.execute(ddl)
    op.drop_table("artifact_redactions")
