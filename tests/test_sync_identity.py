"""Signatures verified on every sync apply (RFC 0008 "Verdicts", issue 12): a hostile
replica's forgeries are refused with their codes and never stored, honest events still
converge, an unknown key holds its events until the key arrives, a late revocation is
listed. SQLite files, and PostgreSQL as the receiving replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from mempalace_logstream import LogStore, agents, replication, sync
from mempalace_logstream.replication import verify
from tests.idsynckit import (
    Team,
    forge,
    held,
    note,
    replica,
    stored_signed_verify,
)


def _pull(store: LogStore, source: LogStore) -> dict:
    return sync.sync_with_peer(store, sync.LocalPeer(source))


def _codes(result: dict) -> dict[str, str]:
    return {r["ident"]: r["reason"] for r in result["rejected"]}


@pytest.fixture
def trio(tmp_path: Path):
    a, b, h = replica(tmp_path, "a"), replica(tmp_path, "b"), replica(tmp_path, "h")
    team = Team.build(a, h, b)
    yield a, b, h, team
    for s in (a, b, h):
        s.close()


def test_signed_events_travel_and_verify(trio) -> None:
    a, b, _, _ = trio
    mine = note(a, "alice", "signed")
    result = _pull(b, a)
    assert result["rejected_count"] == 0
    got = b.event_get(mine.id)
    assert got.verified is True and got.sig == mine.sig and got.key_id == mine.key_id
    assert replication.counts(b)["rejections"] == 0


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("own_key", "wrong_agent"),
        ("garbage", "bad_signature"),
        ("alter", "bad_signature"),
        ("strip", "unsigned_required"),
        ("unsigned", "unsigned_required"),
        ("key_event", "not_admin"),
    ],
)
def test_a_forgery_is_refused_with_its_code_and_honest_events_converge(trio, kind, code) -> None:
    a, b, h, team = trio
    honest = [note(a, "alice", f"honest {i}") for i in range(3)]
    _pull(h, a)  # the hostile replica relays the origin's events (and can alter them)
    after = a.event_get(honest[-1].id).hlc
    forged = forge(team, h, kind, after_hlc=after)
    assert forged is not None
    if kind not in ("alter", "strip"):
        # b knows the keys first (else a forged unsigned event under alice's name would
        # verify as `null` there: its hostile origin may be pulled before the key events).
        _pull(b, a)
    result = _pull(b, h)
    assert _codes(result).get(forged) == code, result["rejected"]
    rows = {r["ident"]: r for r in replication.list_rejections(b)}
    assert rows[forged]["reason"] == code and rows[forged]["retryable"] is False
    assert replication.counts(b)["refused_signatures"] >= 1
    if kind not in ("alter", "strip"):
        assert forged not in {e.id for e in held(b)}
    assert stored_signed_verify(team, b) == []
    # The honest copies arrive from the origin (an altered or stripped one leaves a hole the
    # fingerprints see), and the rejection of that id is resolved by them.
    _pull(b, a)
    assert {e.id: e.content_key() for e in held(b) if e.origin_replica == a.replica_id} == {
        e.id: e.content_key() for e in held(a)
    }
    assert all(b.event_get(e.id).verified is True for e in honest)
    assert stored_signed_verify(team, b) == []


def test_an_altered_copy_of_a_held_event_is_a_forgery_not_a_conflict(trio) -> None:
    a, b, h, team = trio
    mine = note(a, "alice", "the genuine text")
    _pull(h, a)
    _pull(b, a)
    forged = forge(team, h, "alter")
    assert forged == mine.id
    # A round would not pull it (b holds that position); a page that carries it anyway:
    rows = sync.LocalPeer(h).rows(a.replica_id, 0, 100)
    res = replication.apply_remote_batch(b, (), replication.parse_events(b, rows, "h", rows=True))
    assert res.conflicts == [] and res.duplicates == len(rows) - 1
    assert {r["ident"]: r["reason"] for r in res.rejected} == {mine.id: "bad_signature"}
    assert replication.list_conflicts(b) == []
    assert b.event_get(mine.id).body == "the genuine text"


def test_a_pushed_forgery_is_refused(trio) -> None:
    """The receiving side of a push (the hub's /sync/push calls the same apply) judges too."""
    a, b, h, team = trio
    honest = note(a, "alice", "x")
    _pull(h, a)
    _pull(b, a)
    forged = forge(team, h, "garbage", after_hlc=a.event_get(honest.id).hlc)
    assert forged is not None
    sync.sync_with_peer(h, sync.LocalPeer(b), push=True)
    rows = {r["ident"]: r for r in replication.list_rejections(b)}
    assert rows[forged]["reason"] == "bad_signature"
    assert rows[forged]["peer"].startswith("push")
    assert forged not in {e.id for e in held(b)}


def test_a_revoked_keys_later_events_are_refused(trio) -> None:
    a, b, h, team = trio
    revoked = agents.revoke(a, "mallory", reason="laptop stolen")
    _pull(h, a)
    _pull(b, a)
    forged = forge(team, h, "replay", after_hlc=a.event_get(revoked["event_id"]).hlc)
    assert forged is not None
    result = _pull(b, h)
    assert _codes(result)[forged] == "revoked_key"
    assert forged not in {e.id for e in held(b)}


def test_an_unknown_key_holds_its_events_until_the_key_arrives(tmp_path: Path) -> None:
    a, b, c = replica(tmp_path, "a"), replica(tmp_path, "b"), replica(tmp_path, "c")
    admin = agents.ensure_admin(a)
    agents.add(a, "alice")
    signed = [note(a, "alice", f"n{i}") for i in range(3)]
    agents.trust(c, admin)
    _pull(c, a)  # c relays; b does not pin the admin key yet
    rounds = [_pull(b, c) for _ in range(replication.MAX_RETRIES + 2)]
    assert {r["reason"] for r in rounds[-1]["rejected"]} == {"unknown_key"}
    rows = replication.list_rejections(b)
    assert rows and all(r["retryable"] for r in rows)  # held past MAX_RETRIES, not dropped
    assert replication.counts(b)["held_for_key"] == len(rows)
    assert not held(b)
    agents.trust(b, admin)
    _pull(b, c)
    assert {e.id for e in held(b)} >= {e.id for e in signed}
    assert all(b.event_get(e.id).verified is True for e in signed)
    assert replication.list_rejections(b) == []
    for s in (a, b, c):
        s.close()


def test_a_late_revocation_is_listed(trio) -> None:
    a, b, h, team = trio
    _pull(h, a)
    _pull(b, a)  # b knows mallory's key
    revoked = agents.revoke(a, "mallory", reason="left the team")
    stamp = a.event_get(revoked["event_id"]).hlc
    h.clock.observe(stamp)  # the hostile's clock is past the revocation it has not seen
    late = note(h, "mallory", "signed before h learned of the revocation")
    assert late.verified is True and late.hlc > stamp
    _pull(b, h)  # b does not know of the revocation yet: the event verifies and is stored
    assert b.event_get(late.id).verified is True
    assert verify.late_revoked(b) == []
    _pull(b, a)
    found = verify.late_revoked(b)
    assert [x.event_id for x in found] == [late.id]
    assert found[0].key_agent == "mallory" and found[0].reason == "left the team"
    assert found[0].as_dict()["revoked_hlc"] == stamp
    # From then on every read shows it false (RFC 0008), a get and a list alike.
    assert b.event_get(late.id).verified is False
    assert b.event_get(late.id).to_dict()["verified"] is False
    listed = {e.id: e.to_dict()["verified"] for e in b.event_list(limit=500).events}
    assert listed[late.id] is False
    assert all(v is not False for k, v in listed.items() if k != late.id)


def test_unsigned_events_stored_before_the_key_was_known_are_listed(trio) -> None:
    """A replica that does not know alice's key yet keeps a forged unsigned event under her
    name as `null` (it cannot tell); once the key arrives, `late_unsigned` lists it."""
    a, b, h, team = trio
    honest = note(a, "alice", "signed")
    _pull(h, a)
    forged = forge(team, h, "unsigned", after_hlc=a.event_get(honest.id).hlc)
    assert forged is not None
    # b pulls only h's own origin first: alice's key events (origin a) are not there yet.
    peer = sync.LocalPeer(h)
    rows = peer.rows(h.replica_id, 0, 100)
    replication.apply_remote_batch(b, (), replication.parse_events(b, rows, "h", rows=True))
    assert b.event_get(forged).verified is None
    assert verify.late_unsigned(b) == []
    _pull(b, a)
    assert [x.event_id for x in verify.late_unsigned(b)] == [forged]
    assert verify.late_unsigned(a) == [] and verify.late_revoked(a) == []


def test_no_agents_no_verdict_work(trio, monkeypatch) -> None:
    """A log where nobody signs pays no verdicts: the page's judge is never built."""
    _, _, _, _ = trio
    calls = []
    real = verify.verdict
    monkeypatch.setattr(verify, "verdict", lambda *a, **k: calls.append(1) or real(*a, **k))
    root = trio[0].identity.keys_dir.parent.parent
    x, y = replica(root, "x"), replica(root, "y")
    for i in range(5):
        note(x, "bob", f"n{i}")
    assert _pull(y, x)["pulled_events"] == 5
    assert calls == []
    x.close()
    y.close()


@pytest.mark.pg
def test_postgresql_replica_refuses_forgeries(tmp_path: Path, store: LogStore) -> None:
    """One deterministic scenario with PostgreSQL as the honest receiver (the `store`
    fixture's PostgreSQL parameter; its SQLite parameter runs it too)."""
    store.identity.keys_dir = tmp_path / "pg-keys"
    store.identity.reload_keys()
    a, h = replica(tmp_path, "a"), replica(tmp_path, "h")
    team = Team.build(a, h, store)
    honest = [note(a, "alice", f"honest {i}") for i in range(2)]
    _pull(h, a)
    revoked = agents.revoke(a, "mallory", reason="gone")
    after = a.event_get(revoked["event_id"]).hlc
    _pull(store, a)
    expected = {}
    for kind, code in (
        ("own_key", "revoked_key"),  # mallory's key is revoked before these are stamped
        ("garbage", "bad_signature"),
        ("replay", "revoked_key"),
        ("unsigned", "unsigned_required"),
        ("key_event", "revoked_key"),
    ):
        forged = forge(team, h, kind, after_hlc=after)
        assert forged is not None
        expected[forged] = code
    result = _pull(store, h)  # the key events are known: judged in the first round
    assert {k: _codes(result).get(k) for k in expected} == expected
    assert not set(expected) & {e.id for e in held(store)}
    assert all(store.event_get(e.id).verified is True for e in honest)
    assert stored_signed_verify(team, store) == []
    a.close()
    h.close()


def test_http_rows_pages_carry_signatures_and_are_verified(trio) -> None:
    """The hub's compact rows-v2 pages carry sig and key_id: a replica pulling over HTTP
    stores the honest events verified and refuses the hostile hub's forgeries."""
    from tests.test_sync_http import TOKEN, running_hub

    a, b, h, team = trio
    honest = [note(a, "alice", f"over http {i}") for i in range(3)]
    _pull(h, a)
    _pull(b, a)  # b knows the keys; h's own forgery is judged at once
    forged = forge(team, h, "own_key", after_hlc=a.event_get(honest[-1].id).hlc)
    assert forged is not None
    fresh = replica(a.identity.keys_dir.parent.parent, "fresh")  # type: ignore[union-attr]
    agents.trust(fresh, team.admin_id)
    with running_hub(h) as url:
        peer = sync.HttpPeer(url, TOKEN)
        try:
            result = sync.sync_with_peer(b, peer)
            assert peer.rows_limit  # the compact pages were used
            assert _codes(result)[forged] == "wrong_agent"
            assert sync.sync_with_peer(fresh, peer)["rejected_count"] >= 1
        finally:
            peer.close()
    for s in (b, fresh):
        assert forged not in {e.id for e in held(s)}
        for e in honest:
            got = s.event_get(e.id)
            assert got.verified is True and got.sig == e.sig
    fresh.close()


def test_a_held_position_recorded_again_as_a_forgery_no_longer_counts_as_accounted(
    tmp_path: Path,
) -> None:
    """A rejection recorded again takes the latest report's position: an event held for its
    key (position kept, retried) and then seen as a forged copy (no position) must not leave
    its position counted as refused for good, or the honest copy is a hole no round sees."""
    from mempalace_logstream.replication import reports

    store = replica(tmp_path, "x")
    try:
        origin = "rep_" + "0" * 32
        held_report = {
            **{"kind": "event", "ident": "evt_x", "origin_replica": origin, "origin_seq": 3},
            **{"peer": "p", "reason": "unknown_key", "message": "held", "retryable": True},
        }
        forged_report = {**held_report, "origin_seq": None, "reason": "bad_signature"}
        forged_report["retryable"] = False
        store.transaction(lambda tx: reports.record_rejections(store, tx.ex, [held_report]))
        assert replication.held_fingerprint(store, origin, 10)[0] == 1
        store.transaction(lambda tx: reports.record_rejections(store, tx.ex, [forged_report]))
        (row,) = reports.list_rejections(store)
        assert (row["origin_seq"], row["reason"], row["attempts"]) == (None, "bad_signature", 2)
        assert replication.count_upto(store, origin, 10) == 0  # not accounted as refused
        assert replication.held_fingerprint(store, origin, 10)[0] == 0
    finally:
        store.close()
