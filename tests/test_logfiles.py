"""The templates the store fixtures start from (tests/logfiles.py, conftest's `log_url`) make
the same log a first open makes: the same schema, and a replica of its own per copy."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore
from tests.conftest import new_pg_schema
from tests.logfiles import new_log


def _sqlite_schema(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [(t, n, s or "") for t, n, s in rows]


def test_a_copy_of_the_sqlite_template_is_a_new_log_with_a_replica_of_its_own(tmp_path):
    made = tmp_path / "made.sqlite3"
    with LogStore.open(str(made)) as fresh:
        fresh_id = fresh.replica_id
    copies = [LogStore.open(new_log(tmp_path / f"copy{i}.sqlite3")) for i in range(2)]
    try:
        ids = {fresh_id, *(c.replica_id for c in copies)}
        assert len(ids) == 3 and all(c.tip() == (0, None) for c in copies)
    finally:
        for c in copies:
            c.close()
    assert _sqlite_schema(tmp_path / "copy0.sqlite3") == _sqlite_schema(made)
    with pytest.raises(FileExistsError):
        new_log(made)


CATALOG = {
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default "
    "FROM information_schema.columns WHERE table_schema = :s",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = :s",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(c.oid) "
    "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = :s",
    "triggers": "SELECT tgrelid::regclass::text, tgname, tgtype, p.proname FROM pg_trigger t "
    "JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_class r ON r.oid = t.tgrelid "
    "JOIN pg_namespace n ON n.oid = r.relnamespace WHERE n.nspname = :s AND NOT tgisinternal",
    "functions": "SELECT proname, prosrc FROM pg_proc p JOIN pg_namespace n "
    "ON n.oid = p.pronamespace WHERE n.nspname = :s",
}


def _pg_catalog(url: str) -> dict[str, list[tuple[str, ...]]]:
    schema = url.rsplit("%3D", 1)[1]
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            out = {
                what: sorted(
                    tuple(str(v).replace(f"{schema}.", "S.") for v in row)
                    for row in conn.execute(sa.text(sql), {"s": schema})
                )
                for what, sql in CATALOG.items()
            }
            out["alembic_version"] = [
                tuple(r) for r in conn.execute(sa.text("SELECT version_num FROM alembic_version"))
            ]
            return out
    finally:
        eng.dispose()


@pytest.mark.pg
@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_postgresql_template_is_the_schema_alembic_makes(log_url, pg_database):
    migrated = new_pg_schema(pg_database)
    with LogStore.open(migrated) as fresh, LogStore.open(log_url) as copy:
        assert fresh.replica_id != copy.replica_id and copy.tip() == (0, None)
    assert _pg_catalog(log_url) == _pg_catalog(migrated)
