"""File leases (issue 22, RFC 0010): `leases`, one row per `lease.acquire` with what its renews
and releases did, derived from the log in the transaction that appends them (like `tasks`).
No log before this revision holds lease events: the table starts empty.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("lease_id", Key, nullable=False),
        sa.Column("project", Key, nullable=False),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("paths_json", sa.Text, nullable=False),
        sa.Column("exclusive", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("task_id", Key),
        sa.Column("fence", sa.BigInteger, nullable=False),
        sa.Column("acquired_hlc", Key, nullable=False),
        sa.Column("ttl_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("released_hlc", Key),
        sa.Column("released_by", sa.Text),
        sa.Column("lost_to", Key),
        sa.Column("lost_holder", sa.Text),
        sa.Column("updated_seq", Seq, nullable=False),
        sa.PrimaryKeyConstraint("lease_id", name="pk_leases"),
    )
    for cols in (("project", "expires_ms"), ("agent",), ("task_id",)):
        op.create_index(f"ix_leases_{'_'.join(cols)}", "leases", list(cols))


def downgrade() -> None:
    op.drop_table("leases")
