"""Redaction empties only the redacting writer's own artifacts (issue 18 item 2, RFC 0008
"Redaction"). Blobs are content-addressed: bob referencing alice's artifact in his own event,
or re-uploading the same bytes as his own artifact, must not empty alice's artifact anywhere.
Per-artifact tombstones; a blob is emptied only when every artifact that references it is
redacted, and refilled when an unredacted artifact with its bytes arrives, so replicas converge
whatever the arrival order. SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from mempalace_logstream import agents, doctor, errors, replication, sync
from mempalace_logstream.identity import keys
from mempalace_logstream.identity.actor import Actor, acting_as
from mempalace_logstream.store import LogStore, redaction
from tests.hubkit import LiveHub
from tests.idsynckit import resign, rewrite

SECRET = "AKIA-SHARED-SECRET-51c0"
CONTENT = f"token={SECRET}"
SHA = hashlib.sha256(CONTENT.encode()).hexdigest()
ADMIN_TOKEN = "admin-tok-redact-authority-77"


@pytest.fixture
def keyed(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _replica(tmp_path: Path, name: str, pins: list[str]) -> LogStore:
    out = LogStore.open(str(tmp_path / name / "log.sqlite3"))
    for key_id in pins:
        out.pin_admin(key_id)
    return out


def _counts(store: LogStore) -> tuple[int, int]:
    with store.connect() as conn:
        events = conn.execute(sa.text("SELECT count(*) FROM events")).scalar()
        rows = conn.execute(sa.text("SELECT count(*) FROM redactions")).scalar()
    return int(events or 0), int(rows or 0)


def _blob(store: LogStore, sha: str = SHA) -> bytes:
    with store.connect() as conn:
        row = conn.execute(
            sa.text("SELECT content FROM artifact_blobs WHERE sha256 = :s"), {"s": sha}
        ).first()
    assert row is not None
    return bytes(row[0])


def _view(store: LogStore, ident: str) -> tuple[bytes, dict[str, str] | None]:
    art = store.artifact_get(ident)
    return art.content or b"", art.redacted


def _put_and_refer(store: LogStore, who: str) -> tuple[str, str]:
    """`who` puts the shared bytes as its own artifact and writes an event naming it."""
    art = store.artifact_put(kind="note", content=CONTENT, created_by=who)
    event = store.event_append(
        type="note", stream="s", room="r", from_agent=who, body="see", artifact_ids=[art.id]
    )
    return event.id, art.id


# --------------------------------------------------------------------------- HTTP


class Hub:
    def __init__(self, store: LogStore) -> None:
        self.alice = agents.add(store, "alice")
        self.bob = agents.add(store, "bob")
        self.hub = LiveHub(store, _settings())
        self.hub.start()
        self.store = store

    def client(self, token: str) -> httpx.Client:
        auth = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.hub.url, headers=auth, timeout=30)


def _settings() -> Any:
    from mempalace_logstream.http import HubSettings

    return HubSettings(token=ADMIN_TOKEN)


@pytest.fixture
def hub(keyed: LogStore) -> Iterator[Hub]:
    out = Hub(keyed)
    try:
        yield out
    finally:
        out.hub.stop()


def _post(c: httpx.Client, route: str, body: dict[str, Any]) -> httpx.Response:
    return c.post(route, json=body)


def test_bob_cannot_empty_alices_artifact_through_a_shared_blob_over_http(
    hub: Hub, tmp_path: Path
) -> None:
    with hub.client(hub.alice.token) as alice, hub.client(hub.bob.token) as bob:
        art_a = _post(alice, "/v1/artifact_put", {"kind": "note", "content": CONTENT}).json()
        a_id = art_a["artifact"]["id"]
        note = {"type": "note", "stream": "s", "room": "r", "body": "mine"}
        assert _post(alice, "/v1/event_append", {**note, "artifact_ids": [a_id]}).is_success
        # 1. bob names alice's artifact in his own event, then redacts his event with it.
        his = _post(bob, "/v1/event_append", {**note, "artifact_ids": [a_id]}).json()["event"]
        before = _counts(hub.store)
        refused = _post(
            bob,
            "/v1/event_redact",
            {"event_id": his["id"], "reason": "x", "artifact_ids": [a_id], "keep_body": True},
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "artifact_ids"
        assert "alice" in refused.json()["error"]
        assert _counts(hub.store) == before  # nothing written
        # 2. bob uploads the same bytes as his own artifact and redacts that: his is redacted,
        # alice's is not, and the shared blob keeps its bytes.
        art_b = _post(bob, "/v1/artifact_put", {"kind": "note", "content": CONTENT}).json()
        b_id = art_b["artifact"]["id"]
        assert art_b["artifact"]["sha256"] == SHA
        own = _post(bob, "/v1/event_append", {**note, "artifact_ids": [b_id]}).json()["event"]
        ok = _post(
            bob,
            "/v1/event_redact",
            {"event_id": own["id"], "reason": "leak", "artifact_ids": [b_id], "keep_body": True},
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["parts"] == [b_id]
        got_a = alice.get(f"/v1/artifacts/{a_id}").json()["artifact"]
        got_b = alice.get(f"/v1/artifacts/{b_id}").json()["artifact"]
    assert got_a["content"] == CONTENT and "redacted" not in got_a
    assert got_b["content"] == "" and got_b["redacted"]["by"] == "bob"
    assert _blob(hub.store) == CONTENT.encode()
    assert doctor.run(hub.store).healthy, doctor.run(hub.store).to_dict()["findings"]
    # Every replica that syncs reads the same: alice's intact, bob's redacted.
    b = _replica(tmp_path, "b", hub.store.pinned_admins())
    c = _replica(tmp_path, "c", hub.store.pinned_admins())
    try:
        peer = sync.HttpPeer(hub.hub.url, ADMIN_TOKEN)
        try:
            assert sync.sync_with_peer(b, peer)["rejected_count"] == 0
        finally:
            peer.close()
        sync.sync_with_peer(c, sync.LocalPeer(b))
        for replica in (b, c):
            assert _view(replica, a_id) == (CONTENT.encode(), None)
            content, redacted = _view(replica, b_id)
            assert content == b"" and redacted is not None and redacted["by"] == "bob"
            report = doctor.run(replica)
            assert report.healthy, report.to_dict()["findings"]
    finally:
        b.close()
        c.close()


# --------------------------------------------------------------------------- from a peer


def test_a_hostile_peers_redaction_of_someone_elses_artifact_is_refused_and_recorded(
    keyed: LogStore, tmp_path: Path
) -> None:
    """bob's own key signs an `event.redact` of his event naming alice's artifact (a hostile
    replica running bob's key): the honest replica stores the event (it is bob's) but empties
    nothing, records the refusal in the round's rejections, and doctor lists it."""
    origin = keyed
    agents.add(origin, "alice")
    agents.add(origin, "bob")
    pins = origin.pinned_admins()
    _ev_a, a_id = _put_and_refer(origin, "alice")
    bob_event = origin.event_append(
        type="note", stream="s", room="r", from_agent="bob", artifact_ids=[a_id]
    )
    hostile = _replica(tmp_path, "hostile", pins)
    try:
        sync.sync_with_peer(hostile, sync.LocalPeer(origin))
        keys_dir = origin.identity.keys_dir
        assert keys_dir is not None
        bob_pair = keys.load_private_key(keys_dir / "bob.key")
        forged = _forged_redaction(hostile, bob_pair, bob_event.id, a_id)
        result = sync.sync_with_peer(origin, sync.LocalPeer(hostile))
        assert origin.event_get(forged).verified is True  # bob's event stands
        assert _view(origin, a_id) == (CONTENT.encode(), None)
        assert _blob(origin) == CONTENT.encode()
        refused = [r for r in result["rejected"] if r["ident"] == forged]
        assert [(r["kind"], r["reason"]) for r in refused] == [("redaction", "forbidden")]
        assert forged in {r["ident"] for r in replication.list_rejections(origin)}
        report = doctor.run(origin)
        assert not report.healthy
        assert report.checks["redactions"]["not_applied"] == 1
        # A third replica that syncs from the origin: intact there too.
        third = _replica(tmp_path, "third", pins)
        try:
            sync.sync_with_peer(third, sync.LocalPeer(origin))
            assert _view(third, a_id) == (CONTENT.encode(), None)
        finally:
            third.close()
    finally:
        hostile.close()


