"""The `lease` command group (issue 22, RFC 0010): `acquire`, `renew`, `release`, `list`,
`check`. Each is one core call (`lease_acquire`, ...); the store decides who holds what.
`check` exits 0 when the path is free (or the agent's own), 1 when another agent holds it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mempalace_logstream import errors
from mempalace_logstream.cli.options import DbOpt, HubOpt, JsonOpt, LimitOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import emit, fail, given_args, run

lease_app = new_typer(help="Lease paths of a project so that other agents keep off them.")
app.add_typer(lease_app, name="lease")

AgentOpt = Annotated[str, typer.Option("--agent", envvar="LOGSTREAM_AGENT", help="Your agent id.")]
ListAgentOpt = Annotated[str | None, typer.Option("--agent", help="Leases of this agent.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project", envvar="LOGSTREAM_PROJECT", help="Project name; the stream is project/<slug>."
    ),
]
LeaseIdArg = Annotated[str, typer.Argument(help="The lease id (lease acquire prints it).")]
TtlOpt = Annotated[
    int | None, typer.Option("--ttl", help="Seconds the lease holds unless renewed (1800).")
]


def _line(lease: dict[str, Any]) -> str:
    kind = "exclusive" if lease["exclusive"] else "shared"
    extra = f" task {lease['task_id']}" if lease["task_id"] else ""
    why = f" ({lease['reason']})" if lease["reason"] else ""
    lost = f" lost to {lease['lost_holder']}'s {lease['lost_to']}" if lease["lost_to"] else ""
    return (
        f"{lease['lease_id']} {lease['state']} {kind} {lease['agent']} "
        f"{' '.join(lease['paths'])} until {lease['expires_at']} fence {lease['fence']}"
        f"{extra}{why}{lost}"
    )


@lease_app.command("acquire")
def lease_acquire(
    paths: Annotated[list[str], typer.Argument(help="Globs relative to the project root.")],
    agent: AgentOpt,
    shared: Annotated[bool, typer.Option("--shared", help="A shared lease.")] = False,
    ttl: TtlOpt = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (shown).")] = None,
    task: Annotated[str | None, typer.Option("--task", help="The task it is for.")] = None,
    project: ProjectOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Lease paths (exclusive unless --shared); prints the lease id."""
    args = given_args(
        agent=agent,
        paths=paths,
        exclusive=False if shared else None,
        ttl_s=ttl,
        reason=reason,
        task_id=task,
        project=project,
    )
    out = run(db, palace, "lease_acquire", hub, token, **args)
    emit(out, as_json, out["lease"]["lease_id"])


@lease_app.command("renew")
def lease_renew(
    lease_id: LeaseIdArg,
    agent: AgentOpt,
    ttl: TtlOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Extend a lease you hold from now (default: its own ttl)."""
    args = given_args(lease_id=lease_id, agent=agent, ttl_s=ttl)
    out = run(db, palace, "lease_renew", hub, token, **args)
    emit(out, as_json, _line(out["lease"]))


@lease_app.command("release")
def lease_release(
    lease_id: LeaseIdArg,
    agent: AgentOpt,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Release a lease you hold (the admin: --agent admin releases any)."""
    out = run(db, palace, "lease_release", hub, token, lease_id=lease_id, agent=agent)
    emit(out, as_json, _line(out["lease"]))


@lease_app.command("list")
def lease_list(
    agent: ListAgentOpt = None,
    path: Annotated[str | None, typer.Option("--path", help="Leases naming this path.")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Released, expired and lost ones too.")
    ] = False,
    project: ProjectOpt = None,
    limit: LimitOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Leases, newest first (those holding now unless --all)."""
    args = given_args(
        agent=agent, path=path, active=False if all_ else None, project=project, limit=limit
    )
    out = run(db, palace, "lease_list", hub, token, **args)
    emit(out, as_json, "\n".join(_line(x) for x in out["leases"]) or "No leases.")


@lease_app.command("check")
def lease_check(
    path: Annotated[str, typer.Argument(help="The path relative to the project root.")],
    agent: AgentOpt,
    project: ProjectOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Exit 0 if PATH is free or yours, 1 if another agent holds it (or your lease lost)."""
    out = run(
        db, palace, "lease_check", hub, token, **given_args(agent=agent, path=path, project=project)
    )
    emit(out, as_json, out["message"] or f"{out['path']}: free for {out['agent']}")
    if not out["allowed"]:
        raise typer.Exit(1)


guard_app = new_typer(help="The git guard: a pre-commit hook refusing commits of leased paths.")
lease_app.add_typer(guard_app, name="guard")


@guard_app.command("install")
def guard_install(
    repo: Annotated[str, typer.Option("--repo", help="The git repository (default: here).")] = ".",
    project: ProjectOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write .git/hooks/pre-commit: each staged path is checked as $LOGSTREAM_AGENT and the
    commit refused, naming holder, expiry and fencing token, if another agent holds it."""
    from mempalace_logstream import config, lease_hook

    target = None if hub else config.resolve_db(db, palace) if (db or palace) else None
    try:
        out = {"hook": lease_hook.install_guard(repo, target, project, hub)}
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    emit(out, as_json, f"installed the lease guard: {out['hook']}")
