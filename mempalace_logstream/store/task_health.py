"""What `doctor` reads of the task projection's rules (RFC 0007): unverified moves that verified
history undid or refused (a backdated or forged move from a peer?), second requests on
someone else's task, and delegation limits a peer's history exceeds (depth, open children
per parent). One pass over the task rows in chunks by task id; nothing is written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mempalace_logstream.backends.queries import tasks as sql
from mempalace_logstream.store.tasks import from_doc
from mempalace_logstream.tasks.model import NON_TERMINAL

if TYPE_CHECKING:
    from mempalace_logstream.store.core import LogStore

CHUNK = 5000
UNVERIFIED_CODES = frozenset({"overruled", "verified_end"})


@dataclass
class TaskRuleReport:
    unverified: list[str] = field(default_factory=list)  # event ids verified history refused
    second_requests: list[str] = field(default_factory=list)  # event ids
    too_deep: list[str] = field(default_factory=list)  # task ids deeper than the limit
    crowded: list[str] = field(default_factory=list)  # parents with too many open children


def task_rules(store: LogStore) -> TaskRuleReport:
    """The task rows checked against the rules a peer's history may break."""
    out = TaskRuleReport()
    settings = store.task_settings
    open_children: Counter[str] = Counter()
    after = ""
    while True:
        with store.connect() as conn:
            rows = sql.chunk(conn, after=after, n=CHUNK)
        if not rows:
            break
        for task_id, parent, state, doc in rows:
            task = from_doc(doc)
            for entry in task.anomalies:
                code = entry.get("code")
                if code in UNVERIFIED_CODES:
                    out.unverified.append(entry["event_id"])
                elif code == "second_request":
                    out.second_requests.append(entry["event_id"])
            if task.depth > settings.max_depth:
                out.too_deep.append(task_id)
            if parent is not None and state in NON_TERMINAL:
                open_children[parent] += 1
        after = rows[-1][0]
    out.crowded = sorted(p for p, n in open_children.items() if n > settings.max_children)
    return out
