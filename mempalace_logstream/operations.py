"""The operation vocabulary of SPEC §3, shared by every surface.

Each operation takes the raw keyword arguments a surface received (the same names on the CLI,
MCP and HTTP), lets the store validate them, and returns the JSON-ready dict every surface
prints. Surfaces only translate transport details; they never validate or reshape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.store import LogStore

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
    return {"task": out["task"].to_dict(), "handoff": out["handoff"]}


def version_vector(store: LogStore) -> dict[str, Any]:
    return {"replica_id": store.replica_id, "version_vector": store.version_vector()}


def stats(store: LogStore) -> dict[str, Any]:
    from mempalace_logstream import replication  # sync estate (issue 5)

    out = store.stats()
    out["estate"] = {"peers": replication.estate_rows(store), **replication.counts(store)}
    return out


OPERATIONS: dict[str, Handler] = {
    "event_append": event_append,
    "event_get": event_get,
    "event_list": event_list,
    "event_wait": event_wait,
    "event_ack": event_ack,
    "artifact_put": artifact_put,
    "artifact_get": artifact_get,
    "patch_submit": patch_submit,
    "task_create": task_create,
    "version_vector": version_vector,
    "stats": stats,
}
MUTATING = frozenset({"event_append", "event_ack", "artifact_put", "patch_submit", "task_create"})


def call(store: LogStore, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run operation `name` with raw `args` (None values mean "not given")."""
    handler = OPERATIONS.get(name)
    if handler is None:
        raise errors.ValidationError(f"operation {name!r} is unknown", field="operation")
    clean = {k: val for k, val in args.items() if val is not None}
    try:
        return handler(store, **clean)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        # An unknown parameter from a surface: report it like any other bad field.
        bad = str(exc).rsplit("argument", 1)[-1].strip(" '")
        raise errors.ValidationError(f"{bad} is not a parameter of {name}", field=bad) from exc


class LocalClient:
    """Runs operations against a LogStore in this process (the CLI's default)."""

    def __init__(self, store: LogStore) -> None:
        self.store = store

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        return call(self.store, name, args)

    def close(self) -> None:
        self.store.close()