def _forged_redaction(store: LogStore, pair: keys.KeyPair, target: str, part: str) -> str:
    base = store.event_append(type="note", stream="s", room="r", from_agent="zed", body="r")
    meta = {"redacts": target, "parts": [{"part": part, "sha256": SHA}], "reason": "mine now"}
    rewrite(store, base.id, type="event.redact", from_agent="bob", metadata_json=json.dumps(meta))
    return resign(store, store.event_get(base.id), pair).id


# --------------------------------------------------------------------------- convergence


@pytest.mark.parametrize("order", ["alice_first", "bob_first"])
def test_replicas_converge_whatever_the_arrival_order(
    keyed: LogStore, tmp_path: Path, order: str
) -> None:
    """alice writes her artifact on replica X; bob writes the same bytes as his own on Y and
    redacts it there. The receiving replica (SQLite or PostgreSQL) pulls X then Y, or Y then
    X: either way alice's artifact reads intact, bob's reads redacted, and the blob holds the
    bytes (refilled when alice's artifact arrives after bob's redaction emptied it)."""
    x, y = _replica(tmp_path, "x", []), _replica(tmp_path, "y", [])
    try:
        _ev_a, a_id = _put_and_refer(x, "alice")
        ev_b, b_id = _put_and_refer(y, "bob")
        redaction.event_redact(
            y, event_id=ev_b, reason="leak", artifact_ids=[b_id], keep_body=True, from_agent="bob"
        )
        assert _blob(y) == b""  # only bob's artifact references it on Y: emptied
        first, second = (x, y) if order == "alice_first" else (y, x)
        sync.sync_with_peer(keyed, sync.LocalPeer(first))
        if order == "bob_first":
            assert _blob(keyed) == b""
        sync.sync_with_peer(keyed, sync.LocalPeer(second))
        assert _view(keyed, a_id) == (CONTENT.encode(), None)
        content, redacted = _view(keyed, b_id)
        assert content == b"" and redacted == y.artifact_get(b_id).redacted
        assert _blob(keyed) == CONTENT.encode()
        report = doctor.run(keyed)
        assert report.healthy, report.to_dict()["findings"]
        # And back: Y learns alice's artifact from the receiver, its blob is refilled.
        sync.sync_with_peer(y, sync.LocalPeer(keyed))
        assert _view(y, a_id) == (CONTENT.encode(), None)
        assert _view(y, b_id) == _view(keyed, b_id)
    finally:
        x.close()
        y.close()


