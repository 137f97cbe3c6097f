"""Rows and models: the read columns of an event, the artifact row, and the artifact links
column (aggregated by the backend's functions). The one row -> `Event` conversion lives in
plan.py (no SQLAlchemy, for the hook path) and is re-exported here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.models import Artifact
from mempalace_logstream.store.plan import (
    EVENT_FIELDS,
    ID_AT,
    SEQ_AT,
    events_from_rows,
    parse_links,
    repair_row,
)

__all__ = [
    "ARTIFACT_COL_NAMES",
    "EVENT_FIELDS",
    "ID_AT",
    "SEQ_AT",
    "artifact_from_row",
    "events_from_rows",
    "links_column",
    "parse_links",
    "read_columns",
    "repair_row",
]

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
    from mempalace_logstream.backends import Backend
    from mempalace_logstream.backends.queries import log as log_rows

    ARTIFACT_COLS: list[sa.Column[Any]]
else:  # statements are built on first use: the lean write path never loads them
    schema = lazy.module("mempalace_logstream.schema")
    log_rows = lazy.module("mempalace_logstream.backends.queries.log")

# An artifact row in the order `artifact_from_row` reads it (`ARTIFACT_COLS`, the Columns).
ARTIFACT_COL_NAMES = (
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


def __getattr__(name: str) -> Any:
    """`ARTIFACT_COLS`, made on first use (PEP 562): it needs the schema's Table."""
    if name != "ARTIFACT_COLS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cols = [schema.artifacts.c[n] for n in ARTIFACT_COL_NAMES]
    globals()[name] = cols
    return cols


def links_column(backend: Backend) -> sa.Label[Any]:
    """An event's artifact links as one column ("position<RS>id<US>…"), built with the
    backend's string aggregate."""
    return log_rows.links_column(backend.links_functions())


def read_columns(backend: Backend) -> list[sa.ColumnElement[Any]]:
    return log_rows.read_columns(backend.links_functions(), EVENT_FIELDS)


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
