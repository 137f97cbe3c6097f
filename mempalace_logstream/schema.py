"""SQLAlchemy Core schema: the single source of schema truth for SQLite and PostgreSQL.

`SCHEMA_HEAD` names the Alembic revision this code writes; a test proves it is Alembic's head
and that `alembic upgrade head` produces exactly this metadata.
Must not import engine, store or alembic.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from mempalace_logstream.models import EVENT_SPEC

SCHEMA_HEAD = "0008"

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

# The column type of each kind of event field (models.FieldSpec.kind; "links" is no column).
_KINDS: dict[str, sa.types.TypeEngine[Any]] = {
    "seq": Seq,
    "key": Key,
    "int": sa.BigInteger(),
    "text": sa.Text(),
}
# The events columns (and their (column, seq) indexes), as `Event` declares its fields, the
# position first (the order migration 0001 created).
_EVENT_FIELDS = sorted(
    ((name, spec) for name, spec in EVENT_SPEC if spec.kind in _KINDS),
    key=lambda item: item[1].kind != "seq",
)
FILTER_COLUMNS = tuple(name for name, spec in _EVENT_FIELDS if spec.indexed)

events = sa.Table(
    "events",
    metadata,
    *[
        sa.Column(
            name,
            _KINDS[spec.kind],
            nullable=spec.nullable,
            primary_key=spec.kind == "seq",
            autoincrement=False,
        )
        for name, spec in _EVENT_FIELDS
    ],
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

# ---- replication bookkeeping (0002). Not append-only: these are local, never replicated.

# A remote event whose id (or origin position) is already held here with different content.
sync_conflicts = sa.Table(
    "sync_conflicts",
    metadata,
    sa.Column("event_id", Key, primary_key=True),
    sa.Column("remote_sha256", Key, primary_key=True),
    sa.Column("origin_replica", sa.Text),
    sa.Column("origin_seq", sa.BigInteger),
    sa.Column("local_event_id", sa.Text),
    sa.Column("peer", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("remote_json", sa.Text, nullable=False),
    sa.Column("first_seen_at", sa.Text, nullable=False),
)

# A remote event or artifact that was refused (invalid, tampered) or deferred (its artifact was
# refused). `retryable` rows pin the pull position of their origin until they are applied.
sync_rejections = sa.Table(
    "sync_rejections",
    metadata,
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("ident", Key, primary_key=True),
    sa.Column("origin_replica", sa.Text),
    sa.Column("origin_seq", sa.BigInteger),
    sa.Column("peer", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("retryable", sa.Boolean, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("first_seen_at", sa.Text, nullable=False),
    sa.Column("last_seen_at", sa.Text, nullable=False),
    sa.Index(None, "origin_replica", "origin_seq"),
)

# Remote HLC stamps more than 60 s ahead: kept verbatim on the event, not adopted by the clock.
sync_clock_anomalies = sa.Table(
    "sync_clock_anomalies",
    metadata,
    sa.Column("event_id", Key, primary_key=True),
    sa.Column("origin_replica", sa.Text, nullable=False),
    sa.Column("hlc", sa.Text, nullable=False),
    sa.Column("peer", sa.Text, nullable=False),
    sa.Column("observed_at", sa.Text, nullable=False),
)

# Per-peer estate (S-7.4), written after every round so every process can show it.
sync_peers = sa.Table(
    "sync_peers",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
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
)

# ---- the task projection (0004): derived from the log, rebuilt from it at will (RFC 0007).
# One row per task: the columns reads filter and order on, and the whole derived state as JSON.
tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("task_id", Key, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("requester", sa.Text, nullable=False),
    sa.Column("to_agent", sa.Text),
    sa.Column("assignee", sa.Text),
    sa.Column("stream", sa.Text, nullable=False),
    sa.Column("parent_task_id", Key),
    sa.Column("lease_expires_ms", sa.BigInteger),
    sa.Column("updated_seq", Seq, nullable=False),
    sa.Column("doc_json", sa.Text, nullable=False),
    sa.Index(None, "state", "updated_seq"),
    sa.Index(None, "state", "lease_expires_ms"),  # held tasks whose lease has passed
    sa.Index(None, "to_agent", "state", "updated_seq"),
    sa.Index(None, "to_agent", "updated_seq"),
    sa.Index(None, "requester", "updated_seq"),
    sa.Index(None, "parent_task_id"),
    sa.Index(None, "updated_seq"),
)

# ---- the hub's agent tokens (0005): local to one hub, never replicated; only hashes (RFC 0008).
agent_tokens = sa.Table(
    "agent_tokens",
    metadata,
    sa.Column("agent", sa.Text, primary_key=True),
    sa.Column("token_hash", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
)

# ---- redactions (0006, RFC 0008 "Redaction"): one row per piece of content an `event.redact`
# removes: the target's body (`part` = "body") or an artifact's blob (`part` = the artifact id).
# Written when the redaction is applied (locally or from a peer), also before its target
# arrives; the append-only triggers of `events` and `artifact_blobs` allow exactly the change a
# row here names (the body becomes `tombstone`; the blob's content becomes empty bytes).
redactions = sa.Table(
    "redactions",
    metadata,
    sa.Column("redaction_id", Key, nullable=False),
    sa.Column("part", Key, nullable=False),
    sa.Column("target_id", Key, nullable=False),
    sa.Column("sha256", Key, nullable=False),
    sa.Column("tombstone", sa.Text),
    sa.Column("redacted_by", sa.Text, nullable=False),
    sa.Column("redacted_at", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("redaction_id", "part"),
    sa.Index(None, "target_id"),
    sa.Index(None, "sha256"),
)

# ---- artifact_redactions (0007, RFC 0008 "Redaction"): one row per artifact a redaction took
# effect on (its writer created the artifact, or the admin redacted it). The artifact reads as
# redacted whatever its blob holds; a blob is emptied only when every artifact naming its
# sha256 has a row here, and refilled when an unredacted one arrives with its bytes.
artifact_redactions = sa.Table(
    "artifact_redactions",
    metadata,
    sa.Column("artifact_id", Key, nullable=False),
    sa.Column("redaction_id", Key, nullable=False),
    sa.Column("sha256", Key, nullable=False),
    sa.PrimaryKeyConstraint("artifact_id", "redaction_id"),
    sa.Index(None, "sha256"),
)

# ---- deliveries (0008, RFC 0009 "Delivery ledger"): per event and recipient, when a delivery
# path pushed it (and which), when the recipient first read it, when it acked it. Hub-local
# state like presence and agent tokens: never replicated; the earliest time wins per column.
deliveries = sa.Table(
    "deliveries",
    metadata,
    sa.Column("event_id", Key, nullable=False),
    sa.Column("recipient", Key, nullable=False),
    sa.Column("pushed_at", sa.Text),
    sa.Column("pushed_path", sa.Text),
    sa.Column("seen_at", sa.Text),
    sa.Column("acked_at", sa.Text),
    sa.PrimaryKeyConstraint("event_id", "recipient"),
)

# Every table that holds log content. Revision 0001 guarded the first three; 0003 added the
# blobs (the bytes behind an artifact's sha256), so a migration passes the tables it guards.
APPEND_ONLY_TABLES = ("events", "event_artifacts", "artifacts", "artifact_blobs", "redactions")


def append_only_ddl(dialect: str, tables: tuple[str, ...] = APPEND_ONLY_TABLES) -> list[str]:
    """Triggers that make the database itself reject UPDATE/DELETE on the append-only tables."""
    if dialect == "sqlite":
        out = []
        for table in tables:
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
    for table in tables:
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


def drop_append_only_ddl(
    dialect: str, tables: tuple[str, ...] = APPEND_ONLY_TABLES, *, function: bool = True
) -> list[str]:
    if dialect == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {t}_no_{op}" for t in tables for op in ("update", "delete")
        ]
    out = []
    for t in tables:
        out.append(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}")
        out.append(f"DROP TRIGGER IF EXISTS {t}_no_truncate ON {t}")
    if function:
        out.append("DROP FUNCTION IF EXISTS logstream_reject_mutation()")
    return out


# ---- the one exception to append-only (0006): a redaction (RFC 0008 "Redaction").
REDACTABLE_TABLES = ("events", "artifact_blobs")
_REFUSE = "{table} are append-only: UPDATE is not allowed (a redaction may only tombstone {what})"


def redaction_guard_ddl(dialect: str, event_columns: tuple[str, ...]) -> list[str]:
    """Triggers that let an UPDATE through only when it is a redaction a `redactions` row
    names: an event's `body` becomes the row's tombstone (every other column of
    `event_columns` unchanged), or a blob's content becomes empty (sha256 and size unchanged).
    Everything else stays refused by the database itself."""
    kept = [c for c in event_columns if c != "body"]
    body_named = (
        "EXISTS (SELECT 1 FROM redactions r WHERE r.target_id = OLD.id AND r.part = 'body' "
        "AND r.tombstone = NEW.body{sha})"
    )
    blob_named = (
        "EXISTS (SELECT 1 FROM redactions r WHERE r.sha256 = OLD.sha256 AND r.part <> 'body')"
    )
    if dialect == "sqlite":
        changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in kept)
        return [
            "DROP TRIGGER IF EXISTS events_no_update",
            "CREATE TRIGGER events_no_update BEFORE UPDATE ON events "
            f"WHEN NOT {body_named.format(sha='')} OR {changed} "
            f"BEGIN SELECT RAISE(ABORT, '{_REFUSE.format(table='events', what='a body')}'); END",
            *_blob_trigger_0006_sqlite(blob_named),
        ]
    new = ", ".join(f"NEW.{c}" for c in kept)
    old = ", ".join(f"OLD.{c}" for c in kept)
    pg_sha = " AND r.sha256 = encode(sha256(convert_to(OLD.body, 'UTF8')), 'hex')"
    out = [
        "CREATE OR REPLACE FUNCTION logstream_guard_redaction() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "IF TG_TABLE_NAME = 'events' THEN "
        f"IF ROW({new}) IS NOT DISTINCT FROM ROW({old}) AND {body_named.format(sha=pg_sha)} "
        "THEN RETURN NEW; END IF; "
        "ELSIF TG_TABLE_NAME = 'artifact_blobs' THEN "
        "IF NEW.sha256 = OLD.sha256 AND NEW.size_bytes = OLD.size_bytes "
        f"AND octet_length(NEW.content) = 0 AND {blob_named} THEN RETURN NEW; END IF; "
        "END IF; "
        "RAISE EXCEPTION '% are append-only: % is not allowed (a redaction may only tombstone "
        "a body or empty a blob)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'restrict_violation'; "
        "END $$"
    ]
    for table in REDACTABLE_TABLES:
        out += [
            f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
            f"CREATE TRIGGER {table}_append_only BEFORE DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION logstream_reject_mutation()",
            f"DROP TRIGGER IF EXISTS {table}_redact_only ON {table}",
            f"CREATE TRIGGER {table}_redact_only BEFORE UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION logstream_guard_redaction()",
        ]
    return out


def drop_redaction_guard_ddl(dialect: str) -> list[str]:
    """Undo `redaction_guard_ddl` (the plain append-only triggers are re-created after)."""
    if dialect == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {t}_no_update" for t in REDACTABLE_TABLES]
    out = [f"DROP TRIGGER IF EXISTS {t}_redact_only ON {t}" for t in REDACTABLE_TABLES]
    out.append("DROP FUNCTION IF EXISTS logstream_guard_redaction()")
    return out


def _blob_trigger_0006_sqlite(blob_named: str) -> list[str]:
    return [
        "DROP TRIGGER IF EXISTS artifact_blobs_no_update",
        "CREATE TRIGGER artifact_blobs_no_update BEFORE UPDATE ON artifact_blobs "
        f"WHEN NOT {blob_named} OR NEW.sha256 IS NOT OLD.sha256 "
        "OR NEW.size_bytes IS NOT OLD.size_bytes OR length(NEW.content) <> 0 "
        "BEGIN SELECT RAISE(ABORT, "
        f"'{_REFUSE.format(table='artifact_blobs', what='a blob')}'); END",
    ]


# ---- per-artifact redaction (0007): the blob guard counts artifacts, not redactions.
# SQLite has no SHA-256 in SQL: the store registers this function on every connection it
# opens (engine.py); another program's UPDATE of a blob fails for want of it, which refuses it.
SQLITE_SHA256_FUNCTION = "logstream_sha256"
_UNREDACTED = (
    "EXISTS (SELECT 1 FROM artifacts a WHERE a.sha256 = OLD.sha256 AND NOT EXISTS "
    "(SELECT 1 FROM artifact_redactions t WHERE t.artifact_id = a.id))"
)
_REDACTED_ONE = "EXISTS (SELECT 1 FROM artifact_redactions t WHERE t.sha256 = OLD.sha256)"
_BLOB_REFUSE = (
    "artifact_blobs are append-only: UPDATE is not allowed (a redaction may only empty a blob "
    "no unredacted artifact names, or refill an emptied one with its own bytes)"
)


def blob_guard_ddl(dialect: str) -> list[str]:
    """The `artifact_blobs` update guard of 0007: the only UPDATEs let through are emptying a
    blob when every artifact naming its sha256 is redacted (and one is), and refilling an
    emptied blob with bytes of that sha256 and size while an unredacted artifact names it.
    sha256 and size never change."""
    if dialect == "sqlite":
        digest = f"{SQLITE_SHA256_FUNCTION}(NEW.content)"
        empty = f"(length(NEW.content) = 0 AND {_REDACTED_ONE} AND NOT {_UNREDACTED})"
        refill = (
            "(length(OLD.content) = 0 AND length(NEW.content) = OLD.size_bytes "
            f"AND {digest} = OLD.sha256 AND {_UNREDACTED})"
        )
        return [
            "DROP TRIGGER IF EXISTS artifact_blobs_no_update",
            "CREATE TRIGGER artifact_blobs_no_update BEFORE UPDATE ON artifact_blobs "
            "WHEN NEW.sha256 IS NOT OLD.sha256 OR NEW.size_bytes IS NOT OLD.size_bytes "
            f"OR NOT ({empty} OR {refill}) "
            f"BEGIN SELECT RAISE(ABORT, '{_BLOB_REFUSE}'); END",
        ]
    return [
        "CREATE OR REPLACE FUNCTION logstream_guard_blob() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.sha256 = OLD.sha256 AND NEW.size_bytes = OLD.size_bytes THEN "
        f"IF octet_length(NEW.content) = 0 AND {_REDACTED_ONE} AND NOT {_UNREDACTED} "
        "THEN RETURN NEW; END IF; "
        "IF octet_length(OLD.content) = 0 AND octet_length(NEW.content) = OLD.size_bytes "
        f"AND encode(sha256(NEW.content), 'hex') = OLD.sha256 AND {_UNREDACTED} "
        "THEN RETURN NEW; END IF; "
        "END IF; "
        f"RAISE EXCEPTION '{_BLOB_REFUSE}' USING ERRCODE = 'restrict_violation'; END $$",
        "DROP TRIGGER IF EXISTS artifact_blobs_redact_only ON artifact_blobs",
        "CREATE TRIGGER artifact_blobs_redact_only BEFORE UPDATE ON artifact_blobs "
        "FOR EACH ROW EXECUTE FUNCTION logstream_guard_blob()",
    ]


def drop_blob_guard_ddl(dialect: str) -> list[str]:
    """Back to the blob guard of 0006 (`redaction_guard_ddl`'s)."""
    if dialect == "sqlite":
        return _blob_trigger_0006_sqlite(
            "EXISTS (SELECT 1 FROM redactions r WHERE r.sha256 = OLD.sha256 AND r.part <> 'body')"
        )
    return [
        "DROP TRIGGER IF EXISTS artifact_blobs_redact_only ON artifact_blobs",
        "CREATE TRIGGER artifact_blobs_redact_only BEFORE UPDATE ON artifact_blobs "
        "FOR EACH ROW EXECUTE FUNCTION logstream_guard_redaction()",
        "DROP FUNCTION IF EXISTS logstream_guard_blob()",
    ]
