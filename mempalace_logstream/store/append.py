"""The one write path of events (issue 21): `Transaction.append(events, origin)`.

Every event enters the log here, whatever brought it: a local write (`Local`, through
`Transaction.insert_event`), a peer's page (`replication.apply` passes its own origin) or an
import (`Imported`, the importer). One call:

1. admits the events: the origin seals them (local: signed and judged with the writer's key)
   or judges them (a peer's: duplicates, conflicts, missing artifacts, forgeries; an import's:
   the prefix rule), and drops the ones it refuses;
2. assigns `seq` under the write lock (an import keeps the source's, which must continue the
   log);
3. inserts the rows and the artifact links (with the idempotency keys the origin carries);
4. runs every projection registered on the store (`store.projections`, store/projections.py)
   on the stored events, for every origin, and returns what they refused to take effect.

A new projection is registered once (a default in store/projections.py, or on one store) and
sees every path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Protocol

from mempalace_logstream import errors
from mempalace_logstream.backends.base import EVENT_COL_NAMES
from mempalace_logstream.backends.queries import appends as sql
from mempalace_logstream.identity.keyring import KEY_EVENT_TYPES
from mempalace_logstream.identity.verdict import UNSIGNED
from mempalace_logstream.models import Event
from mempalace_logstream.store.identity import check_names
from mempalace_logstream.store.projections import Projection, Refusal

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction

# An event's column values in `EVENT_COL_NAMES` order, from its `__dict__` (one C call, no
# dict per row; an Event holds every field there: half the cost of as many getattr).
_columns = itemgetter(*EVENT_COL_NAMES)
_type = attrgetter("type")
_artifact_ids = attrgetter("artifact_ids")
_KEY_TYPES = frozenset(KEY_EVENT_TYPES)


class Origin(Protocol):
    """Where a batch of events comes from, and how it is let in."""

    name: str  # "local", "peer" or "import": what projections are told
    keeps_seq: bool  # the events bring their seq (an import); else fresh ones are assigned

    def admit(self, tx: Transaction, events: Sequence[Event]) -> list[Event]:
        """Seal or judge `events`; the ones to store, in order (refusals are recorded or
        raised by the origin)."""

    def idempotency_key(self, event: Event) -> str | None:
        """The idempotency key stored with `event`, if any."""


class Appended:
    """What one `append` stored, and the events a projection refused to take effect on (a
    plain class: nothing generated at import, issue 25)."""

    __slots__ = ("events", "refused")

    def __init__(
        self, events: list[Event] | None = None, refused: list[Refusal] | None = None
    ) -> None:
        self.events: list[Event] = [] if events is None else events
        self.refused: list[Refusal] = [] if refused is None else refused


def append(tx: Transaction, events: Sequence[Event], origin: Origin) -> Appended:
    """Admit, number, insert and project `events` in `tx` (see the module's docstring).
    (Written for a local append of one event, the common case: no comprehension, no call
    that finds nothing to do.)"""
    admitted = origin.admit(tx, events)
    if not admitted:
        return Appended()
    st = tx.state
    if origin.keeps_seq:
        stored = _numbered(tx, admitted)
    else:  # the next seqs of the log (a local event was minted with its own already)
        stored, seq = admitted, st.next_seq
        if len(stored) > 1 or stored[0].seq != seq:
            stored = [e if e.seq == seq + n else e.with_seq(seq + n) for n, e in enumerate(stored)]
        st.next_seq = seq + len(stored)
    one = stored[0] if len(stored) == 1 else None
    key = origin.idempotency_key
    if one is not None:  # (one event: its fields read, no iterator over the list)
        tx.ex.insert_events([_columns(one.__dict__) + (key(one),)])  # (no list made)
        linked, keyed = bool(one.artifact_ids), one.type in _KEY_TYPES
    else:
        tx.ex.insert_events([(*_columns(e.__dict__), key(e)) for e in stored])
        linked = any(map(_artifact_ids, stored))
        keyed = not _KEY_TYPES.isdisjoint(map(_type, stored))
    if linked:
        links = [
            {"event_id": e.id, "artifact_id": a, "position": i}
            for e in stored
            if e.artifact_ids
            for i, a in enumerate(e.artifact_ids)
        ]
        sql.insert_links(tx.ex, links)
    st.appended.extend(stored)
    if keyed:  # key events, from any origin
        tx.store.identity.moved()  # the keyring changes with them
    out = Appended(stored)
    projections = tx.store.projections
    if one is not None and origin.name == "local":
        acting: Iterable[Projection] = projections.acting_on_local(one.type)
    else:
        acting = projections
    for projection in acting:
        refused = projection.apply(tx, stored, origin.name)
        if refused:
            out.refused += refused
    return out


def _numbered(tx: Transaction, events: list[Event]) -> list[Event]:
    """The events with their own seq, which must go up from the log's next one."""
    st = tx.state
    out: list[Event] = []
    for event in events:
        seq = event.seq
        if seq < st.next_seq:
            raise errors.ConflictError(
                f"event {event.id} brings seq {seq} but the log already holds seq "
                f"{st.next_seq - 1}; import only into a log that holds a prefix of the source",
                field="db",
            )
        out.append(event)
        st.next_seq = seq + 1
    return out


# ----------------------------------------------------------------------------- origins


class Imported:
    """Events copied verbatim from another log (`logstream import`): judged by the prefix
    rule (the target's newest seq is the one the importer expects, checked under the write
    lock); ids, seq, stamps and idempotency keys kept."""

    name = "import"
    keeps_seq = True

    def __init__(self, expect_tip: int, keys: dict[str, str]) -> None:
        self.expect_tip, self.keys = expect_tip, keys

    def admit(self, tx: Transaction, events: Sequence[Event]) -> list[Event]:
        tip = tx.state.next_seq - 1
        # A local append or a second import in between would interleave with the copy.
        if tip != self.expect_tip:
            raise errors.ConflictError(
                f"the target's events changed during the import (its newest seq is {tip}, "
                f"expected {self.expect_tip}); stop other writers and run the import again",
                field="db",
            )
        return list(events)

    def idempotency_key(self, event: Event) -> str | None:
        return self.keys.get(event.id)


class Local:
    """Events written here (`Transaction.insert_event`): the names checked against the
    keyring, the referenced artifacts held, then each signed with its writer's key and
    judged (RFC 0008); refused by raising, before anything is written."""

    name = "local"
    keeps_seq = False

    def __init__(self, key: str | None = None) -> None:
        self.key = key

    def admit(self, tx: Transaction, events: Sequence[Event]) -> list[Event]:
        ring, store = tx.keyring(), tx.store  # (nothing is stored before all are admitted)
        identity, actor = store.identity, tx.actor
        # What `seal` found plain under this keyring (a log without agents' keys): the same
        # outcome without asking again (issue 25).
        plain = identity.plain_writes(ring) if actor is None else None
        sealed: list[Event] = []
        for event in events:
            minted = event.hlc is store.clock.minted  # (the clock's own stamp: checked when minted)
            known = minted and plain is not None and (event.from_agent, event.type) in plain
            if not known:  # (a plain keyring has no name to look like)
                check_names(ring, from_agent=event.from_agent, to_agent=event.to_agent)
            for aid in event.artifact_ids:
                if not sql.artifact_exists(tx.ex, aid):
                    raise errors.NotFoundError(
                        f"artifact_ids references unknown artifact {aid!r}; put it first",
                        field="artifact_ids",
                        ident=aid,
                    )
            if known:
                tx.verdict = UNSIGNED
                sealed.append(event)
                continue
            one, tx.verdict = identity.seal(tx.ex, store.event_select, event, actor, ring, minted)
            sealed.append(one)
        return sealed

    def idempotency_key(self, event: Event) -> str | None:
        return self.key
