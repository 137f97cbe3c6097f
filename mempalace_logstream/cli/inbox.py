"""`logstream inbox`: an agent's unseen mail since its own cursor, as text or as the context a
Claude Code or Codex hook adds (issue 13). Print, then checkpoint, as `watch` does.

The implementation is `mempalace_logstream.hook.run_inbox`, which `python -m
mempalace_logstream` and `logstream-hook` also reach without loading typer: this command only
declares the options (for --help and usage errors) and maps the exit code.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mempalace_logstream.cli.options import DbOpt, HubOpt, PalaceOpt, TokenOpt, take_global
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import STATE
from mempalace_logstream.cli.testhooks import watch_crash_hook

AGENT_HELP = "Your id: your inbox is what was sent to you or to *, never your own writes."
HOOK_HELP = (
    "claude or codex: print the JSON their UserPromptSubmit/SessionStart hooks read to add "
    "context (the hook's JSON input is read from stdin); codex on SessionStart also records "
    "the session's thread for `logstream deliver --codex`."
)
STATE_FILE_HELP = "Cursor file (default <palace>/inbox/<log>/<agent>.json; '' = none)."
FROM_START_HELP = "On a first run (no state file yet), show the whole inbox, not only new mail."
LIMIT_HELP = "Most messages per call, 1-500 (default 20); the rest come with the next call."
MAX_BODY_HELP = "Cut each body to this many characters (default 500)."
JSON_HELP = "Print the unseen events as one JSON object (errors too: one JSON object on stderr)."
ALLOW_UNVERIFIED_HELP = (
    "Once agents have keys, also show senders whose events are not verified (marked so)."
)

AgentOpt = Annotated[str | None, typer.Option("--agent", help=AGENT_HELP)]
HookOpt = Annotated[str | None, typer.Option("--hook", help=HOOK_HELP)]
StateFileOpt = Annotated[str | None, typer.Option("--state-file", help=STATE_FILE_HELP)]
FromStartOpt = Annotated[bool, typer.Option("--from-start", help=FROM_START_HELP)]
LimitOpt = Annotated[int | None, typer.Option("--limit", help=LIMIT_HELP)]
MaxBodyOpt = Annotated[int | None, typer.Option("--max-body", help=MAX_BODY_HELP)]
InboxJsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP, callback=take_global)]
AllowUnverifiedOpt = Annotated[bool, typer.Option("--allow-unverified", help=ALLOW_UNVERIFIED_HELP)]


@app.command()
def inbox(
    agent: AgentOpt = None,
    hook: HookOpt = None,
    state_file: StateFileOpt = None,
    from_start: FromStartOpt = False,
    limit: LimitOpt = None,
    max_body: MaxBodyOpt = None,
    as_json: InboxJsonOpt = False,
    allow_unverified: AllowUnverifiedOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print your unseen mail once, then save the cursor; exit 0, silently when there is none.

    For context hooks: `logstream inbox --agent NAME --hook claude` on UserPromptSubmit or
    SessionStart. The first run starts at the newest event (--from-start shows the older mail);
    bodies are quoted data, cut to --max-body, never instructions. Once agents have keys,
    only verified senders are shown (each marked verified=true) unless --allow-unverified.
    """
    from mempalace_logstream.hook import run_inbox

    code = run_inbox(
        agent=agent,
        hook=hook,
        state_file=state_file,
        from_start=from_start,
        limit=limit,
        max_body=max_body,
        as_json=as_json,
        allow_unverified=allow_unverified,
        db=db,
        palace=palace,
        hub=hub,
        token=token,
        durability=STATE.durability,
        debug=STATE.debug,
        crash_hook=watch_crash_hook(),
        lean=False,  # through the store: the reference the lean path is tested against
    )
    raise typer.Exit(code)
