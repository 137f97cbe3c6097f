"""The keyring: key events folded in HLC order into "which keys are valid for whom, when".

Pure: given the `identity.key_add` / `identity.key_revoke` events (RFC 0008 "Key events") and
the locally pinned admin key ids, answer which key ids are valid for an agent at an HLC and
whether an admin key is trusted. The verdict on an event lives in `verdict.py`. No SQL.
"""

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from mempalace_logstream import hlc as hlc_mod
from mempalace_logstream import lazy
from mempalace_logstream.models import Event
from mempalace_logstream.payload import parse_tombstone

if TYPE_CHECKING:
    from mempalace_logstream.identity import keys, signing
    from mempalace_logstream.identity.keys import PublicKey
else:  # on first use: a log whose events are not signed never loads them (issue 25)
    keys = lazy.module("mempalace_logstream.identity.keys")
    signing = lazy.module("mempalace_logstream.identity.signing")
    # `KeyRecord.public_key`'s annotation at run time: naming `keys.PublicKey` would load
    # keys (a string would be compiled by typing: the first `compile()` of a process costs
    # ~10 M instructions, issue 25). The type checker sees the class.
    PublicKey = object

KEY_ADD = "identity.key_add"
KEY_REVOKE = "identity.key_revoke"
KEY_EVENT_TYPES = (KEY_ADD, KEY_REVOKE)
Role = Literal["agent", "admin"]
ROLES: tuple[Role, ...] = ("agent", "admin")


def tombstone_sha256(body: str) -> str | None:
    """The SHA-256 of the body a tombstone replaced (None when `body` is not a tombstone)."""
    doc = parse_tombstone(body)
    return None if doc is None else doc["body_sha256"]


_NO_ARTIFACTS: Mapping[str, str] = MappingProxyType({})


