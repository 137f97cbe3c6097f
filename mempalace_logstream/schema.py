"""SQLAlchemy Core schema: the single source of schema truth for SQLite and PostgreSQL.

`SCHEMA_HEAD` names the Alembic revision this code writes; a test proves it is Alembic's head
and that `alembic upgrade head` produces exactly this metadata.
Must not import engine, store or alembic.
"""

from __future__ import annotations

import sqlalchemy as sa

SCHEMA_HEAD = "0001"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

# The local position is the SQLite rowid (INTEGER PRIMARY KEY) and a BIGINT on PostgreSQL.
Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Ids and HLC stamps compare bytewise on every backend (PostgreSQL would otherwise use the
# database collation and break "string order is causal order").
Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")

FILTER_COLUMNS = (
    "stream", "room", "topic", "type", "to_agent", "from_agent", "correlation_id", "status",
)  # fmt: skip

events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", Seq, primary_key=True, autoincrement=False),
    sa.Column("id", Key, nullable=False),
    sa.Column("origin_replica", Key, nullable=False),
    sa.Column("origin_seq", sa.BigInteger, nullable=False),
    sa.Column("hlc", Key, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("stream", sa.Text, nullable=False),
    sa.Column("room", sa.Text, nullable=False),
    sa.Column("topic", sa.Text),
    sa.Column("from_agent", sa.Text, nullable=False),
    sa.Column("to_agent", sa.Text),
    sa.Column("correlation_id", sa.Text),
    sa.Column("branch", sa.Text),
    sa.Column("base_commit", sa.Text),
    sa.Column("status", sa.Text),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("metadata_json", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.Text),
    sa.UniqueConstraint("id"),
    sa.UniqueConstraint("origin_replica", "origin_seq"),
    # (filter, seq): a filtered read ordered by seq walks one index range, no sort.
    *[sa.Index(None, col, "seq") for col in FILTER_COLUMNS],
    sa.Index(None, "hlc"),
    sa.Index(None, "created_at"),
    sa.Index("uq_events_writer_idempotency_key", "from_agent", "idempotency_key", unique=True),
)

artifact_blobs = sa.Table(
    "artifact_blobs",
    metadata,
    sa.Column("sha256", Key, primary_key=True),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("content", sa.LargeBinary, nullable=False),
)

artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("id", Key, primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("sha256", Key, sa.ForeignKey("artifact_blobs.sha256"), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("encoding", sa.Text, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("origin_replica", Key, nullable=False),
    sa.Column("metadata_json", sa.Text, nullable=False),
    sa.UniqueConstraint("seq"),
    sa.Index(None, "sha256"),
)

event_artifacts = sa.Table(
    "event_artifacts",
    metadata,
    sa.Column("event_id", Key, sa.ForeignKey("events.id"), primary_key=True),
    sa.Column("artifact_id", Key, sa.ForeignKey("artifacts.id"), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Index(None, "artifact_id"),
)

meta = sa.Table(
    "logstream_meta",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

APPEND_ONLY_TABLES = ("events", "event_artifacts", "artifacts")


def append_only_ddl(dialect: str) -> list[str]:
    """Triggers that make the database itself reject UPDATE/DELETE on the append-only tables."""
    if dialect == "sqlite":
        out = []
        for table in APPEND_ONLY_TABLES:
            for op in ("UPDATE", "DELETE"):
                out.append(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} are append-only: {op} is not allowed'); "
                    "END"
                )
        return out
    out = [
        "CREATE OR REPLACE FUNCTION logstream_reject_mutation() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '% are append-only: % is not allowed', "
        "TG_TABLE_NAME, TG_OP USING ERRCODE = 'restrict_violation'; END $$"
    ]
    for table in APPEND_ONLY_TABLES:
        out.append(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        out.append(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION logstream_reject_mutation()"
        )
        out.append(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
        out.append(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION logstream_reject_mutation()"
        )
    return out


def drop_append_only_ddl(dialect: str) -> list[str]:
    if dialect == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {t}_no_{op}"
            for t in APPEND_ONLY_TABLES
            for op in ("update", "delete")
        ]
    out = []
    for t in APPEND_ONLY_TABLES:
        out.append(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}")
        out.append(f"DROP TRIGGER IF EXISTS {t}_no_truncate ON {t}")
    out.append("DROP FUNCTION IF EXISTS logstream_reject_mutation()")
    return out
