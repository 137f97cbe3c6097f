"""The dialect DDL of the log's guards (RFC 0006): the triggers that make the database itself
refuse UPDATE and DELETE on the append-only tables and the narrow exceptions a redaction
needs, in SQLite's and PostgreSQL's words; and the column types that differ between them.
Migrations call these with their own frozen table and column lists; the tables themselves
are `schema.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.sqlite_file import SQLITE_SHA256_FUNCTION

# The local position is the SQLite rowid (INTEGER PRIMARY KEY) and a BIGINT on PostgreSQL.
SEQ_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Ids and HLC stamps compare bytewise on every backend (PostgreSQL would otherwise use the
# database collation and break "string order is causal order").
KEY_TYPE = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def where_set(column: str, dialects: Sequence[str] = ("sqlite", "postgresql")) -> dict[str, Any]:
    """The dialect options of an index kept to the rows where `column` is set (a partial
    index: `column IS NOT NULL`, in the words of each of `dialects`)."""
    where = sa.text(f"{column} IS NOT NULL")
    return {f"{dialect}_where": where for dialect in dialects}


def declared_where_set(column: str) -> dict[str, Any]:
    """What schema.py declares for a partial index on `column`: SQLite's predicate alone
    (`postgresql_where_too` adds PostgreSQL's when that backend loads)."""
    return where_set(column, ("sqlite",))


def postgresql_where_too(table: sa.Table) -> None:
    """Give each partial index of `table` its PostgreSQL predicate, SQLite's own. The schema
    declares SQLite's alone: naming a `postgresql_` option loads SQLAlchemy's PostgreSQL
    dialect (~25 ms of every SQLite process's start, issue 25), so the PostgreSQL backend
    calls this when it loads. Idempotent."""
    for index in table.indexes:
        where = index.dialect_kwargs.get("sqlite_where")
        if where is not None:
            index.dialect_kwargs["postgresql_where"] = where


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
# SQLite has no SHA-256 in SQL: the store registers `SQLITE_SHA256_FUNCTION` on every
# connection it opens (sqlite_file.add_functions).
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
