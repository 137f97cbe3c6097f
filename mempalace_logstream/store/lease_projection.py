"""The lease projection as every store registers it (store/projections.py): the lease rules
and rows (leases/, store/leases.py) are loaded when an append holds a lease event, not before,
so a process that appends no lease event never imports them (issue 25: ~3 ms of CPU of a
one-append process). What a lease event is comes from the package (`leases.TYPES`), which
store/leases.py filters by too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mempalace_logstream.leases import TYPES

if TYPE_CHECKING:
    from mempalace_logstream.models import Event
    from mempalace_logstream.store.projections import Refusal
    from mempalace_logstream.store.writes import Transaction


class LeaseProjection:
    """The lease rows as a registered projection: `store.leases.apply` on the events of an
    append that holds a lease move."""

    name = "leases"
    local_types = frozenset(TYPES)  # a local append of any other type moves no lease

    def apply(self, tx: Transaction, events: Sequence[Event], origin: str) -> list[Refusal]:
        if not any(e.type in TYPES for e in events):
            return []
        from mempalace_logstream.store import leases

        return leases.apply(tx, events, origin)
