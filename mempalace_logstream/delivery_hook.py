"""The surfaces' common call hook of the delivery ledger and wakeable presence (issue 20,
RFC 0009): what an operation marks once it returned (`after_call`: a read is a push or a sign
of life, an ack an ack, a write a sign of life), the sender's warning, and the fields
`presence_list` adds per agent. The ledger itself is deliveries.py.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.identity import actor

LEDGER_MODULE = "mempalace_logstream.deliveries"
if TYPE_CHECKING:
    from mempalace_logstream import deliveries as d
    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore
else:  # loaded by `deliveries.enable`: a process that records no delivery never loads it
    d = lazy.module(LEDGER_MODULE)

# The reads the ledger marks (a push through a delivery path, else a sight).
READS = frozenset({"event_list", "event_wait", "event_get"})


# Who reads: in identity/actor.py, where the CLI's lean read (cli/shared.py) asks it without
# loading the ledger.
reader = actor.reader


def after_call(store: LogStore, name: str, args: dict[str, Any], result: dict[str, Any]) -> None:
    """What operation `name` marks once it returned `result` (the surfaces' common hook)."""
    if LEDGER_MODULE not in sys.modules:
        return  # no ledger records in this process (`deliveries.enable` loads the module)
    ledger = d.of(store)
    if ledger is None or d.current_path() == d.OBSERVER:
        return
    if name in READS:
        agent = reader(args)
        if agent is None:
            return
        events = result.get("events")
        if events is None:
            event = result.get("event")
            events = [] if event is None else [event]
        path = d.current_path()
        if path is not None:
            ledger.pushed(events, agent, path)
        else:
            ledger.seen(events, agent)
    elif name == "event_ack":
        event = result.get("event") or {}
        if isinstance(event.get("from_agent"), str):
            ledger.acked(str(args["event_id"]), event["from_agent"])
    elif name in WRITES:
        writer = args.get(WRITES[name]) or _writer_of(result)
        if isinstance(writer, str):
            ledger.alive(writer)
        if name in WARNED:
            _warn(ledger, args.get("to_agent"), result)


WARNED = ("event_append", "task_create")


def records(name: str) -> bool:
    """Whether operation `name` leaves a mark the ledger writes to its table: a read's push or
    sight, an ack. A write's sign of life is kept in memory only (`wakeable`, the warning),
    so a process that makes one call and exits records nothing of it (the lean writer)."""
    return name in READS or name == "event_ack"


def _warn(ledger: d.Ledger, to: Any, result: dict[str, Any]) -> None:
    """The sender's warning (issue 20 item 2): the addressee announced delivery paths here
    and none that pushes is live now, so it sees the message at its next prompt only."""
    registry = ledger.registry
    if registry is None or not isinstance(to, str) or to == "*" or not registry.announced(to):
        return
    if d.wakeable(registry.paths(to), None, 0, 0) == "no":
        result["warning"] = no_path_warning(to)


def no_path_warning(agent: str) -> str:
    return f"{agent} has no live delivery path; it will see this at its next prompt"


def presence_fields(registry: Registry, agent: str) -> dict[str, Any]:
    """What presence_list adds per agent: its live paths (since when), `wakeable`, the last
    push (and path) and the last sign of life this hub saw."""
    from mempalace_logstream.presence import iso

    ledger = d.for_registry(registry)
    paths = registry.paths(agent)
    life = ledger.life(agent) if ledger is not None else d.Life()
    window = ledger.window_s if ledger is not None else d.DEFAULT_WAKEABLE_WINDOW_S
    now = ledger.clock() if ledger is not None else registry.now_ms()
    return {
        "paths": [
            {"path": p, "since": iso(since), "expires_at": iso(until)}
            for p, (since, until) in sorted(paths.items())
        ],
        "wakeable": d.wakeable(paths, life.reacted_ms, now, window),
        "last_push_at": None if life.pushed_ms is None else iso(life.pushed_ms),
        "last_push_path": life.pushed_path,
        "last_life_at": None if life.life_ms is None else iso(life.life_ms),
    }


# The operations that write, and the parameter naming their writer.
WRITES = {
    "event_append": "from_agent",
    "event_redact": "from_agent",
    "artifact_put": "created_by",
    "patch_submit": "from_agent",
    "task_create": "from_agent",
    "task_update": "from_agent",
}


def _writer_of(result: dict[str, Any]) -> str | None:
    event = result.get("event")
    if isinstance(event, dict) and isinstance(event.get("from_agent"), str):
        return str(event["from_agent"])
    return None
