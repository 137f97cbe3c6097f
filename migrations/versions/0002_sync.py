"""Replication bookkeeping: sync conflicts, rejections, clock anomalies and per-peer estate.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sync_conflicts",
        sa.Column("event_id", Key, nullable=False),
        sa.Column("remote_sha256", Key, nullable=False),
        sa.Column("origin_replica", sa.Text),
        sa.Column("origin_seq", sa.BigInteger),
        sa.Column("local_event_id", sa.Text),
        sa.Column("peer", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("remote_json", sa.Text, nullable=False),
        sa.Column("first_seen_at", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("event_id", "remote_sha256", name="pk_sync_conflicts"),
    )
    op.create_table(
        "sync_rejections",
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("ident", Key, nullable=False),
        sa.Column("origin_replica", sa.Text),
        sa.Column("origin_seq", sa.BigInteger),
        sa.Column("peer", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("retryable", sa.Boolean, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("first_seen_at", sa.Text, nullable=False),
        sa.Column("last_seen_at", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("kind", "ident", name="pk_sync_rejections"),
    )
    op.create_index(
        "ix_sync_rejections_origin_replica_origin_seq",
        "sync_rejections",
        ["origin_replica", "origin_seq"],
    )
    op.create_table(
        "sync_clock_anomalies",
        sa.Column("event_id", Key, nullable=False),
        sa.Column("origin_replica", sa.Text, nullable=False),
        sa.Column("hlc", sa.Text, nullable=False),
        sa.Column("peer", sa.Text, nullable=False),
        sa.Column("observed_at", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_sync_clock_anomalies"),
    )
    op.create_table(
        "sync_peers",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("replica_id", sa.Text),
        sa.Column("reachable", sa.Boolean),
        sa.Column("last_success_at", sa.Text),
        sa.Column("last_error", sa.Text),
        sa.Column("last_error_at", sa.Text),
        sa.Column("last_pulled_events", sa.BigInteger, nullable=False),
        sa.Column("last_pulled_artifacts", sa.BigInteger, nullable=False),
        sa.Column("last_pushed_events", sa.BigInteger, nullable=False),
        sa.Column("total_pulled_events", sa.BigInteger, nullable=False),
        sa.Column("rounds", sa.BigInteger, nullable=False),
        sa.Column("remote_version_vector", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_sync_peers"),
    )


def downgrade() -> None:
    op.drop_table("sync_peers")
    op.drop_table("sync_clock_anomalies")
    op.drop_index("ix_sync_rejections_origin_replica_origin_seq", table_name="sync_rejections")
    op.drop_table("sync_rejections")
    op.drop_table("sync_conflicts")
