"""The signed events' index (issue 25): `key_id` where the event is signed (`key_id` or `sig`
set). A read's tip asks whether the log holds any signed event by one probe of it, and while
none is, its page statements leave `sig` and `key_id` out (two NULL values a row fewer for
the driver to convert). An unsigned append writes no entry in it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# Frozen as of this revision.
WHERE = "key_id IS NOT NULL OR sig IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_events_signed",
        "events",
        ["key_id"],
        sqlite_where=sa.text(WHERE),
        postgresql_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_events_signed", table_name="events")
