"""The handlers of the operation table (operations.py) and the rule every call follows: the
arguments checked against the operation's parameters (`checked`), the handler run, the
delivery ledger told (`run`).

Split from the table so that a caller holding the parameters another way runs the same
handlers without the table's pydantic models: the lean local writer (store/lean_write.py),
whose parameter table is generated from `operations.params()` and held equal to it by a test.
A handler takes the store and the raw keyword arguments a surface received, lets the core
validate them, and returns the JSON-ready dict every surface prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors
from mempalace_logstream.identity import actor

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore

Handler = Callable[..., dict[str, Any]]


# The writer's name on a write: an agent authenticated by its token (RFC 0008) may leave it
# out, and it is filled in with the agent's name (another name is refused by the store).
WRITER_FIELDS = ("from_agent", "created_by")


def checked(
    name: str, table: dict[str, bool] | None, args: dict[str, Any], mutating: bool
) -> dict[str, Any]:
    """The arguments of operation `name` (`table`: {parameter: required}, None for an unknown
    operation) without the absent ones (None), the writer's name filled in from the acting
    agent on a write (`mutating`); ValidationError naming an unknown or a missing parameter."""
    if table is None:
        raise errors.ValidationError(f"operation {name!r} is unknown", field="operation")
    for key in args:
        if key not in table:
            raise errors.ValidationError(f"{key} is not a parameter of {name}", field=key)
    clean = {k: val for k, val in args.items() if val is not None}
    who = actor.current()
    if who is not None and who.agent is not None and mutating:
        for key in WRITER_FIELDS:
            if table.get(key) and key not in clean:
                clean[key] = who.agent
    for key, required in table.items():
        if required and key not in clean:
            raise errors.ValidationError(f"{key} is required", field=key)
    return clean


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


def run(store: LogStore, name: str, clean: dict[str, Any]) -> dict[str, Any]:
    """Run operation `name` with `clean` arguments (`checked`'s), then mark what it delivered."""
    from mempalace_logstream import delivery_hook

    result = HANDLERS[name](store, **clean)
    delivery_hook.after_call(store, name, clean, result)
    return result


HANDLERS: dict[str, Handler] = {
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
    "delivery_status": delivery_status,
    **{
        name: _lease_op(name)
        for name in ("lease_acquire", "lease_renew", "lease_release", "lease_list", "lease_check")
    },
    "version_vector": version_vector,
    "stats": stats,
}
