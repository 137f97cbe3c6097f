"""What the typer commands and the fast path (`cli/fast.py`) share, without typer: the read
commands' arguments as the core takes them, the printed answers, tail's reading loop, the lean
read, and one hub call (issue 25). One implementation each: `logstream list` says the same
bytes whichever path ran it. The write commands' arguments and answers are `cli/writes.py`'s.

Must not import typer, click, rich, the store or SQLAlchemy (store/lean.py only inside
`lean_read`, store/lean_write.py and store/options.py only inside `local_write`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mempalace_logstream import config, display, errors

if TYPE_CHECKING:
    from mempalace_logstream.hub_client import HubClient
    from mempalace_logstream.store.lean import LeanReader
    from mempalace_logstream.watch import Client

# (parameter, flag, help): the filters of every read (event_list, event_wait, watch), in the
# order help shows them (cli/filters.py gives them to the typer commands).
FILTERS = (
    ("stream", "--stream", "Stream filter (repeat = OR)."),
    ("room", "--room", "Room filter (repeat = OR)."),
    ("topic", "--topic", "Topic filter (repeat = OR)."),
    ("type", "--type", "Event type filter (repeat = OR)."),
    ("to_agent", "--to-agent", "Inbox: to this agent or to * (repeat = OR)."),
    ("writer", "--writer", "Author filter (repeat = OR)."),
    ("exclude_writer", "--exclude-writer", "Leave out events by this author (repeat)."),
    ("correlation_id", "--correlation-id", "Thread (task id) filter (repeat = OR)."),
    ("status", "--status", "Status filter (repeat = OR)."),
)
# A domain error's field, as the option of `tail` that set it (errors name the option).
TAIL_FLAGS = {
    "since_event_id": "--since-event-id",
    "since_created_at": "--since",
    **{name: flag for name, flag, _help in FILTERS},
}
TAIL_PAGE = 200  # events per read of `tail`
TAIL_WAIT_MS = 60_000  # longest single wait of `tail`; a wake-up ends it at once


def given_args(**kw: Any) -> dict[str, Any]:
    """The arguments the user gave: None and empty repeats mean "not given"."""
    return {k: val for k, val in kw.items() if val not in (None, [])}


def given_filters(values: dict[str, Any]) -> dict[str, Any]:
    """The filters among a command's parameters that were given (each a list of values)."""
    names = (name for name, _flag, _help in FILTERS)
    return {name: val for name in names if (val := values.get(name)) not in (None, [])}


def list_args(
    filters: dict[str, Any],
    since_event_id: str | None = None,
    before_event_id: str | None = None,
    since_created_at: str | None = None,
    limit: int | None = None,
    order: str | None = None,
    preview: bool = False,
) -> dict[str, Any]:
    """`logstream list`'s arguments of `event_list`."""
    page = given_args(
        since_event_id=since_event_id,
        before_event_id=before_event_id,
        since_created_at=since_created_at,
        limit=limit,
        order=order,
        preview=preview or None,
    )
    return {**filters, **page}


def wait_args(
    filters: dict[str, Any],
    since_event_id: str | None = None,
    timeout_ms: int | None = None,
    limit: int | None = None,
    preview: bool = False,
) -> dict[str, Any]:
    """`logstream wait`'s arguments of `event_wait`."""
    args = given_args(
        since_event_id=since_event_id, timeout_ms=timeout_ms, limit=limit, preview=preview or None
    )
    return {**filters, **args}


def inbox_filters(filters: dict[str, Any], agent: str | None) -> dict[str, Any]:
    """`tail --agent NAME`: NAME's inbox (to NAME or *), never NAME's own writes."""
    if agent is None:
        return filters
    out = dict(filters)
    for name in ("to_agent", "exclude_writer"):
        out[name] = [*out.get(name, []), agent]
    return out


# ----------------------------------------------------------------------------- answers


def error_text(message: str, field: str | None, as_json: bool) -> str:
    """The one error line on stderr: `error: …`, or with --json `{"error": …, "field": …}`."""
    text = " ".join(str(message).split())  # database messages (PostgreSQL DETAIL) span lines
    if as_json:
        return json.dumps({"error": text, "field": field}, ensure_ascii=False)
    return "error: " + display.terminal(text)


