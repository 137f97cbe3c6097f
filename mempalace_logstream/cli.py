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
    # One line on stderr, always: database messages (PostgreSQL DETAIL/HINT) can span lines.
    typer.echo("error: " + " ".join(str(message).split()), err=True)
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
        store = _open_store(db, palace)
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
        store = _open_store(db, palace)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        mcp_server.run_stdio(store, read_only=read_only)
    finally:
        store.close()


# --------------------------------------------------------------------------- sync (issue 5)


def _open_store(db: str | None, palace: str | None):
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    return LogStore.open(
        url,
        durability=STATE.durability,
        max_body_bytes=settings.max_body_bytes,
        max_artifact_bytes=settings.max_artifact_bytes,
    )


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
    """Pull (and with --push also push) events and artifacts from peers (S-7.4).

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
        store = _open_store(db, palace)
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

        other = LogStore.open(config.resolve_db(peer_db, None), durability=STATE.durability)
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
        store = _open_store(db, palace)
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
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"peers of {out['self']['replica_id']}")
    for col in ("name", "url", "reachable", "last success", "last error", "pulled (last)"):
        table.add_column(col)
    for p in out["peers"]:
        table.add_row(p["name"], str(p["url"]), str(p["reachable"]), str(p["last_success_at"]),
                      str(p["last_error"] or ""), str(p["last_pulled_events"]))  # fmt: skip
    console = Console()
    console.print(table)
    c = out["sync"]
    console.print(
        f"conflicts {c['conflicts']}, rejections {c['rejections']} "
        f"(deferred {c['deferred']}), clock anomalies {c['clock_anomalies']}, "
        f"sequence anomalies {c['sequence_anomalies']}"
    )


# --------------------------------------------------------------------------- import (PostgreSQL)


@app.command("import")
def import_(
    from_: Annotated[str, typer.Option("--from", help="Source log: a SQLite file (ours or a reference mempalace logstream.sqlite3) or a SQLAlchemy URL.")],
    db: DbOpt = None, palace: PalaceOpt = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Events per target transaction.")] = 2000,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")] = True,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Copy a log into this one (e.g. SQLite into PostgreSQL), keeping ids, seq, hlc and origins.

    The target must be empty or hold a prefix of the same source (a previous, possibly
    interrupted import): re-running resumes and skips what is there.
    """
    from mempalace_logstream import importer
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    try:
        with importer.open_source(from_) as source, LogStore.open(url, durability=STATE.durability) as target:  # fmt: skip
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
    room: Annotated[Multi, typer.Option()] = None,
    topic: Annotated[Multi, typer.Option()] = None,
    type: Annotated[Multi, typer.Option("--type")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent", help="Inbox: matches the name and *.")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer")] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id")] = None,
    status: Annotated[Multi, typer.Option()] = None,
    from_agent: Annotated[str | None, typer.Option("--from-agent", help="Your identity (not a filter).")] = None,
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
    try:
        out = run(db, palace, "event_wait", hub, token, **_read_args(
            stream=stream, room=room, topic=topic, type=type, to_agent=to_agent, writer=writer,
            exclude_writer=exclude_writer, correlation_id=correlation_id, status=status,
            from_agent=from_agent, since_event_id=since_event_id, timeout_ms=timeout_ms,
            limit=limit, preview=preview or None,
        ))  # fmt: skip
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if out["timed_out"]:
        emit(out, as_json, f"Timed out; no matching events (cursor {out['cursor']}).")
        raise typer.Exit(2)
    lines = [f"{out['count']} event(s):"] + [event_line(e) for e in out["events"]]
    emit(out, as_json, "\n".join(lines))


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
    stream: Annotated[Multi, typer.Option()] = None,
    room: Annotated[Multi, typer.Option()] = None,
    topic: Annotated[Multi, typer.Option()] = None,
    status: Annotated[Multi, typer.Option()] = None,
    correlation_id: Annotated[Multi, typer.Option("--correlation-id")] = None,
    to_agent: Annotated[Multi, typer.Option("--to-agent")] = None,
    writer: Annotated[Multi, typer.Option(help="Author filter.")] = None,
    exclude_writer: Annotated[Multi, typer.Option("--exclude-writer")] = None,
    state_file: Annotated[str | None, typer.Option("--state-file", help="Checkpoint file (default ~/.mempalace/watch/<agent>.json; '' = none).")] = None,
    from_start: Annotated[bool, typer.Option("--from-start", help="On a first run, replay the whole log instead of starting at the tip.")] = False,
    since_event_id: Annotated[str | None, typer.Option("--since-event-id", help="Start after this event (overrides the state file).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep watching after a match.")] = False,
    idle_exit_ms: Annotated[int | None, typer.Option("--idle-exit-ms", help="Exit after this long without a match (2 if nothing matched).")] = None,
    limit: Annotated[int | None, typer.Option(help="Events per batch, 1-500 (default 50).")] = None,
    poll_timeout_ms: Annotated[int | None, typer.Option("--poll-timeout-ms", help="Longest single wait, 1-300000 ms.")] = None,
    db: DbOpt = None, palace: PalaceOpt = None, hub: HubOpt = None, token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (with --follow: one batch envelope per line).")] = False,
) -> None:  # fmt: skip
    """Wait for mail: exit 0 when matching events were printed, 2 on idle timeout, 130 on Ctrl-C.

    First run starts at the newest event (say --from-start to replay); later runs resume after
    the checkpoint in the state file. Output is printed before each checkpoint, so a crash
    replays events (dedupe by id) and never skips one.
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


def _exit_with(message: str) -> int:
    fail(message)
    return 1


if __name__ == "__main__":
    main()
