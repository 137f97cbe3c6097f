"""The registry of projections: state derived from the log, kept in the transaction that
appends the events it follows (issue 21).

A projection has a `name` and `apply(tx, events, origin)`; `store/append.py` calls every
registered one, in order, on the events each append stored, whatever the origin ("local",
"peer" or "import"). A local write is refused by raising (nothing is written); a peer's or an
imported event is never refused, and an effect that must not happen is returned as a
`Refusal` (the event stays; the sync round records it). To add a projection: write its class
next to its rows and add it to `_defaults` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mempalace_logstream.models import Event

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction


@dataclass(frozen=True)
class Refusal:
    """A stored event on which a projection takes no effect (a peer's redaction that its
    writer may not make): `code` says why, `field` names the parameter at fault."""

    event: Event
    code: str
    field: str | None
    message: str


class Projection(Protocol):
    name: str

    def apply(self, tx: Transaction, events: Sequence[Event], origin: str) -> list[Refusal]:
        """Follow `events` (just inserted in `tx`, in seq order) from `origin`."""


def _defaults() -> list[Projection]:
    from mempalace_logstream.store.redaction import RedactionProjection
    from mempalace_logstream.store.tasks import TaskProjection

    # Tasks first: a redaction re-folds the task whose body it replaces.
    return [TaskProjection(), RedactionProjection()]


_registry: list[Projection] = []


def registered() -> list[Projection]:
    """Every registered projection, in the order they run (the defaults made on first use:
    their modules import this one)."""
    if not _registry:
        _registry.extend(_defaults())
    return _registry


def register(projection: Projection) -> None:
    """Run `projection` on every append from now on (after those registered before)."""
    if any(p.name == projection.name for p in registered()):
        raise ValueError(f"a projection named {projection.name!r} is registered already")
    _registry.append(projection)


def unregister(name: str) -> None:
    """Stop running the projection `name` (a no-op if none is registered)."""
    _registry[:] = [p for p in registered() if p.name != name]
