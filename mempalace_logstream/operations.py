"""The operation vocabulary of SPEC §3, shared by every surface.

Each operation takes the raw keyword arguments a surface received (the same names on the CLI,
MCP and HTTP), lets the store validate them, and returns the JSON-ready dict every surface
prints. Surfaces only translate transport details; they never validate or reshape.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.identity import actor
from mempalace_logstream.store import LogStore
from mempalace_logstream.store.identity import check_writer

Handler = Callable[..., dict[str, Any]]


def event_append(store: LogStore, **args: Any) -> dict[str, Any]:
    return {"event": store.event_append(**args).to_dict()}


def event_get(store: LogStore, *, event_id: Any) -> dict[str, Any]:
    return {"event": store.event_get(event_id).to_dict()}


def event_list(store: LogStore, **args: Any) -> dict[str, Any]:
    return store.event_list(**args).to_dict()


def event_wait(store: LogStore, **args: Any) -> dict[str, Any]:
    return store.event_wait(**args).to_wait_dict()


def event_ack(store: LogStore, **args: Any) -> dict[str, Any]:
    return {"event": store.event_ack(**args).to_dict()}


def event_redact(store: LogStore, **args: Any) -> dict[str, Any]:
    """Redact an event's body and/or artifact blobs (admin or its verified writer)."""
    out = store.event_redact(**args)
    return {"event": out["event"].to_dict(), "target": out["target"], "parts": out["parts"]}


def artifact_put(store: LogStore, **args: Any) -> dict[str, Any]:
    return {"artifact": store.artifact_put(**args).to_dict(with_content=False)}


def artifact_get(store: LogStore, *, artifact_id: Any) -> dict[str, Any]:
    return {"artifact": store.artifact_get(artifact_id).to_dict()}


def patch_submit(store: LogStore, **args: Any) -> dict[str, Any]:
    out = store.patch_submit(**args)
    result: dict[str, Any] = {
        "artifact": out["artifact"].to_dict(with_content=False),
        "event": out["event"].to_dict(),
    }
    if out["warnings"]:
        result["warnings"] = out["warnings"]
    return result


def task_create(store: LogStore, **args: Any) -> dict[str, Any]:
    out = store.task_create(**args)
    return {"task_id": out["task_id"], "task": out["task"].to_dict(), "handoff": out["handoff"]}


def task_update(store: LogStore, **args: Any) -> dict[str, Any]:
    out = store.task_update(**args)
    return {"event": out["event"].to_dict(), "task": out["task"]}


def task_status(store: LogStore, *, task_id: Any) -> dict[str, Any]:
    return store.task_status(task_id)


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


OPERATIONS: dict[str, Handler] = {
    "event_append": event_append,
    "event_get": event_get,
    "event_list": event_list,
    "event_wait": event_wait,
    "event_ack": event_ack,
    "event_redact": event_redact,
    "artifact_put": artifact_put,
    "artifact_get": artifact_get,
    "patch_submit": patch_submit,
    "task_create": task_create,
    "task_update": task_update,
    "task_status": task_status,
    "task_list": task_list,
    "version_vector": version_vector,
    "stats": stats,
}
MUTATING = frozenset(
    {
        "event_append",
        "event_ack",
        "event_redact",
        "artifact_put",
        "patch_submit",
        "task_create",
        "task_update",
    }
)


READ_PARAMS = (
    *v.FILTER_FIELDS,
    "from_agent",
    "since_event_id",
    "before_event_id",
    "since_created_at",
    "limit",
    "order",
    "preview",
    "slim",
)
# A wait reads forwards from its cursor: a window end or a newest-first order make no sense.
WAIT_PARAMS = (*(p for p in READ_PARAMS if p not in ("before_event_id", "order")), "timeout_ms")


def _signature(fn: Callable[..., Any], drop: tuple[str, ...] = ()) -> dict[str, bool]:
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name != "self" and p.kind is not p.VAR_KEYWORD and name not in drop:
            out[name] = p.default is inspect.Parameter.empty
    return out


@functools.cache
def params() -> dict[str, dict[str, bool]]:
    """{operation: {parameter: required}}: the one parameter table of every surface, taken
    from the core signatures so that HTTP, MCP and the CLI cannot drift from the store."""
    return {
        "event_append": _signature(LogStore.draft_event),
        "event_get": {"event_id": True},
        "event_list": dict.fromkeys(READ_PARAMS, False),
        "event_wait": dict.fromkeys(WAIT_PARAMS, False),
        "event_ack": _signature(LogStore.event_ack),
        "event_redact": _signature(LogStore.event_redact),
        "artifact_put": _signature(LogStore.draft_artifact, ("content_field",)),
        "artifact_get": {"artifact_id": True},
        "patch_submit": _signature(LogStore.patch_submit),
        "task_create": _signature(LogStore.task_create),
        "task_update": _signature(LogStore.task_update),
        "task_status": {"task_id": True},
        "task_list": _signature(LogStore.task_list),
        "version_vector": {},
        "stats": {},
    }


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
    clean = check_args(name, args)
    return OPERATIONS[name](store, **clean)


class LocalClient:
    """Runs operations against a LogStore in this process (the CLI's default)."""

    def __init__(self, store: LogStore) -> None:
        self.store = store

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        return call(self.store, name, args)

    def close(self) -> None:
        self.store.close()


# ----------------------------------------------------------------------------- presence
# Presence (S-8.4) lives in a hub's memory, not in the store: these operations take the hub's
# `presence.Registry`. Same names and refusals on every surface; without a hub, the CLI says
# that presence needs one (`presence.NEEDS_A_HUB`).
PRESENCE_PARAMS: dict[str, dict[str, bool]] = {
    "presence_announce": {
        "agent": True,
        "state": True,
        "task_id": False,
        "note": False,
        "ttl_s": False,
    },
    "presence_leave": {"agent": True},
    "presence_list": {},
}


def presence_call(registry: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run presence operation `name` on the hub's registry with raw `args`."""
    clean = _checked(name, PRESENCE_PARAMS.get(name), args)
    if name != "presence_list" and isinstance(clean.get("agent"), str):
        # An agent token announces (and ends) its own presence only (RFC 0008).
        check_writer(actor.current(), "agent", clean["agent"])
    if name == "presence_announce":
        return {"presence": registry.announce(**clean).to_dict()}
    if name == "presence_leave":
        return {"left": registry.leave(clean["agent"])}
    agents = [entry.to_dict() for entry in registry.present()]
    return {"agents": agents, "count": len(agents)}
