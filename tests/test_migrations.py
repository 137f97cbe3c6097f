"""Alembic migrations: head equals schema.py on both backends, downgrade/upgrade round trips,
append-only triggers, `logstream migrate`, and adoption of files written by the reference
package (every schema generation, built with the real `mempalace` 3.11.0 in its own venv).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from typer.testing import CliRunner

from mempalace_logstream import LogStore, cli, errors, migrate
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.ddl import APPEND_ONLY_TABLES
from mempalace_logstream.schema import SCHEMA_HEAD, metadata

try:
    from tests import refpkg
except ImportError:  # tests/ itself on sys.path
    import refpkg


def _diff(url: str) -> list:
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(ctx, metadata)
    finally:
        eng.dispose()


def _revision(url: str) -> str | None:
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            return migrate.current_revision(conn)
    finally:
        eng.dispose()


def _triggers(url: str) -> set[str]:
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            if eng.dialect.name == "sqlite":
                q = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            else:
                q = (
                    "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"
                )
            return {r[0] for r in conn.execute(sa.text(q))}
    finally:
        eng.dispose()


def test_schema_head_is_alembics_head():
    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert script.get_heads() == [SCHEMA_HEAD]
    assert SCHEMA_HEAD in migrate.KNOWN_REVISIONS


def test_alembic_upgrade_head_on_an_empty_database_matches_schema_py(db_url):
    command.upgrade(migrate.alembic_config(url=db_url), "head")
    assert _revision(db_url) == SCHEMA_HEAD
    assert _diff(db_url) == []


def test_downgrade_to_base_then_upgrade_again_restores_schema_and_triggers(db_url):
    cfg = migrate.alembic_config(url=db_url)
    command.upgrade(cfg, "head")
    with_triggers = _triggers(db_url)
    assert len(with_triggers) >= len(APPEND_ONLY_TABLES)
    command.downgrade(cfg, "base")
    assert _revision(db_url) is None
    eng = sa.create_engine(db_url)
    with eng.connect() as conn:
        left = set(sa.inspect(conn).get_table_names()) - {"alembic_version"}
    eng.dispose()
    assert left == set()
    assert _triggers(db_url) == set()
    command.upgrade(cfg, "head")
    assert _diff(db_url) == []
    assert _triggers(db_url) == with_triggers
    with LogStore.open(db_url) as store:
        a = store.artifact_put(kind="note", content="keep", created_by="a")
        e = store.event_append(
            type="x", stream="s", room="r", from_agent="a", body="keep", artifact_ids=[a.id]
        )
        for sql in (
            "UPDATE events SET body = 'changed'",
            "DELETE FROM events",
            "UPDATE artifacts SET kind = 'file'",
            "DELETE FROM artifacts",
            "DELETE FROM event_artifacts",
            "DELETE FROM artifact_blobs",
        ):
            with pytest.raises(sa.exc.DBAPIError, match="append-only"):
                with store.engine.begin() as conn:
                    conn.execute(sa.text(sql))
        assert store.event_get(e.id).body == "keep"
        assert store.artifact_get(a.id).content == b"keep"


def test_opening_a_store_migrates_automatically_and_only_once(tmp_path):
    path = tmp_path / "auto.sqlite3"
    url = engine_mod.sqlite_url(path)
    with LogStore.open(str(path)) as s:
        rid = s.replica_id
    assert _revision(url) == SCHEMA_HEAD and _diff(url) == []
    eng = engine_mod.create_engine(url)
    assert migrate.upgrade(eng) == SCHEMA_HEAD  # already at head: nothing to do
    eng.dispose()
    with LogStore.open(str(path)) as s:
        assert s.replica_id == rid


def test_a_newer_schema_is_refused_with_a_schema_version_error(tmp_path):
    path = tmp_path / "newer.sqlite3"
    LogStore.open(str(path)).close()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(errors.SchemaVersionError, match="9999"):
        LogStore.open(str(path))
    eng = engine_mod.create_engine(str(path))
    with pytest.raises(errors.SchemaVersionError):
        LogStore(eng, migrate_schema=False)
    eng.dispose()


def test_a_store_can_refuse_to_migrate_and_say_what_to_run(tmp_path):
    eng = engine_mod.create_engine(str(tmp_path / "fresh.sqlite3"))
    with pytest.raises(errors.SchemaVersionError, match="logstream migrate"):
        LogStore(eng, migrate_schema=False)
    eng.dispose()


def test_logstream_migrate_creates_and_reports_the_schema(tmp_path):
    palace = tmp_path / "palace"
    runner = CliRunner()
    first = runner.invoke(cli.app, ["migrate", "--palace", str(palace), "--json"])
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["from"] is None
    assert json.loads(first.stdout)["to"] == SCHEMA_HEAD
    again = runner.invoke(cli.app, ["migrate", "--palace", str(palace), "--json"])
    assert json.loads(again.stdout)["from"] == SCHEMA_HEAD
    url = engine_mod.sqlite_url(palace / "logstream.sqlite3")
    assert _diff(url) == []
    human = runner.invoke(cli.app, ["migrate", "--palace", str(palace)])
    assert human.exit_code == 0 and f"Schema at {SCHEMA_HEAD}" in human.stdout


def test_logstream_migrate_on_postgresql(pg_url):
    result = CliRunner().invoke(cli.app, ["migrate", "--db", pg_url, "--json"])
    assert result.exit_code == 0, result.stderr
    assert _diff(pg_url) == []


# --------------------------------------------------------------------------- reference adoption


@pytest.fixture(scope="module")
def ref_python():
    return refpkg.require_ref_or_skip()


def _expected(ref: refpkg.RefDB) -> list[dict]:
    """What the reference itself shows for this file after its own open-time migration."""
    if ref.generation == "newest":
        return ref.events
    return ref.migrated_events


@pytest.mark.ref
@pytest.mark.parametrize("generation", refpkg.GENERATIONS)
def test_a_reference_palace_of_every_generation_is_adopted_in_place(
    ref_python, tmp_path, generation
):
    ref = refpkg.build_reference_db(tmp_path / "palace", n_events=40, generation=generation)
    if generation == "pre_replication":
        # Use the identity the reference minted when it migrated a copy, so its backfilled
        # stamps are the exact expectation for ours.
        (ref.palace / "replica.json").write_text(
            json.dumps({"replica_id": ref.migrated_replica_id}), encoding="utf-8"
        )
    replica = ref.replica_id or ref.migrated_replica_id
    expected = _expected(ref)
    assert len(expected) == 40

    with LogStore.open(str(ref.db_path)) as store:
        assert store.replica_id == replica
        got = store.event_list(order="asc", limit=500).events
        assert [e.id for e in got] == [e["id"] for e in expected]
        for mine, theirs in zip(got, expected, strict=True):
            wire = mine.to_dict()
            for key in (
                "id",
                "seq",
                "created_at",
                "hlc",
                "origin_replica",
                "origin_seq",
                "type",
                "stream",
                "room",
                "from_agent",
                "to_agent",
                "correlation_id",
                "branch",
                "base_commit",
                "status",
                "body",
                "metadata",
            ):
                assert wire[key] == theirs[key], (generation, key, wire[key], theirs[key])
            assert wire["topic"] == theirs.get("topic")
            assert sorted(wire["artifact_ids"]) == sorted(theirs["artifact_ids"])
        if generation == "pre_replication":  # backfill: seconds*1000, counter min(rowid, 0xFFFFFF)
            first = got[0]
            assert first.origin_seq == first.seq
            assert first.hlc.endswith(f"-{min(first.seq, 0xFFFFFF):06x}-{replica}")
            assert first.hlc.split("-")[0].endswith("000")

        # Artifacts: content and sha256 preserved, links kept.
        assert ref.artifacts
        for theirs in ref.artifacts:
            art = store.artifact_get(theirs["id"])
            assert art.content == theirs["content"].encode("utf-8")
            assert art.sha256 == theirs["sha256"]
            assert art.size_bytes == theirs["size_bytes"]
            assert (art.kind, art.created_by, art.created_at, art.metadata) == (
                theirs["kind"],
                theirs["created_by"],
                theirs["created_at"],
                theirs["metadata"],
            )
            assert art.origin_replica == theirs.get("origin_replica", replica)
        linked = [e for e in got if e.artifact_ids]
        assert {a for e in linked for a in e.artifact_ids} == {a["id"] for a in ref.artifacts}

        # New appends continue after the adopted log, in seq and HLC order.
        top = got[-1]
        new = store.event_append(type="after.adoption", stream="s", room="r", from_agent="a")
        assert new.seq > top.seq and new.origin_seq > top.origin_seq
        assert new.hlc > max(e.hlc for e in got)
        assert new.origin_replica == replica
        assert store.version_vector()[replica] == new.origin_seq

    url = engine_mod.sqlite_url(ref.db_path)
    assert _diff(url) == [] and _triggers(url)
    with closing(sqlite3.connect(ref.db_path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not {t for t in tables if t.startswith("_reference_")}
    if generation == "pre_replication":
        assert json.loads((ref.palace / "replica.json").read_text())["replica_id"] == replica


@pytest.mark.ref
def test_a_pre_replication_palace_without_replica_json_gets_one_identity(ref_python, tmp_path):
    ref = refpkg.build_reference_db(
        tmp_path / "palace", n_events=6, generation="pre_replication", with_migrated=False
    )
    assert not (ref.palace / "replica.json").exists()
    with LogStore.open(str(ref.db_path)) as store:
        minted = store.replica_id
        assert {e.origin_replica for e in store.event_list(limit=500).events} == {minted}
    on_disk = json.loads((ref.palace / "replica.json").read_text())["replica_id"]
    assert on_disk == minted


@pytest.mark.ref
def test_a_corrupt_replica_json_is_refused_not_replaced(ref_python, tmp_path):
    ref = refpkg.build_reference_db(tmp_path / "palace", n_events=3, generation="pre_topic")
    (ref.palace / "replica.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(errors.StorageError, match="refusing"):
        LogStore.open(str(ref.db_path))
    assert (ref.palace / "replica.json").read_text() == "{not json"
    with closing(sqlite3.connect(ref.db_path)) as conn:  # the failed migration left it intact
        cols = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
    assert "seq" not in cols and "hlc" in cols


@pytest.mark.ref
def test_logstream_migrate_adopts_a_reference_palace(ref_python, tmp_path):
    ref = refpkg.build_reference_db(tmp_path / "palace", n_events=8, generation="newest")
    result = CliRunner().invoke(cli.app, ["migrate", "--palace", str(ref.palace), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["from"] is None
    listed = CliRunner().invoke(
        cli.app, ["list", "--palace", str(ref.palace), "--json", "--order", "asc", "--limit", "500"]
    )
    assert [e["id"] for e in json.loads(listed.stdout)["events"]] == [e["id"] for e in ref.events]
