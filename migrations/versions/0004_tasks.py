"""The task projection (RFC 0007): one row per task, derived from the log in the same
transaction as each event. Not append-only: it is an index, rebuilt from the events at will
(the store rebuilds it when it opens a log that was migrated from before this revision).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("task_id", Key, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("requester", sa.Text, nullable=False),
        sa.Column("to_agent", sa.Text),
        sa.Column("assignee", sa.Text),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("parent_task_id", Key),
        sa.Column("lease_expires_ms", sa.BigInteger),
        sa.Column("updated_seq", Seq, nullable=False),
        sa.Column("doc_json", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("task_id", name="pk_tasks"),
    )
    for cols in (
        ("state", "updated_seq"),
        ("state", "lease_expires_ms"),
        ("to_agent", "state", "updated_seq"),
        ("to_agent", "updated_seq"),
        ("requester", "updated_seq"),
        ("parent_task_id",),
        ("updated_seq",),
    ):
        op.create_index(f"ix_tasks_{'_'.join(cols)}", "tasks", list(cols))


def downgrade() -> None:
    op.drop_table("tasks")
