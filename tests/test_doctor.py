"""`logstream doctor` (RFC 0008 "Doctor"): healthy on a fresh log (exit 0), finds a corrupted
blob and a damaged task projection planted behind the API (exit 1, JSON findings), and the
hub's `/healthz` is not green when the integrity check failed. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mempalace_logstream import agents, doctor, sync, workflows
from mempalace_logstream.backends.sqlite import SqliteBackend
from mempalace_logstream.http import create_app
from mempalace_logstream.store import LogStore
from tests.conftest import run_cli
from tests.hubkit import live_hub


@pytest.fixture
def store(store: LogStore, tmp_path: Path) -> LogStore:
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _task(store: LogStore) -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent="claude",
        to_agent="codex",
        goal="fix the login",
        branch="main",
        base_commit="abcdef1",
        done="tests pass",
    )
    return str(out["task"].correlation_id)


def _fill(store: LogStore) -> tuple[str, str]:
    agents.add(store, "alice")
    art = store.artifact_put(kind="note", content="payload", created_by="alice")
    store.event_append(
        type="note", stream="s", room="r", from_agent="alice", body="hi", artifact_ids=[art.id]
    )
    store.event_append(type="note", stream="s", room="r", from_agent="carol", body="unsigned")
    return art.sha256, _task(store)


def _behind_the_api(store: LogStore, sql: str, params: dict[str, Any], table: str) -> None:
    """Change a row the way a disk fault or a hand edit would: the append-only trigger off
    for the moment (a test plants damage; nothing in the package does this)."""
    with store.engine.begin() as conn:
        if store.backend.name == "sqlite":
            trigger = f"{table}_no_update"
            ddl = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (trigger,)
            ).scalar()
            conn.exec_driver_sql(f"DROP TRIGGER {trigger}")
            conn.execute(sa.text(sql), params)
            conn.exec_driver_sql(ddl)
        else:
            conn.exec_driver_sql(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            conn.execute(sa.text(sql), params)
            conn.exec_driver_sql(f"ALTER TABLE {table} ENABLE TRIGGER USER")


def test_doctor_is_healthy_on_a_fresh_log(store: LogStore) -> None:
    _fill(store)
    report = doctor.run(store)
    assert report.healthy, report.to_dict()["findings"]
    checks = report.checks
    assert checks["integrity"]["ok"] is True and checks["integrity"]["method"]
    assert checks["blobs"] == {
        "checked": 1,
        "redacted": 0,
        "corrupt": 0,
        "emptied_without_redaction": 0,
        "emptied_but_named": 0,
    }
    assert checks["tasks"]["tasks"] == 1 and checks["tasks"]["differ"] == 0
    sig = checks["signatures"]
    assert sig["events"] == sig["verified"] + sig["unverified"]
    assert sig["verified"] >= 3 and sig["unverified"] >= 1 and sig["read_false"] == 0
    assert checks["keyring"]["admin_key_present"] is True
    assert checks["database"]["size_bytes"] > 0


def test_doctor_finds_a_corrupt_blob_and_a_damaged_projection(store: LogStore) -> None:
    sha, task_id = _fill(store)
    _behind_the_api(
        store,
        "UPDATE artifact_blobs SET content = :c WHERE sha256 = :s",
        {"c": b"tampered", "s": sha},
        "artifact_blobs",
    )
    with store.connect() as conn, conn.begin():  # the projection is not append-only
        conn.execute(
            sa.text("UPDATE tasks SET state = 'completed' WHERE task_id = :t"), {"t": task_id}
        )
    report = doctor.run(store)
    assert not report.healthy
    out = report.to_dict()
    found = {f["check"]: f for f in out["findings"]}
    assert found["blobs"]["ids"] == [sha]
    assert found["tasks"]["ids"] == [task_id]
    assert out["checks"]["blobs"]["corrupt"] == 1
    json.dumps(out)  # JSON all the way down
    store.rebuild_tasks()
    assert doctor.run(store).checks["tasks"]["differ"] == 0


def test_doctor_cli_exit_codes_and_json(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as store:
        sha, task_id = _fill(store)
    ok = run_cli("doctor", "--db", db)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(b"healthy")
    ok_json = json.loads(run_cli("doctor", "--db", db, "--json").stdout)
    assert ok_json["healthy"] is True and ok_json["findings"] == []
    with LogStore.open(db) as store:
        _behind_the_api(
            store,
            "UPDATE artifact_blobs SET content = :c WHERE sha256 = :s",
            {"c": b"rot", "s": sha},
            "artifact_blobs",
        )
        with store.connect() as conn, conn.begin():
            conn.execute(sa.text("DELETE FROM tasks WHERE task_id = :t"), {"t": task_id})
    bad = run_cli("doctor", "--db", db, "--json")
    assert bad.returncode == 1
    out = json.loads(bad.stdout)
    assert out["healthy"] is False
    assert {f["check"] for f in out["findings"]} == {"blobs", "tasks"}
    human = run_cli("doctor", "--db", db)
    assert human.returncode == 1 and b"2 finding(s)" in human.stdout


def test_healthz_is_not_green_when_the_integrity_check_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with live_hub(tmp_path) as hub:
        hub.app.state.integrity_thread.join(timeout=30)  # the check runs in the background
        green = httpx.get(hub.url + "/healthz", timeout=10)
        assert green.status_code == 200 and green.json()["integrity"] == "ok"

    def damaged(self: Any, conn: Any) -> tuple[str, list[str]]:
        return "PRAGMA integrity_check", ["*** in database main *** Page 7: btreeInitPage()"]

    monkeypatch.setattr(SqliteBackend, "integrity_problems", damaged)
    with LogStore.open(str(tmp_path / "broken.sqlite3")) as store:
        app = create_app(store)
        with TestClient(app, base_url="http://127.0.0.1") as client:  # runs the lifespan
            app.state.integrity_thread.join(timeout=30)
            red = client.get("/healthz")
    assert red.status_code == 503
    assert red.json()["ok"] is False and "btreeInitPage" in red.json()["integrity"][0]


def test_doctor_flags_events_stored_before_their_keys_revocation_arrived(tmp_path: Path) -> None:
    """B stores alice's event while her key is valid there; the revocation (made earlier on
    A, at an HLC before the event) arrives later: the stored event now reads false."""
    a = LogStore.open(str(tmp_path / "a" / "log.sqlite3"))
    agents.add(a, "alice")
    b = LogStore.open(str(tmp_path / "b" / "log.sqlite3"))
    for key_id in a.pinned_admins():
        b.pin_admin(key_id)
    sync.sync_with_peer(b, sync.LocalPeer(a))
    (tmp_path / "b" / "keys").mkdir(exist_ok=True)
    shutil.copy(tmp_path / "a" / "keys" / "alice.key", tmp_path / "b" / "keys" / "alice.key")
    agents.revoke(a, "alice", reason="laptop stolen")
    b.identity.reload_keys()
    late = b.event_append(type="note", stream="s", room="r", from_agent="alice", body="late")
    assert late.verified is True
    assert doctor.run(b).healthy
    sync.sync_with_peer(b, sync.LocalPeer(a))
    report = doctor.run(b)
    assert not report.healthy
    assert report.checks["signatures"]["late_revoked"] == 1
    found = [f for f in report.to_dict()["findings"] if f["check"] == "signatures"]
    assert found and found[0]["ids"] == [late.id]
    a.close()
    b.close()


def test_doctor_flags_unsigned_events_stored_before_the_key_arrived(tmp_path: Path) -> None:
    a = LogStore.open(str(tmp_path / "a" / "log.sqlite3"))
    agents.add(a, "alice")
    b = LogStore.open(str(tmp_path / "b" / "log.sqlite3"))
    for key_id in a.pinned_admins():
        b.pin_admin(key_id)
    early = b.event_append(type="note", stream="s", room="r", from_agent="alice", body="hi")
    assert early.verified is None
    sync.sync_with_peer(b, sync.LocalPeer(a))  # alice's key_add, stamped before `early`
    report = doctor.run(b)
    assert report.checks["signatures"]["late_unsigned"] == 1
    found = [f for f in report.to_dict()["findings"] if f["check"] == "signatures"]
    assert found[0]["ids"] == [early.id] and "before its key event" in found[0]["message"]
    a.close()
    b.close()


@pytest.mark.pg
def test_doctor_runs_amcheck_on_postgresql_when_it_is_installed(pg_url: str) -> None:
    with LogStore.open(pg_url) as store:
        _fill_plain(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS amcheck")
        report = doctor.run(store)
    assert report.healthy, report.to_dict()["findings"]
    method = report.checks["integrity"]["method"]
    assert "amcheck on" in method and not method.endswith("on 0 indexes"), method


def _fill_plain(store: LogStore) -> None:
    store.event_append(type="note", stream="s", room="r", from_agent="carol", body="x")
