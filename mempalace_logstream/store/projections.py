"""The registry of projections: state derived from the log, kept in the transaction that
appends the events it follows (issue 21).

A projection has a `name` and `apply(tx, events, origin)`; `store/append.py` calls every one
registered on the store (`LogStore.projections`, a `Projections`), in order, on the events
each append stored, whatever the origin ("local", "peer" or "import"). A local write is
refused by raising (nothing is written); a peer's or an imported event is never refused, and
an effect that must not happen is returned as a `Refusal` (the event stays; the sync round
records it). To add a projection: write its class
next to its rows and add it to `defaults` below (or register it on one store).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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


def defaults() -> list[Projection]:
    """The projections a store runs unless told otherwise, in their order (new ones each
    call: their modules import this one, so they are made on use)."""
    from mempalace_logstream.store.lease_projection import LeaseProjection
    from mempalace_logstream.store.redaction import RedactionProjection
    from mempalace_logstream.store.tasks import TaskProjection

    # Tasks first: a redaction re-folds the task whose body it replaces, and a lease of a
    # task ends with the task (the lease rules read the task's row).
    return [TaskProjection(), RedactionProjection(), LeaseProjection()]


class Projections:
    """The projections one store runs on every append, in order (`LogStore.projections`):
    `defaults()` unless the store was given its own list (`LogStore(projections=...)`).
    Registering while appends run is safe: an append runs the projections registered when
    it started (the list is replaced, never changed in place)."""

    def __init__(self, projections: Iterable[Projection] | None = None) -> None:
        self._items: tuple[Projection, ...] = ()
        for projection in defaults() if projections is None else projections:
            self.register(projection)

    def __iter__(self) -> Iterator[Projection]:
        return iter(self._items)

    def names(self) -> list[str]:
        return [p.name for p in self._items]

    def register(self, projection: Projection) -> None:
        """Run `projection` on every append from now on (after those registered before);
        ValueError if one of that name is registered already."""
        if projection.name in self.names():
            raise ValueError(f"a projection named {projection.name!r} is registered already")
        self._items = (*self._items, projection)

    def unregister(self, name: str) -> None:
        """Stop running the projection `name` (a no-op if none is registered)."""
        self._items = tuple(p for p in self._items if p.name != name)
