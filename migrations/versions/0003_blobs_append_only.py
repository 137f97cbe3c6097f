"""Artifact blobs become append-only like the other tables that hold log content.

A blob is the bytes behind an artifact's sha256; changing one behind the API would serve other
bytes under the original digest (artifact_get re-hashes too, but the database refuses first).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from mempalace_logstream.backends.ddl import append_only_ddl, drop_append_only_ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES_0003 = ("artifact_blobs",)


def upgrade() -> None:
    for ddl in append_only_ddl(op.get_bind().dialect.name, TABLES_0003):
        op.execute(ddl)


def downgrade() -> None:
    # The PostgreSQL trigger function stays: revision 0001's triggers still use it.
    for ddl in drop_append_only_ddl(op.get_bind().dialect.name, TABLES_0003, function=False):
        op.execute(ddl)
