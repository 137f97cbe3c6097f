"""Signatures verified on every sync apply (RFC 0008 "Verdicts"), and the one way a stored
event reads false afterwards (a late revocation).

`BatchJudge` judges the events of one applied page: the keyring is the store's, extended with
the key events of the same page (folded in HLC order), built once per page. A false verdict is
a rejection (never stored); `unknown_key` is held (retryable: the key events that enable the
event may come from another origin in a later round). A key event the keyring refuses is
refused like a forged event. The rules are the pure core's (`identity/`); this feeds it rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.base import CoreExecutor
from mempalace_logstream.backends.base import Executor as _Ex
from mempalace_logstream.backends.base import binds as _binds
from mempalace_logstream.backends.base import in_lists as _in_lists
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_EVENT_TYPES, Keyring, Refusal
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event
from mempalace_logstream.replication.reports import HELD_REASONS
from mempalace_logstream.schema import events
from mempalace_logstream.store import LogStore, events_from_rows
from mempalace_logstream.store.identity import signed

# Keyring refusals of a key event that more key events (a later round) may cure: its signer
# or the key it replaces or revokes is not known here yet.
_RETRYABLE_KEY_REFUSALS = HELD_REASONS


@dataclass(frozen=True)
class Refused:
    """Why an event of the page must not be stored: `code` is the verdict's (or the keyring's
    for a key event), `retryable` when a later round may bring what it lacks."""

    code: str
    message: str
    retryable: bool

    def report(self, event: Event, peer: str) -> dict[str, Any]:
        """The rejection row. A held event keeps its origin position (it pins the pull
        position, `replication.pull_after`); a forged one does not, so the honest event at that
        position is still a hole to fill from an honest peer (never accounted as refused)."""
        out: dict[str, Any] = {
            "kind": "event",
            "ident": event.id,
            "origin_replica": event.origin_replica,
            "origin_seq": event.origin_seq if self.retryable else None,
            "reason": self.code,
            "field": "sig",
            "message": f"{self.message} (origin {event.origin_replica} #{event.origin_seq})",
            "retryable": self.retryable,
            "peer": peer,
        }
        if self.code == "unknown_key" and event.key_id is not None:
            out["key_id"] = event.key_id
            if _offers_root(event):  # what `logstream agent trust` would pin (a new replica)
                out["root_key_id"] = event.key_id
        return out


def _offers_root(event: Event) -> bool:
    """Whether `event` is an admin key's add signed by that key itself: a palace's trust
    root, valid here only once its id is pinned (RFC 0008 "Admin key")."""
    meta = event.metadata
    return (
        event.type == KEY_ADD
        and meta.get("role") == "admin"
        and meta.get("key_id") == event.key_id
        and meta.get("replaces") is None
    )


class BatchJudge:
    """The verdicts on one page's events, with the keyring built once for the page."""

    def __init__(self, ring: Keyring) -> None:
        self.ring = ring
        self._refused_keys: dict[str, Refusal] = {}
        for refusal in ring.refused:
            self._refused_keys.setdefault(refusal.event_id, refusal)

    @classmethod
    def open(cls, store: LogStore, ex: _Ex, page: Sequence[Event]) -> BatchJudge | None:
        """The judge of `page`, or None when there is nothing to judge: no event of the page
        is signed or a key event, and no agent of this log signs (an unsigned event then
        verifies as `null` whatever it says, so verdicts are skipped)."""
        ring = store.identity.keyring(ex, store.event_select)
        key_events = [signed(e) for e in page if e.type in KEY_EVENT_TYPES]
        if not key_events and not ring.records() and not any(_is_signed(e) for e in page):
            return None
        return cls(ring.extended(key_events) if key_events else ring)

    def judge(
        self, event: Event, shas: Mapping[str, str], body_sha256: str | None = None
    ) -> Refused | None:
        """None when `event` may be stored (verified or unsigned), else why not. `shas` maps
        artifact ids to their content SHA-256; `body_sha256` is the signed body's SHA-256 when
        the body travels redacted (else the body is hashed)."""
        arts = {a: shas[a] for a in event.artifact_ids if a in shas}
        found = verdict(
            event,
            event.sig,
            event.key_id,
            self.ring,
            body_sha256=body_sha256,
            artifact_sha256s=arts,
        )
        if found.verified is False:
            return Refused(found.code, found.reason, found.retryable)
        if event.type in KEY_EVENT_TYPES:
            refusal = self._refused_keys.get(event.id)
            if refusal is not None:
                retry = refusal.code in _RETRYABLE_KEY_REFUSALS
                msg = f"{event.type} {event.id} refused by the keyring: {refusal.message}"
                return Refused(refusal.code, msg, retry)
        return None


