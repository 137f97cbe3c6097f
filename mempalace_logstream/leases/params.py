"""The parameters of the file lease operations (issue 22, RFC 0010), one model each, as
`op_params` holds the others (kept here, next to their limits, so that `op_params` stays one
module's size). `operations.OPERATIONS` pairs them with their handlers. Pure: pydantic and the
lease limits (`inputs`)."""

from __future__ import annotations

from typing import Annotated

from mempalace_logstream.leases import inputs as lease_inputs
from mempalace_logstream.op_params import Agent, Limit, Params, described

LeaseId = Annotated[str, described("The lease id.")]
Project = Annotated[str | None, described("Project name, e.g. 'myrepo'.")]


class LeaseAcquire(Params):
    """Lease paths before editing them so other agents keep off: {lease: {lease_id, fence,
    expires_at}}. Refused, naming the holder, when another agent's lease overlaps (shared
    leases coexist). Renew before expiry; release when done."""

    agent: Agent
    paths: Annotated[
        list[str],
        described(
            f"Globs relative to the project root ('src/**', '*.py'), max {lease_inputs.MAX_GLOBS}."
        ),
    ]
    exclusive: Annotated[bool | None, described("False: shared (default exclusive).")] = None
    ttl_s: Annotated[
        int | None,
        described(
            f"Seconds until it expires, {lease_inputs.MIN_TTL_S}-{lease_inputs.MAX_TTL_S} "
            f"({lease_inputs.DEFAULT_TTL_S})."
        ),
    ] = None
    reason: Annotated[str | None, described("Why, shown to others.")] = None
    task_id: Annotated[str | None, described("The task it is for; released with it.")] = None
    project: Project = None


class LeaseRenew(Params):
    """Extend your lease from now: {lease}. Refused once it expired, was released or lost a
    race (then acquire again)."""

    lease_id: LeaseId
    agent: Agent
    ttl_s: Annotated[int | None, described("Seconds from now (default: its ttl).")] = None


class LeaseRelease(Params):
    """Release your lease when your edits are done: {lease}. The admin (agent 'admin') may
    release any."""

    lease_id: LeaseId
    agent: Agent


class LeaseList(Params):
    """File leases holding now, newest first: {leases: [{lease_id, agent, paths, state,
    expires_at, fence}], count}."""

    agent: Annotated[str | None, described("Leases of this agent.")] = None
    path: Annotated[str | None, described("Leases naming this path.")] = None
    active: Annotated[bool | None, described("False: expired, released, lost too.")] = None
    project: Project = None
    limit: Limit = None


class LeaseCheck(Params):
    """May you edit a path now? {allowed, message, held_by, lost}: not while another agent's
    exclusive lease names it, or your lease on it lost a race."""

    agent: Agent
    path: Annotated[str, described("Path relative to the project root.")]
    project: Project = None
