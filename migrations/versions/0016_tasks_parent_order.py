"""A parent's children walk an index of their own: `(parent_task_id, state, updated_seq,
to_agent)` where `parent_task_id` is set, in place of the plain index on `parent_task_id`.
`task_list(parent_task_id=X)` walked each state's `(state, updated_seq)` filtering the parent,
reading every task (~77 ms CPU on SQLite at 100,000 tasks, even for a parent with no child);
now a parent and a state is one range, a parent and no state one range per state, merged
(backends/queries/tasks.py). Every read names a parent (`=`, which both SQLite and PostgreSQL
prove implies IS NOT NULL), so the rows without one, most, are left out: a move of such a task
updates one index fewer than before. `to_agent`, last, is there to be read, not walked: a
parent's listing filtered by an agent tests it on the index entries, with no table row read
for the children of other agents (SQLite: 4.3 -> 0.74 ms at a parent of 2,041 children).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from mempalace_logstream.backends.ddl import where_set

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_tasks_parent_task_id", table_name="tasks")
    op.create_index(
        "ix_tasks_parent_task_id_state_updated_seq_to_agent",
        "tasks",
        ["parent_task_id", "state", "updated_seq", "to_agent"],
        **where_set("parent_task_id"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_parent_task_id_state_updated_seq_to_agent", table_name="tasks")
    op.create_index("ix_tasks_parent_task_id", "tasks", ["parent_task_id"])
