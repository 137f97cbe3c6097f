"""Shared presence (issue 23): `presence`, one row per agent with its latest announcement, its
delivery paths and their expiry, and the change number (`rev`) that wrote it, so that every hub
on one PostgreSQL log lists the same agents. Hub-local, never replicated, not append-only.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "presence",
        sa.Column("agent", Key, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("task_id", sa.Text),
        sa.Column("note", sa.Text),
        sa.Column("paths_json", sa.Text, nullable=False),
        sa.Column("announced_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("rev", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("agent", name="pk_presence"),
    )


def downgrade() -> None:
    op.drop_table("presence")
