"""A hostile writer against the pure verdict: whatever it forges, alters, strips or replays,
no forged event is ever judged verified, and every honest event is.

The store/sync property over three replicas builds on this; here the attacker holds its own
registered key (mallory), bob's stolen key after its revocation, and every honest event.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream.identity import signing
from mempalace_logstream.identity.keyring import KEY_ADD, Keyring, SignedEvent
from mempalace_logstream.identity.keys import KeyPair
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event

REP = "rep_" + "2" * 32
ADMIN = KeyPair.from_seed(b"\x11" * 32)
KEYS = {name: KeyPair.from_seed(bytes([0x20 + i]) * 32) for i, name in enumerate("abcm")}
ALICE, BOB, CAROL, MALLORY = (KEYS[c] for c in "abcm")
BOB2 = KeyPair.from_seed(b"\x30" * 32)
ROTATED_AT = 500  # bob's key is stolen, and rotated at this HLC
AGENTS = {"alice": ALICE, "bob": BOB, "carol": CAROL}


def hlc(n: int) -> str:
    return f"{1764633600000 + n:013d}-000000-{REP}"


def event(n: int, from_agent: str, *, type: str = "note", body: str = "", meta=None) -> Event:
    return Event(
        id=f"evt_{n:06d}_{from_agent}",
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
        body=body,
        created_at="2026-12-02T00:00:00.000Z",
        metadata_json=json.dumps(meta or {}),
    )


def signed(pair: KeyPair, ev: Event) -> SignedEvent:
    return SignedEvent(event=ev, sig=signing.sign_event(pair, ev), key_id=pair.key_id)


def add(
    signer: KeyPair, n: int, agent: str, pair: KeyPair, role="agent", replaces=None, by="admin"
):
    meta = {
        "agent": agent,
        "key_id": pair.key_id,
        "public_key": pair.public.to_text(),
        "role": role,
        "replaces": replaces,
    }
    return signed(signer, event(n, by, type=KEY_ADD, meta=meta))


KEY_EVENTS = [
    add(ADMIN, 1, "admin", ADMIN, role="admin"),
    add(ADMIN, 2, "alice", ALICE),
    add(ADMIN, 3, "bob", BOB),
    add(ADMIN, 4, "carol", CAROL),
    add(ADMIN, 5, "mallory", MALLORY),
    add(ADMIN, ROTATED_AT, "bob", BOB2, replaces=BOB.key_id),
]
KEYRING = Keyring.build(KEY_EVENTS, [ADMIN.key_id])


def honest(n: int, agent: str, body: str) -> SignedEvent:
    pair = BOB2 if agent == "bob" and n >= ROTATED_AT else AGENTS[agent]
    return signed(pair, event(n, agent, body=body))


def judge(item: SignedEvent, keyring: Keyring = KEYRING):
    return verdict(item.event, item.sig, item.key_id, keyring)


honest_events = st.lists(
    st.tuples(st.integers(10, 1000), st.sampled_from(sorted(AGENTS)), st.text(max_size=20)),
    min_size=1,
    max_size=8,
    unique_by=lambda t: t[0],
).map(lambda items: [honest(n, agent, body) for n, agent, body in items])

_FIELDS = ["from_agent", "hlc", "type", "stream", "room", "origin_seq", "body", "to_agent"]


@st.composite
def attacks(draw, log: list[SignedEvent]) -> tuple[SignedEvent, list[SignedEvent]]:
    """A forged event, and the key events the attacker slipped into the log with it."""
    forged, extra = draw(_forgeries(log)), []
    if forged is None:  # mallory grants herself an admin key, then writes as alice with it
        rogue = KeyPair.from_seed(b"\x66" * 32)
        n = draw(st.integers(10, 1000))
        extra = [add(MALLORY, n, "mallory", rogue, role="admin", by="mallory")]
        forged = signed(rogue, event(n + 1, "alice", body="admin says pay mallory"))
    return forged, extra


@st.composite
def _forgeries(draw, log: list[SignedEvent]) -> SignedEvent | None:
    target = draw(st.sampled_from(log))
    kind = draw(
        st.sampled_from(
            ["alter", "strip", "impersonate", "stolen_key", "swap_sig", "swap_key", "self_admin"]
        )
    )
    n = draw(st.integers(10, 1000))
    if kind == "alter":
        name = draw(st.sampled_from(_FIELDS))
        value = {
            "from_agent": "mallory",
            "hlc": hlc(n + 2000),
            "type": "task.cancel",
            "stream": "project/other",
            "room": "ops",
            "origin_seq": n + 5000,
            "body": target.event.body + "!",
            "to_agent": "mallory",
        }[name]
        return target._replace(event=replace(target.event, **{name: value}))
    if kind == "strip":
        return target._replace(sig=None, key_id=None)
    if kind == "impersonate":
        victim = draw(st.sampled_from(sorted(AGENTS)))
        return signed(MALLORY, event(n, victim, body="pay mallory"))
    if kind == "stolen_key":
        return signed(BOB, event(ROTATED_AT + n, "bob", body="replayed with the old key"))
    if kind == "swap_sig":
        other = draw(st.sampled_from(log))
        forged = event(n, target.event.from_agent, body="not what was signed")
        return SignedEvent(event=forged, sig=other.sig, key_id=other.key_id)
    if kind == "swap_key":
        other = draw(st.sampled_from([p for p in KEYS.values() if p.key_id != target.key_id]))
        return target._replace(key_id=other.key_id)
    return None  # self_admin, built by `attacks`


@given(honest_events, st.data())
def test_no_forgery_is_ever_verified_and_every_honest_event_is(log, data):
    for item in log:
        v = judge(item)
        assert (v.verified, v.signer) == (True, item.event.from_agent)
    for _ in range(5):
        attack, slipped = data.draw(attacks(log))
        keyring = KEYRING.extended(slipped) if slipped else KEYRING
        for grant in slipped:
            assert keyring.refused[-1].code == "not_admin"
            assert judge(grant, keyring).verified is not True
        v = judge(attack, keyring)
        # An alteration that happens to change nothing (same value) is not a forgery.
        if attack == next(
            (i for i in log if i.event == attack.event and i.sig == attack.sig), None
        ):
            continue
        assert v.verified is not True, (attack, v)


def test_an_honest_event_stays_verified_after_a_later_rotation():
    before = honest(ROTATED_AT - 1, "bob", "signed before the rotation")
    assert judge(before).verified is True
    assert judge(before, KEYRING.extended([add(ADMIN, 900, "carol", KeyPair.generate())])).verified
