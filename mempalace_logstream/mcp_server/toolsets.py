"""Which tools an MCP server offers (`logstream mcp --tools`, the hub's `/mcp?tools=`): a
named profile, a tool name, or a comma list of both.

    coord  (the default) what an agent needs to coordinate: events, artifacts, patches, tasks,
           and presence where a hub keeps it
    leases the file lease tools (issue 22): `--tools coord,leases` adds them to the default
           (they do not fit the default's budget of issue 25, 16,000 bytes, with it)
    all    every operation, the operator tools too (version_vector, stats, event_redact,
           delivery_status)

Every tool listed costs each agent's context on every session, so the default is the small
set. A tool that cannot work where the server runs is not offered: presence needs a hub
(`logstream mcp` without `--hub` leaves it out of a profile, and refuses it when named).
"""

from __future__ import annotations

from collections.abc import Iterable

from mempalace_logstream import errors, operations

TOOL_PREFIX = "mempalace_"
COORD = (
    "event_append",
    "event_get",
    "event_list",
    "event_wait",
    "event_ack",
    "artifact_put",
    "artifact_get",
    "patch_submit",
    "task_create",
    "task_update",
    "task_status",
    "task_list",
    *operations.PRESENCE,
)
LEASES = ("lease_acquire", "lease_renew", "lease_release", "lease_list", "lease_check")
PROFILES: dict[str, tuple[str, ...]] = {
    "coord": COORD,
    "leases": LEASES,
    "all": tuple(operations.every_operation()),
}
DEFAULT = "coord"


def resolve(value: str | None, *, option: str = "tools", hub: bool = True) -> tuple[str, ...]:
    """The operations that `value` names ("coord", "all", "event_list,stats", ...; None: the
    default profile), in the table's order. Without a hub (`hub=False`) a profile leaves the
    presence tools out and naming one is refused; an unknown name is refused with `option`
    and the allowed values. Raises ValidationError(field=option)."""
    chosen: set[str] = set()
    for item in (value or DEFAULT).split(","):
        name = item.strip().removeprefix(TOOL_PREFIX)
        if name in PROFILES:
            chosen.update(n for n in PROFILES[name] if hub or n not in operations.PRESENCE)
        elif name in operations.every_operation():
            if not hub and name in operations.PRESENCE:
                msg = f"{option}: {name} needs a hub (presence is kept by one): add --hub URL"
                raise errors.ValidationError(msg, field=option)
            chosen.add(name)
        else:
            raise errors.ValidationError(_unknown(option, item.strip()), field=option)
    return tuple(n for n in operations.every_operation() if n in chosen)


def _unknown(option: str, item: str) -> str:
    return (
        f"{option}: {item!r} is not a profile ({', '.join(PROFILES)}) or a tool "
        f"({', '.join(operations.every_operation())}); give one, or a comma list"
    )


def usable(names: Iterable[str], *, hub: bool) -> tuple[str, ...]:
    """`names` less the tools that cannot work here (presence without a hub)."""
    return tuple(n for n in names if hub or n not in operations.PRESENCE)
