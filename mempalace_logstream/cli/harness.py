"""The `hook` command group (issue 22, RFC 0010): `hook pretooluse`, the PreToolUse hook of
Claude Code and Codex that denies an edit of a path another agent holds an exclusive lease on.
The console script runs it without this module (lease_hook.fast_path); this is the same call
for the lines that reach typer (`--help`, usage errors)."""

from __future__ import annotations

from typing import Annotated

import typer

from mempalace_logstream.cli.options import DbOpt, HubOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app, new_typer

hook_app = new_typer(help="Harness hooks: deny edits of paths leased to another agent.")
app.add_typer(hook_app, name="hook")


@hook_app.command("pretooluse")
def pretooluse(
    agent: Annotated[str, typer.Option("--agent", envvar="LOGSTREAM_AGENT", help="Your agent id.")],
    client: Annotated[
        str, typer.Option("--client", help="claude (Claude Code) or codex.")
    ] = "claude",
    auto_lease: Annotated[
        bool, typer.Option("--auto-lease", help="Lease a free path for you before the edit.")
    ] = False,
    fail_closed: Annotated[
        bool, typer.Option("--fail-closed", help="Deny when the log cannot be read.")
    ] = False,
    ttl: Annotated[
        int | None, typer.Option("--ttl", help="Seconds an auto-lease holds (300).")
    ] = None,
    project: Annotated[
        str | None,
        typer.Option("--project", envvar="LOGSTREAM_PROJECT", help="Project name."),
    ] = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
) -> None:
    """Read the PreToolUse JSON on stdin; print the deny when another agent holds the path."""
    from mempalace_logstream import lease_hook

    if client not in ("claude", "codex"):
        raise typer.BadParameter(
            f"is {client!r}; it must be claude or codex", param_hint="--client"
        )
    code = lease_hook.run_pretooluse(
        agent=agent,
        client=client,
        auto_lease=auto_lease,
        fail_closed=fail_closed,
        ttl=ttl,
        project=project,
        db=db,
        palace=palace,
        hub=hub,
        token=token,
    )
    raise typer.Exit(code)
