"""The redaction projection as every store registers it (store/projections.py): the redaction
rules (store/redaction.py, with the keyring, the tombstones and the task re-fold) are loaded
when a local append holds an `event.redact`, or for a peer's or an imported batch (a
redaction held here whose target just arrived), not before: a process that appends no
redaction never imports them (issue 25, as store/lease_projection.py does for leases).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mempalace_logstream.models import Event
    from mempalace_logstream.store.projections import Refusal
    from mempalace_logstream.store.writes import Transaction

REDACT_TYPE = "event.redact"


class RedactionProjection:
    """Redactions as a registered projection (store/projections.py). A local `event.redact`
    is applied or refused by raising `Refused` (`event_redact` maps it); a peer's or an
    imported one that must not take effect is stored without effect and returned. Redactions
    held here whose target just arrived are applied then (a fresh local event is named by
    none: its id is new). The work is `redaction.on_events`."""

    name = "redactions"
    local_types = frozenset({REDACT_TYPE})  # a fresh local event is named by no redaction

    def apply(self, tx: Transaction, events: Sequence[Event], origin: str) -> list[Refusal]:
        if origin == "local" and not any(e.type == REDACT_TYPE for e in events):
            return []
        from mempalace_logstream.store import redaction

        return redaction.on_events(tx, events, origin)
