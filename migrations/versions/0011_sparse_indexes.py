"""Sparse columns indexed where set (issue 25): the (column, seq) indexes of `topic`,
`correlation_id` and `status`, and the writers' idempotency keys, keep only the rows where the
column is not NULL. Every read asks these columns for values, never for NULL, so each read
plan stays an index range; an append that leaves them empty (most do) updates four indexes
less. The same names, the same columns: dropped and made again as partial indexes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

from mempalace_logstream.backends.ddl import where_set

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# name -> (columns, unique, the column that must be set), frozen as of this revision.
INDEXES = {
    "ix_events_topic_seq": (["topic", "seq"], False, "topic"),
    "ix_events_correlation_id_seq": (["correlation_id", "seq"], False, "correlation_id"),
    "ix_events_status_seq": (["status", "seq"], False, "status"),
    "uq_events_writer_idempotency_key": (
        ["from_agent", "idempotency_key"],
        True,
        "idempotency_key",
    ),
}


def upgrade() -> None:
    for name, (columns, unique, column) in INDEXES.items():
        op.drop_index(name, table_name="events")
        op.create_index(name, "events", columns, unique=unique, **where_set(column))


def downgrade() -> None:
    for name, (columns, unique, _column) in INDEXES.items():
        op.drop_index(name, table_name="events")
        op.create_index(name, "events", columns, unique=unique)
