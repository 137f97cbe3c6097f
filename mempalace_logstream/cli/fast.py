"""The commands agents call most, answered before typer loads (issue 25): `inbox` (hook.py's
`run_inbox`), and `list`, `get`, `wait`, `tail --no-follow` on a local SQLite log, read by the
lean reader (store/lean.py, no SQLAlchemy); `inbox`, `list`, `get` and `wait` (matches there
already) through `--hub` too (httpx; a `wait` that blocks and `tail` ride outages there with
typer's reconnect policy); and through `--hub` the writes `append`, `ack`, `task create`, the
task moves, and `task status`.

One generic parser (fastargs.py) reads a command line against `COMMANDS`, a table of each
command's options as its typer command declares them (flag, parameter, kind, environment
variable, default, required; tests/test_cli_fast.py holds the table to the typer commands'
real parameters). A command line it does not fully understand (help, a typo, a value that
looks like an option, an option given twice, an option only typer handles), a hub, a read the
lean reader leaves to the store, or any error of a read, returns None: the typer app then runs
the whole command line and answers in its own words. What the command does is `cli/plain.py`'s
and `cli/writes.py`'s, shared with the typer commands: the same arguments, the same call, the
same printed bytes. A write is handed to typer only before its call is made (a local write,
today: `plain.local_write`); after, the fast path tells the outcome itself (writes.py
`fast_write`), or typer would make it a second time.

Must not import typer, click, rich, the store or SQLAlchemy.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.cli import fastargs, plain, writes
from mempalace_logstream.cli.fastargs import GLOBALS, Command, Options

FILTER_OPTIONS: Options = {flag: (name, "multi") for name, flag, _help in plain.FILTERS}
PREVIEW: Options = {"--preview": ("preview", "on"), "--no-preview": ("preview", "off")}
# rich decides colour from these whatever stdout is: a plain `tail` line is then not its own.
RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def parse(argv: Sequence[str]) -> tuple[Command, dict[str, Any]] | None:
    """(command, its parameters) for a command line of `COMMANDS` (fastargs.py), else None."""
    return fastargs.parse(COMMANDS, argv)


def run(argv: Sequence[str]) -> int | None:
    """Answer `argv` here: the exit code, or None for the typer app to run it. A reader that
    closed the pipe early (`logstream list | head -1`) ends it quietly with exit 1, Ctrl-C
    with 130, as typer ends its run."""
    parsed = parse(argv)
    if parsed is None:
        return None
    cmd, params = parsed
    if params.get("hub") and not cmd.hub:
        return None  # through a hub: the typer path (its reconnect policy)
    if params.get("hub"):
        plain.without_httpx_cli()
    try:
        return cmd.run(params)
    except BrokenPipeError:
        plain.silence_stdout()
        return 1
    except KeyboardInterrupt:
        return 130  # typer's ending of Ctrl-C: nothing said


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
    """`wait` when matches are there already; one that must block is the store's, or through
    a hub typer's (its reconnect policy rides an outage while it waits): the hub is asked for
    what is there now (`timeout_ms` 0, once the given timeout is known good), and an empty
    answer goes to typer, which waits."""
    filters = plain.given_filters(p)
    args = plain.wait_args(filters, p["since_event_id"], p["timeout_ms"], p["limit"], p["preview"])
    if p["hub"]:
        from mempalace_logstream import validation

        try:
            validation.timeout_ms(p["timeout_ms"])
        except errors.ValidationError:
            return None  # refused: typer says it
        args = {**args, "timeout_ms": 0}
    out = _read(p, "event_wait", args)
    if out is None or (p["hub"] and not out["events"]):
        return None
    _out(plain.emit_text(out, p["as_json"], plain.wait_text(out)))
    return 0


def run_tail(p: dict[str, Any]) -> int | None:
    """`tail --no-follow`, as NDJSON or plain lines (stdout not a terminal: rich would print
    them unstyled, the same bytes); the first read's error or a read shape the lean reader
    lacks goes to typer before anything is printed. Through a hub: `_tail_hub`."""
    if p["follow"] or (p["from_start"] and p["since_event_id"] is not None):
        return None
    if not p["as_json"] and (sys.stdout.isatty() or any(n in os.environ for n in RICH_ENV)):
        return None
    from mempalace_logstream.identity import actor

    filters = plain.inbox_filters(plain.given_filters(p), p["agent"])
    if actor.reader(filters) is not None:
        return None  # the delivery ledger records what a named reader is shown: the store's
    start = {"from_start": p["from_start"], "since_event_id": p["since_event_id"]}
    line = plain.tail_json if p["as_json"] else _plain_line
    if p["hub"]:
        return _tail_hub(p, filters, start, line)
    reader = plain.open_lean(p["db"], p["palace"], p["durability"])
    if reader is None:
        return None
    from mempalace_logstream.store import lean

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


def _tail_hub(
    p: dict[str, Any],
    filters: dict[str, Any],
    start: dict[str, Any],
    line: Callable[[dict[str, Any]], str],
) -> int | None:
    """`tail --no-follow --hub` when what there is fits in one page (`plain.TAIL_PAGE`): it is
    read, then printed. More than a page, or any failure of the hub (an outage the typer
    path rides through, a refusal it words), goes to typer before anything is printed; a
    read twice is harmless."""
    try:
        client = plain.hub_client(p["hub"], p["token"])
    except Exception:  # noqa: BLE001 - the typer path reports it
        return None
    try:
        batches = list(itertools.islice(plain.tail_events(client, filters, start, None, False), 2))
    except Exception:  # noqa: BLE001 - the typer path reports it (or rides an outage)
        return None
    finally:
        client.close()
    if len(batches) > 1:
        return None
    try:
        for events in batches:
            sys.stdout.write("".join(line(e) + "\n" for e in events))
        sys.stdout.flush()
    except BrokenPipeError:
        plain.silence_stdout()
    return 0


def run_append(p: dict[str, Any]) -> int | None:
    return writes.fast_write(p, "event_append", writes.append_args, writes.appended_text, True)


def run_ack(p: dict[str, Any]) -> int | None:
    return writes.fast_write(p, "event_ack", writes.ack_args, writes.acked_text)


def run_create(p: dict[str, Any]) -> int | None:
    return writes.fast_write(p, "task_create", writes.create_args, writes.created_text, True)


def _run_move(action: str) -> Callable[[dict[str, Any]], int | None]:
    def run_move(p: dict[str, Any]) -> int | None:
        build = functools.partial(writes.move_args, action)
        return writes.fast_write(p, "task_update", build, writes.moved_text)

    return run_move


def run_status(p: dict[str, Any]) -> int | None:
    """`task status`: a read, of a hub or of a local log through the lean writer (which
    serves it); an error goes to typer, which reads again and says it."""
    args = {"task_id": p["task_id"]}
    if p["hub"]:
        out = plain.hub_read(p["hub"], p["token"], "task_status", args)
    else:
        try:
            out = plain.local_write(p["db"], p["palace"], p["durability"], "task_status", args)
        except errors.LogstreamError:
            return None
    if out is None:
        return None
    _out(plain.emit_text(out, p["as_json"], writes.status_text(out)))
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
        hub=True,
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
        hub=True,
    ),
}

# ----------------------------------------------------------------------------- writes

_GLOBAL_NONE = {"db": None, "palace": None, "hub": None, "token": None, "as_json": False}
_BODY: Options = {"--body": ("body", "str"), "--body-file": ("body_file", "str")}
_WRITER: Options = {"--from-agent": ("from_agent", "str"), **_BODY}
_EVENT_FIELDS = ("to_agent", "topic", "correlation_id", "branch", "base_commit", "status")
COMMANDS[("append",)] = Command(
    ("append",),
    (),
    {
        **{f"--{n}": (n, "str") for n in ("type", "stream", "room")},
        **{"--" + n.replace("_", "-"): (n, "str") for n in _EVENT_FIELDS},
        **_WRITER,
        "--metadata": ("metadata", "str"),
        "--artifact-id": ("artifact_id", "multi"),
        "--idempotency-key": ("idempotency_key", "str"),
        **GLOBALS,
    },
    run_append,
    {
        **dict.fromkeys(("type", "stream", "room", "from_agent", *_EVENT_FIELDS)),
        **dict.fromkeys(("body", "body_file", "metadata", "artifact_id", "idempotency_key")),
        **_GLOBAL_NONE,
    },
    hub=True,
    required=("type", "stream", "room", "from_agent"),
)
COMMANDS[("ack",)] = Command(
    ("ack",),
    ("event_id",),
    {**_WRITER, "--status": ("status", "str"), "--topic": ("topic", "str"), **GLOBALS},
    run_ack,
    {**dict.fromkeys(("from_agent", "status", "body", "body_file", "topic")), **_GLOBAL_NONE},
    hub=True,
    required=("from_agent",),
)
_CREATE_TEXT = ("project", "to_agent", "branch", "base_commit", "goal", "goal_file", "done")
_CREATE_INT = ("lease_ms", "claim_timeout_ms", "max_reminders", "thread_budget")
COMMANDS[("task", "create")] = Command(
    ("task", "create"),
    (),
    {
        **{"--" + n.replace("_", "-"): (n, "str") for n in _CREATE_TEXT},
        **{"--done-file": ("done_file", "str"), "--parent": ("parent", "str")},
        "--parent-correlation-id": ("parent_correlation_id", "str"),
        "--from-agent": ("from_agent", "str"),
        **{"--" + n.replace("_", "-"): (n, "int") for n in _CREATE_INT},
        **GLOBALS,
    },
    run_create,
    {
        **dict.fromkeys((*_CREATE_TEXT, "done_file", "parent", "parent_correlation_id")),
        **dict.fromkeys(("from_agent", *_CREATE_INT)),
        **_GLOBAL_NONE,
    },
    hub=True,
    required=("project", "from_agent", "to_agent", "branch", "base_commit"),
)
# A task move's own options beyond the writer and a body (cli/tasks.py `_OWN`), and typer's
# defaults of them.
_MOVE_OWN: dict[str, tuple[Options, dict[str, Any]]] = {
    "claim": ({"--lease-ms": ("lease_ms", "int")}, {"lease_ms": None}),
    "progress": ({"--progress": ("progress_option", "float")}, {"progress_option": None}),
    "complete": (
        {
            "--disposition": ("disposition", "str"),
            "--artifact-id": ("artifact_id", "multi"),
            "--verification": ("verification", "multi"),
        },
        dict.fromkeys(("disposition", "artifact_id", "verification")),
    ),
    "fail": ({"--retryable": ("retryable", "on")}, {"retryable": False}),
}
_MOVES = ("claim", "progress", "block", "unblock", "complete", "fail", "decline", "cancel")
for _action in (*_MOVES, "accept", "reject", "reopen"):  # cli/tasks.py MOVES
    _own, _defaults = _MOVE_OWN.get(_action, ({}, {}))
    _progress = _action == "progress"  # also the optional argument after the task
    COMMANDS[("task", _action)] = Command(
        ("task", _action),
        ("task_id",),
        {**_WRITER, **_own, **GLOBALS},
        _run_move(_action),
        {
            **dict.fromkeys(("from_agent", "body", "body_file", *(("progress",) * _progress))),
            **_defaults,
            **_GLOBAL_NONE,
        },
        hub=True,
        optional=(("progress", "float"),) * _progress,
        required=("from_agent",),
    )
COMMANDS[("task", "status")] = Command(
    ("task", "status"), ("task_id",), GLOBALS, run_status, _GLOBAL_NONE, hub=True
)
