"""The `logstream` command line (typer): parse, open the store, make one core call, print.

The only typer importer. Servers are imported lazily inside `serve`/`mcp` so that a plain read
does not pay for FastAPI. Errors: one line on stderr, exit 1; usage errors exit 2; tracebacks
only with --debug; with --json, errors are one JSON object on stderr instead. --db, --palace,
--hub, --token and --json are accepted before the command too (a value after it wins).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from mempalace_logstream import __version__, config, errors

# The exceptions of click, or of the copy of click that typer >= 0.29 vendors.
_cx = importlib.import_module(typer.BadParameter.__module__)
_NO_ARGS = getattr(_cx, "NoArgsIsHelpError", ())  # click >= 8.2
GLOBAL_OPTIONS = {
    "db": "--db",
    "palace": "--palace",
    "hub": "--hub",
    "token": "--token",
    "as_json": "--json",
}


class _Group(TyperGroup):
    """Usage errors as one JSON object with --json; global options a command lacks refused."""

    def main(
        self,
        args: Any = None,
        prog_name: Any = None,
        complete_var: Any = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        STATE.reset()
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, False, **extra)
        except _NO_ARGS as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except _cx.ClickException as exc:
            if not (STATE.as_json or "--json" in argv[: _end_of_options(argv)]):
                exc.show()
            else:
                param = getattr(exc, "param", None)
                name = getattr(param, "name", None) or getattr(exc, "option_name", None)
                STATE.as_json = True
                fail(exc.format_message(), field=(name or "").lstrip("-").replace("-", "_") or None)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):
            takes = {p.name for p in cmd.params if _is_global(p)}
            root = ctx.find_root()
            for key, flag in GLOBAL_OPTIONS.items():
                if _given(root, key) and key not in takes:
                    path = " ".join([*ctx.command_path.split()[1:], name or ""]).strip()
                    raise _cx.UsageError(f"{flag} does not apply to `logstream {path}`", ctx)
        return name, cmd, rest


def _end_of_options(argv: list[str]) -> int:
    return argv.index("--") if "--" in argv else len(argv)


def _given(ctx: Any, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _global(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A global option on a command: its own value if given there, else the one given before
    the command (`logstream --db x stats`), else the environment or the default."""
    root = ctx.find_root()
    if root is not ctx and not _given(ctx, param.name or "") and _given(root, param.name or ""):
        value = root.params[param.name or ""]
    if param.name == "as_json" and value:
        STATE.as_json = True
    return value


def _is_global(param: Any) -> bool:
    return getattr(getattr(param, "callback", None), "__wrapped__", None) is _global


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"logstream {__version__}")
        raise typer.Exit()


def _typer(**kw: Any) -> typer.Typer:
    # Plain help (rich_markup_mode=None): typer's rich help prints flags as `--json <bool>`.
    return typer.Typer(cls=_Group, rich_markup_mode=None, no_args_is_help=True, **kw)


app = _typer(
    name="logstream",
    help="A local-first coordination log for AI agents: events, artifacts, tasks, watch, sync.",
    add_completion=False,
    pretty_exceptions_enable=False,
)
artifact_app = _typer(help="Store and fetch byte-exact artifacts.")
patch_app = _typer(help="Hand a patch to another agent.")
task_app = _typer(help="Delegate work as tasks.")
app.add_typer(artifact_app, name="artifact")
app.add_typer(patch_app, name="patch")
app.add_typer(task_app, name="task")

DB_HELP = "SQLAlchemy URL or SQLite file path."
PALACE_HELP = "Palace dir (default ~/.mempalace/palace)."
HUB_HELP = "Run against a remote hub (http://host:port)."
TOKEN_HELP = "Bearer token for --hub."
JSON_HELP = "Print JSON (errors too: one JSON object on stderr)."
DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="LOGSTREAM_DB", help=DB_HELP, callback=_global),
]
PalaceOpt = Annotated[
    str | None,
    typer.Option("--palace", envvar="MEMPALACE_PALACE_PATH", help=PALACE_HELP, callback=_global),
]
HubOpt = Annotated[
    str | None,
    typer.Option("--hub", envvar="LOGSTREAM_HUB", help=HUB_HELP, callback=_global),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="LOGSTREAM_TOKEN", help=TOKEN_HELP, show_default=False, callback=_global
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP, callback=_global)]


