"""`logstream tail`: follow any filter, as `nats sub` or `kafka-console-consumer` do (issue 13).

Starts at the newest event (or `--from-start`, `--since-event-id ID`, `--since 10m`), prints
what is already there, then follows: woken by the log's push wake-ups (`event_wait`), never
by sleeping. No state file. NDJSON with `--json`, else one readable line per event, coloured
only on a terminal (rich honours NO_COLOR). Ctrl-C exits 130 and a closed pipe (`| head`)
exits 0, both quietly.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from mempalace_logstream import display, errors, reconnect
from mempalace_logstream import validation as v
from mempalace_logstream.cli import plain
from mempalace_logstream.cli.filters import FilterArgs, filter_options
from mempalace_logstream.cli.options import (
    DbOpt,
    GiveUpOpt,
    HubOpt,
    PalaceOpt,
    TokenOpt,
    take_global,
)
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import (
    STATE,
    close_after,
    fail,
    interrupted,
    open_reader,
    riding,
)

if TYPE_CHECKING:
    from mempalace_logstream.watch import Client

FROM_START_HELP = "Start at the first event of the log."
SINCE_ID_HELP = "Start after this event."
SINCE_HELP = (
    "Start at events created this long ago (30s, 10m, 2h, 1d) or since a time "
    "(YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)."
)
FOLLOW_HELP = "Keep following after the events already there (default); --no-follow exits."
JSON_HELP = "One JSON event per line (NDJSON)."
FromStartOpt = Annotated[bool, typer.Option("--from-start", help=FROM_START_HELP)]
SinceIdOpt = Annotated[str | None, typer.Option("--since-event-id", help=SINCE_ID_HELP)]
SinceOpt = Annotated[str | None, typer.Option("--since", help=SINCE_HELP)]
FollowOpt = Annotated[bool, typer.Option("--follow/--no-follow", help=FOLLOW_HELP)]
TailJsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP, callback=take_global)]
AGENT_HELP = "Your id: follow your inbox (to you or *), never your own writes."
MONITOR_HELP = (
    "Claude Code's Monitor tool (needs --agent): one line of at most 200 characters per new "
    "inbox event (a burst in one line), its own cursor per log and agent, exit 0 at "
    "--max-runtime with a line saying how to re-arm."
)
MAX_RUNTIME_HELP = "With --monitor: exit 0 after this long (90s, 25m, 1h, or seconds; default 25m)."
STATE_FILE_HELP = (
    "With --monitor: cursor file (default <palace>/monitor/<log>/<agent>.json; '' = none)."
)
ALLOW_UNVERIFIED_HELP = (
    "With --monitor: once agents have keys, also tell of senders whose events are not verified."
)
AgentOpt = Annotated[str | None, typer.Option("--agent", help=AGENT_HELP)]
MonitorOpt = Annotated[bool, typer.Option("--monitor", help=MONITOR_HELP)]
MaxRuntimeOpt = Annotated[str | None, typer.Option("--max-runtime", help=MAX_RUNTIME_HELP)]
StateFileOpt = Annotated[str | None, typer.Option("--state-file", help=STATE_FILE_HELP)]
AllowUnverifiedOpt = Annotated[bool, typer.Option("--allow-unverified", help=ALLOW_UNVERIFIED_HELP)]

_DURATION = re.compile(r"^(\d{1,9})([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
FLAGS = plain.TAIL_FLAGS


@app.command()
@filter_options
def tail(
    filters: FilterArgs,
    from_start: FromStartOpt = False,
    since_event_id: SinceIdOpt = None,
    since: SinceOpt = None,
    follow: FollowOpt = True,
    as_json: TailJsonOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    give_up_after: GiveUpOpt = None,
    agent: AgentOpt = None,
    monitor: MonitorOpt = False,
    max_runtime: MaxRuntimeOpt = None,
    state_file: StateFileOpt = None,
    allow_unverified: AllowUnverifiedOpt = False,
) -> None:
    """Print matching events as they arrive (no state file); Ctrl-C to stop (exit 130).

    Starts at the newest event unless --from-start, --since-event-id or --since says where;
    with --no-follow, prints what is there and exits 0. With --hub, a hub outage is ridden
    through from the last event printed (one stderr line when the hub is lost, one when it is
    back; exit 3 past --give-up-after); a refused token exits 1. --agent NAME follows NAME's
    inbox; with --monitor, in the lines Claude Code's Monitor tool wakes the model with.
    """
    given = [flag for flag, val in _starts(from_start, since_event_id, since) if val]
    if len(given) > 1:
        raise fail(f"{given[1]} cannot be combined with {given[0]}: give one of them", 2)
    _check_monitor_flags(monitor, agent, as_json, since, follow)
    _check_monitor_only(monitor, max_runtime, state_file, allow_unverified)
    if monitor:
        assert agent is not None
        runtime = duration_s(max_runtime) if max_runtime is not None else None
        mon = {"agent": agent, "state_file": state_file, "max_runtime_s": runtime}
        mon |= {"allow_unverified": allow_unverified, "from_start": from_start}
        mon |= {"since_event_id": since_event_id}
        raise typer.Exit(_run_monitor(filters, mon, (db, palace, hub, token), give_up_after))
    filters = plain.inbox_filters(filters, agent)
    since_created_at = since_time(since) if since is not None else None
    start = {"from_start": from_start, "since_event_id": since_event_id}
    target = (db, palace, hub, token)
    code = _run(filters, start, since_created_at, follow, as_json, target, give_up_after)
    raise typer.Exit(code)


def _check_monitor_flags(
    monitor: bool, agent: str | None, as_json: bool, since: str | None, follow: bool
) -> None:
    if not monitor:
        return
    if agent is None:
        raise fail("--monitor needs --agent NAME: it tells NAME of NAME's new mail", 2)
    for flag, val in (
        ("--json", as_json),
        ("--since", since is not None),
        ("--no-follow", not follow),
    ):
        if val:
            raise fail(f"{flag} cannot be combined with --monitor: it prints its own lines", 2)


def _check_monitor_only(monitor: bool, *values: Any) -> None:
    flags = ("--max-runtime", "--state-file", "--allow-unverified")
    for flag, val in zip(flags, values, strict=True):
        if val not in (None, False) and not monitor:
            raise fail(f"{flag} applies only with --monitor", 2)


def duration_s(text: str) -> float:
    """`--max-runtime`: a duration (`90s`, `25m`, `1h`) or a number of seconds, > 0."""
    raw = text.strip()
    m = _DURATION.match(raw)
    if m:
        seconds = timedelta(**{_UNITS[m.group(2)]: int(m.group(1))}).total_seconds()
    else:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise fail(
            f"--max-runtime {text!r} is not a positive duration (90s, 25m, 1h, or seconds)",
            2,
            field="max_runtime",
        )
    return seconds


def _run_monitor(
    filters: FilterArgs,
    mon: dict[str, Any],
    target: tuple[str | None, str | None, str | None, str | None],
    give_up_after: float | None,
) -> int:
    """Monitor mode (monitor.py) to its exit code: 0 at --max-runtime, 130 on Ctrl-C, 0 when
    the reader closed stdout, 3 when the hub stayed lost past --give-up-after, 1 on errors."""
    from mempalace_logstream import config, cursors, monitor
    from mempalace_logstream.cli.announce import announced, announcer

    db, palace, hub, token = target
    settings = config.Settings.from_env()
    palace = palace or settings.palace
    key = cursors.log_target(db or settings.db, palace, hub)
    try:
        named_hub = hub.rstrip("/") if hub and STATE.hub_typed else None
        opts = monitor.MonitorOptions.parse(
            target=key, palace=palace, hub=named_hub, **mon, **filters
        )
        client, policy = open_reader(db, palace, hub, token, give_up_after, delivery="monitor")
        # With a hub, the agent is announced with the monitor path while this runs, so that
        # presence knows it can be woken (issue 20: wakeable).
        who = announcer(
            mon["agent"], hub, token, enabled=True, ttl_s=None, what="Monitor mode", path="monitor"
        )
        try:
            reader = cast("Client", riding(client, policy))
            running = monitor.Monitor(reader, opts, write=_line_out, note=_note)
            with announced(who):
                return running.run()
        finally:
            close_after(client)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        plain.silence_stdout()
        return 0
    except reconnect.GaveUpError:
        return reconnect.EXIT_GAVE_UP
    except errors.LogstreamError as exc:
        if interrupted(exc):
            return 130
        if STATE.debug:
            raise
        raise fail(plain.name_option(exc, FLAGS)) from None


def _line_out(line: str) -> None:
    """A Monitor line (monitor.py shows nothing hidden: its values are quoted or escaped)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _note(message: str) -> None:
    sys.stderr.write(display.terminal(message) + "\n")
    sys.stderr.flush()


