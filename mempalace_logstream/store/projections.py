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

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from mempalace_logstream.models import Event

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction


class Refusal(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """A stored event on which a projection takes no effect (a peer's redaction that its
    writer may not make): `code` says why, `field` names the parameter at fault."""

    event: Event
    code: str
    field: str | None
    message: str


class Projection(Protocol):
    """A projection may also say which event types a local append of one event can move it
    by: `local_types`, a collection of types (leave it out: every type). An append of one
    local event of another type skips it (`Projections.acting_on_local`: one set lookup per
    append instead of a call that finds nothing to do)."""

    name: str

    def apply(self, tx: "Transaction", events: Sequence[Event], origin: str) -> Sequence[Refusal]:
        """Follow `events` (just inserted in `tx`, in seq order) from `origin`."""


def defaults() -> list[Projection]:
    """The projections a store runs unless told otherwise, in their order (new ones each
    call: their modules import this one, so they are made on use)."""
    from mempalace_logstream.store.lease_projection import LeaseProjection
    from mempalace_logstream.store.redaction_projection import RedactionProjection
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
        # The registered projections and, by event type, those acting on a local append of
        # one event of that type (`acting_on_local`), replaced together on (un)registering.
        self._by_type: tuple[tuple[Projection, ...], dict[str, tuple[Projection, ...]]]
        self._by_type = ((), {})
        for projection in defaults() if projections is None else projections:
            self.register(projection)

    def __iter__(self) -> Iterator[Projection]:
        return iter(self._items)

    def acting_on_local(self, event_type: str) -> tuple[Projection, ...]:
        """The projections, in order, that a local append of one event of `event_type` can
        move: all but those whose `local_types` leave the type out."""
        items, known = self._by_type
        hit = known.get(event_type)
        if hit is None:
            hit = tuple(p for p in items if _acts_on(p, event_type))
            if len(known) >= _TYPES_KEPT:  # event types are the writers' own: bounded
                known.clear()
            known[event_type] = hit
        return hit

    def names(self) -> list[str]:
        return [p.name for p in self._items]

    def register(self, projection: Projection) -> None:
        """Run `projection` on every append from now on (after those registered before);
        ValueError if one of that name is registered already."""
        if projection.name in self.names():
            raise ValueError(f"a projection named {projection.name!r} is registered already")
        self._items = (*self._items, projection)
        self._by_type = (self._items, {})

    def unregister(self, name: str) -> None:
        """Stop running the projection `name` (a no-op if none is registered)."""
        self._items = tuple(p for p in self._items if p.name != name)
        self._by_type = (self._items, {})


_TYPES_KEPT = 256


def _acts_on(projection: Projection, event_type: str) -> bool:
    types = getattr(projection, "local_types", None)
    return types is None or event_type in types
