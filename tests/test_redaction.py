"""Redaction (RFC 0008 "Redaction", issue 12): the content is gone on every replica after sync
(event bodies and artifact blobs, also after a restart), the event still verifies, refused
redactions write nothing, the database refuses any other change. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from mempalace_logstream import agents, doctor, errors, replication, sync, workflows
from mempalace_logstream.identity.actor import Actor, acting_as
from mempalace_logstream.payload import parse_tombstone
from mempalace_logstream.store import LogStore, redaction
from tests.hubkit import live_hub

SECRET = "AKIA-SECRET-7f3e9a"
ADMIN_TOKEN = "admin-tok-redact-3c1f"


@pytest.fixture
def store(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _replica(tmp_path: Path, name: str, pins: list[str]) -> LogStore:
    out = LogStore.open(str(tmp_path / name / "log.sqlite3"))
    for key_id in pins:
        out.pin_admin(key_id)
    return out


def _leak(store: LogStore, who: str = "alice") -> tuple[str, str]:
    art = store.artifact_put(kind="note", content=f"token={SECRET}", created_by=who)
    event = store.event_append(
        type="note",
        stream="s",
        room="r",
        from_agent=who,
        body=f"the key is {SECRET}",
        artifact_ids=[art.id],
    )
    return event.id, art.id


def _secret_in_database(store: LogStore) -> bool:
    """Whether the secret's bytes are anywhere in the database: the file (and WAL) of a
    SQLite store, the tables of a PostgreSQL one."""
    if store.backend.name == "sqlite":
        path = Path(store.engine.url.database or "")
        files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
        return any(SECRET.encode() in p.read_bytes() for p in files)
    with store.connect() as conn:
        like = {"s": f"%{SECRET}%"}
        bodies = conn.execute(sa.text("SELECT count(*) FROM events WHERE body LIKE :s"), like)
        in_bodies = bool(bodies.scalar())
        blobs = conn.execute(sa.text("SELECT content FROM artifact_blobs")).all()
        in_blobs = any(SECRET.encode() in bytes(r[0]) for r in blobs)
        tasks = conn.execute(sa.text("SELECT count(*) FROM tasks WHERE doc_json LIKE :s"), like)
        return in_bodies or in_blobs or bool(tasks.scalar())


def _reopen(store: LogStore, tmp_path: Path) -> LogStore:
    url = store.engine.url.render_as_string(hide_password=False)
    store.close()
    again = LogStore.open(url)
    again.identity.keys_dir = tmp_path / "keys"
    again.identity.reload_keys()
    return again


def test_redaction_removes_the_content_on_every_replica_and_still_verifies(
    store: LogStore, tmp_path: Path
) -> None:
    agents.add(store, "alice")
    pins = store.pinned_admins()
    event_id, art_id = _leak(store)
    b = _replica(tmp_path, "b", pins)
    sync.sync_with_peer(b, sync.LocalPeer(store))
    assert SECRET in b.event_get(event_id).body

    out = redaction.event_redact(
        store, event_id=event_id, reason="leaked AWS key", artifact_ids=[art_id]
    )
    assert out["parts"] == ["body", art_id]
    assert out["event"].type == "event.redact" and out["event"].verified is True
    got = store.event_get(event_id)
    assert SECRET not in got.body and got.verified is True
    assert got.to_dict()["redacted"] == {
        "by": "admin",
        "at": out["event"].created_at,
        "reason": "leaked AWS key",
        "event_id": out["event"].id,
    }
    tomb = parse_tombstone(got.body)
    assert tomb is not None
    assert tomb["body_sha256"] == hashlib.sha256(f"the key is {SECRET}".encode()).hexdigest()
    art = store.artifact_get(art_id)
    assert art.content == b"" and art.redacted is not None
    assert art.sha256 == hashlib.sha256(f"token={SECRET}".encode()).hexdigest()

    # B already held the content: the redaction arrives by sync and removes it there too.
    # C is new: it gets the redacted event and the emptied blob, and they verify.
    sync.sync_with_peer(b, sync.LocalPeer(store))
    c = _replica(tmp_path, "c", pins)
    result = sync.sync_with_peer(c, sync.LocalPeer(b))
    assert result["rejected_count"] == 0 and result["conflict_count"] == 0
    for replica in (b, c):
        seen = replica.event_get(event_id)
        assert seen.redacted is not None and seen.verified is True
        assert replica.artifact_get(art_id).redacted is not None
        report = doctor.run(replica)
        assert report.healthy, report.to_dict()["findings"]
        assert report.checks["redactions"]["redacted_bodies"] == 1
        assert report.checks["blobs"]["redacted"] == 1
        assert report.checks["signatures"]["read_false"] == 0
    report = doctor.run(store)
    assert report.healthy and report.checks["signatures"]["verified"] >= 3
    # And after a restart, the bytes are gone from the database itself.
    b.close()
    c.close()
    store = _reopen(store, tmp_path)
    try:
        assert not _secret_in_database(store)
        assert store.event_get(event_id).verified is True
    finally:
        store.close()
    for name in ("b", "c"):
        again = LogStore.open(str(tmp_path / name / "log.sqlite3"))
        assert not _secret_in_database(again)
        again.close()


def test_a_page_on_a_log_that_holds_no_redaction_looks_up_none_for_its_events(
    store: LogStore, tmp_path: Path
) -> None:
    for i in range(3):
        store.event_append(type="note", stream="s", room="r", from_agent="a", body=f"n{i}")
    b = _replica(tmp_path, "b", [])
    seen: list[str] = []
    b.backend.statement_hooks.append(lambda sql, params: seen.append(sql))
    sync.sync_with_peer(b, sync.LocalPeer(store))
    assert b.event_list(limit=10).events
    assert [q for q in seen if "target_id IN" in q] == []  # one probe found none held
    b.close()


def test_a_redaction_that_arrives_before_its_target_applies_when_it_comes(
    store: LogStore, tmp_path: Path
) -> None:
    event_id, _art = _leak(store, "bob")
    b = _replica(tmp_path, "b", [])
    sync.sync_with_peer(b, sync.LocalPeer(store))
    out = redaction.event_redact(b, event_id=event_id, reason="oops")
    c = _replica(tmp_path, "c", [])
    # C gets the redaction first (from B), then the original body from the first replica.
    applied = replication.apply_remote_events(c, [out["event"].to_dict()], peer="b")
    assert applied.applied_events == 1
    sync.sync_with_peer(c, sync.LocalPeer(store))
    assert c.event_get(event_id).redacted == b.event_get(event_id).redacted
    assert c.artifact_get(_art).content  # only the body was named: the blob stays
    assert SECRET not in c.event_get(event_id).body
    assert doctor.run(c).healthy
    b.close()
    c.close()


def _counts(store: LogStore) -> tuple[int, int]:
    with store.connect() as conn:
        events = conn.execute(sa.text("SELECT count(*) FROM events")).scalar()
        rows = conn.execute(sa.text("SELECT count(*) FROM redactions")).scalar()
    return int(events or 0), int(rows or 0)


def test_refused_redactions_write_nothing(store: LogStore) -> None:
    agents.add(store, "alice")
    agents.add(store, "bob")
    event_id, _ = _leak(store, "alice")
    before = _counts(store)
    with acting_as(Actor(agent="bob")), pytest.raises(errors.ForbiddenError) as info:
        redaction.event_redact(store, event_id=event_id, reason="not mine")
    assert info.value.field == "from_agent"
    with pytest.raises(errors.ConflictError) as wrong:
        redaction.event_redact(store, event_id=event_id, reason="x", body_sha256="0" * 64)
    assert wrong.value.field == "body_sha256"
    with pytest.raises(errors.NotFoundError) as unknown:
        redaction.event_redact(
            store, event_id="evt_20261202T000000_00000000000000000000", reason="x"
        )
    assert unknown.value.field == "event_id"
    with pytest.raises(errors.ValidationError) as no_reason:
        redaction.event_redact(store, event_id=event_id, reason="  ")
    assert no_reason.value.field == "reason"
    assert _counts(store) == before
    assert SECRET in store.event_get(event_id).body
    # The writer itself may: alice's own key signs the redaction.
    with acting_as(Actor(agent="alice")):
        out = redaction.event_redact(store, event_id=event_id, reason="mine", body_sha256=None)
    assert out["event"].from_agent == "alice" and out["event"].verified is True
    assert store.event_get(event_id).redacted["by"] == "alice"  # type: ignore[index]


def test_the_database_refuses_every_other_change(store: LogStore) -> None:
    event_id, art_id = _leak(store, "bob")
    out = redaction.event_redact(store, event_id=event_id, reason="r", artifact_ids=[art_id])
    for sql in (
        "UPDATE events SET body = 'changed'",
        f"UPDATE events SET body = 'x' WHERE id = '{event_id}'",
        f"UPDATE events SET room = 'elsewhere' WHERE id = '{event_id}'",
        f"UPDATE events SET body = 'x' WHERE id = '{out['event'].id}'",
        "UPDATE artifact_blobs SET content = :raw",
        "UPDATE artifact_blobs SET size_bytes = size_bytes + 1",
        "UPDATE redactions SET reason = 'other'",
        "DELETE FROM redactions",
        "DELETE FROM events",
    ):
        with pytest.raises((sa.exc.DBAPIError, errors.StorageError), match="append-only"):
            with store.connect() as conn, conn.begin():
                conn.execute(sa.text(sql), {"raw": b"\x00"} if ":raw" in sql else {})


def test_a_tombstone_is_not_a_body_anyone_may_write(store: LogStore) -> None:
    event_id, _ = _leak(store, "bob")
    redaction.event_redact(store, event_id=event_id, reason="r")
    tomb = store.event_get(event_id).body
    with pytest.raises(errors.ValidationError) as info:
        store.event_append(type="note", stream="s", room="r", from_agent="bob", body=tomb)
    assert info.value.field == "body"
    with pytest.raises(errors.ConflictError):
        redaction.event_redact(store, event_id=event_id, reason="again")


def test_redaction_over_http_and_the_wrong_writer_is_403(tmp_path: Path) -> None:
    """Per-agent tokens: bob's token may not redact alice's event (403), alice's may (her
    hub-held key signs the redaction), the admin token may redact anyone's."""
    with live_hub(tmp_path, token=ADMIN_TOKEN) as hub:
        alice = agents.add(hub.store, "alice").token
        bob = agents.add(hub.store, "bob").token
        event_id, _ = _leak(hub.store, "alice")
        other_id, _ = _leak(hub.store, "bob")
        before = _counts(hub.store)
        with httpx.Client(base_url=hub.url, timeout=30) as client:

            def redact(token: str, ident: str) -> httpx.Response:
                body = {"event_id": ident, "reason": "r"}
                auth = {"Authorization": f"Bearer {token}"}
                return client.post("/v1/event_redact", json=body, headers=auth)

            bad = redact(bob, event_id)
            assert bad.status_code == 403, bad.text
            assert bad.json()["field"] == "from_agent"
            assert redact(bob, "evt_20261202T000000_00000000000000000000").status_code == 404
            assert _counts(hub.store) == before
            ok = redact(alice, event_id)
            assert ok.status_code == 200, ok.text
            assert ok.json()["parts"] == ["body"]
            assert ok.json()["event"]["from_agent"] == "alice"
            got = client.get(
                f"/v1/events/{event_id}", headers={"Authorization": f"Bearer {alice}"}
            ).json()["event"]
            assert got["redacted"]["by"] == "alice" and got["verified"] is True
            assert redact(ADMIN_TOKEN, other_id).json()["event"]["from_agent"] == "admin"


