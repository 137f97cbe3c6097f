"""The `logstream` command line (typer): parse, open the store, make one core call, print.

The only typer importer. Servers are imported lazily inside `serve`/`mcp` so that a plain read
does not pay for FastAPI. Errors: one line on stderr, exit 1; usage errors exit 2; tracebacks
only with --debug.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mempalace_logstream import config, errors

app = typer.Typer(
    name="logstream",
    help="A local-first coordination log for AI agents: events, artifacts, tasks, watch, sync.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
artifact_app = typer.Typer(help="Store and fetch byte-exact artifacts.", no_args_is_help=True)
patch_app = typer.Typer(help="Hand a patch to another agent.", no_args_is_help=True)
task_app = typer.Typer(help="Delegate work as tasks.", no_args_is_help=True)
app.add_typer(artifact_app, name="artifact")
app.add_typer(patch_app, name="patch")
app.add_typer(task_app, name="task")

DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="LOGSTREAM_DB", help="SQLAlchemy URL or SQLite file path."),
]
PalaceOpt = Annotated[
    str | None,
    typer.Option(
        "--palace", envvar="MEMPALACE_PALACE_PATH", help="Palace dir (default ~/.mempalace/palace)."
    ),
]
HubOpt = Annotated[
    str | None,
    typer.Option(
        "--hub", envvar="LOGSTREAM_HUB", help="Run against a remote hub (http://host:port)."
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="LOGSTREAM_TOKEN", help="Bearer token for --hub.", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Multi = list[str] | None


class State:
    debug = False
    durability = "full"


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
) -> None:
    STATE.debug = debug
    STATE.durability = durability


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def open_client(
    db: str | None, palace: str | None, hub: str | None = None, token: str | None = None
):
    """A client with `.call(op, **args)`: the local store, or a remote hub with --hub."""
    if hub:
        from mempalace_logstream.hub_client import HubClient

        return HubClient(hub, token=token)
    from mempalace_logstream.operations import LocalClient
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    store = LogStore.open(
        url,
        durability=STATE.durability,
        max_body_bytes=settings.max_body_bytes,
        max_artifact_bytes=settings.max_artifact_bytes,
    )
    return LocalClient(store)


def run(db: str | None, palace: str | None, op: str, hub: str | None = None,
        token: str | None = None, **args: Any) -> dict[str, Any]:  # fmt: skip
    """Open, call one operation, close; domain errors become one stderr line and exit 1."""
    try:
        client = open_client(db, palace, hub, token)
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
    correlation_id: Annotated[str | None, typer.Option("--correlation-id")] = None,
    branch: Annotated[str | None, typer.Option()] = None,
    base_commit: Annotated[str | None, typer.Option("--base-commit")] = None,
    status: Annotated[str | None, typer.Option(help="open|claimed|ready|applied|...")] = None,
    body: Annotated[str | None, typer.Option(help="Body text.")] = None,
    body_file: Annotated[str | None, typer.Option("--body-file", help="Body from a file, - = stdin.")] = None,
    metadata: Annotated[str | None, typer.Option(help="Metadata as a JSON object.")] = None,
    artifact_id: Annotated[Multi, typer.Option("--artifact-id", help="Referenced artifact (repeat).")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
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
    room: Annotated[Multi, typer.Option()] = None,
    topic: Annotated[Multi, typer.Option()] = None,
    type: Annotated[Multi, typer.Option("--type")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent", help="Inbox: matches the name and *.")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer")] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id")] = None,
    status: Annotated[Multi, typer.Option()] = None,
    from_agent: Annotated[str | None, typer.Option("--from-agent", help="Your identity (not a filter).")] = None,
    since_event_id: Annotated[str | None, typer.Option("--since-event-id")] = None,
    before_event_id: Annotated[str | None, typer.Option("--before-event-id")] = None,
    since_created_at: Annotated[str | None, typer.Option("--since-created-at")] = None,
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
    status: Annotated[str | None, typer.Option()] = None,
    body: Annotated[str | None, typer.Option()] = None,
    body_file: Annotated[str | None, typer.Option("--body-file")] = None,
    topic: Annotated[str | None, typer.Option()] = None,
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
    metadata: Annotated[str | None, typer.Option()] = None,
    binary: Annotated[bool, typer.Option("--binary", help="Store as binary (base64 on the wire).")] = False,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Store an artifact byte-exact (text or binary)."""
    raw = read_bytes(file, "content")
    content: Any = raw
    encoding = "base64" if binary else None
    if hub:
        import base64

        try:
            content, encoding = (raw.decode("utf-8"), "utf-8") if not binary else (None, None)
        except UnicodeDecodeError:
            content = None
        if content is None:
            content, encoding = base64.b64encode(raw).decode("ascii"), "base64"
    out = run(db, palace, "artifact_put", hub, token, kind=kind, created_by=created_by,
              content=content, metadata=metadata, encoding=encoding)  # fmt: skip
    for w in out["artifact"].get("warnings", []):
        typer.echo(f"warning: {w}", err=True)
    a = out["artifact"]
    emit(
        out, as_json, f"Stored: {a['id']} {a['kind']} {a['size_bytes']} bytes sha256={a['sha256']}"
    )


