"""Identity (RFC 0008): each event's Ed25519 signature and key id (NULL when unsigned), and the
hub's agent tokens (hashes only, local to one hub, never replicated).

Adding nullable columns is DDL, not an UPDATE: the append-only triggers are untouched, and
every event written before this revision reads as unsigned (`verified: null`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("sig", sa.Text))
    op.add_column("events", sa.Column("key_id", sa.Text))
    op.create_table(
        "agent_tokens",
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("token_hash", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("agent", name="pk_agent_tokens"),
    )


def downgrade() -> None:
    op.drop_table("agent_tokens")
    # Plain ALTER TABLE ... DROP COLUMN (SQLite 3.35+, PostgreSQL): a batch rebuild would copy
    # the events table and lose its append-only triggers.
    op.execute("ALTER TABLE events DROP COLUMN key_id")
    op.execute("ALTER TABLE events DROP COLUMN sig")