def _starts(from_start: bool, since_event_id: str | None, since: str | None) -> list[Any]:
    return [
        ("--from-start", from_start),
        ("--since-event-id", since_event_id is not None),
        ("--since", since is not None),
    ]


def since_time(text: str, now: datetime | None = None) -> str:
    """`--since`: a duration back from now (`10m`) or a time, as a `since_created_at` bound;
    a usage error naming the option otherwise."""
    m = _DURATION.match(text.strip())
    if m:
        delta = timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        at = (now or datetime.now(UTC)) - delta
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        bound = v.since_created_at(text, "since")
    except errors.ValidationError:
        bound = None
    if bound is None:
        raise fail(
            f"--since {text!r} is not a duration (30s, 10m, 2h, 1d) or a time "
            "(YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ)",
            2,
            field="since",
        )
    return bound[:19] + "Z"  # the validator's own form, seconds precision


def _run(
    filters: FilterArgs,
    start: dict[str, Any],
    since_created_at: str | None,
    follow: bool,
    as_json: bool,
    target: tuple[str | None, str | None, str | None, str | None],
    give_up_after: float | None = None,
) -> int:
    """Follow to the exit code: 0 (--no-follow done, or stdout closed), 130 on Ctrl-C, 3 when
    the hub stayed lost past --give-up-after."""
    write = _json_writer() if as_json else _line_writer()
    try:
        client, policy = open_reader(*target, give_up_after)
        try:
            # HubClient's call() names its first parameter `op`
            reader = cast("Client", riding(client, policy))
            for events in plain.tail_events(reader, filters, start, since_created_at, follow):
                write(events)
        finally:
            close_after(client)
    except KeyboardInterrupt:
        return 130
    except reconnect.GaveUpError:
        return reconnect.EXIT_GAVE_UP
    except BrokenPipeError:
        plain.silence_stdout()
        return 0
    except errors.LogstreamError as exc:
        if interrupted(exc):
            return 130
        if STATE.debug:
            raise
        raise fail(plain.name_option(exc, FLAGS)) from None
    return 0


# ----------------------------------------------------------------------------- printing


def _json_writer() -> Callable[[list[dict[str, Any]]], None]:
    def write(events: list[dict[str, Any]]) -> None:
        for event in events:
            sys.stdout.write(plain.tail_json(event) + "\n")
        sys.stdout.flush()

    return write


def _line_writer() -> Callable[[list[dict[str, Any]]], None]:
    """Readable lines; rich colours them only on a terminal and honours NO_COLOR."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1: ours exits 0, quietly
            raise BrokenPipeError

    # NO_COLOR: no escape codes at all (rich alone would still print bold and dim).
    no_color = bool(os.environ.get("NO_COLOR"))
    console = _Console(
        color_system=None if no_color else "auto",
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )

    def write(events: list[dict[str, Any]]) -> None:
        for event in events:
            console.print(_styled(event))
        sys.stdout.flush()

    return write


def _styled(e: dict[str, Any]) -> Any:
    """One event as a rich Text (never read as markup), every piece `display.terminal`'d."""
    from rich.text import Text

    text = Text()
    for piece, style in plain.tail_pieces(e):
        text.append(piece, style=style)
    return text
