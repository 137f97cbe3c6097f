"""`logstream import` of a log holding redactions (issue 21): the import succeeds and the
target holds the same redactions, healthy by its own doctor, on SQLite -> SQLite,
SQLite -> PostgreSQL and PostgreSQL -> SQLite. Before the one write path the importer copied
rows past the redaction projection: an emptied blob failed its sha256 check, and a copied
tombstone had no redaction row naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mempalace_logstream import doctor, importer
from mempalace_logstream.store import LogStore, redaction
from tests.test_import import assert_same_log

SECRET = "AKIA-IMPORT-SECRET-41c2"


def build_redacted_source(url: str) -> dict[str, str]:
    """A log where alice's body and artifact were redacted by alice, bob's body only (his
    artifact shares a blob with an unredacted one), and a task thread followed the body."""
    with LogStore.open(url) as store:
        art = store.artifact_put(kind="note", content=f"token={SECRET}", created_by="alice")
        leak = store.event_append(
            type="note",
            stream="s",
            room="r",
            from_agent="alice",
            body=f"the key is {SECRET}",
            artifact_ids=[art.id],
        )
        shared = store.artifact_put(kind="note", content=b"shared bytes", created_by="bob")
        task = store.event_append(
            type="task.request",
            stream="s",
            room="r",
            from_agent="bob",
            to_agent="carol",
            correlation_id="t-import-1",
            body=f"please rotate {SECRET}",
            artifact_ids=[shared.id],
        )
        for i in range(5):  # later events, so the redactions sit mid-log
            store.event_append(type="note", stream="s", room="r", from_agent="x", body=f"n{i}")
        redaction.event_redact(
            store, event_id=leak.id, reason="leaked key", from_agent="alice", artifact_ids=[art.id]
        )
        redaction.event_redact(store, event_id=task.id, reason="leaked key", from_agent="bob")
        store.event_append(type="note", stream="s", room="r", from_agent="x", body="after")
        report = doctor.run(store)
        assert report.healthy, report.to_dict()["findings"]
    return {"leak": leak.id, "art": art.id, "task": task.id, "shared": shared.id}


def assert_redacted_copy(target: LogStore, ids: dict[str, str]) -> None:
    report = doctor.run(target)
    assert report.healthy, report.to_dict()["findings"]
    assert report.checks["redactions"]["redacted_bodies"] == 2
    assert report.checks["blobs"]["redacted"] == 1
    leak = target.event_get(ids["leak"])
    assert leak.redacted is not None and leak.redacted["by"] == "alice"
    assert SECRET not in leak.body
    art = target.artifact_get(ids["art"])
    assert art.redacted is not None and art.content == b""
    assert target.artifact_get(ids["shared"]).content == b"shared bytes"
    assert target.event_get(ids["task"]).redacted is not None
    task = target.task_status(task_id="t-import-1")
    assert SECRET not in str(task)


def _import(source_url: str, target_url: str, batch_size: int = 3) -> importer.ImportReport:
    with importer.open_source(source_url) as source, LogStore.open(target_url) as target:
        report = importer.import_log(source, target, batch_size=batch_size)
        assert assert_same_log(source, target) == report.events_total
        return report


def test_import_sqlite_to_sqlite_keeps_redactions_and_is_healthy(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'src.sqlite3'}"
    dst = f"sqlite:///{tmp_path / 'dst.sqlite3'}"
    ids = build_redacted_source(src)
    report = _import(src, dst)
    assert report.events_imported == report.events_total == 10
    with LogStore.open(dst) as target:
        assert_redacted_copy(target, ids)
        # A second run is a no-op, and the copy stays healthy.
        with LogStore.open(src) as source:
            again = importer.import_log(source, target)
        assert again.events_imported == 0
        assert_redacted_copy(target, ids)


@pytest.mark.pg
def test_import_sqlite_to_postgresql_keeps_redactions_and_is_healthy(
    tmp_path: Path, pg_url: str
) -> None:
    src = f"sqlite:///{tmp_path / 'src.sqlite3'}"
    ids = build_redacted_source(src)
    _import(src, pg_url, batch_size=4)
    with LogStore.open(pg_url) as target:
        assert_redacted_copy(target, ids)


@pytest.mark.pg
def test_import_postgresql_to_sqlite_keeps_redactions_and_is_healthy(
    tmp_path: Path, pg_url: str
) -> None:
    ids = build_redacted_source(pg_url)
    dst = f"sqlite:///{tmp_path / 'dst.sqlite3'}"
    _import(pg_url, dst, batch_size=100)
    with LogStore.open(dst) as target:
        assert_redacted_copy(target, ids)
