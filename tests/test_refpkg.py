"""The reference harness works: venv, CLI, and reference-written databases of each generation.

Slow only the first time (building the reference venv, ~10 s); then a few seconds.
"""

import importlib.util
import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime

import pytest

try:
    from tests import refpkg
except ImportError:  # tests/ itself on sys.path (e.g. pytest -c /dev/null)
    import refpkg

pytestmark = pytest.mark.ref


@pytest.fixture(scope="module")
def ref_python():
    return refpkg.require_ref_or_skip()


def _schema(db_path):
    with closing(sqlite3.connect(db_path)) as conn:
        events = tuple(r[1] for r in conn.execute("PRAGMA table_info(events)"))
        artifacts = tuple(r[1] for r in conn.execute("PRAGMA table_info(artifacts)"))
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='events'"
                " AND name NOT LIKE 'sqlite_autoindex%'"
            )
        }
        rows = conn.execute("SELECT rowid, id FROM events ORDER BY rowid").fetchall()
        n_links = conn.execute("SELECT count(*) FROM event_artifacts").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return events, artifacts, indexes, rows, n_links, mode


def test_reference_runs_in_its_own_venv_not_ours(ref_python):
    assert importlib.util.find_spec("mempalace") is None, "mempalace leaked into our venv"
    out = refpkg.run_ref(
        "import sys, mempalace.version as v, mempalace.logstream as ls;"
        " print(v.__version__, ls.MAX_LIST_LIMIT, sys.argv[1])",
        "arg",
    ).stdout.split()
    assert out == [refpkg.REF_VERSION, "500", "arg"]
    with pytest.raises(refpkg.RefError, match="boom"):
        refpkg.run_ref("raise SystemExit('boom')")


@pytest.mark.parametrize("generation", refpkg.GENERATIONS)
def test_build_reference_db_writes_each_schema_generation(ref_python, tmp_path, generation):
    n = 25
    db = refpkg.build_reference_db(tmp_path / "palace", n_events=n, generation=generation)

    events, artifacts, indexes, rows, n_links, mode = _schema(db.db_path)
    assert events == refpkg.EVENT_COLUMNS[generation]
    assert artifacts == refpkg.ARTIFACT_COLUMNS[generation]
    assert indexes == set(refpkg.EVENT_INDEXES[generation])
    assert mode == "wal"
    assert n_links == 3  # one patch + two on the note event
    assert len(db.events) == len(rows) == n
    assert [(e["seq"], e["id"]) for e in db.events] == [tuple(r) for r in rows]
    types = [e["type"] for e in db.events]
    assert {"event.ack", "patch.ready", "task.request"} <= set(types)
    assert "*" in {e["to_agent"] for e in db.events}
    assert [a["kind"] for a in db.artifacts] == ["patch", "note", "log"]

    replica_json = db.palace / "replica.json"
    if generation == "pre_replication":
        assert db.replica_id is None and not replica_json.exists()
        assert "hlc" not in db.events[0] and "origin_replica" not in db.artifacts[0]
    else:
        rid = json.loads(replica_json.read_text())["replica_id"]
        assert db.replica_id == rid
        assert all(e["origin_replica"] == rid and e["origin_seq"] == e["seq"] for e in db.events)
    if generation == "newest":
        assert db.migrated_events is None
        assert {e["topic"] for e in db.events} == {None, "auth-v2", "t1", "t2"}
        return

    # The reference's own open-time migration of a copy: topic added as NULL, and for
    # pre-replication files origin_seq = rowid, hlc = created_at seconds*1000 + rowid.
    mig_rid = db.migrated_replica_id
    assert [e["id"] for e in db.migrated_events] == [e["id"] for e in db.events]
    for before, after in zip(db.events, db.migrated_events, strict=True):
        assert after["topic"] is None
        assert after["created_at"] == before["created_at"]
        if generation == "pre_topic":
            assert after["hlc"] and after["origin_replica"] == db.replica_id == mig_rid
        else:
            ms = int(
                datetime.strptime(before["created_at"], "%Y-%m-%dT%H:%M:%SZ")
                .replace(tzinfo=UTC)
                .timestamp()
                * 1000
            )
            assert after["origin_replica"] == mig_rid
            assert after["origin_seq"] == before["seq"]
            assert after["hlc"] == f"{ms:013d}-{before['seq']:06x}-{mig_rid}"


def test_reference_cli_reads_the_built_db(ref_python, tmp_path):
    db = refpkg.build_reference_db(tmp_path / "palace", n_events=7)
    listed = refpkg.ref_cli_json("logstream", "list", "--limit", "500", palace=db.palace)
    assert listed == {"events": db.events, "count": 7}

    inbox = refpkg.ref_cli_json("logstream", "list", "--to-agent", "agent-b", palace=db.palace)
    assert {e["to_agent"] for e in inbox["events"]} <= {"agent-b", "*"}

    waited = refpkg.ref_cli(
        "logstream", "wait", "--type", "never.sent", "--timeout-ms", "50", palace=db.palace
    )
    assert waited.returncode == 2

    art = db.artifacts[1]
    got = refpkg.ref_cli("artifact", "get", art["id"], palace=db.palace, check=True)
    assert got.stdout == art["content"].encode("utf-8")  # CRLF kept byte-exact
