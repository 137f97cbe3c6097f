"""The operation table of SPEC §3, shared by every surface: for each operation its parameters
(a model of `op_params`: names, types, descriptions, which are required), its handler and
whether it writes. HTTP routes, MCP tools and the CLI's checks are derived from this table.

A handler takes the store and the raw keyword arguments a surface received (the same names on
the CLI, MCP and HTTP), lets the core validate them, and returns the JSON-ready dict every
surface prints. Surfaces only translate transport details; they never validate or reshape.
To add an operation: its model in `op_params`, its handler here, one row in `OPERATIONS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mempalace_logstream import op_handlers as h
from mempalace_logstream import op_params as p
from mempalace_logstream.identity import actor
from mempalace_logstream.leases import params as lp

if TYPE_CHECKING:
    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore

Handler = h.Handler


@dataclass(frozen=True)
class Operation:
    """One operation: its parameters model, its handler, whether it writes, and whether a
    write destroys something (a redaction removes content; every other write appends)."""

    params: type[p.Params]
    handler: Handler
    mutating: bool = False
    destructive: bool = False

    @property
    def description(self) -> str:
        """What the operation does (its parameters model's docstring), for agents and docs."""
        return " ".join((self.params.__doc__ or "").split())

    @property
    def summary(self) -> str:
        """The first sentence of the description."""
        return self.description.split(". ")[0].rstrip(".")

    def required(self) -> dict[str, bool]:
        """{parameter: required}, in the model's order."""
        return {name: f.is_required() for name, f in self.params.model_fields.items()}


OPERATIONS: dict[str, Operation] = {
    "event_append": Operation(p.EventAppend, h.HANDLERS["event_append"], mutating=True),
    "event_get": Operation(p.EventGet, h.HANDLERS["event_get"]),
    "event_list": Operation(p.EventList, h.HANDLERS["event_list"]),
    "event_wait": Operation(p.EventWait, h.HANDLERS["event_wait"]),
    "event_ack": Operation(p.EventAck, h.HANDLERS["event_ack"], mutating=True),
    "event_redact": Operation(
        p.EventRedact, h.HANDLERS["event_redact"], mutating=True, destructive=True
    ),
    "artifact_put": Operation(p.ArtifactPut, h.HANDLERS["artifact_put"], mutating=True),
    "artifact_get": Operation(p.ArtifactGet, h.HANDLERS["artifact_get"]),
    "patch_submit": Operation(p.PatchSubmit, h.HANDLERS["patch_submit"], mutating=True),
    "task_create": Operation(p.TaskCreate, h.HANDLERS["task_create"], mutating=True),
    "task_update": Operation(p.TaskUpdate, h.HANDLERS["task_update"], mutating=True),
    "task_status": Operation(p.TaskStatus, h.HANDLERS["task_status"]),
    "task_list": Operation(p.TaskList, h.HANDLERS["task_list"]),
    "delivery_status": Operation(p.DeliveryStatus, h.HANDLERS["delivery_status"]),
    "lease_acquire": Operation(lp.LeaseAcquire, h.HANDLERS["lease_acquire"], mutating=True),
    "lease_renew": Operation(lp.LeaseRenew, h.HANDLERS["lease_renew"], mutating=True),
    "lease_release": Operation(lp.LeaseRelease, h.HANDLERS["lease_release"], mutating=True),
    "lease_list": Operation(lp.LeaseList, h.HANDLERS["lease_list"]),
    "lease_check": Operation(lp.LeaseCheck, h.HANDLERS["lease_check"]),
    "version_vector": Operation(p.VersionVector, h.HANDLERS["version_vector"]),
    "stats": Operation(p.Stats, h.HANDLERS["stats"]),
}

# The writer's name on a write, filled in from the acting agent (op_handlers.checked).
WRITER_FIELDS = h.WRITER_FIELDS
# The operations that write: only their CLI commands create a missing log, a read-only MCP
# server leaves their tools out, and HTTP tags their routes.
MUTATING = frozenset(name for name, op in OPERATIONS.items() if op.mutating)
READ_PARAMS = tuple(p.EventList.model_fields)
# A wait reads forwards from its cursor: a window end or a newest-first order make no sense.
WAIT_PARAMS = tuple(p.EventWait.model_fields)


@functools.cache
def params() -> dict[str, dict[str, bool]]:
    """{operation: {parameter: required}}: the one parameter table of every surface."""
    return {name: op.required() for name, op in OPERATIONS.items()}


def check_args(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments of operation `name` without the absent ones (None), or ValidationError
    naming an unknown parameter ("to is not a parameter of event_append") or a missing one."""
    return h.checked(name, params().get(name), args, name in MUTATING)


def call(store: LogStore, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run operation `name` with raw `args` (None values mean "not given")."""
    return h.run(store, name, check_args(name, args))


class LocalClient:
    """Runs operations against a LogStore in this process (the CLI's default)."""

    def __init__(self, store: LogStore, delivery: str | None = None) -> None:
        from mempalace_logstream import deliveries

        self.store = store
        # This process's reads, pushes and acks reach the delivery ledger; with `delivery`
        # (watch, channel, codex, monitor), its reads are pushes through that path.
        self.delivery = deliveries.check_path(delivery)
        deliveries.enable(store)

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        if self.delivery is None:
            return call(self.store, name, args)
        from mempalace_logstream import deliveries

        with deliveries.delivering(self.delivery):
            return call(self.store, name, args)

    def close(self) -> None:
        from mempalace_logstream import deliveries

        deliveries.disable(self.store)
        self.store.close()


# ----------------------------------------------------------------------------- presence
# Presence (S-8.4) lives at a hub (its memory, or the table every hub of a PostgreSQL log
# shares, issue 23), not in the log: these handlers take the hub's `presence.Registry`. Same
# names and refusals on every surface; without a hub, the CLI says that presence needs one
# (`presence.NEEDS_A_HUB`).


def presence_announce(registry: Registry, **args: Any) -> dict[str, Any]:
    return {"presence": registry.announce(**args).to_dict()}


def presence_leave(registry: Registry, *, agent: str) -> dict[str, Any]:
    return {"left": registry.leave(agent)}


def presence_list(registry: Registry, store: LogStore | None = None) -> dict[str, Any]:
    """Who is home, with each one's delivery paths and, given the hub's log, its active file
    leases (`leases`: count and globs; issue 22)."""
    from mempalace_logstream.delivery_hook import presence_fields

    entries = registry.present()
    agents = [{**entry.to_dict(), **presence_fields(registry, entry.agent)} for entry in entries]
    if store is not None:
        held = _leases_by_agent(store)
        for agent in agents:
            agent["leases"] = held.get(agent["agent"], {"count": 0, "paths": []})
    # Agents this hub could push to once and no longer can (a reaped watcher): wakeable no.
    home = {entry.agent for entry in entries}
    unreachable = [
        {"agent": name, **presence_fields(registry, name)}
        for name in registry.path_agents()
        if name not in home
    ]
    return {"agents": agents, "count": len(agents), "unreachable": unreachable}


def _leases_by_agent(store: LogStore) -> dict[str, dict[str, Any]]:
    """agent -> {count, paths}: its active file leases (one read of the lease rows)."""
    from mempalace_logstream import validation as v
    from mempalace_logstream.store import lease_ops

    out: dict[str, dict[str, Any]] = {}
    for lease in lease_ops.lease_list(store, active=True, limit=v.MAX_LIST_LIMIT)["leases"]:
        mine = out.setdefault(lease["agent"], {"count": 0, "paths": []})
        mine["count"] += 1
        mine["paths"] += [g for g in lease["paths"] if g not in mine["paths"]]
    return out


PRESENCE: dict[str, Operation] = {
    "presence_announce": Operation(p.PresenceAnnounce, presence_announce, mutating=True),
    "presence_leave": Operation(p.PresenceLeave, presence_leave, mutating=True),
    "presence_list": Operation(p.PresenceList, presence_list),
}
PRESENCE_PARAMS: dict[str, dict[str, bool]] = {name: op.required() for name, op in PRESENCE.items()}


def presence_call(
    registry: Registry, name: str, args: dict[str, Any], store: LogStore | None = None
) -> dict[str, Any]:
    """Run presence operation `name` on the hub's registry with raw `args` (`store`: the
    hub's log, whose active leases presence_list adds per agent)."""
    clean = h.checked(name, PRESENCE_PARAMS.get(name), args, name in MUTATING)
    if name == "presence_list":
        return presence_list(registry, store)
    if name != "presence_list" and isinstance(clean.get("agent"), str):
        from mempalace_logstream.store.identity import check_writer

        # An agent token announces (and ends) its own presence only (RFC 0008).
        check_writer(actor.current(), "agent", clean["agent"])
    return PRESENCE[name].handler(registry, **clean)


def every_operation() -> dict[str, Operation]:
    """The store's operations and the hub's presence ones: what an agent's tools offer."""
    return {**OPERATIONS, **PRESENCE}
