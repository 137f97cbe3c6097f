"""The task listing's plan, whatever the statistics (issue 25): `ix_tasks_updated_seq` is
dropped. With statistics, PostgreSQL walked it backwards filtering the state (a listing of a
state reads every other state's rows in between) instead of `(state, updated_seq)`; a
listing of any state is now one `(state, updated_seq)` leg per state, merged
(backends/queries/tasks.py), so nothing reads this index any more, and a task's move writes
one index entry fewer.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_tasks_updated_seq", table_name="tasks")


def downgrade() -> None:
    op.create_index("ix_tasks_updated_seq", "tasks", ["updated_seq"])
