"""SQLAlchemy Core schema: the single source of schema truth for SQLite and PostgreSQL.

`SCHEMA_HEAD` names the Alembic revision this code writes; a test proves it is Alembic's head
and that `alembic upgrade head` produces exactly this metadata.
Must not import store or alembic; the column types that differ by dialect are backends/ddl.py's.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.ddl import KEY_TYPE, SEQ_TYPE, declared_where_set
from mempalace_logstream.models import EVENT_SPEC

SCHEMA_HEAD = "0016"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)

# The position and key column types, as each backend stores them (backends/ddl.py).
Seq, Key = SEQ_TYPE, KEY_TYPE

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
# Columns most events leave empty, indexed only where set (migration 0011, issue 25): every
# read asks them for values (`=`, IN; SQLite and PostgreSQL both prove that such a test
# implies IS NOT NULL), never for NULL, and an append without them updates that many indexes
# less (each ~4-5 µs of a SQLite commit's CPU). `to_agent` stays whole: the inbox's.
SPARSE_COLUMNS = ("topic", "correlation_id", "status", "idempotency_key")
# The pair loop guard's walk (queries/guards.py `_pair_counted`, migration 0012): one writer's
# messages to one agent, newest first, an exact index range; the rows addressed to nobody or
# to everyone ("*", which the guard never counts) are left out, so a broadcast updates no
# more indexes than before.
PAIR_WHERE = "to_agent IS NOT NULL AND to_agent != '*'"
# The signed events (migration 0013, issue 25): a read's tip asks whether the log holds one
# (`queries/log.py` `_tip_facts`, the same predicate word for word: SQLite uses a partial
# index only for a query that states its WHERE), and while none is, its page statements leave
# `sig` and `key_id` out (`plan.read_page`). Written at insert only (the table refuses any
# other UPDATE than a redaction's body); an unsigned append updates no entry of it.
SIGNED_WHERE = "key_id IS NOT NULL OR sig IS NOT NULL"
# Every task row (a task's `updated_seq` is an event's seq, from 1): the predicate of the
# index a listing of any state walks, which that listing states word for word (queries/
# tasks.py) and a listing of a state does not, so no planner walks it filtering a state.
TASKS_ANY_STATE_WHERE = "updated_seq > 0"


def _where_set(column: str) -> dict[str, Any]:
    """An index on `column` keeps to the rows where it is set if it is sparse (SQLite's
    predicate; the PostgreSQL backend adds its own, `ddl.postgresql_where_too`)."""
    return declared_where_set(column) if column in SPARSE_COLUMNS else {}


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
    *[sa.Index(None, col, "seq", **_where_set(col)) for col in FILTER_COLUMNS],
    sa.Index(None, "hlc"),
    sa.Index(None, "created_at"),
    sa.Index("ix_events_pair", "from_agent", "to_agent", "seq", sqlite_where=sa.text(PAIR_WHERE)),
    sa.Index("ix_events_signed", "key_id", sqlite_where=sa.text(SIGNED_WHERE)),
    sa.Index(
        "uq_events_writer_idempotency_key",
        "from_agent",
        "idempotency_key",
        unique=True,
        **_where_set("idempotency_key"),
    ),
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
    sa.Index(None, "stream", "state", "updated_seq"),  # a stream's listing (0015)
    sa.Index(None, "requester", "updated_seq"),
    # A parent's children (0016): its listing, one range per state, and the counts of its
    # open children; only the rows with a parent (every read names one). `to_agent` is read
    # from the entries by a listing that filters a parent's children by agent.
    sa.Index(
        None,
        "parent_task_id",
        "state",
        "updated_seq",
        "to_agent",
        **declared_where_set("parent_task_id"),
    ),
    # The listing of any state (0015): partial, so that only it, which states the predicate,
    # walks it, never a state's listing (0014 dropped the plain index on `updated_seq`).
    sa.Index("ix_tasks_any_state", "updated_seq", sqlite_where=sa.text(TASKS_ANY_STATE_WHERE)),
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

# ---- presence (0009, issue 23): who is home, shared by every hub on one PostgreSQL log (a
# SQLite hub keeps it in memory). One row per agent: its latest announcement, its delivery
# paths ({path: [since_ms, expires_ms]} as JSON) and `rev`, the change that wrote it (hubs
# apply changes in rev order). Hub-local like the ledger: never in the log, never replicated.
presence = sa.Table(
    "presence",
    metadata,
    sa.Column("agent", Key, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("task_id", sa.Text),
    sa.Column("note", sa.Text),
    sa.Column("paths_json", sa.Text, nullable=False),
    sa.Column("announced_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
    sa.Column("rev", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("agent"),
)

# ---- leases (0010, issue 22, RFC 0010): file leases derived from the log's `lease.*` events,
# kept in the transaction that appends them, rebuilt from the log at will (like `tasks`). One
# row per `lease.acquire`; expiry is derived on read from `expires_ms`, never written.
leases = sa.Table(
    "leases",
    metadata,
    sa.Column("lease_id", Key, primary_key=True),
    sa.Column("project", Key, nullable=False),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("paths_json", sa.Text, nullable=False),
    sa.Column("exclusive", sa.Boolean, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("task_id", Key),
    sa.Column("fence", sa.BigInteger, nullable=False),
    sa.Column("acquired_hlc", Key, nullable=False),
    sa.Column("ttl_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
    sa.Column("released_hlc", Key),
    sa.Column("released_by", sa.Text),
    sa.Column("lost_to", Key),
    sa.Column("lost_holder", sa.Text),
    sa.Column("updated_seq", Seq, nullable=False),
    sa.Index(None, "project", "expires_ms"),
    sa.Index(None, "agent"),
    sa.Index(None, "task_id"),
)
