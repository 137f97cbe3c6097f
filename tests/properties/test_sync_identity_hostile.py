"""Three replicas, one hostile (issue 12 "Must show", extended by issue 18): the origin `a`
holds the admin key and alice's, `b` is honest, `h` runs mallory's key and turns hostile — it
forges events of other agents (signed with its own key, or garbage signatures), alters signed
fields of honest events it relays, replays mallory's key after its revocation, strips
signatures, serves unsigned events under names that have keys, and forges key events (a key
for someone, an admin-role key for mallory, a revocation of alice's key) and redactions of
other writers' artifacts signed with mallory's key. Random honest writes, key events by the
admin (adds, a rotation, revocations) and an agent's revocation of its own key, an agent's
and the hostile replica's attempts to write key events through the API (refused), artifacts
whose bytes the writers share, redactions (of one's own artifact, of another's through a
reference or a copy of its bytes, by the admin) and pulls in every direction interleave.

After every step: every signed event an honest replica stores verifies under the honest
keyring (a replay that reached a replica before the revocation did is the one exception the
RFC allows, and `late_revoked` lists it), no forged content is stored, every refusal of a
forgery carries a code its kind allows, the keyring of each honest replica is the one its
admin-made key events alone give (no forged key event is ever stored or applied), and no
writer's artifact reads emptied unless its writer or the admin redacted it. A forged
unsigned event under a keyed name that reached a replica before the key did reads `null`
there and `late_unsigned` lists it. After a heal (honest rounds only) the honest origins'
events and every artifact read the same on both honest replicas.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mempalace_logstream import LogStore, agents, doctor, errors, sync
from mempalace_logstream.identity import key_events, keys
from mempalace_logstream.identity.actor import Actor, acting_as
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_EVENT_TYPES, KEY_REVOKE, Keyring
from mempalace_logstream.replication import verify
from mempalace_logstream.store import redaction
from tests.idsynckit import (
    FORGERY_CODES,
    Team,
    forge,
    held,
    note,
    replica,
    resign,
    rewrite,
    signed,
    stored_signed_verify,
)

KINDS = sorted(FORGERY_CODES)
CONTENTS = ("key=alpha", "key=beta", "key=gamma")  # few, so that writers share blobs
# The writers of artifacts, each on its replica: alice signs (her key is on a), bob and carol
# never had a key.
WRITERS = {"alice": "a", "bob": "a", "carol": "b"}


@dataclass(frozen=True)
class Art:
    id: str
    creator: str
    content: bytes
    home: str  # the replica it was put on
    event_id: str  # its creator's event that names it


def _as(who: str) -> contextlib.AbstractContextManager[None]:
    """Run as the agent `who` (alice: as her token or `mcp --agent` would), else as the local
    process writing under that name (bob and carol have no key)."""
    return acting_as(Actor(agent=who)) if who == "alice" else contextlib.nullcontext()


def _ring_view(ring: Keyring) -> set[tuple[str, str, str, str | None, str | None]]:
    return {(r.key_id, r.agent, r.role, r.added_by, r.revoked_by) for r in ring.records()}


class HostileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="idsync-prop-"))
        self.a, self.b, self.h = (replica(self.root, n) for n in ("a", "b", "h"))
        self.team = Team.build(self.a, self.h, self.b)
        # The backdating window (issue 18 item 3, tests/test_backdating.py) would hold an
        # honest event that a relay withheld until after its key's rotation: here the honest
        # replicas accept such events (window 0, as an operator does after reading doctor),
        # so that they converge on the honest history.
        self.a.backdate_window_ms = self.b.backdate_window_ms = 0
        self.revoked = False
        self.n = 0
        # Every key event the admin (or an agent revoking its own key) wrote: the only ones
        # any honest keyring may fold.
        self.legit_keys = {e.id for e in held(self.a) if e.type in KEY_EVENT_TYPES}
        self.erins: dict[str, str | None] = {}  # agent -> its key id (None once revoked)
        self.arts: list[Art] = []
        self.redacted: set[str] = set()  # artifacts redacted by their writer or the admin
        self.legit_redactions: dict[str, str] = {}  # redaction event id -> artifact id
        self.forged_redactions: set[str] = set()

    def teardown(self) -> None:
        for s in (self.a, self.b, self.h):
            s.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _body(self) -> str:
        self.n += 1
        return f"n{self.n}"

    def _latest(self) -> str:
        return str(max(e.hlc for e in held(self.a)))

    def _store(self, name: str) -> LogStore:
        return {"a": self.a, "b": self.b, "h": self.h}[name]

    # ------------------------------------------------------------------ honest writes
    @rule(who=st.sampled_from(["alice", "bob"]))
    def write_at_origin(self, who: str) -> None:
        note(self.a, who, self._body())  # alice signs; bob never had a key

    @rule()
    def write_at_b(self) -> None:
        note(self.b, "carol", self._body())

    @rule()
    def mallory_writes(self) -> None:
        try:
            note(self.h, "mallory", self._body())
        except errors.ForbiddenError:
            pass  # h learned of the revocation: its own seal refuses

    # ------------------------------------------------------------------ key events
    @precondition(lambda self: not self.revoked)
    @rule()
    def revoke_mallory(self) -> None:
        self.legit_keys.add(agents.revoke(self.a, "mallory", reason="turned hostile")["event_id"])
        self.revoked = True

    @rule()
    def rotate_alice(self) -> None:
        self.legit_keys.add(agents.rotate(self.a, "alice").event_id)

    @precondition(lambda self: len(self.erins) < 3)
    @rule()
    def admin_adds_an_agent(self) -> None:
        name = f"erin{len(self.erins)}"
        minted = agents.add(self.a, name)
        self.legit_keys.add(minted.event_id)
        self.erins[name] = minted.key_id

    @precondition(lambda self: any(self.erins.values()))
    @rule(data=st.data())
    def admin_revokes_an_agent(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, k in self.erins.items() if k)))
        self.legit_keys.add(agents.revoke(self.a, name, reason="done")["event_id"])
        self.erins[name] = None

    @precondition(lambda self: any(self.erins.values()))
    @rule(data=st.data())
    def an_agent_revokes_its_own_key(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, k in self.erins.items() if k)))
        key_id = str(self.erins[name])
        meta = key_events.key_revoke_metadata(name, key_id, "leaving")
        with acting_as(Actor(agent=name)):
            event = self.a.event_append(
                type=KEY_REVOKE, stream="identity", room="keys", from_agent=name, metadata=meta
            )
        assert event.key_id == key_id and event.verified is True  # its own key, not the admin's
        self.legit_keys.add(event.id)
        self.erins[name] = None

    @rule(
        where=st.sampled_from(["a", "h"]),
        what=st.sampled_from(["revoke_other", "admin_key", "move_other", "new_agent"]),
    )
    def an_agent_tries_a_key_event(self, where: str, what: str) -> None:
        """alice on the origin (as her token would), mallory on the hostile replica: refused
        by the store, nothing written."""
        store, who = (self.a, "alice") if where == "a" else (self.h, "mallory")
        other = "mallory" if who == "alice" else "alice"
        ring = agents.keyring(store)
        theirs = [r.key_id for r in ring.records() if r.agent == other] or [self.team.admin_id]
        fresh = keys.KeyPair.generate().public
        meta, kind = {
            "revoke_other": (key_events.key_revoke_metadata(other, theirs[-1], "x"), KEY_REVOKE),
            "admin_key": (key_events.key_add_metadata(who, fresh, role="admin"), KEY_ADD),
            "move_other": (key_events.key_add_metadata(other, fresh, replaces=theirs[-1]), KEY_ADD),
            "new_agent": (key_events.key_add_metadata("zoe", fresh), KEY_ADD),
        }[what]
        before = store.stats()["events"]
        with acting_as(Actor(agent=who)):
            try:
                store.event_append(
                    type=kind, stream="identity", room="keys", from_agent=who, metadata=meta
                )
            except errors.ForbiddenError as exc:
                assert exc.field == "type", exc
            else:
                raise AssertionError(f"{who} wrote a {kind} ({what})")
        assert store.stats()["events"] == before

    # ------------------------------------------------------------------ artifacts, redactions
    @rule(who=st.sampled_from(sorted(WRITERS)), content=st.sampled_from(CONTENTS))
    def put_artifact(self, who: str, content: str) -> None:
        store = self._store(WRITERS[who])
        with _as(who):
            art = store.artifact_put(kind="note", content=content, created_by=who)
            event = store.event_append(
                type="note", stream="s", room="r", from_agent=who, artifact_ids=[art.id]
            )
        self.arts.append(Art(art.id, who, content.encode(), WRITERS[who], event.id))

    @precondition(lambda self: self.arts)
    @rule(i=st.integers(0, 50))
    def redact_own(self, i: int) -> None:
        art = self.arts[i % len(self.arts)]
        store = self._store(art.home)
        with _as(art.creator):
            out = redaction.event_redact(
                store,
                event_id=art.event_id,
                reason="mine",
                artifact_ids=[art.id],
                keep_body=True,
                from_agent=art.creator,
            )
        self.legit_redactions[out["event"].id] = art.id
        self.redacted.add(art.id)

    @precondition(lambda self: self.arts)
    @rule(i=st.integers(0, 50), copy=st.booleans())
    def redact_someone_elses(self, i: int, copy: bool) -> None:
        """Another writer on the same replica names the artifact in its own event and redacts
        that (refused, nothing written), or puts the same bytes as its own artifact and redacts
        its copy (allowed: only the copy reads redacted)."""
        art = self.arts[i % len(self.arts)]
        store = self._store(art.home)
        if art.home == "a":
            who = "bob" if art.creator == "alice" else "alice"
        else:
            who = "dave" if art.creator == "carol" else "carol"
        with _as(who):
            mine = art.id
            if copy:
                mine = store.artifact_put(kind="note", content=art.content, created_by=who).id
            event = store.event_append(
                type="note", stream="s", room="r", from_agent=who, artifact_ids=[mine]
            )
        if copy:
            self.arts.append(Art(mine, who, art.content, art.home, event.id))
        before = store.stats()["events"]
        with acting_as(Actor(agent=who)):
            try:
                out = redaction.event_redact(
                    store, event_id=event.id, reason="x", artifact_ids=[mine], keep_body=True
                )
            except errors.ForbiddenError as exc:
                assert not copy and exc.field == "artifact_ids", exc
                assert store.stats()["events"] == before
                return
        assert copy, "redacted another writer's artifact"
        self.legit_redactions[out["event"].id] = mine
        self.redacted.add(mine)

    @precondition(lambda self: self.arts)
    @rule(i=st.integers(0, 50))
    def admin_redacts(self, i: int) -> None:
        art = self.arts[i % len(self.arts)]
        try:
            self.a.event_get(art.event_id)
        except errors.NotFoundError:
            return  # not on the origin yet
        out = redaction.event_redact(
            self.a, event_id=art.event_id, reason="admin", artifact_ids=[art.id], keep_body=True
        )
        self.legit_redactions[out["event"].id] = art.id
        self.redacted.add(art.id)

    @precondition(lambda self: self.arts)
    @rule(i=st.integers(0, 50))
    def hostile_redacts_someone_elses(self, i: int) -> None:
        """h pulls another writer's artifact, mallory names it in her own event and signs a
        redaction of it with her key, straight into h's database."""
        art = self.arts[i % len(self.arts)]
        sync.sync_with_peer(self.h, sync.LocalPeer(self._store(art.home)))  # h relays it
        try:
            target = self.h.event_append(
                type="note", stream="s", room="r", from_agent="mallory", artifact_ids=[art.id]
            )
        except (errors.NotFoundError, errors.ForbiddenError, errors.IntegrityError):
            return  # not on h yet, or h knows mallory is revoked
        base = note(self.h, "zed", self._body())
        sha = hashlib.sha256(art.content).hexdigest()
        meta = {"redacts": target.id, "parts": [{"part": art.id, "sha256": sha}], "reason": "x"}
        rewrite(
            self.h,
            base.id,
            type="event.redact",
            from_agent="mallory",
            metadata_json=json.dumps(meta),
        )
        self.forged_redactions.add(resign(self.h, self.h.event_get(base.id), self.team.mallory).id)
        self.pull("ah" if i % 2 else "bh")  # served to an honest replica at once

    # ------------------------------------------------------------------ hostility
    @rule(kind=st.sampled_from(KINDS))
    def forge(self, kind: str) -> None:
        if kind == "replay" and not self.revoked:
            return
        forge(self.team, self.h, kind, after_hlc=self._latest())

    # ------------------------------------------------------------------ sync
    @rule(pair=st.sampled_from(["ab", "ba", "ah", "bh", "ha", "hb"]))
    def pull(self, pair: str) -> None:
        dst, src = self._store(pair[0]), self._store(pair[1])
        result = sync.sync_with_peer(dst, sync.LocalPeer(src))
        if dst is self.h:
            return
        for r in result["rejected"]:
            kind = self.team.forged.get(r["ident"])
            if r["kind"] == "redaction":  # stored (it is mallory's) but takes no effect
                assert r["ident"] in self.forged_redactions, r
                assert r["reason"] == "forbidden", r
            elif kind is not None:
                assert r["reason"] in FORGERY_CODES[kind], (kind, r)
            elif r["origin_replica"] == self.h.replica_id:
                # h's own writes as mallory: after the revocation, or unsigned while h did
                # not know mallory's key yet (h's seal signs with keys its keyring holds).
                assert r["reason"] in ("unknown_key", "revoked_key", "unsigned_required"), r
            else:  # an honest origin's event is at most held for its key
                assert r["reason"] == "unknown_key", r

    @rule()
    def heal(self) -> None:
        """Honest rounds only: the honest origins' events and every artifact converge."""
        for dst, src in ((self.b, self.a), (self.a, self.b), (self.b, self.a)):
            sync.sync_with_peer(dst, sync.LocalPeer(src))
        honest = {self.a.replica_id, self.b.replica_id}

        def view(s: Any) -> dict[str, Any]:
            return {
                e.id: (e.content_key(), e.sig, e.key_id)
                for e in held(s)
                if e.origin_replica in honest
            }

        assert view(self.a) == view(self.b)
        for art in self.arts:
            got_a, got_b = self.a.artifact_get(art.id), self.b.artifact_get(art.id)
            assert (got_a.content, got_a.redacted) == (got_b.content, got_b.redacted), art
        for s in (self.a, self.b):
            assert _ring_view(agents.keyring(s)) == _ring_view(agents.keyring(self.a))
            assert doctor.run(s).checks["blobs"]["emptied_but_named"] == 0

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_forged_is_stored(self) -> None:
        for s in (self.a, self.b):
            assert stored_signed_verify(self.team, s) == []
            late = {x.event_id for x in verify.late_revoked(s)}
            unsigned_late = {x.event_id for x in verify.late_unsigned(s)}
            genuine = {e.id: e for e in held(self.a)}
            for e in held(s):
                kind = self.team.forged.get(e.id)
                if kind is None:
                    continue
                if kind == "strip" and e.sig is None:
                    # Stripped before this replica knew the signer had a key (it never pulled
                    # the key event): indistinguishable from an unsigned write, so held as
                    # one, under the same rules.
                    kind = "unsigned"
                if kind in ("alter", "strip"):  # only the genuine copy may be held
                    g = genuine.get(e.id) or e
                    assert (e.content_key(), e.sig) == (g.content_key(), g.sig), kind
                elif kind == "unsigned":  # stored before the keys were known: never true
                    assert e.sig is None and e.verified is not True
                    if agents.keyring(s).signs(e.from_agent):  # a name that signs now: marked
                        assert e.verified is False, e.id
                        assert e.verified_reason == "unsigned_name_signs", e.id
                    else:
                        assert e.verified is None, e.id
                    if agents.keyring(s).must_sign(e.from_agent, e.hlc):  # the key is known now
                        assert e.id in unsigned_late, e.id
                else:
                    assert kind == "replay" and e.id in late, (kind, e.id)

    @invariant()
    def every_keyring_is_the_admin_made_one(self) -> None:
        """No forged key event is stored on an honest replica, and its keyring is what the
        legitimate key events it holds give."""
        for s in (self.a, self.b):
            key_events_held = [e for e in held(s) if e.type.startswith("identity.")]
            assert {e.id for e in key_events_held} <= self.legit_keys
            legit = Keyring.build([signed(e) for e in key_events_held], s.pinned_admins())
            assert _ring_view(agents.keyring(s)) == _ring_view(legit)

    @invariant()
    def no_artifact_is_emptied_by_another_writer(self) -> None:
        """An artifact reads its bytes unless its writer or the admin redacted it; one such
        redaction held with its target makes it read redacted."""
        for s in (self.a, self.b):
            holds = {e.id for e in held(s)}
            for art in self.arts:
                try:
                    got = s.artifact_get(art.id)
                except errors.NotFoundError:
                    continue
                if art.id not in self.redacted:
                    assert got.redacted is None and got.content == art.content, art
                    continue
                applied = any(
                    rid in holds and aid == art.id and art.event_id in holds
                    for rid, aid in self.legit_redactions.items()
                )
                if applied:
                    assert got.redacted is not None and got.content == b"", art


