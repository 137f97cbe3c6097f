"""Three replicas, one hostile (issue 12 "Must show"): the origin `a` holds the admin key and
alice's, `b` is honest, `h` runs mallory's key and turns hostile — it forges events of other
agents (signed with its own key, or garbage signatures), alters signed fields of honest
events it relays, replays mallory's key after its revocation, strips signatures and serves
unsigned events under names that have keys. Random honest writes, a revocation, a rotation
and pulls in every direction interleave with the forgeries.

After every step: every signed event an honest replica stores verifies under the honest
keyring (a replay that reached a replica before the revocation did is the one exception the
RFC allows, and `late_revoked` lists it), no forged content is stored, and every refusal of a
forgery carries a code its kind allows. A forged unsigned event under a keyed name that
reached a replica before the key did reads `null` there and `late_unsigned` lists it. After
a heal (honest rounds only) the honest origins' events are the same on both honest replicas.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mempalace_logstream import agents, errors, sync
from mempalace_logstream.replication import verify
from tests.idsynckit import FORGERY_CODES, Team, forge, held, note, replica, stored_signed_verify

KINDS = sorted(FORGERY_CODES)


class HostileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="idsync-prop-"))
        self.a, self.b, self.h = (replica(self.root, n) for n in ("a", "b", "h"))
        self.team = Team.build(self.a, self.h, self.b)
        self.revoked = False
        self.n = 0

    def teardown(self) -> None:
        for s in (self.a, self.b, self.h):
            s.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _body(self) -> str:
        self.n += 1
        return f"n{self.n}"

    def _latest(self) -> str:
        return str(max(e.hlc for e in held(self.a)))

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

    @precondition(lambda self: not self.revoked)
    @rule()
    def revoke_mallory(self) -> None:
        agents.revoke(self.a, "mallory", reason="turned hostile")
        self.revoked = True

    @rule()
    def rotate_alice(self) -> None:
        agents.rotate(self.a, "alice")

    # ------------------------------------------------------------------ hostility
    @rule(kind=st.sampled_from(KINDS))
    def forge(self, kind: str) -> None:
        if kind == "replay" and not self.revoked:
            return
        forge(self.team, self.h, kind, after_hlc=self._latest())

    # ------------------------------------------------------------------ sync
    @rule(pair=st.sampled_from(["ab", "ba", "ah", "bh", "ha", "hb"]))
    def pull(self, pair: str) -> None:
        stores = {"a": self.a, "b": self.b, "h": self.h}
        dst, src = stores[pair[0]], stores[pair[1]]
        result = sync.sync_with_peer(dst, sync.LocalPeer(src))
        if dst is self.h:
            return
        for r in result["rejected"]:
            kind = self.team.forged.get(r["ident"])
            if kind is not None:
                assert r["reason"] in FORGERY_CODES[kind], (kind, r)
            elif r["origin_replica"] == self.h.replica_id:
                # h's own writes as mallory: after the revocation, or unsigned while h did
                # not know mallory's key yet (h's seal signs with keys its keyring holds).
                assert r["reason"] in ("unknown_key", "revoked_key", "unsigned_required"), r
            else:  # an honest origin's event is at most held for its key
                assert r["reason"] == "unknown_key", r

    @rule()
    def heal(self) -> None:
        """Honest rounds only: the honest origins' events converge."""
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
                if kind in ("alter", "strip"):  # only the genuine copy may be held
                    g = genuine.get(e.id) or e
                    assert (e.content_key(), e.sig) == (g.content_key(), g.sig), kind
                elif kind == "unsigned":  # stored before the keys were known: reads null
                    assert e.sig is None and e.verified is None
                    assert e.id in unsigned_late, e.id
                else:
                    assert kind == "replay" and e.id in late, (kind, e.id)


HostileMachine.TestCase.settings = settings(
    settings(),
    max_examples=min(settings().max_examples, 10),
    stateful_step_count=12,
)
TestHostileReplica = HostileMachine.TestCase
