"""Two listings of tasks walk an index of their own (issue 25):

- a stream's, `(stream, state, updated_seq)`: `task_list(stream=X)` walked each state's
  `(state, updated_seq)` filtering the stream, reading every task of a state the stream has
  none of (~45 ms on SQLite at 100,000 tasks). A stream and a state is one range of it; a
  stream and no state one range per state, merged (backends/queries/tasks.py).
- any state's, `ix_tasks_any_state`: `updated_seq` where `updated_seq > 0`, every row (a
  task's seq is an event's, from 1), a partial index so that only the listing of any state,
  which states the predicate word for word, can walk it. A state's listing cannot: it states
  no such term (0014 dropped the plain index because PostgreSQL, with statistics, walked it
  filtering the state). The nine-leg merge it replaces cost ~0.4 ms more on SQLite.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ANY_STATE_WHERE = "updated_seq > 0"  # schema.TASKS_ANY_STATE_WHERE, word for word


def upgrade() -> None:
    op.create_index(
        "ix_tasks_stream_state_updated_seq", "tasks", ["stream", "state", "updated_seq"]
    )
    op.create_index(
        "ix_tasks_any_state",
        "tasks",
        ["updated_seq"],
        sqlite_where=sa.text(ANY_STATE_WHERE),
        postgresql_where=sa.text(ANY_STATE_WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_any_state", table_name="tasks")
    op.drop_index("ix_tasks_stream_state_updated_seq", table_name="tasks")
