"""Rows and models: the read columns of an event, the one row -> `Event` conversion, the
artifact row, and the artifact links column (aggregated by the backend's functions)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends import Backend
from mempalace_logstream.models import Artifact, Event
from mempalace_logstream.schema import artifacts, event_artifacts, events

# Read statements select the Event fields in declaration order, the artifact links column in
# the `artifact_ids` slot, so a row zips straight into an Event's __dict__.
EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(Event))
SEQ_AT, ID_AT = EVENT_FIELDS.index("seq"), EVENT_FIELDS.index("id")
_OSEQ_AT, _LINKS_AT = EVENT_FIELDS.index("origin_seq"), EVENT_FIELDS.index("artifact_ids")
# A page row carries its artifact links as "position<RS>id<US>position<RS>id…" (control
# characters never occur in ids), so a read needs no second statement over the page's ids.
_POS_SEP, _LINK_SEP = "\x1e", "\x1f"
# An artifact row in the order `artifact_from_row` reads it.
ARTIFACT_COLS = [
    artifacts.c[name]
    for name in (
        "id",
        "kind",
        "sha256",
        "size_bytes",
        "encoding",
        "created_by",
        "created_at",
        "origin_replica",
        "metadata_json",
    )
]


def links_column(backend: Backend) -> sa.Label[Any]:
    """An event's artifact links as one column ("position<RS>id<US>…"), built with the
    backend's string aggregate."""
    ea = event_artifacts.alias("ea")
    char, agg = backend.links_functions()
    item = sa.cast(ea.c.position, sa.Text) + char(sa.literal_column("30")) + ea.c.artifact_id
    link_sep = char(sa.literal_column("31"))
    return (
        sa.select(agg(item, link_sep))
        .where(ea.c.event_id == events.c.id)
        .scalar_subquery()
        .label("artifact_links")
    )


def parse_links(links: str | None) -> tuple[str, ...]:
    """The artifact ids of a links column value, in position order."""
    if not links:
        return ()
    pairs = [item.split(_POS_SEP, 1) for item in links.split(_LINK_SEP)]
    return tuple(aid for _, aid in sorted(pairs, key=lambda p: int(p[0])))


def read_columns(backend: Backend) -> list[sa.ColumnElement[Any]]:
    cols: list[sa.ColumnElement[Any]] = []
    for name in EVENT_FIELDS:
        cols.append(links_column(backend) if name == "artifact_ids" else events.c[name])
    return cols


def events_from_rows(rows: Sequence[Sequence[Any]]) -> list[Event]:
    """Events from rows of `read_columns` (plain tuples or Rows): the one row -> Event.

    A frozen dataclass assigns every field through `object.__setattr__` in `__init__`; filling
    `__dict__` directly builds the same object ~6x faster (a page has up to 500 of them).
    """
    out = []
    new, names = object.__new__, EVENT_FIELDS
    for row in rows:
        event = new(Event)
        values = event.__dict__
        values.update(zip(names, row, strict=True))
        values["seq"], values["origin_seq"] = int(row[SEQ_AT]), int(row[_OSEQ_AT])
        values["artifact_ids"] = parse_links(row[_LINKS_AT])
        out.append(event)
    return out


def artifact_from_row(row: Sequence[Any], content: bytes | None) -> Artifact:
    """The Artifact of a row that starts with `ARTIFACT_COLS`."""
    return Artifact(
        id=row[0],
        kind=row[1],
        sha256=row[2],
        size_bytes=int(row[3]),
        encoding=row[4],
        created_by=row[5],
        created_at=row[6],
        origin_replica=row[7],
        metadata_json=row[8],
        content=content,
    )
