"""The store: `LogStore`, the only code that runs SQL (see core.py), and its parts.

core.py      `LogStore`: constructs its parts and holds them; each public method calls one
pipeline.py  group commit and the write transaction's state (`store.pipeline`)
writes.py    drafts, the one insert of an artifact, `Transaction` (`store.writes`)
append.py    the one write path of events: `Transaction.append(events, origin)`
projections.py  `Projections`, the registry each store holds (`store.projections`; by
             default tasks, redactions, leases): what every append runs
lease_projection.py  the lease projection as registered: loads store/leases.py on a lease event
reads.py     snapshots, the page planner, waits (`store.reads`)
task_reads.py  task_status and task_list (`store.task_reads`)
plan.py      the page rule (cursor, filters, order, limit) and row -> Event, without SQLAlchemy
filters.py   `FILTER_RULES`, `Filters`, `ReadRequest`, `ReadArgs` (a read's raw arguments)
signatures.py  `takes_args_of`: a facade takes the parameters of the method it calls
rows.py      read columns, artifact rows, the links column
ids.py       ids, timestamps, slugs
stats.py     version vector and stats (`store.counts`)
lean.py      the inbox reader of the hook path (no SQLAlchemy; the store's rule and SQL text)
lean_write.py  the lean local writer of `append`, `ack`, the task moves (issue 25): the store's
             write path on a stdlib sqlite3 connection, its SQL from a generated table
options.py   `log_options`: the local log a command names and `LogStore.open`'s settings

Names are loaded on first use (PEP 562): importing the package, or one of its lean modules
(`store.ids`, `store.lean`, `store.lean_leases`: the hook paths) imports neither SQLAlchemy nor
the read filters and models; `from mempalace_logstream.store import LogStore` imports them.
The write path's modules (writes, append, pipeline, the projections) import without
SQLAlchemy too: their statements are built on first use (`lazy.module`), which the lean
writer (`store.lean_write`) never does.
"""

from __future__ import annotations

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from mempalace_logstream.backends.base import EVENT_COLS
    from mempalace_logstream.store.core import LogStore
    from mempalace_logstream.store.filters import (
        FILTER_RULES,
        FROM_AGENT_NOTE,
        Filters,
        ReadRequest,
    )
    from mempalace_logstream.store.ids import mint_replica_id, new_id, now_text, slug
    from mempalace_logstream.store.pipeline import TxState
    from mempalace_logstream.store.rows import (
        ARTIFACT_COLS,
        artifact_from_row,
        events_from_rows,
        links_column,
        parse_links,
        repair_row,
    )
    from mempalace_logstream.store.writes import Transaction, same_as_prior

# name -> (module, attribute) of everything loaded on first access.
_LAZY: dict[str, tuple[str, str]] = {
    "EVENT_COLS": ("mempalace_logstream.backends.base", "EVENT_COLS"),
    "LogStore": ("mempalace_logstream.store.core", "LogStore"),
    "TxState": ("mempalace_logstream.store.pipeline", "TxState"),
    "Transaction": ("mempalace_logstream.store.writes", "Transaction"),
    "same_as_prior": ("mempalace_logstream.store.writes", "same_as_prior"),
    **{
        name: ("mempalace_logstream.store.filters", name)
        for name in ("FILTER_RULES", "FROM_AGENT_NOTE", "Filters", "ReadRequest")
    },
    **{
        name: ("mempalace_logstream.store.ids", name)
        for name in ("mint_replica_id", "new_id", "now_text", "slug")
    },
    **{
        name: ("mempalace_logstream.store.rows", name)
        for name in (
            "ARTIFACT_COLS",
            "artifact_from_row",
            "events_from_rows",
            "links_column",
            "parse_links",
            "repair_row",
        )
    },
}

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
    "repair_row",
    "same_as_prior",
    "slug",
]


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