def artifact_bytes(artifact: dict[str, Any]) -> bytes:
    import base64

    if artifact.get("encoding") == "base64":
        return base64.b64decode(artifact["content"])
    return str(artifact["content"]).encode("utf-8")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id.")],
    out_file: Annotated[str | None, typer.Option("--out", help="Write the content to this file.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Print an artifact's exact bytes (or write them with --out)."""
    out = run(db, palace, "artifact_get", hub, token, artifact_id=artifact_id)
    art = out["artifact"]
    if out_file:
        Path(out_file).write_bytes(artifact_bytes(art))
        meta = {k: val for k, val in art.items() if k != "content"}
        meta["content_written_to"] = out_file
        emit({"artifact": meta}, True)
    elif as_json:
        emit(out, True)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(artifact_bytes(art))
        sys.stdout.buffer.flush()


# --------------------------------------------------------------------------- patches, tasks


@patch_app.command("submit")
def patch_submit(
    from_agent: Annotated[str, typer.Option("--from-agent")],
    stream: Annotated[str, typer.Option()],
    file: Annotated[str, typer.Argument(help="Patch file; - or omitted = stdin.")] = "-",
    room: Annotated[str, typer.Option()] = "patches",
    topic: Annotated[str | None, typer.Option()] = None,
    to_agent: Annotated[str | None, typer.Option("--to-agent")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id")] = None,
    branch: Annotated[str | None, typer.Option()] = None,
    base_commit: Annotated[str | None, typer.Option("--base-commit")] = None,
    body: Annotated[str | None, typer.Option()] = None,
    metadata: Annotated[str | None, typer.Option()] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Store a patch and announce it (patch.ready) in one transaction."""
    content = read_text(file, "content")
    out = run(db, palace, "patch_submit", hub, token, content=content, from_agent=from_agent,
              stream=stream, room=room, topic=topic, to_agent=to_agent,
              correlation_id=correlation_id, branch=branch, base_commit=base_commit,
              body=body, metadata=metadata)  # fmt: skip
    for w in out.get("warnings", []):
        typer.echo(f"warning: {w}", err=True)
    a = out["artifact"]
    emit(out, as_json, f"Patch {a['id']} ({a['size_bytes']} bytes) announced: "
         + event_line(out["event"]))  # fmt: skip


@task_app.command("create")
def task_create(
    project: Annotated[str, typer.Option()],
    from_agent: Annotated[str, typer.Option("--from-agent")],
    to_agent: Annotated[str, typer.Option("--to-agent")],
    branch: Annotated[str, typer.Option()],
    base_commit: Annotated[str, typer.Option("--base-commit", help="7-64 hex commit id.")],
    goal: Annotated[str | None, typer.Option()] = None,
    goal_file: Annotated[str | None, typer.Option("--goal-file")] = None,
    done: Annotated[str | None, typer.Option(help="Definition of done.")] = None,
    done_file: Annotated[str | None, typer.Option("--done-file")] = None,
    parent_correlation_id: Annotated[str | None, typer.Option("--parent-correlation-id")] = None,
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
    emit(out, as_json, f"Task created: {t['correlation_id']}\nEvent: {t['id']}\n"
         f"To: {t['to_agent']}\nReady to paste:\n{out['handoff']}")  # fmt: skip


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
    for key in ("per_stream", "per_type", "per_writer"):
        table = Table(title=key.replace("per_", "events by "))
        table.add_column(key.replace("per_", ""))
        table.add_column("events", justify="right")
        for k, n in out[key].items():
            table.add_row(k, str(n))
        console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
