"""The delivery ledger (issue 20, RFC 0009): `deliveries`, one row per event and recipient with
the earliest push (and its path), read and ack. Hub-local, never replicated, not append-only
(a later mark fills a column; an earlier time replaces a later one).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("event_id", Key, nullable=False),
        sa.Column("recipient", Key, nullable=False),
        sa.Column("pushed_at", sa.Text),
        sa.Column("pushed_path", sa.Text),
        sa.Column("seen_at", sa.Text),
        sa.Column("acked_at", sa.Text),
        sa.PrimaryKeyConstraint("event_id", "recipient", name="pk_deliveries"),
    )


def downgrade() -> None:
    op.drop_table("deliveries")
