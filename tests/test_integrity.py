"""Artifact bytes are re-hashed on every read: content changed behind the log (a restored
backup, a disk fault, an old file without the blob trigger) is refused, never served under the
original sha256 (issue 9, item 6)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import httpx
import pytest

from mempalace_logstream import IntegrityError, LogStore
from tests.conftest import run_cli
from tests.hubkit import live_hub


def _corrupt_blob(path: Path, sha256: str) -> None:
    """Change a blob's bytes as a disk fault or a hand edit would (the trigger refuses SQL)."""
    db = sqlite3.connect(path)
    try:
        db.execute("DROP TRIGGER artifact_blobs_no_update")
        db.execute("UPDATE artifact_blobs SET content = ? WHERE sha256 = ?", (b"evil", sha256))
        db.commit()
    finally:
        db.close()


@pytest.fixture
def corrupt(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "log.sqlite3"
    with LogStore.open(str(path)) as store:
        art = store.artifact_put(kind="patch", content="good\n", created_by="a")
        assert art.sha256 == hashlib.sha256(b"good\n").hexdigest()
    _corrupt_blob(path, art.sha256)
    return path, art.id


def test_the_store_refuses_content_that_no_longer_matches_its_sha256(corrupt) -> None:
    path, art_id = corrupt
    with LogStore.open(str(path)) as store, pytest.raises(IntegrityError) as info:
        store.artifact_get(art_id)
    assert info.value.ident == art_id
    assert art_id in info.value.message and "corrupt" in info.value.message


def test_the_cli_exits_1_naming_the_artifact(corrupt, tmp_path: Path) -> None:
    path, art_id = corrupt
    out = tmp_path / "out.bin"
    done = run_cli("artifact", "get", art_id, "--db", str(path), "--out", str(out))
    assert done.returncode == 1
    assert done.stderr.decode().startswith(f"error: artifact '{art_id}' is corrupt")
    assert not out.exists()


def test_the_hub_answers_500_naming_the_artifact(corrupt) -> None:
    path, art_id = corrupt
    with LogStore.open(str(path)) as store:
        from mempalace_logstream.http import HubSettings
        from tests.hubkit import LiveHub

        hub = LiveHub(store, HubSettings())
        hub.start()
        try:
            resp = httpx.get(f"{hub.url}/v1/artifacts/{art_id}", timeout=30)
            posted = httpx.post(f"{hub.url}/v1/artifact_get", json={"artifact_id": art_id})
        finally:
            hub.stop()
    assert resp.status_code == 500 and posted.status_code == 500
    assert resp.json()["field"] is None and "is corrupt" in resp.json()["error"]


def test_an_intact_artifact_is_served_with_its_sha256(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub:
        art = hub.store.artifact_put(kind="file", content=b"\x00\xffbytes", created_by="a")
        got = httpx.get(f"{hub.url}/v1/artifacts/{art.id}", timeout=30).json()["artifact"]
    assert got["sha256"] == hashlib.sha256(b"\x00\xffbytes").hexdigest()
