"""Read marks (RFC 0008 "Verdicts"): what makes a stored event read `verified: false`, applied
the same way by the store's reads and by the hook's lean inbox reader (store/lean.py).

A read probes the keyring once per page that holds events (the `identity.marks` statement:
the newest key event and the pins, on which the store caches its keyring); a log without key
events stops there. The rule itself is the keyring's (`Keyring.read_mark`).
Must not import sqlalchemy or the store's other modules, nor `identity` at import time (the
hook path loads it only for a log that has key events).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream.models import Event, Page

if TYPE_CHECKING:
    from mempalace_logstream.identity.keyring import Keyring

PIN_PREFIX = "identity.pin."  # meta rows `identity.pin.<key id>`: the pinned admin keys
# The statement keys (`CommitPipeline.sql`) of the keyring's two reads, shared with the lean reader.
# (backends/queries/identity.py's MARKS and KEY_EVENTS: tests/test_lean_inbox.py checks both.)
MARKS_SQL = "identity.marks"
KEY_EVENTS_SQL = "identity.key-events"


def pins_of(joined: str | None) -> frozenset[str]:
    """The pinned admin key ids from the marks row's joined pin keys."""
    return frozenset(k[len(PIN_PREFIX) :] for k in (joined or "").split(",") if k)


def keyring_of(
    key_events: Iterable[Event], pins: Iterable[str], *, check_signatures: bool = True
) -> Keyring:
    """The keyring folded from stored key events (`check_signatures=False`: trust the
    signatures each was verified with on its way in)."""
    from mempalace_logstream.identity.keyring import Keyring, SignedEvent

    items = (SignedEvent(event=e, sig=e.sig, key_id=e.key_id) for e in key_events)
    return Keyring.build(items, pins, check_signatures=check_signatures)


def judge(
    marks_row: Sequence[Any], events: Sequence[Event], keyring: Callable[[], Keyring]
) -> tuple[Event, ...]:
    """`events` as a read returns them, given the log's marks row (the `MARKS_SQL` probe):
    as they are while the log holds no key event (no key: nothing reads unverified; the
    keyring is not even asked for), else judged by `keyring()` (`mark_reads`). The rule of
    both the store's reads and the lean reader."""
    if not has_key_events(marks_row):
        return tuple(events)
    return mark_reads(keyring(), events)


def judge_page(
    marks_row: Sequence[Any], page: Page, keyring: Callable[..., Keyring], *args: Any
) -> Page:
    """`page` with its events as `judge` returns them (`keyring(*args)` is asked only where
    `judge` asks): the same page while the log holds no key event, no copy or closure made
    (issue 25: the store's reads run this once per page)."""
    if not has_key_events(marks_row):
        return page
    return with_events(page, judge(marks_row, page.events, lambda: keyring(*args)))


def mark_reads(ring: Keyring, events: Sequence[Event]) -> tuple[Event, ...]:
    """`events`, those that read `verified: false` under `ring` replaced by marked copies
    (their `verified_reason`)."""
    if not ring.records():
        return tuple(events)
    out: list[Event] = []
    for event in events:
        code = ring.read_mark(event)
        out.append(event if code is None else event.with_unverified(code))
    return tuple(out)


def with_events(page: Page, marked: tuple[Event, ...]) -> Page:
    """`page` with its events as `mark_reads` returned them (the same page if none was
    marked: a marked copy compares equal to its event, so by identity; `mark_reads` gives
    the page's own tuple back when its keyring has no key)."""
    if marked is page.events or all(m is e for m, e in zip(marked, page.events, strict=True)):
        return page
    return page.replace(events=marked)


def has_key_events(marks_row: Sequence[Any]) -> bool:
    """Whether the marks row shows any key event (else no key exists: nothing to mark)."""
    return marks_row[0] is not None
