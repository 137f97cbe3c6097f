"""Redaction (RFC 0008): the `redactions` table and the one exception to append-only.

A row names one piece of content an `event.redact` removes: the target event's body (replaced
by the row's tombstone, which keeps the SHA-256 the signature covers) or an artifact's blob
(emptied; its sha256 and size stay). The update triggers of `events` and `artifact_blobs` now
let through exactly that change and nothing else; `redactions` itself is append-only.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mempalace_logstream.backends.ddl import (
    append_only_ddl,
    drop_append_only_ddl,
    drop_redaction_guard_ddl,
    redaction_guard_ddl,
)

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")

# The events columns at this revision (frozen: a later column must be added here by its own
# migration, or the trigger would not check it).
EVENT_COLUMNS_0006 = (
    "seq",
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "body",
    "created_at",
    "metadata_json",
    "sig",
    "key_id",
    "idempotency_key",
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "redactions",
        sa.Column("redaction_id", Key, nullable=False),
        sa.Column("part", Key, nullable=False),
        sa.Column("target_id", Key, nullable=False),
        sa.Column("sha256", Key, nullable=False),
        sa.Column("tombstone", sa.Text),
        sa.Column("redacted_by", sa.Text, nullable=False),
        sa.Column("redacted_at", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("redaction_id", "part", name="pk_redactions"),
    )
    op.create_index("ix_redactions_target_id", "redactions", ["target_id"])
    op.create_index("ix_redactions_sha256", "redactions", ["sha256"])
    for ddl in append_only_ddl(dialect, ("redactions",)):
        op.execute(ddl)
    for ddl in redaction_guard_ddl(dialect, EVENT_COLUMNS_0006):
        op.execute(ddl)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for ddl in drop_redaction_guard_ddl(dialect):
        op.execute(ddl)
    # Back to the plain append-only triggers of 0001/0003 on the two tables.
    for ddl in append_only_ddl(dialect, ("events", "artifact_blobs")):
        op.execute(ddl)
    for ddl in drop_append_only_ddl(dialect, ("redactions",), function=False):
        op.execute(ddl)
    op.drop_table("redactions")