def test_a_redaction_event_is_written_only_by_event_redact(store: LogStore) -> None:
    event_id, _ = _leak(store, "bob")
    with pytest.raises(errors.ValidationError) as info:
        store.event_append(
            type="event.redact",
            stream="s",
            room="r",
            from_agent="bob",
            metadata={"redacts": event_id, "parts": [], "reason": "x"},
        )
    assert info.value.field == "type"


def test_a_peers_redaction_by_someone_else_takes_no_effect(tmp_path: Path) -> None:
    """A hostile peer's `event.redact` under another name is stored (the log stands) but does
    not remove anything, on any replica; doctor lists it."""
    a = _replica(tmp_path, "a", [])
    event_id, _ = _leak(a, "bob")
    body = a.event_get(event_id).body
    forged = {
        "id": "evt_20261202T060000_00000000000000000abc",
        "origin_replica": "rep_" + "e" * 32,
        "origin_seq": 1,
        "hlc": a.event_get(event_id).hlc[:14] + "000009-rep_" + "e" * 32,
        "type": "event.redact",
        "stream": "s",
        "room": "r",
        "from_agent": "mallory",
        "body": "gone",
        "created_at": "2026-12-02T06:00:00.000Z",
        "metadata": {
            "redacts": event_id,
            "parts": [{"part": "body", "sha256": hashlib.sha256(body.encode()).hexdigest()}],
            "reason": "erase it",
        },
    }
    res = replication.apply_remote_events(a, [forged], peer="hostile")
    assert res.applied_events == 1
    assert a.event_get(event_id).body == body
    report = doctor.run(a)
    assert not report.healthy
    assert report.checks["redactions"]["not_applied"] == 1
    a.close()