def test_a_blob_is_emptied_only_when_every_artifact_naming_it_is_redacted(
    keyed: LogStore,
) -> None:
    agents.add(keyed, "alice")
    agents.add(keyed, "bob")
    ev_a, a_id = _put_and_refer(keyed, "alice")
    ev_b, b_id = _put_and_refer(keyed, "bob")
    with acting_as(Actor(agent="alice")):
        out = redaction.event_redact(keyed, event_id=ev_a, reason="mine", artifact_ids=[a_id])
    assert out["parts"] == ["body", a_id]
    assert _view(keyed, a_id)[1] is not None and _view(keyed, a_id)[0] == b""
    assert _view(keyed, b_id) == (CONTENT.encode(), None)  # bob's still reads its bytes
    assert _blob(keyed) == CONTENT.encode()
    with acting_as(Actor(agent="bob")):
        redaction.event_redact(keyed, event_id=ev_b, reason="mine too", artifact_ids=[b_id])
    assert _blob(keyed) == b""  # now nobody's unredacted artifact names it
    assert _view(keyed, b_id)[1]["by"] == "bob"  # type: ignore[index]
    # A later put of the same bytes (by anyone) refills the blob for its own artifact only.
    again = keyed.artifact_put(kind="note", content=CONTENT, created_by="carol")
    assert _view(keyed, again.id) == (CONTENT.encode(), None)
    assert _view(keyed, a_id)[0] == b"" and _view(keyed, b_id)[0] == b""
    assert doctor.run(keyed).healthy, doctor.run(keyed).to_dict()["findings"]


