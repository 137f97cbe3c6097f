"""The keyring and the verdict: key events in HLC order, rotation, revocation, who may sign."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream.identity import key_events, signing
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE, Keyring, SignedEvent
from mempalace_logstream.identity.keys import KeyPair
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event

REP = "rep_" + "1" * 32
ADMIN = KeyPair.from_seed(b"\x01" * 32)
ALICE = KeyPair.from_seed(b"\x02" * 32)
ALICE2 = KeyPair.from_seed(b"\x03" * 32)
BOB = KeyPair.from_seed(b"\x04" * 32)
ADMIN2 = KeyPair.from_seed(b"\x05" * 32)


def hlc(n: int) -> str:
    return f"{1764633600000 + n:013d}-000000-{REP}"


def event(n: int, *, type: str = "note", from_agent: str = "alice", metadata=None) -> Event:
    return Event(
        id=f"evt_{n:06d}_{type.replace('.', '_')}_{from_agent}",
        seq=n,
        origin_replica=REP,
        origin_seq=n,
        hlc=hlc(n),
        type=type,
        stream="project/demo",
        room="general",
        topic=None,
        from_agent=from_agent,
        to_agent=None,
        correlation_id=None,
        branch=None,
        base_commit=None,
        status=None,
        artifact_ids=(),
        body=f"body {n}",
        created_at="2026-12-02T00:00:00.000Z",
        metadata_json=json.dumps(metadata or {}),
    )


def signed(pair: KeyPair, ev: Event) -> SignedEvent:
    return SignedEvent(event=ev, sig=signing.sign_event(pair, ev), key_id=pair.key_id)


def key_add(signer, n, agent, pair, *, role="agent", replaces=None) -> SignedEvent:
    meta = {
        "agent": agent,
        "key_id": pair.key_id,
        "public_key": pair.public.to_text(),
        "role": role,
        "replaces": replaces,
    }
    return signed(signer, event(n, type=KEY_ADD, from_agent="admin", metadata=meta))


def key_revoke(signer, n, agent, key_id, reason="stolen", writer="admin") -> SignedEvent:
    meta = {"agent": agent, "key_id": key_id, "reason": reason}
    return signed(signer, event(n, type=KEY_REVOKE, from_agent=writer, metadata=meta))


ROOT = key_add(ADMIN, 1, "admin", ADMIN, role="admin")


def ring(*events: SignedEvent, pinned=(ADMIN.key_id,)) -> Keyring:
    return Keyring.build([ROOT, *events], pinned)


def judge(item: SignedEvent, keyring: Keyring):
    return verdict(item.event, item.sig, item.key_id, keyring)


def test_with_no_agents_registered_every_event_is_unsigned_and_null():
    empty = Keyring.build([], ())
    v = verdict(event(5), None, None, empty)
    assert (v.verified, v.code, v.signer) == (None, "unsigned", None)


def test_an_agents_signed_event_verifies_and_names_the_signer():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE))
    v = judge(signed(ALICE, event(3)), keyring)
    assert (v.verified, v.code, v.signer, v.role) == (True, "ok", "alice", "agent")
    assert keyring.valid_keys("alice", hlc(3)) == {ALICE.key_id}


def test_revocation_refuses_events_at_or_after_its_hlc_and_keeps_earlier_ones():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), key_revoke(ADMIN, 10, "alice", ALICE.key_id))
    assert judge(signed(ALICE, event(9)), keyring).verified is True
    for n in (10, 11):
        v = judge(signed(ALICE, event(n)), keyring)
        assert (v.verified, v.code) == (False, "revoked_key")
        assert "revoked at HLC" in v.reason and "stolen" in v.reason
    assert keyring.valid_keys("alice", hlc(10)) == frozenset()


def test_rotation_keeps_the_old_keys_earlier_signatures_and_refuses_its_later_ones():
    keyring = ring(
        key_add(ADMIN, 2, "alice", ALICE),
        key_add(ADMIN, 20, "alice", ALICE2, replaces=ALICE.key_id),
    )
    assert judge(signed(ALICE, event(19)), keyring).verified is True
    assert judge(signed(ALICE, event(21)), keyring).code == "revoked_key"
    assert judge(signed(ALICE2, event(21)), keyring).verified is True
    # No lower bound: clock skew must not refuse the new key's first honest events.
    assert judge(signed(ALICE2, event(15)), keyring).verified is True
    assert keyring.key(ALICE.key_id).revoke_reason == "rotated"


def test_an_unknown_key_is_refused_but_retryable():
    v = judge(signed(BOB, event(3, from_agent="bob")), ring())
    assert (v.verified, v.code, v.retryable) == (False, "unknown_key", True)


def test_a_key_of_another_agent_is_refused():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), key_add(ADMIN, 3, "bob", BOB))
    v = judge(signed(BOB, event(5, from_agent="alice")), keyring)
    assert (v.verified, v.code) == (False, "wrong_agent")
    assert v.retryable is False


def test_an_agent_with_a_key_must_sign_from_its_first_add_on():
    keyring = ring(key_add(ADMIN, 5, "alice", ALICE))
    assert verdict(event(4), None, None, keyring).verified is None
    for n in (5, 6):
        v = verdict(event(n), None, None, keyring)
        assert (v.verified, v.code) == (False, "unsigned_required")
    assert verdict(event(6, from_agent="carol"), None, None, keyring).verified is None


def test_the_admin_key_may_sign_for_anyone():
    v = judge(signed(ADMIN, event(3, from_agent="alice")), ring())
    assert (v.verified, v.signer, v.role) == (True, "admin", "admin")


def test_only_an_admin_key_may_add_keys():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), key_add(ALICE, 3, "bob", BOB))
    assert keyring.key(BOB.key_id) is None
    assert [r.code for r in keyring.refused] == ["not_admin"]
    assert judge(key_add(ALICE, 3, "bob", BOB), keyring).code == "not_admin"
    assert judge(key_add(ADMIN, 3, "bob", BOB), keyring).verified is True


def test_a_replica_that_has_not_pinned_the_admin_key_trusts_nothing_signed():
    keyring = Keyring.build([ROOT, key_add(ADMIN, 2, "alice", ALICE)], pinned_admins=())
    assert keyring.records() == ()
    assert [r.code for r in keyring.refused] == ["unknown_key", "unknown_key"]
    assert judge(signed(ALICE, event(3)), keyring).code == "unknown_key"


def test_a_self_signed_admin_key_that_is_not_pinned_is_not_a_root():
    keyring = Keyring.build(
        [ROOT, key_add(BOB, 2, "mallory", BOB, role="admin")], pinned_admins=[ADMIN.key_id]
    )
    assert keyring.key(BOB.key_id) is None
    assert [r.code for r in keyring.refused] == ["unknown_key"]


def test_a_holder_may_revoke_its_own_key_and_that_revocation_verifies():
    own = key_revoke(ALICE, 10, "alice", ALICE.key_id, reason="laptop lost", writer="alice")
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), own)
    assert keyring.key(ALICE.key_id).revoked_hlc == hlc(10)
    assert judge(own, keyring).verified is True
    assert judge(signed(ALICE, event(11)), keyring).code == "revoked_key"


def test_reusing_the_revocations_event_id_never_exempts_an_event_from_it():
    revocation = key_revoke(ADMIN, 10, "alice", ALICE.key_id)
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), revocation)
    thief = replace(event(10), id=revocation.event.id)  # same id and HLC, a plain note
    assert judge(signed(ALICE, thief), keyring).code == "revoked_key"


def test_a_self_revocation_written_as_someone_else_is_refused_everywhere():
    posing = key_revoke(ALICE, 10, "alice", ALICE.key_id, writer="admin")
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), posing)
    assert keyring.key(ALICE.key_id).revoked_hlc is None
    assert [r.code for r in keyring.refused] == ["not_admin"]
    assert judge(posing, keyring).verified is False


def test_an_agent_cannot_revoke_another_agents_key():
    keyring = ring(
        key_add(ADMIN, 2, "alice", ALICE),
        key_add(ADMIN, 3, "bob", BOB),
        key_revoke(ALICE, 4, "bob", BOB.key_id),
    )
    assert keyring.key(BOB.key_id).revoked_hlc is None
    assert [r.code for r in keyring.refused] == ["not_admin"]


def test_a_key_id_is_added_once_and_must_be_derived_from_its_public_key():
    forged = key_add(ADMIN, 4, "mallory", ALICE)
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE), forged)
    assert keyring.key(ALICE.key_id).agent == "alice"
    assert [r.code for r in keyring.refused] == ["duplicate_key"]
    meta = {"agent": "bob", "key_id": ALICE.key_id, "public_key": BOB.public.to_text()}
    mismatched = signed(ADMIN, event(5, type=KEY_ADD, from_agent="admin", metadata=meta))
    keyring = ring(mismatched)
    assert keyring.refused[0].code == "malformed"
    assert "not derived" in keyring.refused[0].message


def test_admin_keys_chain_and_a_revoked_admins_later_grants_are_refused():
    keyring = ring(
        key_add(ADMIN, 2, "admin2", ADMIN2, role="admin"),
        key_add(ADMIN2, 3, "alice", ALICE),
        key_revoke(ADMIN, 10, "admin2", ADMIN2.key_id, reason="rotated out"),
        key_add(ADMIN2, 11, "bob", BOB),
    )
    assert keyring.is_admin_trusted(ADMIN2.key_id, hlc(9))
    assert not keyring.is_admin_trusted(ADMIN2.key_id, hlc(10))
    assert keyring.key(ALICE.key_id) is not None
    assert keyring.key(BOB.key_id) is None
    assert [r.code for r in keyring.refused] == ["not_admin"]


def test_tampering_and_stripping_are_refused():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE))
    good = signed(ALICE, event(3))
    tampered = good._replace(event=replace(good.event, body="pay mallory"))
    assert judge(tampered, keyring).code == "bad_signature"
    assert verdict(good.event, None, None, keyring).code == "unsigned_required"
    forged_key = good._replace(key_id=BOB.key_id)
    assert judge(forged_key, keyring).code == "unknown_key"


def test_malformed_signature_fields_are_refused_not_raised():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE))
    good = signed(ALICE, event(3))
    assert verdict(good.event, good.sig, None, keyring).code == "malformed"
    assert verdict(good.event, None, good.key_id, keyring).code == "malformed"
    assert verdict(good.event, good.sig, "ed25519:XYZ", keyring).code == "malformed"
    assert verdict(good.event, "!!", good.key_id, keyring).code == "malformed"
    assert verdict(good.event, good.sig[:-2], good.key_id, keyring).code == "malformed"
    unencodable = replace(good.event, metadata_json='{"n": 9007199254740993}')
    assert verdict(unencodable, good.sig, good.key_id, keyring).code == "malformed"
    garbage = replace(good.event, metadata_json="[1, 2")
    assert verdict(garbage, good.sig, good.key_id, keyring).code == "malformed"
    with_artifact = replace(good.event, artifact_ids=("art_missing",))
    v = verdict(with_artifact, good.sig, good.key_id, keyring)
    assert (v.code, "art_missing" in v.reason) == ("malformed", True)
    bad_hlc = replace(good.event, hlc="yesterday")
    assert verdict(bad_hlc, good.sig, good.key_id, keyring).code == "malformed"


def test_a_redacted_event_still_verifies_through_its_stored_body_sha256():
    keyring = ring(key_add(ADMIN, 2, "alice", ALICE))
    good = signed(ALICE, event(3))
    redacted = replace(good.event, body="[redacted 2026-12-02 by admin: leaked key]")
    kept = signing.body_sha256(good.event.body)
    assert verdict(redacted, good.sig, good.key_id, keyring).code == "bad_signature"
    v = verdict(redacted, good.sig, good.key_id, keyring, body_sha256=kept)
    assert v.verified is True


def test_key_events_must_be_signed_and_of_the_right_shape():
    unsigned = SignedEvent(event=key_add(ADMIN, 2, "alice", ALICE).event)
    keyring = ring(unsigned)
    assert keyring.refused[0].code == "unsigned"
    assert verdict(unsigned.event, None, None, keyring).code == "unsigned_required"
    junk = signed(ADMIN, event(3, type=KEY_ADD, from_agent="admin", metadata={"agent": ""}))
    assert ring(junk).refused[0].code == "malformed"
    note = signed(ADMIN, event(4))
    assert ring(note).refused[0].code == "malformed"


# --------------------------------------------------------------------------- properties
@given(st.integers(3, 60), st.integers(3, 60))
def test_a_signature_before_the_revocation_stays_valid_and_one_after_does_not(revoke_at, at):
    keyring = ring(
        key_add(ADMIN, 2, "alice", ALICE), key_revoke(ADMIN, revoke_at, "alice", ALICE.key_id)
    )
    v = judge(signed(ALICE, event(at)), keyring)
    assert v.verified is (at < revoke_at)
    assert v.code == ("ok" if at < revoke_at else "revoked_key")


@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_rotations_keep_every_old_signature_valid(gaps, data):
    pairs = [KeyPair.from_seed(bytes([10 + i]) * 32) for i in range(len(gaps) + 1)]
    events = [key_add(ADMIN, 2, "alice", pairs[0])]
    at = 2
    rotations = []
    for i, gap in enumerate(gaps):
        at += gap * 10
        rotations.append(at)
        events.append(key_add(ADMIN, at, "alice", pairs[i + 1], replaces=pairs[i].key_id))
    keyring = ring(*events)
    bounds = [*rotations, 10**6]
    for i, pair in enumerate(pairs):
        n = data.draw(st.integers(3, bounds[i] - 1), label=f"hlc signed by key {i}")
        assert judge(signed(pair, event(n)), keyring).verified is True
        if i < len(rotations):
            after = data.draw(st.integers(bounds[i], bounds[i] + 100), label="after rotation")
            assert judge(signed(pair, event(after)), keyring).code == "revoked_key"


def test_a_key_event_seen_twice_counts_once_and_a_changed_copy_is_refused():
    grant = key_add(ADMIN, 2, "alice", ALICE)
    keyring = ring(grant, grant).extended([grant])
    assert keyring.refused == () and keyring.key(ALICE.key_id) is not None
    altered = grant._replace(event=replace(grant.event, body="other"))
    assert [r.code for r in ring(grant, altered).refused] == ["conflict"]


@given(st.permutations(range(5)))
def test_the_keyring_is_the_same_whatever_order_the_key_events_arrive_in(order):
    events = [
        key_add(ADMIN, 2, "admin2", ADMIN2, role="admin"),
        key_add(ADMIN2, 3, "alice", ALICE),
        key_add(ADMIN2, 4, "alice", ALICE2, replaces=ALICE.key_id),
        key_revoke(ADMIN, 5, "admin2", ADMIN2.key_id),
        key_add(ADMIN2, 6, "bob", BOB),
    ]
    expected = ring(*events)
    shuffled = Keyring.build([events[i] for i in order] + [ROOT], [ADMIN.key_id])
    assert shuffled.records() == expected.records()
    assert shuffled.refused == expected.refused
    assert ring().extended(events).refused == expected.refused


def test_the_key_event_builders_write_what_the_keyring_reads():
    meta = key_events.key_add_metadata("alice", ALICE.public)
    grant = signed(ADMIN, event(2, type=key_events.KEY_ADD, from_agent="admin", metadata=meta))
    rotate_meta = key_events.key_add_metadata("alice", ALICE2.public, replaces=ALICE.key_id)
    rotate = signed(ADMIN, event(3, type=KEY_ADD, from_agent="admin", metadata=rotate_meta))
    gone = key_events.key_revoke_metadata("alice", ALICE2.key_id, "left the team")
    revoke = signed(ADMIN, event(4, type=key_events.KEY_REVOKE, from_agent="admin", metadata=gone))
    keyring = ring(grant, rotate, revoke)
    assert keyring.refused == ()
    assert keyring.key(ALICE.key_id).revoke_reason == "rotated"
    assert keyring.key(ALICE2.key_id).revoke_reason == "left the team"
    assert meta == key_add_meta_by_hand("alice", ALICE)


def key_add_meta_by_hand(agent, pair):
    return {
        "agent": agent,
        "key_id": pair.key_id,
        "public_key": pair.public.to_text(),
        "role": "agent",
        "replaces": None,
    }