def test_redaction_travels_over_the_http_peer(tmp_path: Path) -> None:
    with live_hub(tmp_path / "hub", token=ADMIN_TOKEN) as hub:
        agents.add(hub.store, "alice")
        event_id, art_id = _leak(hub.store, "alice")
        redaction.event_redact(hub.store, event_id=event_id, reason="leak", artifact_ids=[art_id])
        b = _replica(tmp_path, "b", hub.store.pinned_admins())
        peer = sync.HttpPeer(hub.url, ADMIN_TOKEN)
        try:
            result = sync.sync_with_peer(b, peer)
        finally:
            peer.close()
        assert result["rejected_count"] == 0, result["rejected"]
        got = b.event_get(event_id)
        assert got.redacted is not None and got.verified is True
        art = b.artifact_get(art_id)
        assert art.content == b"" and art.redacted is not None
        assert doctor.run(b).healthy
        b.close()
    with LogStore.open(str(tmp_path / "b" / "log.sqlite3")) as again:
        assert not _secret_in_database(again)


def test_a_redacted_task_move_keeps_the_projection_the_fold(store: LogStore) -> None:
    """A block needs a body: the tombstone still is one, the task stays blocked, and the
    projection (re-folded by the redaction) equals the fold of the redacted thread."""
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
    task_id = out["task"].correlation_id
    workflows.task_update(store, task_id=task_id, action="claim", from_agent="codex")
    blocked = workflows.task_update(
        store, task_id=task_id, action="block", from_agent="codex", body=f"needs {SECRET}"
    )
    redaction.event_redact(store, event_id=blocked["event"].id, reason="leak")
    status = store.task_status(task_id)
    assert status["task"]["state"] == "blocked" and SECRET not in json.dumps(status)
    assert doctor.run(store).checks["tasks"] == {"tasks": 1, "differ": 0, "missing": 0, "extra": 0}
