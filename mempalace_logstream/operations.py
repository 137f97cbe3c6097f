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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors
from mempalace_logstream import op_params as p
from mempalace_logstream.identity import actor
from mempalace_logstream.leases import params as lp

if TYPE_CHECKING:
    from mempalace_logstream.presence import Registry
    from mempalace_logstream.store import LogStore

Handler = Callable[..., dict[str, Any]]


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


def event_append(store: LogStore, **args: Any) -> dict[str, Any]:
    return {"event": store.event_append(**args).to_dict()}


def event_get(store: LogStore, *, event_id: Any) -> dict[str, Any]:
    return {"event": store.event_get(event_id).to_dict()}


def event_list(store: LogStore, **args: Any) -> dict[str, Any]:
    return store.event_list(**args).to_dict()


def event_wait(store: LogStore, **args: Any) -> dict[str, Any]:
    return store.event_wait(**args).to_wait_dict()


def event_ack(store: LogStore, **args: Any) -> dict[str, Any]:
    from mempalace_logstream import workflows

    return {"event": workflows.event_ack(store, **args).to_dict()}


def event_redact(store: LogStore, **args: Any) -> dict[str, Any]:
    from mempalace_logstream.store import redaction

    out = redaction.event_redact(store, **args)
    return {"event": out["event"].to_dict(), "target": out["target"], "parts": out["parts"]}


def artifact_put(store: LogStore, **args: Any) -> dict[str, Any]:
    return {"artifact": store.artifact_put(**args).to_dict(with_content=False)}


def artifact_get(store: LogStore, *, artifact_id: Any) -> dict[str, Any]:
    return {"artifact": store.artifact_get(artifact_id).to_dict()}


def patch_submit(store: LogStore, **args: Any) -> dict[str, Any]:
    from mempalace_logstream import workflows

    out = workflows.patch_submit(store, **args)
    result: dict[str, Any] = {
        "artifact": out["artifact"].to_dict(with_content=False),
        "event": out["event"].to_dict(),
    }
    if out["warnings"]:
        result["warnings"] = out["warnings"]
    return result


def task_create(store: LogStore, **args: Any) -> dict[str, Any]:
    from mempalace_logstream import workflows

    out = workflows.task_create(store, **args)
    return {"task_id": out["task_id"], "task": out["task"].to_dict(), "handoff": out["handoff"]}


def task_update(store: LogStore, **args: Any) -> dict[str, Any]:
    from mempalace_logstream import workflows

    out = workflows.task_update(store, **args)
    return {"event": out["event"].to_dict(), "task": out["task"]}


def task_status(store: LogStore, *, task_id: Any) -> dict[str, Any]:
    from mempalace_logstream import deliveries

    out = store.task_status(task_id)
    request = out["task"]["events"][:1]
    # The delivery ledger of the task's request (issue 20): who it reached, and when.
    out["task"]["delivery"] = (
        deliveries.status_of(store, request[0])["recipients"] if request else []
    )
    return out


def delivery_status(store: LogStore, *, event_id: Any) -> dict[str, Any]:
    from mempalace_logstream import deliveries

    return deliveries.status_of(store, event_id)


def task_list(store: LogStore, **args: Any) -> dict[str, Any]:
    return store.task_list(**args)


def version_vector(store: LogStore) -> dict[str, Any]:
    return {"replica_id": store.replica_id, "version_vector": store.version_vector()}


def stats(store: LogStore) -> dict[str, Any]:
    import mempalace_logstream
    from mempalace_logstream import replication  # sync estate (issue 5)

    out = store.stats()
    out["version"] = mempalace_logstream.__version__
    out["estate"] = {"peers": replication.estate_rows(store), **replication.counts(store)}
    return out


def _lease_op(name: str) -> Handler:
    def handler(store: LogStore, **args: Any) -> dict[str, Any]:
        from mempalace_logstream.store import lease_ops

        out: dict[str, Any] = getattr(lease_ops, name)(store, **args)
        return out

    handler.__name__ = name
    return handler


OPERATIONS: dict[str, Operation] = {
    "event_append": Operation(p.EventAppend, event_append, mutating=True),
    "event_get": Operation(p.EventGet, event_get),
    "event_list": Operation(p.EventList, event_list),
    "event_wait": Operation(p.EventWait, event_wait),
    "event_ack": Operation(p.EventAck, event_ack, mutating=True),
    "event_redact": Operation(p.EventRedact, event_redact, mutating=True, destructive=True),
    "artifact_put": Operation(p.ArtifactPut, artifact_put, mutating=True),
    "artifact_get": Operation(p.ArtifactGet, artifact_get),
    "patch_submit": Operation(p.PatchSubmit, patch_submit, mutating=True),
    "task_create": Operation(p.TaskCreate, task_create, mutating=True),
    "task_update": Operation(p.TaskUpdate, task_update, mutating=True),
    "task_status": Operation(p.TaskStatus, task_status),
    "task_list": Operation(p.TaskList, task_list),
    "delivery_status": Operation(p.DeliveryStatus, delivery_status),
    "lease_acquire": Operation(lp.LeaseAcquire, _lease_op("lease_acquire"), mutating=True),
    "lease_renew": Operation(lp.LeaseRenew, _lease_op("lease_renew"), mutating=True),
    "lease_release": Operation(lp.LeaseRelease, _lease_op("lease_release"), mutating=True),
    "lease_list": Operation(lp.LeaseList, _lease_op("lease_list")),
    "lease_check": Operation(lp.LeaseCheck, _lease_op("lease_check")),
    "version_vector": Operation(p.VersionVector, version_vector),
    "stats": Operation(p.Stats, stats),
}

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
    return _checked(name, params().get(name), args)


# The writer's name on a write: an agent authenticated by its token (RFC 0008) may leave it
# out, and it is filled in with the agent's name (another name is refused by the store).
WRITER_FIELDS = ("from_agent", "created_by")


def _checked(name: str, table: dict[str, bool] | None, args: dict[str, Any]) -> dict[str, Any]:
    if table is None:
        raise errors.ValidationError(f"operation {name!r} is unknown", field="operation")
    for key in args:
        if key not in table:
            raise errors.ValidationError(f"{key} is not a parameter of {name}", field=key)
    clean = {k: val for k, val in args.items() if val is not None}
    who = actor.current()
    if who is not None and who.agent is not None and name in MUTATING:
        for key in WRITER_FIELDS:
            if table.get(key) and key not in clean:
                clean[key] = who.agent
    for key, required in table.items():
        if required and key not in clean:
            raise errors.ValidationError(f"{key} is required", field=key)
    return clean


def call(store: LogStore, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run operation `name` with raw `args` (None values mean "not given")."""
    from mempalace_logstream import delivery_hook

    clean = check_args(name, args)
    result = OPERATIONS[name].handler(store, **clean)
    delivery_hook.after_call(store, name, clean, result)
    return result


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
    clean = _checked(name, PRESENCE_PARAMS.get(name), args)
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