def test_the_admin_may_empty_anyones_artifact(keyed: LogStore) -> None:
    agents.add(keyed, "alice")
    agents.add(keyed, "bob")
    _ev_a, a_id = _put_and_refer(keyed, "alice")
    with acting_as(Actor(agent="bob")):
        his = keyed.event_append(
            type="note", stream="s", room="r", from_agent="bob", artifact_ids=[a_id]
        )
        with pytest.raises(errors.ForbiddenError) as info:
            redaction.event_redact(
                keyed, event_id=his.id, reason="x", artifact_ids=[a_id], keep_body=True
            )
    assert info.value.field == "artifact_ids"
    out = redaction.event_redact(
        keyed, event_id=his.id, reason="leak", artifact_ids=[a_id], keep_body=True
    )
    assert out["parts"] == [a_id]
    assert _view(keyed, a_id)[1]["by"] == "admin"  # type: ignore[index]
    assert _blob(keyed) == b""


# --------------------------------------------------------------------------- the database


def _drop_blob_guard(store: LogStore) -> None:
    with store.engine.begin() as conn:
        if store.backend.name == "sqlite":
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS artifact_blobs_no_update")
        else:
            conn.exec_driver_sql(
                "DROP TRIGGER IF EXISTS artifact_blobs_redact_only ON artifact_blobs"
            )


def test_the_database_refuses_to_empty_a_blob_an_unredacted_artifact_names(
    keyed: LogStore,
) -> None:
    """Even with a `redactions` row naming the blob's sha256 (bob's own redaction of his copy),
    the database refuses to empty it while alice's artifact is unredacted, and to refill an
    emptied blob with other bytes."""
    _put_and_refer(keyed, "alice")
    ev_b, b_id = _put_and_refer(keyed, "bob")
    redaction.event_redact(keyed, event_id=ev_b, reason="r", artifact_ids=[b_id], keep_body=True)
    for sql, raw in (
        ("UPDATE artifact_blobs SET content = :raw", b""),
        ("UPDATE artifact_blobs SET content = :raw", b"x" * len(CONTENT)),
    ):
        with pytest.raises((sa.exc.DBAPIError, errors.StorageError), match="append-only"):
            with keyed.connect() as conn, conn.begin():
                conn.execute(sa.text(sql), {"raw": raw})
    assert _blob(keyed) == CONTENT.encode()


def test_doctor_flags_an_emptied_blob_an_unredacted_artifact_still_names(
    keyed: LogStore,
) -> None:
    """The state an older version left (bob's redaction of his copy emptied the shared blob):
    alice's artifact reads empty; doctor names it."""
    _ev_a, a_id = _put_and_refer(keyed, "alice")
    ev_b, b_id = _put_and_refer(keyed, "bob")
    redaction.event_redact(keyed, event_id=ev_b, reason="r", artifact_ids=[b_id], keep_body=True)
    _drop_blob_guard(keyed)
    with keyed.engine.begin() as conn:
        conn.execute(sa.text("UPDATE artifact_blobs SET content = :e"), {"e": b""})
    report = doctor.run(keyed)
    assert not report.healthy
    blobs = report.checks["blobs"]
    assert blobs["emptied_but_named"] == 1, blobs
    assert any(a_id in json.dumps(f) for f in report.to_dict()["findings"])


def test_upgrading_a_0006_log_keeps_its_redacted_artifacts_redacted(
    db_url: str, tmp_path: Path
) -> None:
    """Migration 0007 gives the artifacts a 0006 redaction emptied (by their own writer, or
    the admin) their per-artifact rows: they still read redacted, doctor stays healthy."""
    from alembic import command

    from mempalace_logstream import migrate

    with LogStore.open(db_url) as store:
        ev_a, a_id = _put_and_refer(store, "alice")
        ev_b, b_id = _put_and_refer(store, "bob")
        for ev, art, who in ((ev_b, b_id, "bob"), (ev_a, a_id, "alice")):
            redaction.event_redact(
                store, event_id=ev, reason="r", artifact_ids=[art], keep_body=True, from_agent=who
            )
        assert _blob(store) == b""
    command.downgrade(migrate.alembic_config(url=db_url), "0006")
    with LogStore.open(db_url) as again:  # migrates to head on open
        with again.connect() as conn:
            rows = conn.execute(sa.text("SELECT artifact_id FROM artifact_redactions")).all()
        assert sorted(r[0] for r in rows) == sorted([a_id, b_id])
        for art in (a_id, b_id):
            content, redacted = _view(again, art)
            assert content == b"" and redacted is not None
        report = doctor.run(again)
        assert report.healthy, report.to_dict()["findings"]
        assert report.checks["blobs"]["redacted"] == 1