def name_option(exc: errors.LogstreamError, flags: dict[str, str]) -> str:
    """The error's message with its leading field name given as the option of `flags`
    (`--since-event-id 'x' not found`)."""
    field = getattr(exc, "field", None)
    flag = flags.get(field or "")
    if flag and field and exc.message.startswith(field + " "):
        return flag + str(exc.message)[len(field) :]
    return str(exc.message)


def emit_text(data: dict[str, Any], as_json: bool, human: str | None = None) -> str:
    """What `emit` prints: `data` as indented JSON (--json: the exact bytes), or the human
    text when there is one and --json was not given; every hidden character escaped."""
    if as_json:
        return json.dumps(data, ensure_ascii=False, indent=2)
    if human is None:
        return display.json_text(data, indent=2)
    return display.terminal(human)


def event_line(e: dict[str, Any]) -> str:
    """One event on one line: id, type, stream/room, route, routing fields, a cut body (raw:
    the printer escapes the whole text once, see `emit_text`)."""
    route = f"{e.get('from_agent')}->{e.get('to_agent') or '-'}"
    extra = "".join(f" {k}={e[k]}" for k in ("topic", "status", "correlation_id") if e.get(k))
    body = (e.get("body") or "").replace("\n", " ")
    if len(body) > 80:
        body = body[:77] + "..."
    return f"{e['id']} [{e['type']}] {e['stream']}/{e['room']} {route}{extra} {body}".rstrip()


def list_text(out: dict[str, Any]) -> str:
    """`logstream list`'s human answer."""
    lines = [f"{out['count']} event(s):"] + [event_line(e) for e in out["events"]]
    if out.get("note"):
        lines.append(f"note: {out['note']}")
    return "\n".join(lines)


def get_text(out: dict[str, Any]) -> str:
    """`logstream get`'s human answer."""
    return event_line(out["event"]) + "\n" + str(out["event"]["body"])


def wait_text(out: dict[str, Any]) -> str:
    """`logstream wait`'s human answer."""
    if out["timed_out"]:
        return f"Timed out; no matching events (cursor {out['cursor']})."
    return "\n".join([f"{out['count']} event(s):"] + [event_line(e) for e in out["events"]])


def tail_pieces(e: dict[str, Any]) -> list[tuple[str, str | None]]:
    """One `tail` line as (text, style) pieces, each `display.terminal`'d: rich styles them
    on a terminal; joined, they are the plain line."""
    out: list[tuple[str, str | None]] = []

    def add(piece: str, style: str | None = None) -> None:
        out.append((display.terminal(piece), style))

    add((e.get("created_at") or "")[11:23] + " ", "dim")
    add(str(e["id"]) + " ", "dim")
    add(f"[{e['type']}] ", "bold cyan")
    add(f"{e['stream']}/{e['room']} ", "magenta")
    add(f"{e.get('from_agent')}->{e.get('to_agent') or '-'}", "green")
    for key in ("topic", "status", "correlation_id"):
        if e.get(key):
            add(f" {key}={e[key]}", "yellow")
    body = " ".join((e.get("body") or "").split())
    if len(body) > 200:
        body = body[:197] + "..."
    if body:
        add(" " + body)
    return out


def tail_json(event: dict[str, Any]) -> str:
    """One `tail --json` line (NDJSON)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def silence_stdout() -> None:
    """After the reader closed the pipe: point stdout at /dev/null so the interpreter's last
    flush does not print a BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# ----------------------------------------------------------------------------- reading


def tail_events(
    client: Client,
    filters: dict[str, Any],
    start: dict[str, Any],
    since_created_at: str | None,
    follow: bool,
) -> Iterator[list[dict[str, Any]]]:
    """`tail`'s matching events, a batch at a time: what is there from the start point, then
    (with `follow`) each new batch as `event_wait` wakes."""
    cursor = start["since_event_id"]
    if cursor is None and not start["from_start"] and since_created_at is None:
        cursor = client.call("event_list", limit=1, order="desc").get("cursor")
    bound = {"since_created_at": since_created_at} if since_created_at else {}
    while True:  # catch up with pages: the window bound applies only to what is there
        page = client.call(
            "event_list", since_event_id=cursor, order="asc", limit=TAIL_PAGE, **bound, **filters
        )
        cursor = page.get("cursor") or cursor
        if page["events"]:
            yield page["events"]
        if not page.get("has_more"):
            break
    while follow:
        out = client.call(
            "event_wait", since_event_id=cursor, timeout_ms=TAIL_WAIT_MS, limit=TAIL_PAGE, **filters
        )
        cursor = out.get("cursor") or cursor
        if out["events"]:
            yield out["events"]