HostileMachine.TestCase.settings = settings(
    settings(),
    max_examples=min(settings().max_examples, 10),
    stateful_step_count=20,
)
TestHostileReplica = HostileMachine.TestCase


def _replay(steps: list[tuple[str, tuple[Any, ...]]]) -> None:
    machine = HostileMachine()
    try:
        for name, args in steps:
            getattr(machine, name)(*args)
            machine.nothing_forged_is_stored()
            machine.every_keyring_is_the_admin_made_one()
    finally:
        machine.teardown()


def test_a_key_event_altered_by_a_relay_is_pulled_again_from_an_honest_peer() -> None:
    """Found by CI (seed 159833916745482056752446049027501178554): h alters mallory's key add
    (origin a #3) before b pulls from it, so b refuses #3 as a forgery but stores #4; then a
    revokes that key (#5). b's vector said a:4, a's a:5: the pull resumed after 4, #5 was held
    for ever for the key #3 adds, and the genuine #3 was never asked for again. A peer ahead of
    us is now checked for a position below our top that it holds and we lack."""
    _replay(
        [
            ("write_at_origin", ("alice",)),
            ("pull", ("ha",)),
            ("forge", ("unsigned",)),
            ("forge", ("alter",)),
            ("pull", ("bh",)),
            ("revoke_mallory", ()),
            ("heal", ()),
        ]
    )
