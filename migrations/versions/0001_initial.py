"""Initial schema; adopts a reference `logstream.sqlite3` (mempalace 3.x) in place.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from mempalace_logstream import errors
from mempalace_logstream.backends.ddl import append_only_ddl, drop_append_only_ddl

# The tables this revision made append-only (0003 adds artifact_blobs).
TABLES_0001 = ("events", "event_artifacts", "artifacts")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
FILTERS = ("stream", "room", "topic", "type", "to_agent", "from_agent", "correlation_id", "status")
REFERENCE_TABLES = ("events", "artifacts", "event_artifacts")


def create_tables() -> None:
    op.create_table(
        "events",
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
        sa.PrimaryKeyConstraint("seq", name="pk_events"),
        sa.UniqueConstraint("id", name="uq_events_id"),
        sa.UniqueConstraint(
            "origin_replica", "origin_seq", name="uq_events_origin_replica_origin_seq"
        ),
    )
    for col in FILTERS:
        op.create_index(f"ix_events_{col}_seq", "events", [col, "seq"])
    op.create_index("ix_events_hlc", "events", ["hlc"])
    op.create_index("ix_events_created_at", "events", ["created_at"])
    op.create_index(
        "uq_events_writer_idempotency_key",
        "events",
        ["from_agent", "idempotency_key"],
        unique=True,
    )
    op.create_table(
        "artifact_blobs",
        sa.Column("sha256", Key, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_artifact_blobs"),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", Key, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("sha256", Key, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("encoding", sa.Text, nullable=False),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("origin_replica", Key, nullable=False),
        sa.Column("metadata_json", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_artifacts"),
        sa.UniqueConstraint("seq", name="uq_artifacts_seq"),
        sa.ForeignKeyConstraint(
            ["sha256"], ["artifact_blobs.sha256"], name="fk_artifacts_sha256_artifact_blobs"
        ),
    )
    op.create_index("ix_artifacts_sha256", "artifacts", ["sha256"])
    op.create_table(
        "event_artifacts",
        sa.Column("event_id", Key, nullable=False),
        sa.Column("artifact_id", Key, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("event_id", "artifact_id", name="pk_event_artifacts"),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.id"], name="fk_event_artifacts_event_id_events"
        ),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name="fk_event_artifacts_artifact_id_artifacts"
        ),
    )
    op.create_index("ix_event_artifacts_artifact_id", "event_artifacts", ["artifact_id"])
    op.create_table(
        "logstream_meta",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_logstream_meta"),
    )


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    reference = "events" in existing and "seq" not in {
        c["name"] for c in sa.inspect(bind).get_columns("events")
    }
    if reference:
        for table in REFERENCE_TABLES:
            if table in existing:
                op.execute(f"ALTER TABLE {table} RENAME TO _reference_{table}")
    create_tables()
    if reference:
        adopt_reference(bind, existing)
    for ddl in append_only_ddl(bind.dialect.name, TABLES_0001):
        op.execute(ddl)


def downgrade() -> None:
    bind = op.get_bind()
    for ddl in drop_append_only_ddl(bind.dialect.name, TABLES_0001):
        op.execute(ddl)
    for table in ("event_artifacts", "artifacts", "artifact_blobs", "events", "logstream_meta"):
        op.drop_table(table)


# --------------------------------------------------------------------------- adoption


_REPLICA_RE = re.compile(r"^rep_(?:[0-9a-f]{12}|[0-9a-f]{32})$")


def _reference_replica_id(bind: sa.Connection) -> str:
    """The palace identity the reference minted (`replica.json` beside the database).

    A pre-replication palace has none: mint one and write it there, as the reference does on its
    first open, so every tool of the palace agrees on one identity. A corrupt or invalid file
    is refused, never replaced: two ids for one replica would fork its provenance.
    """
    db = bind.engine.url.database or ""
    path = os.path.join(os.path.dirname(os.path.abspath(db)), "replica.json")
    try:
        with open(path, encoding="utf-8") as fh:
            rid = json.load(fh).get("replica_id")
    except FileNotFoundError:
        return _mint_replica_file(path)
    except (OSError, ValueError, AttributeError) as exc:
        raise errors.StorageError(
            f"{path} is corrupt; refusing to mint a second replica identity (fix or remove it)"
        ) from exc
    if not isinstance(rid, str) or not _REPLICA_RE.match(rid):
        raise errors.StorageError(
            f"{path} holds an invalid replica_id {rid!r}; refusing to adopt this palace"
        )
    return rid


def _mint_replica_file(path: str) -> str:
    rid = f"rep_{secrets.token_hex(16)}"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"replica_id": rid, "minted_at_note": "adopted by mempalace-logstream"}, fh,
                  indent=2)  # fmt: skip
        fh.write("\n")
    os.replace(tmp, path)
    return rid


def _backfill_hlc(created_at: str, rowid: int, replica: str) -> str:
    """The reference's backfill: whole seconds of `created_at` (strictly `…THH:MM:SSZ`, else
    0) and the rowid as counter (capped), so adopted stamps equal what it would have shown."""
    try:
        dt = datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        ms = int(dt.timestamp()) * 1000
    except (TypeError, ValueError):
        ms = 0
    return f"{ms:013d}-{min(rowid, 0xFFFFFF):06x}-{replica}"


def adopt_reference(bind: sa.Connection, existing: set[str]) -> None:
    """Copy a reference log into the new tables: ids, created_at, hlc and origins kept."""
    replica = _reference_replica_id(bind)
    bind.execute(
        sa.text("INSERT INTO logstream_meta (key, value) VALUES ('replica_id', :r)"),
        {"r": replica},
    )
    bind.execute(
        sa.text("INSERT INTO logstream_meta (key, value) VALUES ('adopted_from', 'mempalace')")
    )
    cols = {c["name"] for c in sa.inspect(bind).get_columns("_reference_events")}

    def col(name: str) -> str:
        return name if name in cols else f"NULL AS {name}"

    rows = bind.execute(
        sa.text(
            "SELECT rowid AS seq, id, type, stream, room, "
            f"{col('topic')}, from_agent, to_agent, correlation_id, branch, base_commit, status, "
            f"body, created_at, metadata_json, {col('origin_replica')}, {col('origin_seq')}, "
            f"{col('hlc')} FROM _reference_events ORDER BY rowid"
        )
    ).mappings()
    insert = sa.text(
        "INSERT INTO events (seq, id, origin_replica, origin_seq, hlc, type, stream, room, "
        "topic, from_agent, to_agent, correlation_id, branch, base_commit, status, body, "
        "created_at, metadata_json) VALUES (:seq, :id, :origin_replica, :origin_seq, :hlc, "
        ":type, :stream, :room, :topic, :from_agent, :to_agent, :correlation_id, :branch, "
        ":base_commit, :status, :body, :created_at, :metadata_json)"
    )
    batch = []
    for r in rows:
        row = dict(r)
        if not row["origin_replica"]:
            row["origin_replica"] = replica
            row["origin_seq"] = row["seq"]
            row["hlc"] = _backfill_hlc(row["created_at"], row["seq"], replica)
        # A stamped row missing part of its stamp (never written by 3.x, but possible by hand):
        # complete it the same way rather than refuse the whole palace.
        if row["origin_seq"] is None:
            row["origin_seq"] = row["seq"]
        if not row["hlc"]:
            row["hlc"] = _backfill_hlc(row["created_at"], row["seq"], row["origin_replica"])
        row["body"] = row["body"] or ""
        row["metadata_json"] = row["metadata_json"] or "{}"
        batch.append(row)
        if len(batch) >= 5000:
            bind.execute(insert, batch)
            batch = []
    if batch:
        bind.execute(insert, batch)
    if "artifacts" in existing:
        _adopt_artifacts(bind, replica)
    if "event_artifacts" in existing:
        bind.execute(
            sa.text(
                "INSERT INTO event_artifacts (event_id, artifact_id, position) "
                "SELECT event_id, artifact_id, "
                "ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY artifact_id) - 1 "
                "FROM _reference_event_artifacts "
                "WHERE event_id IN (SELECT id FROM events) "
                "AND artifact_id IN (SELECT id FROM artifacts)"
            )
        )
    for table in REFERENCE_TABLES:
        if table in existing:
            op.execute(f"DROP TABLE _reference_{table}")


def _adopt_artifacts(bind: sa.Connection, replica: str) -> None:
    cols = {c["name"] for c in sa.inspect(bind).get_columns("_reference_artifacts")}
    origin = "origin_replica" if "origin_replica" in cols else "NULL AS origin_replica"
    rows = bind.execute(
        sa.text(
            "SELECT rowid AS seq, id, kind, content, created_by, created_at, metadata_json, "
            f"{origin} FROM _reference_artifacts ORDER BY rowid"
        )
    ).mappings()
    for r in rows:
        content = (r["content"] or "").encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(content).hexdigest()
        bind.execute(
            sa.text(
                "INSERT OR IGNORE INTO artifact_blobs (sha256, size_bytes, content) "
                "VALUES (:s, :n, :c)"
            ),
            {"s": digest, "n": len(content), "c": content},
        )
        bind.execute(
            sa.text(
                "INSERT INTO artifacts (id, seq, kind, sha256, size_bytes, encoding, created_by, "
                "created_at, origin_replica, metadata_json) VALUES (:id, :seq, :kind, :sha, :n, "
                "'utf-8', :by, :at, :origin, :meta)"
            ),
            {
                "id": r["id"], "seq": r["seq"], "kind": r["kind"], "sha": digest,
                "n": len(content), "by": r["created_by"], "at": r["created_at"],
                "origin": r["origin_replica"] or replica, "meta": r["metadata_json"] or "{}",
            },
        )  # fmt: skip
