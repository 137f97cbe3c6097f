"""`logstream mcp`: the MCP tools over stdio for Claude Code, Codex and other MCP clients; with
`--agent NAME --channel`, new mail in NAME's inbox is pushed into the session (channel mode).
With `--agent NAME` on a local log every tool call runs as NAME (RFC 0008): it writes as NAME
only, signed with `<keys_dir>/NAME.key` when that key is there.

The MCP SDK is imported inside the command only.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated, Any, NoReturn

import typer

from mempalace_logstream import errors
from mempalace_logstream.cli import plain
from mempalace_logstream.cli.announce import (
    NoPresenceOpt,
    PresenceTtlOpt,
    announced,
    announcer,
)
from mempalace_logstream.cli.filters import FilterArgs, filter_options
from mempalace_logstream.cli.options import DbOpt, HubOpt, Multi, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import STATE, fail, open_client, open_store
from mempalace_logstream.cli.testhooks import watch_crash_hook

ReadOnlyOpt = Annotated[bool, typer.Option("--read-only", help="Hide the mutating tools.")]
ToolsOpt = Annotated[
    str | None,
    typer.Option(
        "--tools",
        help="Which tools to offer: coord (default: events, artifacts, patches, tasks, and "
        "presence with --hub), all (also version_vector, stats, event_redact, "
        "delivery_status), or a comma list of profiles and tool names.",
    ),
]
AgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="Your agent id: tools write as it only (signed with keys/NAME.key on a local log; "
        "with --hub the token says who you are), whose inbox --channel pushes, and who is "
        "announced in the presence of --hub while this runs.",
    ),
]
ChannelOpt = Annotated[
    bool,
    typer.Option(
        "--channel",
        help="Push each new event of --agent's inbox into the session as a Claude Code channel "
        "notification (launch with `claude --dangerously-load-development-channels server:NAME`).",
    ),
]
AllowFromOpt = Annotated[
    Multi, typer.Option("--allow-from", help="Push only events by this sender (repeat).")
]
AllowUnverifiedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unverified",
        help="Once agents have keys, also push senders whose events are not signed.",
    ),
]
StateFileOpt = Annotated[
    str | None,
    typer.Option(
        "--state-file",
        help="Channel cursor file (default <palace>/channel/<log>/<agent>.json; '' = none).",
    ),
]
FromStartOpt = Annotated[
    bool,
    typer.Option(
        "--from-start", help="First run only: push the whole inbox, not just what comes next."
    ),
]
BodyCharsOpt = Annotated[
    int | None, typer.Option("--body-chars", help="Cut quoted bodies here (default 600).")
]
BurstOpt = Annotated[
    int | None,
    typer.Option("--burst", help="More events than this at once become one notification (3)."),
]
WindowOpt = Annotated[
    int | None,
    typer.Option("--window-ms", help="Gather a burst for this long after a notification (250)."),
]


@app.command("mcp")
@filter_options
def mcp_cmd(
    read_only: ReadOnlyOpt = False,
    tools: ToolsOpt = None,
    agent: AgentOpt = None,
    channel: ChannelOpt = False,
    *,
    filters: FilterArgs,
    allow_from: AllowFromOpt = None,
    allow_unverified: AllowUnverifiedOpt = False,
    state_file: StateFileOpt = None,
    from_start: FromStartOpt = False,
    body_chars: BodyCharsOpt = None,
    burst: BurstOpt = None,
    window_ms: WindowOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    no_presence: NoPresenceOpt = False,
    presence_ttl_s: PresenceTtlOpt = None,
) -> None:
    """Serve the MCP tools over stdio (local log, or a hub with --hub).

    With --agent NAME --channel, new events addressed to NAME (or to *), never NAME's own, are
    pushed into the session; the cursor is checkpointed after each notification, so a restart
    resumes where it stopped and a crash repeats, never skips. Filters narrow what is pushed.
    With --hub and --agent NAME, NAME is announced in the hub's presence while this runs
    (--no-presence: not). --tools chooses the tools listed (each costs the agent context).
    """
    given = {
        "allow_from": allow_from,
        "allow_unverified": allow_unverified or None,
        "state_file": state_file,
        "from_start": from_start or None,
        "body_chars": body_chars,
        "burst": burst,
        "window_ms": window_ms,
    }
    if not channel:
        _refuse_channel_options(given, filters)
    try:
        _check_tools(tools, hub)
        what = "logstream mcp --channel" if channel else "logstream mcp"
        # channel mode says itself when the hub is lost or refuses the token: not twice
        ttl, on = presence_ttl_s, not no_presence
        path = "channel" if channel else None
        who = announcer(
            agent, hub, token, enabled=on, ttl_s=ttl, what=what, hub_told=channel, path=path
        )
        with announced(who):
            if channel:
                _run_channel(agent, filters, given, (read_only, tools), db, palace, hub, token)
            else:
                _run_tools((read_only, tools), agent, db, palace, hub, token)
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None


def _refuse_channel_options(given: dict[str, Any], filters: FilterArgs) -> None:
    extra = [name for name, val in given.items() if val not in (None, [])]
    extra += ["filters"] if filters else []
    if extra:
        flag = "--" + extra[0].replace("_", "-")
        raise fail(f"{flag} is an option of channel mode: add --channel (and --agent NAME)")


def _check_tools(tools: str | None, hub: str | None) -> None:
    """Refuse a bad --tools before anything is opened (or created)."""
    from mempalace_logstream.mcp_server import toolsets

    toolsets.resolve(tools, option="--tools", hub=bool(hub))


def _run_tools(
    offer: tuple[bool, str | None],
    agent: str | None,
    db: str | None,
    palace: str | None,
    hub: str | None,
    token: str | None,
) -> None:
    from mempalace_logstream import mcp_server

    actor = _actor(agent, hub)
    read_only, tools = offer
    if not hub:  # the log is opened once `initialize` is answered (mcp_server/deferred.py)
        from mempalace_logstream.operations import LocalClient

        log = mcp_server.DeferredStore(
            lambda: LocalClient(open_store(db, palace, create=True)), _exit_now
        )
        try:
            mcp_server.run_stdio(log, read_only=read_only, tools=tools, actor=actor)
        finally:
            log.close()
        return
    client = open_client(db, palace, hub, token, create=True)
    try:
        backend = _backend(client)
        name = f"hub {hub.rstrip('/')}"
        mcp_server.run_stdio(backend, read_only=read_only, tools=tools, actor=actor, name=name)
    finally:
        client.close()


def _exit_now(exc: Exception) -> NoReturn:
    """The log could not be opened (after `initialize` was answered): the command ends as it
    did when it opened the log before serving, its one error line and exit 1, but at once: the
    SDK's stdin reader is in a read that only the client can end, so no clean exit would come
    before the client closes the pipe. Nothing is open to close."""
    if STATE.debug:
        traceback.print_exception(exc)
    elif isinstance(exc, errors.LogstreamError):
        fail(exc.message, field=getattr(exc, "field", None))
    else:
        fail(plain.unexpected_text(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _run_channel(
    agent: str | None,
    filters: FilterArgs,
    given: dict[str, Any],
    offer: tuple[bool, str | None],
    db: str | None,
    palace: str | None,
    hub: str | None,
    token: str | None,
) -> None:
    import anyio

    from mempalace_logstream import config, cursors
    from mempalace_logstream.mcp_server import channel

    if agent is None:
        raise fail("--channel needs --agent NAME: whose inbox to push")
    settings = config.Settings.from_env()
    target = cursors.log_target(db or settings.db, palace or settings.palace, hub)
    opts = channel.ChannelOptions.parse(
        agent=agent, target=target, palace=palace or settings.palace, **filters, **given
    )
    client = open_client(db, palace, hub, token, create=True)
    # The channel's own reads push to the agent (the hub's delivery ledger); its tool calls
    # are the agent's reads, its signs of life.
    pusher = open_client(db, palace, hub, token, delivery="channel") if hub else client
    try:
        backend = _backend(client)
        hook = watch_crash_hook()
        actor = _actor(agent, hub)
        source = f"hub {hub.rstrip('/')}" if hub else "the log"
        anyio.run(
            lambda: channel.serve(
                backend,
                client,
                opts,
                read_only=offer[0],
                tools=offer[1],
                crash_hook=hook,
                actor=actor,
                source=source,
                push=_backend(pusher) if pusher is not client else None,
            )
        )
    finally:
        client.close()
        if pusher is not client:
            pusher.close()


def _actor(agent: str | None, hub: str | None) -> Any:
    """Who the tool calls run as: `--agent` on a local log; with --hub the hub decides by the
    token (the actor is the hub's to prove, not this process's)."""
    from mempalace_logstream import validation as v
    from mempalace_logstream.identity.actor import Actor

    if agent is None or hub:
        return None
    return Actor(agent=v.writer("agent", agent))


def _backend(client: Any) -> Any:
    from mempalace_logstream import mcp_server
    from mempalace_logstream.operations import LocalClient

    if isinstance(client, LocalClient):
        return mcp_server.StoreBackend(client.store)
    return mcp_server.ClientBackend(client)