def _not_a_filter(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> None:
    if value is not None:
        exc = _cx.UsageError(
            f"--from-agent is your identity on writes, not a filter: to read what {value} wrote, "
            f"use --writer {value} (and --to-agent {value} for what was sent to {value})",
            ctx,
        )
        exc.param = param  # the field of a --json error
        raise exc


# `list --from-agent bob` reads as "bob's events" but would list everyone's: refused.
NotAFilterOpt = Annotated[
    str | None, typer.Option("--from-agent", hidden=True, callback=_not_a_filter)
]
Multi = list[str] | None


class State:
    debug = False
    durability = "full"
    as_json = False  # errors as one JSON object on stderr

    def reset(self) -> None:
        self.debug, self.durability, self.as_json = False, "full", False


STATE = State()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    durability: Annotated[
        str,
        typer.Option(
            "--durability",
            envvar="MEMPALACE_LOGSTREAM_DURABILITY",
            help="full (default: survives power loss) or normal (survives a crash of the process).",
        ),
    ] = "full",
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_show_version
        ),
    ] = False,
    db: Annotated[str | None, typer.Option("--db", help=DB_HELP)] = None,
    palace: Annotated[str | None, typer.Option("--palace", help=PALACE_HELP)] = None,
    hub: Annotated[str | None, typer.Option("--hub", help=HUB_HELP)] = None,
    token: Annotated[str | None, typer.Option("--token", help=TOKEN_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Global options; --db, --palace, --hub, --token and --json may also follow the command."""
    STATE.debug = debug
    STATE.durability = durability
    STATE.as_json = STATE.as_json or as_json


def fail(message: str, code: int = 1, field: str | None = None) -> typer.Exit:
    """One line on stderr, always: `error: …`, or with --json `{"error": …, "field": …}`.

    The field defaults to that of the domain error being handled, if any."""
    text = " ".join(str(message).split())  # database messages (PostgreSQL DETAIL) span lines
    if field is None:
        field = getattr(sys.exc_info()[1], "field", None)
    if STATE.as_json:
        typer.echo(json.dumps({"error": text, "field": field}, ensure_ascii=False), err=True)
    else:
        typer.echo("error: " + text, err=True)
    return typer.Exit(code)


# The operations that write: only their commands (and serve, mcp, migrate, sync's own log,
# import's target) create a missing log; every other command refuses a mistyped path.
WRITE_OPS = frozenset({"event_append", "event_ack", "artifact_put", "patch_submit", "task_create"})


def open_client(
    db: str | None,
    palace: str | None,
    hub: str | None = None,
    token: str | None = None,
    *,
    create: bool = False,
):
    """A client with `.call(op, **args)`: the local store, or a remote hub with --hub."""
    settings = config.Settings.from_env()
    if hub:
        from mempalace_logstream.hub_client import HubClient

        return HubClient(hub, token=token, timeout=settings.hub_timeout_s)
    from mempalace_logstream.operations import LocalClient

    return LocalClient(_open_store(db, palace, create=create))


def run(db: str | None, palace: str | None, op: str, hub: str | None = None,
        token: str | None = None, **args: Any) -> dict[str, Any]:  # fmt: skip
    """Open, call one operation, close; domain errors become one stderr line and exit 1."""
    try:
        client = open_client(db, palace, hub, token, create=op in WRITE_OPS)
        try:
            return client.call(op, **args)
        finally:
            client.close()
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None


def read_bytes(path: str, field: str) -> bytes:
    """Exact bytes from a file or `-` (stdin); no newline translation."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise fail(f"{field}: cannot read {path}: {exc.strerror}") from None


def read_text(path: str, field: str) -> str:
    raw = read_bytes(path, field)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(f"{field} is not valid UTF-8 ({path})") from None


def text_arg(
    value: str | None, file: str | None, field: str, *, required: bool = False
) -> str | None:
    if value is not None and file is not None:
        raise fail(f"give --{field} or --{field}-file, not both", 2)
    if file is not None:
        return read_text(file, field)
    if value is None and required:
        raise fail(f"--{field} or --{field}-file is required", 2)
    return value


def emit(data: dict[str, Any], as_json: bool, human: str | None = None) -> None:
    if as_json or human is None:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        typer.echo(human)


def event_line(e: dict[str, Any]) -> str:
    route = f"{e.get('from_agent')}->{e.get('to_agent') or '-'}"
    extra = "".join(f" {k}={e[k]}" for k in ("topic", "status", "correlation_id") if e.get(k))
    body = (e.get("body") or "").replace("\n", " ")
    if len(body) > 80:
        body = body[:77] + "..."
    return f"{e['id']} [{e['type']}] {e['stream']}/{e['room']} {route}{extra} {body}".rstrip()


# --------------------------------------------------------------------------- events


@app.command()
def append(
    type: Annotated[str, typer.Option("--type", help="Event type, e.g. task.reply.")],
    stream: Annotated[str, typer.Option(help="Stream, e.g. project/x.")],
    room: Annotated[str, typer.Option(help="Room within the stream.")],
    from_agent: Annotated[str, typer.Option("--from-agent", help="Your agent id.")],
    to_agent: Annotated[str | None, typer.Option("--to-agent", help="Addressee or *.")] = None,
    topic: Annotated[str | None, typer.Option(help="Topic.")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id", help="Thread id (a task's id).")] = None,
    branch: Annotated[str | None, typer.Option(help="Git branch.")] = None,
    base_commit: Annotated[str | None, typer.Option("--base-commit", help="Git commit the work is based on.")] = None,
    status: Annotated[str | None, typer.Option(help="open|claimed|ready|applied|...")] = None,
    body: Annotated[str | None, typer.Option(help="Body text.")] = None,
    body_file: Annotated[str | None, typer.Option("--body-file", help="Body from a file, - = stdin.")] = None,
    metadata: Annotated[str | None, typer.Option(help="Metadata as a JSON object.")] = None,
    artifact_id: Annotated[Multi, typer.Option("--artifact-id", help="Referenced artifact (repeat).")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key", help="Retry-safe key: the same key and content return the first event.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Append one event to the log."""
    text = text_arg(body, body_file, "body") or ""
    out = run(
        db, palace, "event_append", hub, token, type=type, stream=stream, room=room,
        from_agent=from_agent, to_agent=to_agent, topic=topic, correlation_id=correlation_id,
        branch=branch, base_commit=base_commit, status=status, body=text, metadata=metadata,
        artifact_ids=artifact_id, idempotency_key=idempotency_key,
    )  # fmt: skip
    emit(out, as_json, "Appended: " + event_line(out["event"]))


def _read_args(**kw: Any) -> dict[str, Any]:
    return {k: val for k, val in kw.items() if val not in (None, [])}


@app.command("list")
def list_(
    stream: Annotated[Multi, typer.Option(help="Filter (repeat = OR).")] = None,
    room: Annotated[Multi, typer.Option(help="Room filter (repeat = OR).")] = None,
    topic: Annotated[Multi, typer.Option(help="Topic filter (repeat = OR).")] = None,
    type: Annotated[Multi, typer.Option("--type", help="Event type filter (repeat = OR).")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent", help="Inbox: matches the name and *.")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer", help="Leave out events by this author (repeat).")] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id", help="Thread (task id) filter (repeat = OR).")] = None,
    status: Annotated[Multi, typer.Option(help="Status filter (repeat = OR).")] = None,
    from_agent: NotAFilterOpt = None,
    since_event_id: Annotated[str | None, typer.Option("--since-event-id", help="Only events after this id (oldest first); 'tip' = none yet.")] = None,
    before_event_id: Annotated[str | None, typer.Option("--before-event-id", help="Only events before this id (page back).")] = None,
    since_created_at: Annotated[str | None, typer.Option("--since-created-at", help="Only events created at or after YYYY-MM-DD[THH:MM:SSZ] (a window, not a cursor).")] = None,
    limit: Annotated[int | None, typer.Option(help="1-500 (default 50).")] = None,
    order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
    preview: Annotated[bool, typer.Option(help="Cut bodies to 200 characters.")] = False,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """List events (newest first without a cursor, oldest first after --since-event-id)."""
    out = run(db, palace, "event_list", hub, token, **_read_args(
        stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, writer=writer,
        exclude_writer=exclude_writer, correlation_id=correlation_id, status=status,
        from_agent=from_agent, since_event_id=since_event_id, before_event_id=before_event_id,
        since_created_at=since_created_at, limit=limit, order=order, preview=preview or None,
    ))  # fmt: skip
    lines = [f"{out['count']} event(s):"] + [event_line(e) for e in out["events"]]
    if out.get("note"):
        lines.append(f"note: {out['note']}")
    emit(out, as_json, "\n".join(lines))


@app.command()
def get(
    event_id: Annotated[str, typer.Argument(help="Event id.")],
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Show one event."""
    out = run(db, palace, "event_get", hub, token, event_id=event_id)
    emit(out, as_json, event_line(out["event"]) + "\n" + out["event"]["body"])


@app.command()
def ack(
    event_id: Annotated[str, typer.Argument(help="The event to acknowledge.")],
    from_agent: Annotated[str, typer.Option("--from-agent", help="Your agent id.")],
    status: Annotated[str | None, typer.Option(help="open|claimed|ready|applied|blocked|failed|superseded.")] = None,
    body: Annotated[str | None, typer.Option(help="Body text.")] = None,
    body_file: Annotated[str | None, typer.Option("--body-file", help="Body from a file, - = stdin.")] = None,
    topic: Annotated[str | None, typer.Option(help="Topic.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Acknowledge an event (appends event.ack; the target never changes)."""
    text = text_arg(body, body_file, "body") or ""
    out = run(db, palace, "event_ack", hub, token, event_id=event_id, from_agent=from_agent,
              status=status, body=text, topic=topic)  # fmt: skip
    emit(out, as_json, "Acked: " + event_line(out["event"]))


# --------------------------------------------------------------------------- artifacts


@artifact_app.command("put")
def artifact_put(
    kind: Annotated[str, typer.Option(help="patch|file|log|json|note")],
    created_by: Annotated[str, typer.Option("--created-by", help="Your agent id.")],
    file: Annotated[str, typer.Argument(help="Content file; - or omitted = stdin.")] = "-",
    metadata: Annotated[str | None, typer.Option(help="Metadata as a JSON object.")] = None,
    binary: Annotated[bool, typer.Option("--binary", help="Store as binary (base64 on the wire).")] = False,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Store an artifact byte-exact (text or binary)."""
    content, encoding = wire_content(read_bytes(file, "content"), hub, binary=binary)
    out = run(db, palace, "artifact_put", hub, token, kind=kind, created_by=created_by,
              content=content, metadata=metadata, encoding=encoding)  # fmt: skip
    for w in out["artifact"].get("warnings", []):
        typer.echo(f"warning: {w}", err=True)
    a = out["artifact"]
    emit(
        out, as_json, f"Stored: {a['id']} {a['kind']} {a['size_bytes']} bytes sha256={a['sha256']}"
    )


def wire_content(raw: bytes, hub: str | None, *, binary: bool = False) -> tuple[Any, str | None]:
    """(content, encoding) for an operation. Locally the bytes themselves: the core sniffs them.
    JSON to a hub cannot carry bytes, so they are sniffed here by the core's own rule (valid
    UTF-8 without NUL is text) and anything else travels as base64, stored as binary."""
    import base64

    from mempalace_logstream import validation

    asked = "base64" if binary else None
    if not hub:
        return raw, asked
    _, encoding = validation.artifact_content(raw, asked, max_bytes=len(raw))
    if encoding == "utf-8":
        return raw.decode("utf-8"), encoding
    return base64.b64encode(raw).decode("ascii"), encoding


def artifact_bytes(artifact: dict[str, Any]) -> bytes:
    import base64

    if artifact.get("encoding") == "base64":
        return base64.b64decode(artifact["content"])
    return str(artifact["content"]).encode("utf-8")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id.")],
    out_file: Annotated[str | None, typer.Option("--out", help="Write the content to this file (atomically; ~ expands).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --out replace an existing file (a symlink is replaced, never followed).")] = False,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Print an artifact's exact bytes (or write them with --out)."""
    target = out_path(out_file, force) if out_file else None
    out = run(db, palace, "artifact_get", hub, token, artifact_id=artifact_id)
    art = out["artifact"]
    if target is not None:
        write_out(target, artifact_bytes(art), force)
        meta = {k: val for k, val in art.items() if k != "content"}
        meta["content_written_to"] = str(target)
        emit({"artifact": meta}, as_json, f"Wrote {art['id']} to {target} "
             f"({art['size_bytes']} bytes, sha256 {art['sha256']})")  # fmt: skip
    elif as_json:
        emit(out, True)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(artifact_bytes(art))
        sys.stdout.buffer.flush()


def out_path(text: str, force: bool) -> Path:
    """The --out path, `~` expanded; refused early if it exists and --force was not given."""
    import os

    path = Path(text).expanduser()
    if path.is_dir() and not path.is_symlink():
        raise fail(f"--out {path} is a directory", field="out")
    if not force and os.path.lexists(path):
        raise fail(f"--out {path} already exists; pass --force to replace it", field="out")
    return path


def write_out(path: Path, data: bytes, force: bool) -> None:
    """Write a temp file beside `path`, then rename it into place: readers never see half a
    file, and a symlink at `path` is replaced (with --force), never written through."""
    import os
    import secrets

    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _place(tmp, path, force)
    except FileExistsError:
        raise fail(
            f"--out {path} already exists; pass --force to replace it", field="out"
        ) from None
    except OSError as exc:
        raise fail(f"--out {path}: cannot write: {exc.strerror or exc}", field="out") from None
    finally:
        tmp.unlink(missing_ok=True)


def _place(tmp: Path, path: Path, force: bool) -> None:
    import errno
    import os

    if force:
        os.replace(tmp, path)  # replaces a file or the symlink itself, never its target
        return
    try:
        os.link(tmp, path)  # atomic and no-clobber: fails if the name exists by now
    except OSError as exc:
        no_links = exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK)
        if not no_links or os.path.lexists(path):
            raise
        os.rename(tmp, path)  # a filesystem without hard links: checked just above


# --------------------------------------------------------------------------- patches, tasks


@patch_app.command("submit")
def patch_submit(
    from_agent: Annotated[str, typer.Option("--from-agent", help="Your agent id.")],
    stream: Annotated[str, typer.Option(help="Stream, e.g. project/x (task create prints it).")],
    file: Annotated[str, typer.Argument(help="Patch file; - or omitted = stdin.")] = "-",
    room: Annotated[str, typer.Option(help="Room within the stream.")] = "patches",
    topic: Annotated[str | None, typer.Option(help="Topic.")] = None,
    to_agent: Annotated[str | None, typer.Option("--to-agent", help="Addressee or *.")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id", help="Thread id (a task's id).")] = None,
    branch: Annotated[str | None, typer.Option(help="Git branch.")] = None,
    base_commit: Annotated[str | None, typer.Option("--base-commit", help="Git commit the work is based on.")] = None,
    body: Annotated[str | None, typer.Option(help="Body text.")] = None,
    metadata: Annotated[str | None, typer.Option(help="Metadata as a JSON object.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Store a patch and announce it (patch.ready) in one transaction."""
    content, encoding = wire_content(read_bytes(file, "content"), hub)
    out = run(db, palace, "patch_submit", hub, token, content=content, encoding=encoding,
              from_agent=from_agent, stream=stream, room=room, topic=topic, to_agent=to_agent,
              correlation_id=correlation_id, branch=branch, base_commit=base_commit,
              body=body, metadata=metadata)  # fmt: skip
    for w in out.get("warnings", []):
        typer.echo(f"warning: {w}", err=True)
    a = out["artifact"]
    emit(out, as_json, f"Patch {a['id']} ({a['size_bytes']} bytes) announced: "
         + event_line(out["event"]))  # fmt: skip


@task_app.command("create")
def task_create(
    project: Annotated[str, typer.Option(help="Project name; the stream is project/<slug>.")],
    from_agent: Annotated[str, typer.Option("--from-agent", help="Your agent id.")],
    to_agent: Annotated[str, typer.Option("--to-agent", help="The agent that should do it.")],
    branch: Annotated[str, typer.Option(help="Git branch to work on.")],
    base_commit: Annotated[str, typer.Option("--base-commit", help="7-64 hex commit id.")],
    goal: Annotated[str | None, typer.Option(help="What to do.")] = None,
    goal_file: Annotated[str | None, typer.Option("--goal-file", help="Goal from a file, - = stdin.")] = None,
    done: Annotated[str | None, typer.Option(help="Definition of done.")] = None,
    done_file: Annotated[str | None, typer.Option("--done-file", help="Definition of done from a file, - = stdin.")] = None,
    parent_correlation_id: Annotated[str | None, typer.Option("--parent-correlation-id", help="The task this one is part of.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Delegate a task: appends task.request and prints a handoff line to paste."""
    goal_text = text_arg(goal, goal_file, "goal", required=True)
    done_text = text_arg(done, done_file, "done", required=True)
    out = run(db, palace, "task_create", hub, token, project=project, from_agent=from_agent,
              to_agent=to_agent, goal=goal_text, branch=branch, base_commit=base_commit,
              done=done_text, parent_correlation_id=parent_correlation_id)  # fmt: skip
    t = out["task"]
    emit(out, as_json, "\n".join((
        f"Task created: {t['correlation_id']} (the task id is the correlation id)",
        f"Stream: {t['stream']}",
        f"Event: {t['id']}",
        f"To: {t['to_agent']}",
        "Ready to paste:",
        out["handoff"],
    )))  # fmt: skip


# --------------------------------------------------------------------------- admin


@app.command()
def migrate(
    db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Create or upgrade the schema (also adopts a reference mempalace logstream file)."""
    from mempalace_logstream import engine as engine_mod
    from mempalace_logstream import migrate as migrate_mod
    from mempalace_logstream.schema import SCHEMA_HEAD

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    try:
        eng = engine_mod.create_engine(url, durability=STATE.durability)
        if engine_mod.was_created(eng) and not STATE.as_json:
            typer.echo(f"created a new log at {eng.url.database}", err=True)
        try:
            before = migrate_mod.upgrade(eng)
        finally:
            eng.dispose()
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    except Exception as exc:  # alembic/sqlalchemy failure at the edge
        if STATE.debug:
            raise
        raise fail(f"migration failed: {exc}") from None
    out = {
        "database": eng.url.render_as_string(hide_password=True),
        "from": before,
        "to": SCHEMA_HEAD,
    }
    emit(out, as_json, f"Schema at {SCHEMA_HEAD} (was {before or 'empty'}): {out['database']}")


@app.command()
def stats(
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Counts per stream, type and writer; database size; replica id and version vector."""
    out = run(db, palace, "stats", hub, token)
    if as_json:
        emit(out, True)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"replica {out['replica_id']} ({out['backend']}): {out['events']} events, "
                  f"{out['artifacts']} artifacts, {out.get('db_size_bytes')} bytes")  # fmt: skip
    console.print(f"database {out['database']}", soft_wrap=True)
    console.print(f"mempalace-logstream {out.get('version', '?')}")
    for key in ("per_stream", "per_type", "per_writer"):
        table = Table(title=key.replace("per_", "events by "))
        table.add_column(key.replace("per_", ""))
        table.add_column("events", justify="right")
        for k, n in out[key].items():
            table.add_row(k, str(n))
        console.print(table)


# --------------------------------------------------------------------------- hub and MCP
# (`_open_store` is shared with the sync commands below.)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Bind address; non-loopback needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 = any free port).")] = 8765,
    token: Annotated[str | None, typer.Option("--token", envvar="LOGSTREAM_TOKEN", help="Bearer token clients must send (never printed).", show_default=False)] = None,
    sse_max_clients: Annotated[int, typer.Option("--sse-max-clients", help="Concurrent SSE clients before 503.")] = 256,
    ping_interval: Annotated[float, typer.Option("--ping-interval", help="Seconds between SSE ': ping' comments.")] = 15.0,
    max_request_bytes: Annotated[int, typer.Option("--max-request-bytes", help="Larger requests get 413.")] = 16 * 1024 * 1024,
    allow_host: Annotated[Multi, typer.Option("--allow-host", help="Extra Host name accepted on a loopback bind (repeat).")] = None,
    mcp_read_only: Annotated[bool, typer.Option("--mcp-read-only", help="Hide mutating MCP tools at /mcp.")] = False,
    sync_interval: Annotated[float | None, typer.Option("--sync-interval", help="Seconds between background sync rounds with the peers of <palace>/peers.json (0 disables). Default: $MEMPALACE_LOGSTREAM_SYNC_INTERVAL, $MEMPALACE_SYNC_INTERVAL or 15.", show_default=False)] = None,
    sync_push: Annotated[bool, typer.Option("--sync-push", help="Background rounds also push what each peer lacks.")] = False,
    sync_deadline_s: Annotated[float, typer.Option("--sync-deadline-s", help="Seconds a background round with one peer may take in all; past it the round stops and reports it as that peer's error.")] = 300.0,
    sync_max_response_bytes: Annotated[int, typer.Option("--sync-max-response-bytes", help="Bytes read from one peer response in background rounds; a larger response is refused.")] = 16 * 1024 * 1024,
    db: DbOpt = None, palace: PalaceOpt = None,
) -> None:  # fmt: skip
    """Run the hub: HTTP API under /v1, SSE at /v1/stream, MCP at /mcp, docs at /docs."""
    import os

    import uvicorn

    from mempalace_logstream import http_app, mcp_server
    from mempalace_logstream import sync as sync_mod

    try:
        http_app.check_token(token or None)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    if not http_app.is_loopback_host(host) and not token:
        raise fail(f"refusing to bind {host} without a token: pass --token or set LOGSTREAM_TOKEN")
    if sync_interval is not None and sync_interval < 0:
        raise fail(
            f"--sync-interval must be 0 (off) or a positive number of seconds, got {sync_interval}"
        )
    _check_sync_limits(
        "--sync-deadline-s",
        sync_deadline_s,
        "--sync-max-response-bytes",
        sync_max_response_bytes,
        sync_mod.MIN_RESPONSE_BYTES,
    )
    try:
        interval = (
            sync_interval if sync_interval is not None else sync_mod.interval_from_env(os.environ)
        )
        store = _open_store(db, palace, create=True)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    palace_path = config.palace_dir(palace or config.Settings.from_env().palace)
    settings = http_app.HubSettings(
        host=host, port=port, token=token, sse_max_clients=sse_max_clients,
        ping_interval_s=ping_interval, max_request_bytes=max_request_bytes,
        allowed_hosts=tuple(allow_host or ()), palace=str(palace_path),
    )  # fmt: skip
    loop = sync_mod.SyncLoop(
        store,
        palace_path,
        interval_s=interval,
        push=sync_push,
        deadline_s=sync_deadline_s,
        max_response_bytes=sync_max_response_bytes,
    )
    mcp_app, mcp_lifespan = mcp_server.http_endpoint(store, read_only=mcp_read_only)
    mount = http_app.ExtraMount("/mcp", mcp_app, mcp_lifespan)
    application = http_app.create_app(store, settings, mounts=(mount,), sync_loop=loop)
    try:
        sock = http_app.listen_socket(host, port)
    except OSError as exc:
        raise fail(f"cannot bind {host}:{port}: {exc.strerror}") from None
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    typer.echo(f"logstream hub listening on http://{shown}:{bound} "
               f"(API /v1, SSE /v1/stream, MCP /mcp, docs /docs)", err=False)  # fmt: skip
    typer.echo(f"  database {store.engine.url.render_as_string(hide_password=True)}, replica "
               f"{store.replica_id}, mempalace-logstream {http_app.version()}")  # fmt: skip
    if loop.enabled:
        typer.echo(f"sync: a round every {interval:g} s with the peers of "
                   f"{palace_path / 'peers.json'}", err=True)  # fmt: skip
    sys.stdout.flush()
    server = uvicorn.Server(
        uvicorn.Config(application, log_level="warning", timeout_graceful_shutdown=3)
    )
    try:
        server.run(sockets=[sock])
    finally:
        store.close()


@app.command("mcp")
def mcp_cmd(
    read_only: Annotated[bool, typer.Option("--read-only", help="Hide the mutating tools.")] = False,
    db: DbOpt = None, palace: PalaceOpt = None,
) -> None:  # fmt: skip
    """Serve the MCP tools over stdio (for Claude Code, Codex and other MCP clients)."""
    from mempalace_logstream import mcp_server

    try:
        store = _open_store(db, palace, create=True)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        mcp_server.run_stdio(store, read_only=read_only)
    finally:
        store.close()


# --------------------------------------------------------------------------- sync (issue 5)


def _open_store(db: str | None, palace: str | None, *, create: bool):
    """The local store; `create` for commands that write (a reader refuses a missing file)."""
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    store = LogStore.open(
        url,
        durability=STATE.durability,
        create=create,
        max_body_bytes=settings.max_body_bytes,
        max_artifact_bytes=settings.max_artifact_bytes,
    )
    return _said_created(store)


def _said_created(store: Any) -> Any:
    """Say once, on stderr, that this command made a new log (a typo is then visible); not
    with --json, where stderr holds only the one JSON error object scripts parse."""
    if store.created and not STATE.as_json:
        typer.echo(f"created a new log at {store.engine.url.database}", err=True)
    return store


def _sync_line(r: dict[str, Any]) -> str:
    name = r.get("peer_name") or r.get("peer_url")
    if "error" in r:
        return f"  {name}: ERROR {r['error']}"
    line = (f"  {name} ({r.get('peer_replica')}): +{r['pulled_events']} events, "
            f"+{r['pulled_artifacts']} artifacts")  # fmt: skip
    if r.get("pushed_events") or r.get("pushed_artifacts"):
        line += f", pushed {r['pushed_events']} events, {r['pushed_artifacts']} artifacts"
    if r.get("conflict_count"):
        line += f", {r['conflict_count']} CONFLICTS (see `logstream peers --json`)"
    if r.get("rejected_count"):
        line += f", {r['rejected_count']} REJECTED"
    if r.get("sequence_anomaly_count"):
        line += (
            f", {r['sequence_anomaly_count']} SEQUENCE ANOMALIES "
            f"({r['sequence_anomalies'][0]['message']})"
        )
    if "repair" in r:
        holes = [h for h in r["repair"]["holes"] if h["side"] == "local"]
        line += f", {len(holes)} holes repaired (+{r['repair']['pulled_events']} events)"
    if r.get("repair_error") or r.get("push_error"):
        line += f" [{r.get('repair_error') or r.get('push_error')}]"
    return line


def _sync_progress(enabled: bool):
    """A rich progress bar on stderr for long rounds (only on a terminal)."""
    import contextlib

    if not enabled or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    console=Console(stderr=True), transient=True)  # fmt: skip


@app.command("sync")
def sync_cmd(
    peer: Annotated[str | None, typer.Option("--peer", help="Hub URL to sync with.")] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="LOGSTREAM_PEER_TOKEN", help="Bearer token for --peer.",
                     show_default=False),
    ] = None,
    peer_db: Annotated[
        str | None, typer.Option("--peer-db", help="Sync with another local database instead.")
    ] = None,
    push: Annotated[bool, typer.Option("--push", help="Also push what the peer lacks.")] = False,
    repair_holes: Annotated[
        bool,
        typer.Option("--repair-holes", help="Then probe for holes the version vector cannot "
                     "see and re-pull them (not supported by reference hubs)."),
    ] = False,
    deadline_s: Annotated[float, typer.Option("--deadline-s", help="Seconds a round with one peer may take in all (every socket read included); past it the round stops and reports it as that peer's error.")] = 300.0,
    max_response_bytes: Annotated[int, typer.Option("--max-response-bytes", help="Bytes read from one peer response; a larger response is refused with an error naming the peer.")] = 16 * 1024 * 1024,
    db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Pull (and with --push also push) events and artifacts from peers.

    With neither --peer nor --peer-db, syncs with every peer of <palace>/peers.json
    ({"peers": [{"name", "url", "token"}]}). Exits 1 if any peer failed.
    """
    from mempalace_logstream import sync as sync_mod

    if peer and peer_db:
        raise fail("give --peer or --peer-db, not both", 2)
    _check_sync_limits(
        "--deadline-s",
        deadline_s,
        "--max-response-bytes",
        max_response_bytes,
        sync_mod.MIN_RESPONSE_BYTES,
    )
    limits = {"deadline_s": deadline_s, "max_response_bytes": max_response_bytes}
    settings = config.Settings.from_env()
    palace_path = config.palace_dir(palace or settings.palace)
    try:
        store = _open_store(db, palace, create=True)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        with _sync_progress(not as_json) as bar:
            task = bar.add_task("sync", total=None) if bar is not None else None

            def progress(info: dict[str, Any]) -> None:
                if bar is not None and task is not None:
                    done = info.get("pulled", info.get("pushed", 0))
                    bar.update(task, completed=done, total=info.get("total") or None,
                               description=f"sync {str(info.get('origin'))[:16]}")  # fmt: skip

            results = _run_sync(
                store,
                sync_mod,
                peer,
                token,
                peer_db,
                push,
                palace_path,
                progress,
                repair_holes,
                limits,
            )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(results, ensure_ascii=False, indent=2))
    else:
        for r in results:
            typer.echo(_sync_line(r))
    if any("error" in r for r in results):
        raise typer.Exit(1)


def _run_sync(
    store: Any,
    sync_mod: Any,
    peer: str | None,
    token: str | None,
    peer_db: str | None,
    push: bool,
    palace_path: Path,
    progress: Any,
    repair: bool,
    limits: dict[str, Any],
) -> list[dict[str, Any]]:
    if peer_db:
        from mempalace_logstream.store import LogStore

        other = LogStore.open(
            config.resolve_db(peer_db, None), durability=STATE.durability, create=False
        )
        try:
            return [
                sync_mod.sync_one(
                    store,
                    sync_mod.LocalPeer(other, name=peer_db),
                    push,
                    progress,
                    repair,
                    limits["deadline_s"],
                )
            ]
        finally:
            other.close()
    if peer:
        spec = {"url": peer, "token": token}
        return [sync_mod.http_round(store, spec, push, progress, repair, **limits)]
    if not sync_mod.load_peers(palace_path):
        raise errors.ValidationError(
            f"no peers configured ({sync_mod.peers_file(palace_path)}) and no --peer given",
            field="peer",
        )
    return sync_mod.sync_all(
        store, palace_path, push=push, progress=progress, repair=repair, **limits
    )


def _check_sync_limits(
    deadline_flag: str, deadline_s: float, bytes_flag: str, max_bytes: int, min_bytes: int
) -> None:
    if not deadline_s > 0:
        raise fail(f"{deadline_flag} must be a positive number of seconds, got {deadline_s}", 2)
    if max_bytes < min_bytes:
        raise fail(f"{bytes_flag} is {max_bytes}; it must be at least {min_bytes} bytes", 2)


@app.command("peers")
def peers_cmd(
    db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Per-peer sync estate: reachable, last success, last error, pulled counts, conflicts."""
    from mempalace_logstream import replication
    from mempalace_logstream import sync as sync_mod

    settings = config.Settings.from_env()
    try:
        store = _open_store(db, palace, create=False)
        try:
            out = sync_mod.estate(store, config.palace_dir(palace or settings.palace))
            out["conflicts"] = replication.list_conflicts(store, 20)
            out["rejections"] = replication.list_rejections(store, 20)
        finally:
            store.close()
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    if as_json:
        emit(out, True)
        return
    c = out["sync"]
    typer.echo(_peers_table(out))
    typer.echo(
        f"conflicts {c['conflicts']}, rejections {c['rejections']} "
        f"(deferred {c['deferred']}), clock anomalies {c['clock_anomalies']}, "
        f"sequence anomalies {c['sequence_anomalies']}"
    )


PEER_COLUMNS = (
    ("name", "name"),
    ("url", "url"),
    ("reachable", "reachable"),
    ("last success", "last_success_at"),
    ("pulled (last)", "last_pulled_events"),
    ("last error", "last_error"),  # last: free text ends the line
)


def _peers_table(out: dict[str, Any]) -> str:
    """The peers as text that never cuts a URL, date or error: a table folded to the terminal's
    width, or one `key=value` line per peer when stdout is not a terminal (pipes, files)."""
    title = f"peers of {out['self']['replica_id']}"
    cells = [[str(p[k]) if p[k] is not None else "" for _, k in PEER_COLUMNS] for p in out["peers"]]
    if not sys.stdout.isatty():
        keys = [k for _, k in PEER_COLUMNS[1:]]
        rows = [f"{row[0]} " + " ".join(f"{k}={v}" for k, v in zip(keys, row[1:], strict=True))
                for row in cells]  # fmt: skip
        return "\n".join([title, *rows])
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header, _ in PEER_COLUMNS:
        table.add_column(header, overflow="fold")
    for row in cells:
        table.add_row(*row)
    console = Console()
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip("\n")


# --------------------------------------------------------------------------- import (PostgreSQL)


@app.command("import")
def import_(
    from_: Annotated[str, typer.Option("--from", help="Source log: a SQLite file (ours or a reference mempalace logstream.sqlite3) or a SQLAlchemy URL.")],
    db: DbOpt = None, palace: PalaceOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Events per target transaction.")] = 2000,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")] = True,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Copy a log into this one, keeping ids, seq, hlc and origins (SQLite into PostgreSQL, say).

    The target must be empty or hold a prefix of the same source (a previous, possibly
    interrupted import): re-running resumes and skips what is there.
    """
    from mempalace_logstream import importer
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    try:
        with importer.open_source(from_) as source:  # a missing source: refused, no target made
            target = _said_created(LogStore.open(url, durability=STATE.durability))
            with target:
                report = _run_import(importer, source, target, batch_size, progress)
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None
    out = report.to_dict()
    emit(out, as_json, (
        f"Imported {report.events_imported} events ({report.events_skipped} already there) and "
        f"{report.artifacts_imported} artifacts ({report.artifacts_skipped} already there) "
        f"in {report.seconds:.1f}s: {report.source} -> {report.target}"
    ))  # fmt: skip


def _run_import(importer: Any, source: Any, target: Any, batch_size: int, show: bool) -> Any:
    if not show:
        return importer.import_log(source, target, batch_size=batch_size)
    from rich import progress as rp
    from rich.console import Console

    columns = (
        rp.TextColumn("{task.description:>9}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeRemainingColumn(),
    )
    with rp.Progress(*columns, console=Console(stderr=True)) as bar:
        tasks: dict[str, Any] = {}

        def tick(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        return importer.import_log(source, target, batch_size=batch_size, progress=tick)


# --------------------------------------------------------------------------- wait and watch


@app.command()
def wait(
    stream: Annotated[Multi, typer.Option(help="Filter (repeat = OR).")] = None,
    room: Annotated[Multi, typer.Option(help="Room filter (repeat = OR).")] = None,
    topic: Annotated[Multi, typer.Option(help="Topic filter (repeat = OR).")] = None,
    type: Annotated[Multi, typer.Option("--type", help="Event type filter (repeat = OR).")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent", help="Inbox: matches the name and *.")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer", help="Leave out events by this author (repeat).")] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id", help="Thread (task id) filter (repeat = OR).")] = None,
    status: Annotated[Multi, typer.Option(help="Status filter (repeat = OR).")] = None,
    from_agent: NotAFilterOpt = None,
    since_event_id: Annotated[str | None, typer.Option("--since-event-id", help="Only events after this id; 'tip' = only new ones.")] = None,
    timeout_ms: Annotated[int | None, typer.Option("--timeout-ms", help="0-300000 (default 60000).")] = None,
    limit: Annotated[int | None, typer.Option(help="1-500 (default 50).")] = None,
    preview: Annotated[bool, typer.Option(help="Cut bodies to 200 characters.")] = False,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Block until a matching event exists (exit 0) or the timeout passes (exit 2).

    Without --since-event-id, existing matches return at once; with one, only later events.
    """
    args = _read_args(
        stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, writer=writer,
        exclude_writer=exclude_writer, correlation_id=correlation_id, status=status,
        from_agent=from_agent, since_event_id=since_event_id, timeout_ms=timeout_ms,
        limit=limit, preview=preview or None,
    )  # fmt: skip
    try:
        client = open_client(db, palace, hub, token)
        try:
            out = client.call("event_wait", **args)
            _print_wait(out, as_json)  # the answer first: closing the store comes after
        finally:
            client.close()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None
    if out["timed_out"]:
        raise typer.Exit(2)


def _print_wait(out: dict[str, Any], as_json: bool) -> None:
    if out["timed_out"]:
        emit(out, as_json, f"Timed out; no matching events (cursor {out['cursor']}).")
    else:
        lines = [f"{out['count']} event(s):"] + [event_line(e) for e in out["events"]]
        emit(out, as_json, "\n".join(lines))
    sys.stdout.flush()


class _WatchPrinter:
    """Prints watch batches and flushes before the watcher checkpoints (print, then save)."""

    def __init__(self, as_json: bool, follow: bool) -> None:
        self.as_json = as_json
        self.follow = follow

    def batch(self, batch: Any, *, final: bool) -> None:
        data = batch.to_dict()
        if self.as_json and self.follow:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        elif self.as_json:
            text = json.dumps(data, ensure_ascii=False, indent=2)
        elif batch.events:
            text = "\n".join(
                [f"{data['count']} event(s):"] + [event_line(e) for e in data["events"]]
            )
        else:
            text = "No matching events before the idle timeout."
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def note(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def _watch_crash_hook():
    """LOGSTREAM_TEST_KILL_AT=print:N (or checkpoint:N): SIGKILL ourselves right after printing
    (or checkpointing) matched batch N. A test hook for the at-least-once tests."""
    import os

    raw = os.environ.get("LOGSTREAM_TEST_KILL_AT")
    if not raw:
        return None
    where, _, n = raw.partition(":")
    target = int(n or 1)

    def hook(point: str, printed: int) -> None:
        if point == where and printed >= target:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    return hook


@app.command()
def watch(
    agent: Annotated[str | None, typer.Option("--agent", help="Your id: watch your inbox (to you or *), never your own writes.")] = None,
    type: Annotated[Multi, typer.Option("--type", help="Filter (repeat = OR).")] = None,
    stream: Annotated[Multi, typer.Option(help="Stream filter (repeat = OR).")] = None,
    room: Annotated[Multi, typer.Option(help="Room filter (repeat = OR).")] = None,
    topic: Annotated[Multi, typer.Option(help="Topic filter (repeat = OR).")] = None,
    status: Annotated[Multi, typer.Option(help="Status filter (repeat = OR).")] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id", help="Thread (task id) filter (repeat = OR).")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent", help="Addressee filter (repeat = OR).")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer", help="Leave out events by this author (repeat).")] = None,
    state_file: Annotated[str | None, typer.Option("--state-file", help="Checkpoint file (default ~/.mempalace/watch/<agent>.json; '' = none).")] = None,
    from_start: Annotated[bool, typer.Option("--from-start", help="On a first run (no state file yet), replay the whole log instead of starting at the newest event; refused when the state file already holds a cursor.")] = False,
    since_event_id: Annotated[str | None, typer.Option("--since-event-id", help="Start after this event (overrides the state file).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep watching after a match.")] = False,
    idle_exit_ms: Annotated[int | None, typer.Option("--idle-exit-ms", help="Exit after this long without a match (exit 2 if nothing matched); 0 or absent = wait for ever.")] = None,
    limit: Annotated[int | None, typer.Option(help="Events per batch, 1-500 (default 50).")] = None,
    poll_timeout_ms: Annotated[int | None, typer.Option("--poll-timeout-ms", help="Longest single wait, 1-300000 ms.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (with --follow: one batch envelope per line).", callback=_global)] = False,
) -> None:  # fmt: skip
    """Wait for mail: exit 0 when matching events were printed, 2 on idle timeout, 130 on Ctrl-C.

    First run starts at the newest event (say --from-start to replay); later runs resume after
    the checkpoint in the state file (--from-start is then refused: delete the file to replay).
    Output is printed before each checkpoint, so a crash replays events (dedupe by id) and never
    skips one.
    """
    from mempalace_logstream import watch as watch_mod

    try:
        opts = watch_mod.WatchOptions.parse(
            agent=agent, state_file=state_file, since_event_id=since_event_id,
            from_start=from_start, follow=follow, idle_exit_ms=idle_exit_ms, limit=limit,
            poll_timeout_ms=poll_timeout_ms, type=type, stream=stream, room=room, topic=topic,
            status=status, correlation_id=correlation_id, to_agent=to_agent, writer=writer,
            exclude_writer=exclude_writer,
        )  # fmt: skip
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    printer = _WatchPrinter(as_json, follow)
    try:
        client = open_client(db, palace, hub, token)
        try:
            watcher = watch_mod.Watcher(client, opts, printer, crash_hook=_watch_crash_hook(),
                                        human=not as_json)  # fmt: skip
            code = watcher.run()
        finally:
            client.close()
    except KeyboardInterrupt:
        code = watch_mod.EXIT_INTERRUPTED
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None
    except BrokenPipeError:
        raise typer.Exit(1) from None
    if code == watch_mod.EXIT_INTERRUPTED and not as_json:
        printer.note("Stopped.")
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except errors.LogstreamError as exc:  # a domain error outside run(): same one-line form
        if STATE.debug:
            raise
        raise SystemExit(_exit_with(exc.message)) from None
    except Exception as exc:  # the outermost edge: no traceback without --debug
        if STATE.debug:
            raise
        raise SystemExit(_exit_with(f"{type(exc).__name__}: {exc} (rerun with --debug)")) from None
    finally:
        # Every store is closed by now: let the interpreter exit without a last cyclic-GC scan
        # of all it imported (about 0.3 s with SQLAlchemy loaded, paid by every `wait` script).
        import gc

        gc.freeze()


def _exit_with(message: str) -> int:
    fail(message)
    return 1


if __name__ == "__main__":
    main()