def _is_signed(event: Event) -> bool:
    return event.sig is not None or event.key_id is not None


@dataclass(frozen=True)
class LateRevoked:
    """A stored signed event whose key was revoked at an HLC <= its own (RFC 0008: stored
    before this replica learned of the revocation; it reads as unverified from then on)."""

    event_id: str
    seq: int
    hlc: str
    from_agent: str
    key_id: str
    key_agent: str
    revoked_hlc: str
    revoked_by: str
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def late_revoked(store: LogStore) -> list[LateRevoked]:
    """The stored signed events whose key was revoked at an HLC <= theirs, in seq order (the
    key's own revocation event excepted). Reads only the events of revoked keys."""
    with store.connect() as conn:
        ex = CoreExecutor(conn)
        ring = store.identity.keyring(ex, store.event_select)
        revoked = {r.key_id: r for r in ring.records() if r.revoked_hlc is not None}
        found: list[Event] = []
        for n, params in _in_lists(sorted(revoked)):

            def build(n: int = n) -> sa.Executable:
                return store.event_select(events.c.key_id.in_(_binds(n))).order_by(events.c.seq)

            found += events_from_rows(ex.rows(("late-revoked", n), build, params))
    out: list[LateRevoked] = []
    for e in sorted(found, key=lambda e: e.seq):
        record = revoked[str(e.key_id)]
        if not ring.revoked_before(e):
            continue
        out.append(
            LateRevoked(
                event_id=e.id,
                seq=e.seq,
                hlc=e.hlc,
                from_agent=e.from_agent,
                key_id=record.key_id,
                key_agent=record.agent,
                revoked_hlc=str(record.revoked_hlc),
                revoked_by=str(record.revoked_by),
                reason=record.revoke_reason,
            )
        )
    return out


@dataclass(frozen=True)
class LateUnsigned:
    """A stored unsigned event of an agent that signs at its HLC: stored before this replica
    knew the agent's key (a stripped signature or a forged name it could not tell yet). It
    reads `verified: null`, never true; doctor lists it."""

    event_id: str
    seq: int
    hlc: str
    from_agent: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def late_unsigned(store: LogStore) -> list[LateUnsigned]:
    """The stored unsigned events whose `from_agent` must sign at their HLC, in seq order.
    Reads only the unsigned events of agents that have a key."""
    with store.connect() as conn:
        ex = CoreExecutor(conn)
        ring = store.identity.keyring(ex, store.event_select)
        names = sorted({r.agent for r in ring.records()})
        found: list[Event] = []
        for n, params in _in_lists(names):

            def build(n: int = n) -> sa.Executable:
                c = events.c
                return store.event_select(c.from_agent.in_(_binds(n)), c.sig.is_(None))

            found += events_from_rows(ex.rows(("late-unsigned", n), build, params))
    return [
        LateUnsigned(event_id=e.id, seq=e.seq, hlc=e.hlc, from_agent=e.from_agent)
        for e in sorted(found, key=lambda e: e.seq)
        if ring.must_sign(e.from_agent, e.hlc)
    ]
