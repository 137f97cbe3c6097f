"""The commands agents call most, answered before typer loads (issue 25): `inbox` (hook.py's
`run_inbox`), and `list`, `get`, `wait`, `tail --no-follow` on a local SQLite log, read by the
lean reader (store/lean.py, no SQLAlchemy); `inbox`, `list` and `get` through `--hub` too
(httpx; `wait` and `tail` there ride outages with typer's reconnect policy).

One generic parser reads a command line against `COMMANDS`, a table of each command's
options as its typer command declares them (flag, parameter, kind, environment variable,
default; tests/test_cli_fast.py holds the table to the typer commands' real parameters). A
command line it does not fully understand (help, a typo, a value that looks like an option,
an option given twice, an option only typer handles), a hub, a read the lean reader leaves to
the store, or any error, returns None: the typer app then runs the whole command line and
answers in its own words. What the command does is `cli/plain.py`'s, shared with the typer
commands: the same arguments, the same read, the same printed bytes.

Must not import typer, click, rich, the store or SQLAlchemy.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.cli import plain

# An option: flag -> (parameter, kind). Kinds: "str" and "int" take a value, "multi" a value
# each time it is given (a list), "on"/"off" are the two flags of a boolean.
Options = dict[str, tuple[str, str]]

# The options every command here takes, before the command or after it (cli/options.py).
GLOBALS: Options = {
    "--db": ("db", "str"),
    "--palace": ("palace", "str"),
    "--hub": ("hub", "str"),
    "--token": ("token", "str"),
    "--json": ("as_json", "on"),
}
# The root's own options (cli/root.py), before the command only.
ROOT: Options = {**GLOBALS, "--debug": ("debug", "on"), "--durability": ("durability", "str")}
ROOT_DEFAULTS: dict[str, Any] = {"debug": False, "durability": "full"}
# The environment variable each option reads when it is not on the command line.
ENVVARS = {
    "db": "LOGSTREAM_DB",
    "palace": "MEMPALACE_PALACE_PATH",
    "hub": "LOGSTREAM_HUB",
    "token": "LOGSTREAM_TOKEN",
    "durability": "MEMPALACE_LOGSTREAM_DURABILITY",
}
FILTER_OPTIONS: Options = {flag: (name, "multi") for name, flag, _help in plain.FILTERS}
PREVIEW: Options = {"--preview": ("preview", "on"), "--no-preview": ("preview", "off")}
_INT = re.compile(r"-?[0-9]+")
# rich decides colour from these whatever stdout is: a plain `tail` line is then not its own.
RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


@dataclass(frozen=True)
class Command:
    """A command the fast path answers: its words, positional arguments, options, the
    defaults of its parameters (typer's), the typer command's parameters left to typer (not
    in `options`: given, the command line is typer's), and `run(params)` -> exit code, or
    None to hand the command line to typer."""

    words: tuple[str, ...]
    arguments: tuple[str, ...]
    options: Options
    run: Callable[[dict[str, Any]], int | None]
    defaults: dict[str, Any] = field(default_factory=dict)
    slow: tuple[str, ...] = ()
    hub: bool = False  # answers through --hub too (else a hub's call is the typer path's)


def parse(argv: Sequence[str]) -> tuple[Command, dict[str, Any]] | None:
    """(command, its parameters) for a command line this parser fully understands, else
    None. Parameters are as typer gives them: the command's own option, else the one given
    before the command, else the environment variable, else the default."""
    head = _scan(argv, ROOT, None)
    if head is None:
        return None
    root, at = head
    rest = list(argv[at:])
    cmd = COMMANDS.get(tuple(rest[:2])) or COMMANDS.get(tuple(rest[:1]))
    if cmd is None:
        return None
    positional: list[str] = []
    tail = _scan(rest[len(cmd.words) :], cmd.options, positional)
    if tail is None or len(positional) != len(cmd.arguments):
        return None
    own = tail[0]
    names = {name for name, _kind in cmd.options.values()}
    params: dict[str, Any] = {**ROOT_DEFAULTS, **cmd.defaults}
    for name, var in ENVVARS.items():
        if (name in names or name in ROOT_DEFAULTS) and os.environ.get(var):
            params[name] = os.environ[var]
    for name, value in root.items():
        if name not in names and name not in ROOT_DEFAULTS:
            return None  # typer: "--x does not apply to `logstream cmd`"
        params[name] = value
    params.update(own)
    params.update(zip(cmd.arguments, positional, strict=True))
    return cmd, params


def _scan(
    args: Sequence[str], table: Options, positional: list[str] | None
) -> tuple[dict[str, Any], int] | None:
    """Options of `table` (`--opt value`, `--opt=value`, flags) up to the first bare word
    when `positional` is None (the command), else to the end, bare words into `positional`.
    None on anything else: an unknown option, a value that starts with "-", a bad integer,
    an option given twice (typer keeps the last), "--"."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if positional is None:
                return out, i
            positional.append(arg)
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        spec = table.get(flag)
        if spec is None:
            return None
        name, kind = spec
        if kind in ("on", "off"):
            if eq:
                return None
            value: Any = kind == "on"
        elif eq:
            value = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            i += 1
            value = args[i]
        else:
            return None
        if kind == "int":
            if not _INT.fullmatch(value):
                return None
            value = int(value)
        if kind == "multi":
            out.setdefault(name, []).append(value)
        elif name in out:
            return None
        else:
            out[name] = value
        i += 1
    return None if positional is None else (out, i)


def run(argv: Sequence[str]) -> int | None:
    """Answer `argv` here: the exit code, or None for the typer app to run it."""
    parsed = parse(argv)
    if parsed is None:
        return None
    cmd, params = parsed
    if params.get("hub") and not cmd.hub:
        return None  # through a hub: the typer path (its reconnect policy)
    return cmd.run(params)


# ----------------------------------------------------------------------------- commands


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _read(params: dict[str, Any], op: str, args: dict[str, Any]) -> dict[str, Any] | None:
    if params["hub"]:
        return plain.hub_read(params["hub"], params["token"], op, args)
    return plain.lean_read(params["db"], params["palace"], params["durability"], op, args)


def run_list(p: dict[str, Any]) -> int | None:
    filters = plain.given_filters(p)
    args = plain.list_args(
        filters,
        p["since_event_id"],
        p["before_event_id"],
        p["since_created_at"],
        p["limit"],
        p["order"],
        p["preview"],
    )
    out = _read(p, "event_list", args)
    if out is None:
        return None
    _out(plain.emit_text(out, p["as_json"], plain.list_text(out)))
    return 0


def run_get(p: dict[str, Any]) -> int | None:
    out = _read(p, "event_get", {"event_id": p["event_id"]})
    if out is None:
        return None
    _out(plain.emit_text(out, p["as_json"], plain.get_text(out)))
    return 0


def run_wait(p: dict[str, Any]) -> int | None:
    """`wait` when matches are there already; one that must block is the store's."""
    filters = plain.given_filters(p)
    args = plain.wait_args(filters, p["since_event_id"], p["timeout_ms"], p["limit"], p["preview"])
    out = _read(p, "event_wait", args)
    if out is None:
        return None
    _out(plain.emit_text(out, p["as_json"], plain.wait_text(out)))
    return 0


def run_tail(p: dict[str, Any]) -> int | None:
    """`tail --no-follow`, as NDJSON or plain lines (stdout not a terminal: rich would print
    them unstyled, the same bytes); the first read's error or a read shape the lean reader
    lacks goes to typer before anything is printed."""
    if p["follow"] or (p["from_start"] and p["since_event_id"] is not None):
        return None
    if not p["as_json"] and (sys.stdout.isatty() or any(n in os.environ for n in RICH_ENV)):
        return None
    from mempalace_logstream.identity import actor

    filters = plain.inbox_filters(plain.given_filters(p), p["agent"])
    if actor.reader(filters) is not None:
        return None  # the delivery ledger records what a named reader is shown: the store's
    reader = plain.open_lean(p["db"], p["palace"], p["durability"])
    if reader is None:
        return None
    from mempalace_logstream.store import lean

    start = {"from_start": p["from_start"], "since_event_id": p["since_event_id"]}
    line = plain.tail_json if p["as_json"] else _plain_line
    printed = False
    try:
        for events in plain.tail_events(reader, filters, start, None, follow=False):
            sys.stdout.write("".join(line(e) + "\n" for e in events))
            sys.stdout.flush()
            printed = True
    except BrokenPipeError:
        plain.silence_stdout()
        return 0
    except KeyboardInterrupt:
        return 130
    except (lean.Unplanned, errors.LogstreamError) as exc:
        if not printed:
            return None
        if isinstance(exc, lean.Unplanned) or p["debug"]:
            raise
        text = plain.name_option(exc, plain.TAIL_FLAGS)
        sys.stderr.write(plain.error_text(text, getattr(exc, "field", None), p["as_json"]) + "\n")
        return 1
    finally:
        reader.close()
    return 0


def inbox_args(p: dict[str, Any]) -> dict[str, Any]:
    """`hook.run_inbox`'s arguments: the typer command's, with the root's --debug and
    --durability."""
    names = (
        *("agent", "hook", "state_file", "from_start", "limit", "max_body", "as_json"),
        *("allow_unverified", "db", "palace", "hub", "token", "durability", "debug"),
    )
    return {name: p[name] for name in names}


def run_inbox(p: dict[str, Any]) -> int | None:
    """`logstream inbox` (hook.py's `run_inbox`: the typer command's one implementation)."""
    from mempalace_logstream import hook

    return hook.run_inbox(**inbox_args(p))


def _plain_line(e: dict[str, Any]) -> str:
    return "".join(piece for piece, _style in plain.tail_pieces(e))


_READ: Options = {**FILTER_OPTIONS, **GLOBALS}
_NONE = dict.fromkeys(("db", "palace", "hub", "token", *(n for n, _f, _h in plain.FILTERS)))
COMMANDS: dict[tuple[str, ...], Command] = {
    ("inbox",): Command(
        ("inbox",),
        (),
        {
            "--agent": ("agent", "str"),
            "--hook": ("hook", "str"),
            "--state-file": ("state_file", "str"),
            "--from-start": ("from_start", "on"),
            "--limit": ("limit", "int"),
            "--max-body": ("max_body", "int"),
            "--allow-unverified": ("allow_unverified", "on"),
            **GLOBALS,
        },
        run_inbox,
        {
            **dict.fromkeys(("agent", "hook", "state_file", "limit", "max_body")),
            **{"from_start": False, "allow_unverified": False, "as_json": False},
            **{"db": None, "palace": None, "hub": None, "token": None},
        },
        hub=True,
    ),
    ("list",): Command(
        ("list",),
        (),
        {
            **_READ,
            "--since-event-id": ("since_event_id", "str"),
            "--before-event-id": ("before_event_id", "str"),
            "--since-created-at": ("since_created_at", "str"),
            "--limit": ("limit", "int"),
            "--order": ("order", "str"),
            **PREVIEW,
        },
        run_list,
        {
            **_NONE,
            **dict.fromkeys(("since_event_id", "before_event_id", "since_created_at")),
            **{"limit": None, "order": None, "preview": False, "as_json": False},
        },
        slow=("from_agent",),
        hub=True,
    ),
    ("get",): Command(
        ("get",),
        ("event_id",),
        GLOBALS,
        run_get,
        {"db": None, "palace": None, "hub": None, "token": None, "as_json": False},
        hub=True,
    ),
    ("wait",): Command(
        ("wait",),
        (),
        {
            **_READ,
            "--since-event-id": ("since_event_id", "str"),
            "--timeout-ms": ("timeout_ms", "int"),
            "--limit": ("limit", "int"),
            **PREVIEW,
        },
        run_wait,
        {
            **_NONE,
            **{"since_event_id": None, "timeout_ms": None, "limit": None},
            **{"preview": False, "as_json": False},
        },
        slow=("from_agent", "give_up_after"),
    ),
    ("tail",): Command(
        ("tail",),
        (),
        {
            **_READ,
            "--from-start": ("from_start", "on"),
            "--since-event-id": ("since_event_id", "str"),
            "--follow": ("follow", "on"),
            "--no-follow": ("follow", "off"),
            "--agent": ("agent", "str"),
        },
        run_tail,
        {
            **_NONE,
            **{"from_start": False, "since_event_id": None, "follow": True},
            **{"as_json": False, "agent": None},
        },
        slow=(
            *("from_agent", "since", "give_up_after", "monitor", "max_runtime", "state_file"),
            "allow_unverified",
        ),
    ),
}
