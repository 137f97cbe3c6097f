"""Signatures verified on every sync apply (RFC 0008 "Verdicts"), and what doctor lists
afterwards: late revocations, backdating suspects, unsigned events under names that sign.

`BatchJudge` judges the events of one applied page: the keyring is the store's, extended with
the key events of the same page (folded in HLC order), built once per page. A false verdict is
a rejection (never stored); `unknown_key` is held (retryable: the key events that enable the
event may come from another origin in a later round). A key event the keyring refuses is
refused like a forged event. An event signed by a key whose revocation this log already holds,
stamped less than the store's backdating window before it, is held too (`backdated`: it
verifies, but a holder of the revoked key could have stamped it so). The rules are the pure
core's (`identity/`); this feeds it rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mempalace_logstream import hlc
from mempalace_logstream.backends.base import Executor as _Ex
from mempalace_logstream.backends.queries import sync
from mempalace_logstream.identity.keyring import (
    KEY_ADD,
    KEY_EVENT_TYPES,
    KeyRecord,
    Keyring,
    Refusal,
)
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event
from mempalace_logstream.replication.reports import HELD_REASONS, HELD_SUSPECT_REASONS
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
    """The verdicts on one page's events, with the keyring built once for the page.

    `stored` is the keyring of what this log held before the page (the revocations that
    arrived here first); `window_ms` the backdating window (0: nothing is held for it)."""

    def __init__(self, ring: Keyring, stored: Keyring | None = None, window_ms: int = 0) -> None:
        self.ring = ring
        self.stored = ring if stored is None else stored
        self.window_ms = window_ms
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
        window = store.backdate_window_ms
        # A key event held as a backdating suspect is not folded either: the keys it would
        # add stay unknown here, and their events are held with it.
        key_events = [k for k in key_events if backdated(ring, k.event, window) is None]
        return cls(ring.extended(key_events) if key_events else ring, ring, window)

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
        if found.verified is True:
            suspect = backdated(self.stored, event, self.window_ms)
            if suspect is not None:
                return suspect
        if event.type in KEY_EVENT_TYPES:
            refusal = self._refused_keys.get(event.id)
            if refusal is not None:
                retry = refusal.code in _RETRYABLE_KEY_REFUSALS
                msg = f"{event.type} {event.id} refused by the keyring: {refusal.message}"
                return Refused(refusal.code, msg, retry)
        return None


def _is_signed(event: Event) -> bool:
    return event.sig is not None or event.key_id is not None


def _wall_ms(stamp: str) -> int:
    parsed = hlc.parse(stamp)
    return parsed.wall_ms if parsed is not None else 0


def backdated(ring: Keyring, event: Event, window_ms: int) -> Refused | None:
    """Held (`backdated`, retried every round) when `event` is signed by a key that `ring`
    (what this log held before the event arrived) knows as revoked at an HLC after the
    event's, less than `window_ms` after it: first received after the revocation, stamped just
    before it, which a holder of the revoked key can do (RFC 0008 "Threat model")."""
    if window_ms <= 0 or event.key_id is None or hlc.parse(event.hlc) is None:
        return None
    record = _revoked_after(ring, event)
    if record is None or record.revoked_hlc is None:
        return None
    gap = _wall_ms(record.revoked_hlc) - _wall_ms(event.hlc)
    if gap >= window_ms:
        return None
    return Refused(
        "backdated",
        f"{event.id} is signed by {record.key_id} of {record.agent} at HLC {event.hlc}, "
        f"{gap} ms before that key was revoked (HLC {record.revoked_hlc}), and arrived here "
        f"after the revocation: held as a backdating suspect (window {window_ms} ms). If it is "
        "honest (the agent was offline during the revocation), accept it with one sync round "
        f"run with {WINDOW_ENV}=0; `logstream doctor` lists what is held",
        True,
    )


def _revoked_after(ring: Keyring, event: Event) -> KeyRecord | None:
    """The record of `event`'s key when an explicit revocation (`identity.key_revoke`) came
    after the event's HLC. A rotation (`key_add` with `replaces`) is routine and says nothing of
    a stolen key: an agent's events written offline before it and synced afterwards are
    honest as a rule, so they are neither held nor suspects (revoke, then `agent add`, for a
    key that was compromised)."""
    record = ring.revoked_after(event)
    if record is None or record.revoke_reason == "rotated":
        return None
    return record


# The setting that sets the backdating window (config.Settings.backdate_window_ms), named in
# the messages that say how to accept a held suspect.
WINDOW_ENV = "MEMPALACE_LOGSTREAM_BACKDATE_WINDOW_MS"


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


def _revoked_keys_events(store: LogStore) -> tuple[Keyring, dict[str, KeyRecord], list[Event]]:
    """The keyring, its revoked keys by id, and the stored events they signed (seq order)."""
    with store.snapshot() as ex:
        ring = store.identity.keyring(ex, store.event_select)
        revoked = {r.key_id: r for r in ring.records() if r.revoked_hlc is not None}
        found = events_from_rows(sync.events_signed_by(ex, store.event_select, sorted(revoked)))
    return ring, revoked, sorted(found, key=lambda e: e.seq)


def late_revoked(store: LogStore) -> list[LateRevoked]:
    """The stored signed events whose key was revoked at an HLC <= theirs, in seq order (the
    key's own revocation event excepted). Reads only the events of revoked keys."""
    ring, revoked, found = _revoked_keys_events(store)
    out: list[LateRevoked] = []
    for e in found:
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
class BackdatingSuspect:
    """A stored event signed by a key at an HLC before that key's revocation, but stored here
    after the revocation arrived (RFC 0008 "Doctor"): a holder of the revoked key may have
    stamped it so, or its writer was offline during the revocation. `within_window`: closer
    to the revocation than the backdating window (sync apply holds such events now: this one
    was accepted by an operator, or stored before the rule)."""

    event_id: str
    seq: int
    hlc: str
    from_agent: str
    key_id: str
    key_agent: str
    revoked_hlc: str
    revoked_by: str
    gap_ms: int
    within_window: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def backdating_suspects(store: LogStore, window_ms: int | None = None) -> list[BackdatingSuspect]:
    """The stored backdating suspects, in seq order, against `window_ms` (default: the
    store's window). Reads only the events of revoked keys."""
    window = store.backdate_window_ms if window_ms is None else window_ms
    ring, revoked, found = _revoked_keys_events(store)
    out: list[BackdatingSuspect] = []
    for e in found:
        record = revoked[str(e.key_id)]
        revocation = ring.key_event(str(record.revoked_by))
        if _revoked_after(ring, e) is None or revocation is None or e.seq <= revocation.seq:
            continue
        gap = _wall_ms(str(record.revoked_hlc)) - _wall_ms(e.hlc)
        out.append(
            BackdatingSuspect(
                event_id=e.id,
                seq=e.seq,
                hlc=e.hlc,
                from_agent=e.from_agent,
                key_id=record.key_id,
                key_agent=record.agent,
                revoked_hlc=str(record.revoked_hlc),
                revoked_by=revocation.id,
                gap_ms=gap,
                within_window=gap < window,
            )
        )
    return out


def held_backdated(store: LogStore) -> list[str]:
    """The ids of the events held as backdating suspects (sync rejections `backdated`)."""
    with store.connect() as conn:
        return sync.rejection_idents(conn, HELD_SUSPECT_REASONS)


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
    return [
        LateUnsigned(event_id=u.event_id, seq=u.seq, hlc=u.hlc, from_agent=u.from_agent)
        for u in unsigned_signing_names(store)
        if not u.before_first_key
    ]


@dataclass(frozen=True)
class UnsignedUnderKey:
    """A stored unsigned event under a name that has a key: it reads `verified: false`
    (`unsigned_name_signs`). `before_first_key`: stamped before the name's first key (else
    `late_unsigned`); `stored_after_key`: stored here after a key of the name arrived, so it
    is stamped before the key yet came after it (backdated under a name that signs, or
    history that reached this replica late: doctor lists these)."""

    event_id: str
    seq: int
    hlc: str
    from_agent: str
    before_first_key: bool
    stored_after_key: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def unsigned_signing_names(store: LogStore) -> list[UnsignedUnderKey]:
    """The stored unsigned events of names that have a key, in seq order. Reads only the
    unsigned events of those names."""
    with store.snapshot() as ex:
        ring = store.identity.keyring(ex, store.event_select)
        names = sorted({r.agent for r in ring.records()})
        found = events_from_rows(sync.unsigned_events_of(ex, store.event_select, names))
    arrived: dict[str, int] = {}  # name -> seq of its first key event stored here
    for record in ring.records():
        added = ring.key_event(record.added_by)
        if added is not None:
            prior = arrived.get(record.agent, added.seq)
            arrived[record.agent] = min(prior, added.seq)
    return [
        UnsignedUnderKey(
            event_id=e.id,
            seq=e.seq,
            hlc=e.hlc,
            from_agent=e.from_agent,
            before_first_key=not ring.must_sign(e.from_agent, e.hlc),
            stored_after_key=e.seq > arrived.get(e.from_agent, e.seq),
        )
        for e in sorted(found, key=lambda e: e.seq)
    ]
