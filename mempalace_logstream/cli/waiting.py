"""The commands that block for events: `wait` (one answer, then exit) and `watch` (a
checkpointed cursor in a state file; print, then save, so a crash replays and never skips).

The watch algorithm is `mempalace_logstream.watch`; this module parses, prints and maps exit
codes. The store is opened lazily by `shared`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from mempalace_logstream import display, errors, reconnect
from mempalace_logstream import validation as v
from mempalace_logstream.cli import plain
from mempalace_logstream.cli.announce import (
    NoPresenceOpt,
    PresenceTtlOpt,
    announced,
    announcer,
)
from mempalace_logstream.cli.deliver import CodexBinOpt, run_codex
from mempalace_logstream.cli.filters import FilterArgs, filter_options
from mempalace_logstream.cli.options import (
    DbOpt,
    GiveUpOpt,
    HubOpt,
    JsonOpt,
    LimitOpt,
    PalaceOpt,
    PreviewOpt,
    TokenOpt,
    take_global,
)
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import (
    STATE,
    close_after,
    emit,
    event_line,
    fail,
    interrupted,
    open_reader,
    riding,
)
from mempalace_logstream.cli.testhooks import watch_crash_hook

if TYPE_CHECKING:
    from mempalace_logstream.watch import Batch, Client, WatchOptions

WAIT_SINCE_HELP = "Only events after this id; 'tip' = only new ones."
WaitSinceOpt = Annotated[str | None, typer.Option("--since-event-id", help=WAIT_SINCE_HELP)]
TimeoutOpt = Annotated[int | None, typer.Option("--timeout-ms", help="0-300000 (default 60000).")]


@app.command()
@filter_options
def wait(
    filters: FilterArgs,
    since_event_id: WaitSinceOpt = None,
    timeout_ms: TimeoutOpt = None,
    limit: LimitOpt = None,
    preview: PreviewOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    give_up_after: GiveUpOpt = None,
) -> None:
    """Block until a matching event exists (exit 0) or the timeout passes (exit 2).

    Without --since-event-id, existing matches return at once; with one, only later events.
    With --hub, an outage is ridden through (the timeout still counts; exit 3 when the hub is
    still lost once it has passed, or past --give-up-after when given); 1 on errors (a
    refused token included), 130 on Ctrl-C.
    """
    args = plain.wait_args(filters, since_event_id, timeout_ms, limit, preview)
    try:
        client, policy = open_reader(db, palace, hub, token, give_up_after)
        try:
            if policy is None:
                out = client.call("event_wait", **args)
            else:
                out = _wait_riding(cast("Client", client), policy, args)
            _print_wait(out, as_json)  # the answer first: closing the store comes after
        finally:
            close_after(client)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except reconnect.GaveUpError:
        raise typer.Exit(reconnect.EXIT_GAVE_UP) from None
    except errors.LogstreamError as exc:
        if interrupted(exc):
            raise typer.Exit(130) from None
        if STATE.debug:
            raise
        raise fail(exc.message) from None
    if out["timed_out"]:
        raise typer.Exit(2)


def _wait_riding(
    client: Client, policy: reconnect.Reconnect, args: dict[str, Any]
) -> dict[str, Any]:
    """`event_wait` on a hub through outages: `tip` is fixed first (a retry must not move it
    past what arrived meanwhile), and each try waits only for what is left of the timeout; a
    try after the timeout is a last look (0 ms) at what arrived. Without --give-up-after the
    timeout bounds the ride too: a hub still lost when it has passed is given up on (exit 3),
    so a wait ends within its timeout plus the hub timeout (one call's deadline) whatever
    the hub does; with it, the outage may outlast the timeout until that bound."""
    deadline = time.monotonic() + v.timeout_ms(args.get("timeout_ms")) / 1000
    until = deadline if policy.give_up_after_s is None else None
    since = args.get("since_event_id")
    if isinstance(since, str) and since.strip() == "tip":
        tip = policy.call(lambda: client.call("event_list", limit=1, order="desc"), until=until)
        args = {**args, "since_event_id": tip.get("cursor")}  # None: the log was empty

    def attempt() -> dict[str, Any]:
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        return client.call("event_wait", **{**args, "timeout_ms": left_ms})

    return policy.call(attempt, until=until)


def _print_wait(out: dict[str, Any], as_json: bool) -> None:
    emit(out, as_json, plain.wait_text(out))
    sys.stdout.flush()


class _WatchPrinter:
    """Prints watch batches and flushes before the watcher checkpoints (print, then save)."""

    def __init__(self, as_json: bool, follow: bool) -> None:
        self.as_json = as_json
        self.follow = follow

    def batch(self, batch: Batch, *, final: bool) -> None:
        data = batch.to_dict()
        if self.as_json and self.follow:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        elif self.as_json:
            text = json.dumps(data, ensure_ascii=False, indent=2)
        elif batch.events:
            lines = [f"{data['count']} event(s):"] + [event_line(e) for e in data["events"]]
            text = display.terminal("\n".join(lines))
        else:
            text = "No matching events before the idle timeout."
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def note(self, message: str) -> None:
        sys.stderr.write(display.terminal(message) + "\n")
        sys.stderr.flush()


AGENT_HELP = "Your id: watch your inbox (to you or *), never your own writes."
STATE_FILE_HELP = "Checkpoint file (default <palace>/watch/<log>/<agent>.json; '' = none)."
FROM_START_HELP = (
    "On a first run (no state file yet), replay the whole log instead of starting at the "
    "newest event; refused when the state file already holds a cursor."
)
WATCH_SINCE_HELP = "Start after this event (overrides the state file)."
IDLE_EXIT_HELP = (
    "Exit after this long without a match (exit 2 if nothing matched); 0 or absent = wait for ever."
)
WATCH_JSON_HELP = "Print JSON (with --follow: one batch envelope per line)."
AgentOpt = Annotated[str | None, typer.Option("--agent", help=AGENT_HELP)]
StateFileOpt = Annotated[str | None, typer.Option("--state-file", help=STATE_FILE_HELP)]
FromStartOpt = Annotated[bool, typer.Option("--from-start", help=FROM_START_HELP)]
WatchSinceOpt = Annotated[str | None, typer.Option("--since-event-id", help=WATCH_SINCE_HELP)]
FollowOpt = Annotated[bool, typer.Option("--follow", help="Keep watching after a match.")]
IdleExitOpt = Annotated[int | None, typer.Option("--idle-exit-ms", help=IDLE_EXIT_HELP)]
BatchLimitOpt = Annotated[
    int | None, typer.Option("--limit", help="Events per batch, 1-500 (default 50).")
]
PollOpt = Annotated[
    int | None, typer.Option("--poll-timeout-ms", help="Longest single wait, 1-300000 ms.")
]
WatchJsonOpt = Annotated[bool, typer.Option("--json", help=WATCH_JSON_HELP, callback=take_global)]
EXEC_CODEX_HELP = (
    "Instead of printing, wake Codex: `logstream deliver --agent NAME --codex` (its own cursor; "
    "takes --agent, --state-file, --from-start, --codex-bin and the log options only)."
)
ExecCodexOpt = Annotated[bool, typer.Option("--exec-codex", help=EXEC_CODEX_HELP)]


@app.command()
@filter_options
def watch(
    ctx: typer.Context,
    agent: AgentOpt = None,
    *,
    filters: FilterArgs,
    state_file: StateFileOpt = None,
    from_start: FromStartOpt = False,
    since_event_id: WatchSinceOpt = None,
    follow: FollowOpt = False,
    idle_exit_ms: IdleExitOpt = None,
    limit: BatchLimitOpt = None,
    poll_timeout_ms: PollOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: WatchJsonOpt = False,
    no_presence: NoPresenceOpt = False,
    presence_ttl_s: PresenceTtlOpt = None,
    exec_codex: ExecCodexOpt = False,
    codex_bin: CodexBinOpt = None,
    give_up_after: GiveUpOpt = None,
) -> None:
    """Wait for mail: exit 0 when matching events were printed, 2 on idle timeout, 130 on Ctrl-C.

    First run starts at the newest event (say --from-start to replay); later runs resume after
    the checkpoint in the state file (--from-start is then refused: delete the file to replay).
    Output is printed before each checkpoint, so a crash replays events (dedupe by id) and never
    skips one. With --hub and --agent, the agent is announced in the hub's presence while the
    watch runs (--no-presence: not). With --hub, a hub outage is ridden through from the cursor
    (one stderr line when it is lost, one when it is back; exit 3 past --give-up-after); a
    refused token exits 1.
    """
    if exec_codex:
        raise typer.Exit(_exec_codex(ctx.params, filters))
    try:
        opts = _watch_options(ctx.params, filters)
        on, ttl = not no_presence, presence_ttl_s
        who = announcer(
            opts.agent, hub, token, enabled=on, ttl_s=ttl, what="logstream watch", path="watch"
        )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    with announced(who):
        code = _run_watcher(opts, as_json, follow, (db, palace, hub, token), give_up_after)
    raise typer.Exit(code)


def _watch_options(params: dict[str, Any], filters: FilterArgs) -> WatchOptions:
    """The watch's options from its command line; the default state file is per log and agent
    (cursors.log_target names the log). Raises ValidationError."""
    from mempalace_logstream import config, cursors
    from mempalace_logstream import watch as watch_mod

    settings = config.Settings.from_env()
    palace = params.get("palace") or settings.palace
    return watch_mod.WatchOptions.parse(
        agent=params.get("agent"),
        state_file=params.get("state_file"),
        target=cursors.log_target(params.get("db") or settings.db, palace, params.get("hub")),
        palace=palace,
        since_event_id=params.get("since_event_id"),
        from_start=bool(params.get("from_start")),
        follow=bool(params.get("follow")),
        idle_exit_ms=params.get("idle_exit_ms"),
        limit=params.get("limit"),
        poll_timeout_ms=params.get("poll_timeout_ms"),
        **filters,
    )


WATCH_ONLY = ("since_event_id", "idle_exit_ms", "limit", "poll_timeout_ms", "as_json")


def _exec_codex(params: dict[str, Any], filters: FilterArgs) -> int:
    """`watch --exec-codex`: the Codex deliverer (`logstream deliver --codex`), which takes
    --agent's whole inbox; watch's own output and filter options are refused."""
    extra = [name for name in WATCH_ONLY if params.get(name) not in (None, False)]
    if extra or filters:
        flag = "--" + min([*extra, *filters]).replace("_", "-").replace("as-json", "json")
        raise fail(f"--exec-codex delivers the whole inbox of --agent; drop {flag}", 2)
    given = params.get
    return run_codex(
        agent=given("agent"),
        codex_bin=given("codex_bin"),
        state_file=given("state_file"),
        from_start=bool(given("from_start")),
        db=given("db"),
        palace=given("palace"),
        hub=given("hub"),
        token=given("token"),
        no_presence=bool(given("no_presence")),
        presence_ttl_s=given("presence_ttl_s"),
    )


def _run_watcher(
    opts: WatchOptions,
    as_json: bool,
    follow: bool,
    target: tuple[str | None, str | None, str | None, str | None],
    give_up_after: float | None,
) -> int:
    """Run the watcher to its exit code (0 matched, 2 idle, 130 interrupted, 1 error, 3 gave
    up on the hub)."""
    from mempalace_logstream import watch as watch_mod

    printer = _WatchPrinter(as_json, follow)
    try:
        client, policy = open_reader(*target, give_up_after, delivery="watch")
        try:
            hook = watch_crash_hook()
            # HubClient names call()'s first parameter `op`, watch.Client `name`; both are
            # only ever passed it positionally.
            reader = cast("Client", riding(client, policy))
            watcher = watch_mod.Watcher(reader, opts, printer, crash_hook=hook, human=not as_json)
            code = watcher.run()
        finally:
            close_after(client)
    except KeyboardInterrupt:
        code = watch_mod.EXIT_INTERRUPTED
    except reconnect.GaveUpError:
        code = reconnect.EXIT_GAVE_UP
    except errors.LogstreamError as exc:
        if not interrupted(exc):
            if STATE.debug:
                raise
            raise fail(exc.message) from None
        code = watch_mod.EXIT_INTERRUPTED
    except BrokenPipeError:
        raise typer.Exit(1) from None
    if code == watch_mod.EXIT_INTERRUPTED and not as_json:
        printer.note("Stopped.")
    return code