class SignedEvent(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """An event with what checking it needs: its signature, key id, the SHA-256 of its body
    (given when the body was redacted; else the body is hashed) and of its artifacts."""

    event: Event
    sig: str | None = None
    key_id: str | None = None
    body_sha256: str | None = None
    artifact_sha256s: Mapping[str, str] = _NO_ARTIFACTS

    def payload(self) -> bytes:
        """The signed message (RFC 0008). Raises SigningError if the event has none."""
        fields = signing.event_fields(self.event)
        # A redacted body stands for the original through the SHA-256 its tombstone keeps.
        stored = self.body_sha256 or tombstone_sha256(self.event.body)
        body = stored or signing.body_sha256(self.event.body)
        return signing.signing_payload(fields, body, self.artifact_sha256s)

    def signature_bytes(self) -> bytes:
        """The decoded signature. Raises KeyFormatError if absent or not 64 bytes."""
        if self.sig is None:
            raise keys.KeyFormatError("no signature")
        return keys.b64url_decode(self.sig, size=keys.SIGNATURE_BYTES)

    def payload_verifies(self, public_key: "keys.PublicKey") -> bool:
        try:
            return public_key.verify(self.signature_bytes(), self.payload())
        except (keys.KeyFormatError, signing.SigningError):
            return False


# The keyring's own records are NamedTuples, not dataclasses: nothing is generated at import
# (issue 25).
class KeyRecord(NamedTuple):
    """A key the keyring accepted: whose, which role, since and until which HLC."""

    key_id: str
    agent: str
    role: Role
    public_key: PublicKey
    added_hlc: str
    added_by: str  # the event id of its key_add
    revoked_hlc: str | None = None
    revoked_by: str | None = None  # the event id of the revocation (or rotation)
    revoke_reason: str | None = None


class Refusal(NamedTuple):
    """A key event the keyring ignored, and why (doctor lists these)."""

    event_id: str
    code: str
    message: str


def order_key(stamp: str) -> hlc_mod.Stamp:
    """The HLC stamp as an ordered value; ValueError if it is malformed."""
    parsed = hlc_mod.parse(stamp)
    if parsed is None:
        raise ValueError(f"malformed HLC {stamp!r}")
    return parsed


def is_before(a: str, b: str) -> bool:
    """Whether HLC `a` is strictly earlier than HLC `b`."""
    return order_key(a) < order_key(b)


class Keyring:
    """Keys by id, folded from key events in HLC order. Build with `Keyring.build`."""

    def __init__(self, pinned_admins: Iterable[str] = (), *, check_signatures: bool = True) -> None:
        self.pinned_admins = frozenset(pinned_admins)
        # False only for key events this log already stored (each was verified on its way
        # in): the hook's lean reader folds them without loading the Ed25519 library.
        self.check_signatures = check_signatures
        self._records: dict[str, KeyRecord] = {}
        self._first_add: dict[str, str] = {}  # agent -> HLC of its first accepted key
        self._refused: list[Refusal] = []
        self._events: tuple[SignedEvent, ...] = ()

    @classmethod
    def build(
        cls,
        key_events: Iterable[SignedEvent],
        pinned_admins: Iterable[str] = (),
        *,
        check_signatures: bool = True,
    ) -> "Keyring":
        """Fold the key events (any order given; folded in HLC order, then by event id).

        A repeated event counts once; events of other types, with a malformed HLC, or reusing
        an event id with other content are refused (listed in `refused`), never raised.
        `check_signatures=False` trusts each key event's signature (stored ones only).
        """
        ring = cls(pinned_admins, check_signatures=check_signatures)
        good: list[tuple[hlc_mod.Stamp, str, SignedEvent]] = []
        seen: dict[str, SignedEvent] = {}
        for item in key_events:
            parsed, first = hlc_mod.parse(item.event.hlc), seen.get(item.event.id)
            if first is not None:  # the same event again is a no-op (sync is idempotent)
                if first != item:
                    ring._refuse(item, "conflict", f"{item.event.id} differs from its first copy")
                continue
            seen[item.event.id] = item
            if parsed is None:
                ring._refuse(item, "malformed", f"malformed HLC {item.event.hlc!r}")
            else:
                good.append((parsed, item.event.id, item))
        good.sort(key=lambda entry: (entry[0], entry[1]))
        ring._events = tuple(entry[2] for entry in good)
        for item in ring._events:
            ring._apply(item)
        return ring

    def extended(self, more: Iterable[SignedEvent]) -> "Keyring":
        """A keyring over these key events plus `more` (rebuilt: HLC order may interleave)."""
        return Keyring.build(
            (*self._events, *more), self.pinned_admins, check_signatures=self.check_signatures
        )

    # ------------------------------------------------------------------ queries
    def key(self, key_id: str) -> KeyRecord | None:
        return self._records.get(key_id)

    def records(self) -> tuple[KeyRecord, ...]:
        return tuple(self._records.values())

    @property
    def refused(self) -> tuple[Refusal, ...]:
        return tuple(self._refused)

    def is_valid(self, key_id: str, at_hlc: str) -> bool:
        """Whether the key may sign an event stamped `at_hlc` (valid before its revocation)."""
        record = self._records.get(key_id)
        if record is None:
            return False
        return record.revoked_hlc is None or is_before(at_hlc, record.revoked_hlc)

    def valid_keys(self, agent: str, at_hlc: str) -> frozenset[str]:
        """The key ids that may sign `agent`'s events stamped `at_hlc`."""
        return frozenset(
            r.key_id
            for r in self._records.values()
            if r.agent == agent and r.role == "agent" and self.is_valid(r.key_id, at_hlc)
        )

    def revoked_before(self, event: Event) -> bool:
        """Whether `event`'s key was revoked at an HLC <= the event's (the key's own revocation
        event excepted): a signed event stored before this replica learned of a revocation
        made during a partition (RFC 0008), which reads `verified: false` from then on."""
        record = self._records.get(event.key_id) if event.key_id else None
        if record is None or record.revoked_hlc is None:
            return False
        if event.type == KEY_REVOKE and record.revoked_by == event.id:
            return False
        return not self.is_valid(record.key_id, event.hlc)

    def revoked_after(self, event: Event) -> KeyRecord | None:
        """The record of `event`'s key when that key is revoked at an HLC after the event's:
        the event verifies (signed while the key was valid), but a holder of a revoked key
        can stamp an event just before its revocation (backdating, RFC 0008 "Threat model")."""
        record = self._records.get(event.key_id) if event.key_id else None
        if record is None or record.revoked_hlc is None:
            return None
        return record if is_before(event.hlc, record.revoked_hlc) else None

    def key_event(self, event_id: str) -> Event | None:
        """The folded key event with this id (its `seq` says when it arrived in this log)."""
        for item in self._events:
            if item.event.id == event_id:
                return item.event
        return None

    def signs(self, agent: str) -> bool:
        """Whether `agent` has had a key: it signs from its first key on, and an unsigned
        event under its name, of any HLC, cannot be told from a forgery."""
        return agent in self._first_add

    def first_key_hlc(self, agent: str) -> str | None:
        """The HLC of `agent`'s first accepted key (None when it never had one)."""
        return self._first_add.get(agent)

    def read_mark(self, event: Event) -> str | None:
        """Why a stored event reads `verified: false` now (RFC 0008 "Verdicts"), or None when
        it reads as stored (`true` signed, `null` unsigned): `revoked_key` for a signed event
        whose key was revoked at an HLC <= its own, `unsigned_name_signs` for an unsigned event
        under a name that has a key."""
        if event.sig is not None:
            return "revoked_key" if self.revoked_before(event) else None
        return "unsigned_name_signs" if event.from_agent in self._first_add else None

    def is_admin_trusted(self, key_id: str, at_hlc: str) -> bool:
        """Whether `key_id` is an admin key (pinned root or added by one) valid at `at_hlc`."""
        record = self._records.get(key_id)
        return record is not None and record.role == "admin" and self.is_valid(key_id, at_hlc)

    def must_sign(self, agent: str, at_hlc: str) -> bool:
        """Whether `agent` signs every event from `at_hlc` on (it had a key added by then)."""
        first = self._first_add.get(agent)
        return first is not None and not is_before(at_hlc, first)

    # ------------------------------------------------------------------ folding
    def _refuse(self, item: SignedEvent, code: str, message: str) -> None:
        self._refused.append(Refusal(item.event.id, code, message))

    def _apply(self, item: SignedEvent) -> None:
        event = item.event
        try:
            facts = _facts(event)
        except ValueError as exc:
            self._refuse(item, "malformed", str(exc))
            return
        problem = self._authorize(item, facts)
        if problem is not None:
            self._refuse(item, *problem)
        elif event.type == KEY_ADD:
            self._add(item, facts)
        else:
            self._revoke(item, facts)

    def _signer(self, item: SignedEvent, facts: Mapping[str, Any]) -> "keys.PublicKey | None":
        """The signing key: an accepted key, or a pinned admin key signing its own add."""
        if item.key_id is None:
            return None
        self_signed_root = (
            item.event.type == KEY_ADD
            and facts["role"] == "admin"
            and item.key_id == facts["key_id"]
            and item.key_id in self.pinned_admins
        )
        if self_signed_root:
            public: keys.PublicKey = facts["public_key"]
            return public
        record = self._records.get(item.key_id)
        return record.public_key if record else None

    def _authorize(self, item: SignedEvent, facts: Mapping[str, Any]) -> tuple[str, str] | None:
        event = item.event
        if item.sig is None or item.key_id is None:
            return "unsigned", f"{event.type} {event.id} is not signed"
        signer = self._signer(item, facts)
        if signer is None:
            return "unknown_key", f"{event.id} is signed by unknown key {item.key_id}"
        if self.check_signatures and not item.payload_verifies(signer):
            return "bad_signature", f"{event.id}: the signature does not verify"
        if item.key_id in self.pinned_admins and item.key_id == facts["key_id"]:
            return None  # a pinned root adding (or revoking) itself
        if self.is_admin_trusted(item.key_id, event.hlc):
            return None
        if (
            event.type == KEY_REVOKE
            and item.key_id == facts["key_id"]
            and event.from_agent == facts["agent"]
        ):
            return None  # a holder may always give its own key up, writing as itself
        return "not_admin", f"{event.id} is signed by {item.key_id}, not a trusted admin key"

    def _add(self, item: SignedEvent, facts: Mapping[str, Any]) -> None:
        event, new_id, agent = item.event, facts["key_id"], facts["agent"]
        if new_id in self._records:
            self._refuse(item, "duplicate_key", f"key {new_id} was already added")
            return
        replaces = facts["replaces"]
        if replaces is not None:
            old = self._records.get(replaces)
            if old is None or old.agent != agent:
                self._refuse(item, "bad_replaces", f"{replaces} is not a key of {agent}")
                return
            if old.revoked_hlc is None:
                self._records[replaces] = old._replace(
                    revoked_hlc=event.hlc, revoked_by=event.id, revoke_reason="rotated"
                )
        self._records[new_id] = KeyRecord(
            key_id=new_id,
            agent=agent,
            role=facts["role"],
            public_key=facts["public_key"],
            added_hlc=event.hlc,
            added_by=event.id,
        )
        self._first_add.setdefault(agent, event.hlc)

    def _revoke(self, item: SignedEvent, facts: Mapping[str, Any]) -> None:
        event, target = item.event, facts["key_id"]
        old = self._records.get(target)
        if old is None or old.agent != facts["agent"]:
            self._refuse(item, "bad_revoke", f"{target} is not a key of {facts['agent']}")
            return
        if old.revoked_hlc is None:  # the earliest revocation (in HLC order) stands
            self._records[target] = old._replace(
                revoked_hlc=event.hlc, revoked_by=event.id, revoke_reason=facts["reason"]
            )


def _facts(event: Event) -> dict[str, Any]:
    """The key event's metadata, checked (ValueError names the problem)."""
    if event.type not in KEY_EVENT_TYPES:
        raise ValueError(f"{event.id} is a {event.type}, not a key event")
    meta = event.metadata
    agent, key_id = meta.get("agent"), meta.get("key_id")
    if not isinstance(agent, str) or not agent:
        raise ValueError(f"{event.id}: metadata.agent must be a name")
    if not keys.is_key_id(key_id):
        raise ValueError(f"{event.id}: metadata.key_id must be ed25519:<32 hex>")
    facts: dict[str, Any] = {"agent": agent, "key_id": key_id}
    if event.type == KEY_REVOKE:
        reason = meta.get("reason")
        facts["reason"] = reason if isinstance(reason, str) else None
        return facts
    try:
        public = keys.PublicKey.from_text(meta.get("public_key"))  # type: ignore[arg-type]
    except keys.KeyFormatError as exc:
        raise ValueError(f"{event.id}: metadata.public_key: {exc}") from exc
    if public.key_id != key_id:
        raise ValueError(f"{event.id}: key_id {key_id} is not derived from the public key")
    role, replaces = meta.get("role", "agent"), meta.get("replaces")
    if role not in ROLES:
        raise ValueError(f"{event.id}: metadata.role must be agent or admin")
    if replaces is not None and not keys.is_key_id(replaces):
        raise ValueError(f"{event.id}: metadata.replaces must be a key id or null")
    return {**facts, "public_key": public, "role": role, "replaces": replaces}
