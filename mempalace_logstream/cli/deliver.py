"""`logstream deliver --agent NAME --codex` (also `watch --agent NAME --exec-codex`): a long-running
deliverer that wakes an idle Codex session with `codex queue` for each new inbox event.

The algorithm is `mempalace_logstream.deliver`; this module parses, opens the client, prints
its one-line notes on stderr and maps exit codes. The store is opened lazily by `shared`.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, cast

import typer

from mempalace_logstream import config, cursors, display, errors
from mempalace_logstream.cli.announce import (
    NoPresenceOpt,
    PresenceTtlOpt,
    announced,
    announcer,
)
from mempalace_logstream.cli.options import DbOpt, HubOpt, PalaceOpt, TokenOpt, take_global
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import STATE, close_after, fail, interrupted, open_client
from mempalace_logstream.cli.testhooks import watch_crash_hook

if TYPE_CHECKING:
    from mempalace_logstream.deliver import CodexOptions
    from mempalace_logstream.watch import Client

EXIT_INTERRUPTED = 130
AGENT_HELP = "Your id: deliver your inbox (to you or *), never your own writes."
CODEX_HELP = (
    "Deliver to Codex: run `codex queue --thread <id> --message <envelope>` for each batch of "
    "new events; the thread is the one `inbox --hook codex` recorded on SessionStart."
)
CODEX_BIN_HELP = "The Codex executable (default: codex on PATH)."
THREAD_ID_HELP = "Queue to this Codex thread instead of the one the SessionStart hook recorded."
STATE_FILE_HELP = (
    "Cursor file (default <palace>/inbox/<log>/codex-deliver/<agent>.json; '' = none)."
)
FROM_START_HELP = "On a first run (no cursor file yet), deliver the whole inbox, not only new mail."
ALLOW_UNVERIFIED_HELP = (
    "Once agents have keys, also deliver events whose sender is not verified (marked so)."
)
AgentOpt = Annotated[str | None, typer.Option("--agent", help=AGENT_HELP)]
CodexOpt = Annotated[bool, typer.Option("--codex", help=CODEX_HELP)]
CodexBinOpt = Annotated[
    str | None, typer.Option("--codex-bin", envvar="CODEX_BIN", help=CODEX_BIN_HELP)
]
ThreadIdOpt = Annotated[str | None, typer.Option("--thread-id", help=THREAD_ID_HELP)]
StateFileOpt = Annotated[str | None, typer.Option("--state-file", help=STATE_FILE_HELP)]
FromStartOpt = Annotated[bool, typer.Option("--from-start", help=FROM_START_HELP)]
AllowUnverifiedOpt = Annotated[bool, typer.Option("--allow-unverified", help=ALLOW_UNVERIFIED_HELP)]
DELIVER_JSON_HELP = 'Say each note on stderr as one JSON object {"note": …} (errors too).'
DeliverJsonOpt = Annotated[
    bool, typer.Option("--json", help=DELIVER_JSON_HELP, callback=take_global)
]


def _note(message: str) -> None:
    if STATE.as_json:
        sys.stderr.write(json.dumps({"note": message}, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"logstream deliver: {display.terminal(message)}\n")
    sys.stderr.flush()


@app.command()
def deliver(
    agent: AgentOpt = None,
    codex: CodexOpt = False,
    codex_bin: CodexBinOpt = None,
    thread_id: ThreadIdOpt = None,
    state_file: StateFileOpt = None,
    from_start: FromStartOpt = False,
    allow_unverified: AllowUnverifiedOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    no_presence: NoPresenceOpt = False,
    presence_ttl_s: PresenceTtlOpt = None,
    as_json: DeliverJsonOpt = False,
) -> None:
    """Wake a harness that is not listening when mail arrives; runs until Ctrl-C (exit 130).

    --codex: for each batch of new events to --agent (or *, never its own writes), run
    `codex queue` with a one-line envelope naming the event ids (never a body); the cursor
    moves only after `codex queue` exits 0, so a failure or a crash re-delivers, never skips.
    Failures are retried with backoff, each problem said in one line on stderr.
    """
    if not codex:
        raise fail("say where to deliver: --codex (the only target so far)", 2)
    code = run_codex(
        agent=agent,
        codex_bin=codex_bin,
        thread_id=thread_id,
        state_file=state_file,
        from_start=from_start,
        allow_unverified=allow_unverified,
        db=db,
        palace=palace,
        hub=hub,
        token=token,
        no_presence=no_presence,
        presence_ttl_s=presence_ttl_s,
    )
    raise typer.Exit(code)


def run_codex(
    *,
    agent: str | None,
    codex_bin: str | None,
    thread_id: str | None = None,
    state_file: str | None = None,
    from_start: bool = False,
    allow_unverified: bool = False,
    db: str | None = None,
    palace: str | None = None,
    hub: str | None = None,
    token: str | None = None,
    no_presence: bool = False,
    presence_ttl_s: int | None = None,
) -> int:
    """Validate, announce (with --hub), deliver; the exit code (1 error, 130 interrupted)."""
    from mempalace_logstream import deliver as core

    settings = config.Settings.from_env()
    palace = palace or settings.palace
    target = cursors.log_target(db or settings.db, palace, hub)
    try:
        opts = core.CodexOptions.parse(
            agent=agent,
            target=target,
            palace=palace,
            state_file=state_file,
            thread_id=thread_id,
            codex_bin=codex_bin,
            from_start=from_start,
            allow_unverified=allow_unverified,
        )
        who = announcer(
            opts.agent,
            hub,
            token,
            enabled=not no_presence,
            ttl_s=presence_ttl_s,
            what="logstream deliver --codex",
            path="codex",
        )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    with announced(who):
        return _deliver(opts, db, palace, hub, token)


def _deliver(
    opts: CodexOptions, db: str | None, palace: str | None, hub: str | None, token: str | None
) -> int:
    from mempalace_logstream.deliver import CodexDeliverer

    try:
        client = open_client(db, palace, hub, token, delivery="codex")
        try:
            # HubClient names call()'s first parameter `op`, watch.Client `name`; both are
            # only ever passed it positionally.
            deliverer = CodexDeliverer(
                cast("Client", client),
                opts,
                _note,
                hub=hub.rstrip("/") if hub else None,
                crash_hook=watch_crash_hook(),
            )
            return deliverer.run()
        finally:
            close_after(client)
    except KeyboardInterrupt:
        _note("stopped")
        return EXIT_INTERRUPTED
    except errors.LogstreamError as exc:
        if interrupted(exc):
            _note("stopped")
            return EXIT_INTERRUPTED
        if STATE.debug:
            raise
        raise fail(exc.message) from None
