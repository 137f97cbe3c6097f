"""The store: `LogStore`, the only code that runs SQL (see core.py), and its parts.

pipeline.py  group commit and the write transaction's state
writes.py    drafts, the one insert of an event and of an artifact, `Transaction`
reads.py     snapshots, the page planner, waits
filters.py   `FILTER_RULES`, `Filters`, `ReadRequest`
rows.py      read columns, row -> Event, artifact rows, the links column
ids.py       ids, timestamps, slugs
stats.py     version vector and stats
"""

from __future__ import annotations

from mempalace_logstream.backends.base import EVENT_COLS
from mempalace_logstream.store.core import LogStore
from mempalace_logstream.store.filters import FILTER_RULES, FROM_AGENT_NOTE, Filters, ReadRequest
from mempalace_logstream.store.ids import mint_replica_id, new_id, now_text, slug
from mempalace_logstream.store.pipeline import TxState
from mempalace_logstream.store.rows import (
    ARTIFACT_COLS,
    artifact_from_row,
    events_from_rows,
    links_column,
    parse_links,
)
from mempalace_logstream.store.writes import Transaction, same_as_prior

# The old private names, for code and tests written against store.py.
_EVENT_COLS = EVENT_COLS
_TxState = TxState

__all__ = [
    "ARTIFACT_COLS",
    "EVENT_COLS",
    "FILTER_RULES",
    "FROM_AGENT_NOTE",
    "Filters",
    "LogStore",
    "ReadRequest",
    "Transaction",
    "TxState",
    "artifact_from_row",
    "events_from_rows",
    "links_column",
    "mint_replica_id",
    "new_id",
    "now_text",
    "parse_links",
    "same_as_prior",
    "slug",
]
