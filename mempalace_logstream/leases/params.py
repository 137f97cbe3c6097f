"""The parameters of the file lease operations (issue 22, RFC 0010), one model each, as
`op_params` holds the others (kept here, next to their limits, so that `op_params` stays one
module's size). `operations.OPERATIONS` pairs them with their handlers. Pure: pydantic and the
lease limits (`inputs`)."""

from __future__ import annotations

from typing import Annotated

from mempalace_logstream.leases import inputs as lease_inputs
from mempalace_logstream.op_params import Agent, Limit, Params, described

LeaseId = Annotated[str, described("The lease (the id lease_acquire returned).")]
Project = Annotated[
    str | None,
    described("The project whose root the globs are relative to ('myrepo' or 'project/myrepo')."),
]


class LeaseAcquire(Params):
    """Lease paths of a project before editing them, so other agents keep off: {lease:
    {lease_id, fence, expires_at, ...}}. Exclusive leases refuse any overlapping lease of
    another agent (the refusal names the holder, the overlapping globs and the expiry); shared
    ones coexist with each other. Renew before it expires; release when done."""

    agent: Agent
    paths: Annotated[
        list[str],
        described(
            f"Up to {lease_inputs.MAX_GLOBS} gitignore-style globs relative to the project root "
            f"('src/**', '*.py', 'docs/'; a directory means everything under it), each at most "
            f"{lease_inputs.MAX_GLOB_CHARS} chars."
        ),
    ]
    exclusive: Annotated[
        bool | None, described("False for a shared lease (default true: exclusive).")
    ] = None
    ttl_s: Annotated[
        int | None,
        described(
            f"Seconds the lease holds unless renewed, {lease_inputs.MIN_TTL_S}-"
            f"{lease_inputs.MAX_TTL_S} (default {lease_inputs.DEFAULT_TTL_S})."
        ),
    ] = None
    reason: Annotated[
        str | None, described(f"Why, shown to others (max {lease_inputs.MAX_REASON_CHARS} chars).")
    ] = None
    task_id: Annotated[
        str | None, described("The task the edit is for: its project, and released with it.")
    ] = None
    project: Project = None


class LeaseRenew(Params):
    """Extend a lease you hold from now: {lease}. Refused once it expired, was released or
    lost a race across replicas (acquire again then)."""

    lease_id: LeaseId
    agent: Agent
    ttl_s: Annotated[int | None, described("Seconds from now (default: the lease's own ttl).")] = (
        None
    )


class LeaseRelease(Params):
    """Release a lease you hold, when your edits are done: {lease}. The admin may release any
    lease (agent 'admin'), recorded as such."""

    lease_id: LeaseId
    agent: Agent


class LeaseList(Params):
    """File leases, newest first: {leases: [{lease_id, agent, paths, exclusive, state,
    expires_at, fence, reason, task_id, lost_to}], count}. By default only those holding now;
    filter by agent, project or a path they name."""

    agent: Annotated[str | None, described("Leases of this agent.")] = None
    path: Annotated[str | None, described("Leases naming this path.")] = None
    active: Annotated[
        bool | None, described("False to list released, expired and lost ones too.")
    ] = None
    project: Project = None
    limit: Limit = None


class LeaseCheck(Params):
    """May you edit a path now? {allowed, message, held_by, own, lost}: not allowed while
    another agent holds an exclusive lease naming it (message names it, until when, why), or
    while your lease on it lost a race across replicas."""

    agent: Agent
    path: Annotated[str, described("The path relative to the project root, e.g. 'src/a.py'.")]
    project: Project = None