LEAN_OPS = ("event_list", "event_get", "event_wait")


def lean_read(
    db: str | None, palace: str | None, durability: str, op: str, args: dict[str, Any]
) -> dict[str, Any] | None:
    """A `list`, `get` or `wait` of a local SQLite log through the lean reader (store/lean.py:
    the store's page rule, validation and SQL text on the stdlib `sqlite3`, no SQLAlchemy), or
    None for the store to answer: another operation, a read the delivery ledger records (one
    that names its reader, identity/actor.py), a log or a read shape the lean reader leaves to
    the store, a wait that must block, or an error (the store then says it, in its words)."""
    from mempalace_logstream.identity import actor

    if op not in LEAN_OPS or actor.reader(args) is not None:
        return None
    reader = open_lean(db, palace, durability)
    if reader is None:
        return None
    from mempalace_logstream.store import lean

    try:
        return reader.call(op, **args)
    except (lean.Unplanned, errors.LogstreamError):
        return None
    finally:
        reader.close()


def without_httpx_cli() -> None:
    """Keep httpx from importing its optional command line (`httpx._main`: click, rich and
    pygments, ~50 ms of CPU of each `--hub` call of the fast path) in a process that never
    runs it: a None in `sys.modules` makes that one import fail, and httpx defines its stub
    `main` instead. For the fast path, whose process is ours; before httpx is imported."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def hub_client(hub: str, token: str | None, delivery: str | None = None) -> HubClient:
    """The client of a hub every command uses (hub_client.py, httpx), with the deadline of
    LOGSTREAM_HUB_TIMEOUT; its reads push through `delivery` (watch, channel, codex) when
    given."""
    from mempalace_logstream.hub_client import HubClient

    settings = config.Settings.from_env()
    return HubClient(hub, token=token, timeout=settings.hub_timeout_s, delivery=delivery)


def hub_call(hub: str, token: str | None, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """One call of a hub, the one `shared.run` makes: its answer, or the domain error of
    errors.py the hub's answer maps to (hub_client.py)."""
    client = hub_client(hub, token)
    try:
        return client.call(op, **args)
    finally:
        client.close()


def hub_read(hub: str, token: str | None, op: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """One read of a hub (`hub_call`), or None on any error: the typer path then makes it
    again and says what went wrong in its words (a read twice is harmless; a write is not,
    see cli/writes.py)."""
    try:
        return hub_call(hub, token, op, args)
    except Exception:  # noqa: BLE001 - the typer path reports it
        return None


def local_write(
    db: str | None, palace: str | None, durability: str, op: str, args: dict[str, Any]
) -> dict[str, Any] | None:
    """A write of the fast path (cli/fast.py, writes.py `fast_write`) to a local log through
    the lean local writer (store/lean_write.py: the store's own write path on the stdlib
    `sqlite3`, the log and settings `store.options.log_options` gives the CLI's store), or
    None for the typer path to make it through the store, nothing written: a log the lean
    writer leaves to the store (a missing file the store creates and says so, PostgreSQL, a
    schema to migrate, a file that is not a log: the store says it), or `Unplanned` (rolled
    back). A refusal of the input (`errors.LogstreamError`, raised before anything is
    written) is the caller's to print, as `shared.run` prints the store's."""
    from mempalace_logstream.store import lean_write
    from mempalace_logstream.store.options import log_options

    try:
        target, options = log_options(db, palace, durability=durability)
        writer = lean_write.open_lean_writer(target, **options)
    except errors.LogstreamError:
        return None
    if writer is None:
        return None
    try:
        return writer.call(op, **args)
    except lean_write.Unplanned:
        return None
    finally:
        writer.close()


def unexpected_text(exc: BaseException) -> str:
    """The one line an unexpected error gets without --debug (the typer app's outermost
    edge, cli/root.py, and the fast path's writes)."""
    return f"{type(exc).__name__}: {exc} (rerun with --debug)"


def open_lean(db: str | None, palace: str | None, durability: str) -> LeanReader | None:
    """The lean reader (store/lean.py `LeanReader`) of the local log, or None when the store
    must open it (or an error, which the store then says in its words)."""
    from mempalace_logstream.store import lean

    settings = config.Settings.from_env()
    try:
        target = config.resolve_db(db or settings.db, palace or settings.palace)
        return lean.open_lean(target, durability)
    except errors.LogstreamError:
        return None
