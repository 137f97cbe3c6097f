"""The hub command: `serve` (the HTTP hub with SSE, MCP at /mcp and background sync).

Every server module (http, mcp_server, uvicorn, sync) is imported inside the command that
runs it, never at module level: a plain `list` must not pay for FastAPI or the MCP SDK.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mempalace_logstream import config, errors
from mempalace_logstream.cli.options import DbOpt, Multi, PalaceOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import (
    check_sync_limits,
    fail,
    guard_settings,
    nats_config,
    open_store,
)

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from mempalace_logstream.http import HubSettings
    from mempalace_logstream.natsbridge import BridgeConfig, BridgeThread
    from mempalace_logstream.store import LogStore
    from mempalace_logstream.sync import SyncLoop

MiB = 1024 * 1024
HOST_HELP = "Bind address; non-loopback needs --token."
SERVE_TOKEN_HELP = (
    "Bearer token clients must send (never printed); prefer the variable: a command line "
    "shows in ps."
)
PING_HELP = "Seconds between SSE ': ping' comments."
ALLOW_HOST_HELP = "Extra Host name accepted on a loopback bind (repeat)."
SYNC_INTERVAL_HELP = (
    "Seconds between background sync rounds with the peers of <palace>/peers.json (0 "
    "disables). Default: $MEMPALACE_LOGSTREAM_SYNC_INTERVAL, $MEMPALACE_SYNC_INTERVAL or 15."
)
SYNC_DEADLINE_HELP = (
    "Seconds a background round with one peer may take in all; past it the round stops and "
    "reports it as that peer's error."
)
SYNC_BYTES_HELP = (
    "Bytes read from one peer response in background rounds; a larger response is refused."
)
HostOpt = Annotated[str, typer.Option("--host", help=HOST_HELP)]
PortOpt = Annotated[int, typer.Option("--port", help="Port (0 = any free port).")]
ServeTokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="LOGSTREAM_TOKEN", help=SERVE_TOKEN_HELP, show_default=False),
]
SseClientsOpt = Annotated[
    int, typer.Option("--sse-max-clients", help="Concurrent SSE clients before 503.")
]
WaitClientsOpt = Annotated[
    int,
    typer.Option(
        "--wait-max-clients",
        help="Concurrent blocked event_wait calls (HTTP and MCP) before 503.",
    ),
]
PingOpt = Annotated[float, typer.Option("--ping-interval", help=PING_HELP)]
RequestBytesOpt = Annotated[
    int, typer.Option("--max-request-bytes", help="Larger requests get 413.")
]
AllowHostOpt = Annotated[Multi, typer.Option("--allow-host", help=ALLOW_HOST_HELP)]
McpReadOnlyOpt = Annotated[
    bool, typer.Option("--mcp-read-only", help="Hide mutating MCP tools at /mcp.")
]
SyncIntervalOpt = Annotated[
    float | None,
    typer.Option("--sync-interval", help=SYNC_INTERVAL_HELP, show_default=False),
]
SyncPushOpt = Annotated[
    bool, typer.Option("--sync-push", help="Background rounds also push what each peer lacks.")
]
SyncDeadlineOpt = Annotated[float, typer.Option("--sync-deadline-s", help=SYNC_DEADLINE_HELP)]
SyncBytesOpt = Annotated[int, typer.Option("--sync-max-response-bytes", help=SYNC_BYTES_HELP)]
RemindIntervalOpt = Annotated[
    float,
    typer.Option(
        "--remind-interval",
        help="Seconds between passes of the reminders for unclaimed tasks (0 disables).",
    ),
]
ClaimTimeoutOpt = Annotated[
    int | None,
    typer.Option(
        "--claim-timeout-ms",
        help="Default: remind a task's assignee when unclaimed this long (10 min; 0 off). "
        "Also $MEMPALACE_LOGSTREAM_CLAIM_TIMEOUT_MS.",
        show_default=False,
    ),
]
MaxRemindersOpt = Annotated[
    int | None,
    typer.Option(
        "--max-reminders", help="Default reminders before task.stalled (3).", show_default=False
    ),
]
ThreadBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--thread-budget",
        help="Agent-written events per thread since a person or the request (60).",
        show_default=False,
    ),
]
PairBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--pair-budget",
        help="Messages between two agents per window without a task move (30).",
        show_default=False,
    ),
]
PairWindowOpt = Annotated[
    int | None,
    typer.Option("--pair-window-ms", help="The pair budget's window (10 min).", show_default=False),
]
WakeableWindowOpt = Annotated[
    int,
    typer.Option(
        "--wakeable-window",
        help="Seconds: an agent that reacted to a push this recently is wakeable: yes.",
    ),
]
ForwardedOpt = Annotated[
    str | None,
    typer.Option(
        "--forwarded-allow-ips",
        help="Comma-separated addresses (or *) of load balancers whose X-Forwarded-For is "
        "trusted as the client's address (login lockouts count per address). "
        "Default: 127.0.0.1, or $FORWARDED_ALLOW_IPS.",
    ),
]
NatsOpt = Annotated[
    str | None,
    typer.Option(
        "--nats",
        help="Also bridge the log to this NATS JetStream server (2.10+; the nats extra), as "
        "`logstream bridge nats` does.",
        show_default=False,
    ),
]
HumanOpt = Annotated[
    Multi,
    typer.Option("--human", help="A name that counts as a person for the loop guards (repeat)."),
]


@app.command()
def serve(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    token: ServeTokenOpt = None,
    sse_max_clients: SseClientsOpt = 256,
    wait_max_clients: WaitClientsOpt = 512,
    ping_interval: PingOpt = 15.0,
    max_request_bytes: RequestBytesOpt = 16 * MiB,
    allow_host: AllowHostOpt = None,
    mcp_read_only: McpReadOnlyOpt = False,
    sync_interval: SyncIntervalOpt = None,
    sync_push: SyncPushOpt = False,
    sync_deadline_s: SyncDeadlineOpt = 300.0,
    sync_max_response_bytes: SyncBytesOpt = 16 * MiB,
    remind_interval: RemindIntervalOpt = 15.0,
    claim_timeout_ms: ClaimTimeoutOpt = None,
    max_reminders: MaxRemindersOpt = None,
    thread_budget: ThreadBudgetOpt = None,
    pair_budget: PairBudgetOpt = None,
    pair_window_ms: PairWindowOpt = None,
    human: HumanOpt = None,
    wakeable_window: WakeableWindowOpt = 1_800,
    forwarded_allow_ips: ForwardedOpt = None,
    nats: NatsOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
) -> None:
    """Run the hub: HTTP API under /v1, SSE at /v1/stream, MCP at /mcp, docs at /docs."""
    import socket

    from mempalace_logstream import sync as sync_mod
    from mempalace_logstream.backends import leader as leader_mod
    from mempalace_logstream.http import HubSettings

    _check_serve_flags(host, token, sync_interval, sync_deadline_s, sync_max_response_bytes)
    nats_cfg = None
    if nats is not None:
        nats_cfg = nats_config(nats, "LOGSTREAM", "logstream")
    try:
        interval = (
            sync_interval if sync_interval is not None else sync_mod.interval_from_env(os.environ)
        )
        store = open_store(db, palace, create=True)
        store.task_settings = guard_settings(
            store.task_settings,
            claim_timeout_ms=claim_timeout_ms,
            max_reminders=max_reminders,
            thread_budget=thread_budget,
            pair_budget=pair_budget,
            pair_window_ms=pair_window_ms,
            humans=tuple(human or ()),
        )
        # One hub per SQLite file; on PostgreSQL, the lead of the background loops.
        lead, held = leader_mod.for_engine(
            store.engine, f"{socket.gethostname()} pid {os.getpid()}"
        )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    palace_path = config.palace_dir(palace or config.Settings.from_env().palace)
    try:
        settings = HubSettings(
            host=host,
            port=port,
            token=token,
            sse_max_clients=sse_max_clients,
            wait_max_clients=wait_max_clients,
            ping_interval_s=ping_interval,
            max_request_bytes=max_request_bytes,
            allowed_hosts=tuple(allow_host or ()),
            palace=str(palace_path),
            wakeable_window_s=wakeable_window,
        )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    loop = sync_mod.SyncLoop(
        store,
        palace_path,
        interval_s=interval,
        push=sync_push,
        deadline_s=sync_deadline_s,
        max_response_bytes=sync_max_response_bytes,
        leader=lead,
    )
    application = _hub_app(store, settings, loop, mcp_read_only, remind_interval)
    sock = _bind(host, port)
    lead.name = f"{socket.gethostname()}:{sock.getsockname()[1]} pid {os.getpid()}"
    bridge = _start_bridge(store, nats_cfg, lead.hold) if nats_cfg is not None else None
    _banner(host, sock, store, loop, interval, palace_path)
    try:
        _run(application, sock, store, forwarded_allow_ips, bridge)
    finally:
        lead.release()
        if held is not None:
            held.close()


def _run(
    application: Any,
    sock: socket.socket,
    store: LogStore,
    forwarded_allow_ips: str | None,
    bridge: BridgeThread | None = None,
) -> None:
    """uvicorn until a signal stops it cleanly (http/server.py: the open waits answered, the
    streams ended, one line on stderr, the hub's log), then the NATS bridge stopped (if one
    runs) and the store closed."""
    import uvicorn

    from mempalace_logstream.http.server import HubServer

    config_ = uvicorn.Config(
        application,
        log_level="warning",
        timeout_graceful_shutdown=3,
        forwarded_allow_ips=forwarded_allow_ips,
        ws="none",  # the hub serves no WebSocket: its protocol module is not loaded at start
    )
    server = HubServer(config_, application, say=_say, owns_process=True)
    try:
        server.run(sockets=[sock])
    finally:
        if bridge is not None:
            bridge.stop()
        store.close()


def _start_bridge(
    store: LogStore, cfg: BridgeConfig, leads: Callable[[], bool] | None = None
) -> BridgeThread:
    """The NATS bridge beside the hub (its own thread and event loop), started once its
    checks passed; a refusal stops `serve` with its one line. It publishes while `leads()`
    (the hub that leads a PostgreSQL log's background loops; a SQLite hub always leads)."""
    from mempalace_logstream.natsbridge import BridgeThread

    try:
        thread = BridgeThread(store, cfg, _say, leads).start()
    except errors.LogstreamError as exc:
        store.close()
        raise fail(exc.message) from None
    _say(f"nats bridge: {store.replica_id} on {cfg.url} stream {cfg.stream}")
    return thread


def _say(line: str) -> None:
    """The hub's own lines (a stop) on stderr, the hub's log."""
    typer.echo(line, err=True)


def _check_serve_flags(
    host: str,
    token: str | None,
    sync_interval: float | None,
    sync_deadline_s: float,
    sync_max_response_bytes: int,
) -> None:
    """Refuse a bad token, a public bind without one, and impossible sync settings."""
    from mempalace_logstream import sync as sync_mod
    from mempalace_logstream.http import check_token, is_loopback_host

    try:
        check_token(token or None)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    if not is_loopback_host(host) and not token:
        raise fail(f"refusing to bind {host} without a token: pass --token or set LOGSTREAM_TOKEN")
    if sync_interval is not None and sync_interval < 0:
        raise fail(
            f"--sync-interval must be 0 (off) or a positive number of seconds, got {sync_interval}"
        )
    check_sync_limits(
        "--sync-deadline-s",
        sync_deadline_s,
        "--sync-max-response-bytes",
        sync_max_response_bytes,
        sync_mod.MIN_RESPONSE_BYTES,
    )


def _hub_app(
    store: LogStore,
    settings: HubSettings,
    loop: SyncLoop,
    mcp_read_only: bool,
    remind_interval: float,
) -> Any:
    """The hub's ASGI app with the MCP endpoint mounted at /mcp and the reminder loop."""
    from mempalace_logstream import mcp_server
    from mempalace_logstream.http import ExtraMount, create_app
    from mempalace_logstream.reminders import ReminderLoop
    from mempalace_logstream.shared_presence import registry_for

    # One table for the HTTP routes and the MCP tools; every hub's on a PostgreSQL log.
    presence = registry_for(store)
    mcp_app, mcp_lifespan = mcp_server.late_http_endpoint(
        store, read_only=mcp_read_only, presence=presence
    )
    mount = ExtraMount("/mcp", mcp_app, mcp_lifespan, drain=mcp_app.drain)
    lead = loop.leader
    reminders = ReminderLoop(
        store, presence, interval_s=remind_interval, leads=lead.hold if lead else None
    )
    return create_app(
        store, settings, mounts=(mount,), sync_loop=loop, presence=presence, reminders=reminders
    )


def _bind(host: str, port: int) -> socket.socket:
    from mempalace_logstream.http import listen_socket

    try:
        return listen_socket(host, port)
    except OSError as exc:
        raise fail(f"cannot bind {host}:{port}: {exc.strerror}") from None


def _banner(
    host: str,
    sock: socket.socket,
    store: LogStore,
    loop: SyncLoop,
    interval: float,
    palace_path: Path,
) -> None:
    """Where the hub listens (stdout, flushed: scripts wait for this line) and what it serves."""
    from mempalace_logstream.http import version

    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    typer.echo(
        f"logstream hub listening on http://{shown}:{bound} "
        "(dashboard /, API /v1, SSE /v1/stream, MCP /mcp, docs /docs)"
    )
    database = store.engine.url.render_as_string(hide_password=True)
    typer.echo(
        f"  database {database}, replica {store.replica_id}, mempalace-logstream {version()}"
    )
    from mempalace_logstream import agents

    named = sorted(agents.token_hashes(store))
    if named:
        typer.echo(
            f"identity: agent tokens for {', '.join(named)}; every request needs a token "
            "(an agent's, or the admin's --token)",
            err=True,
        )
    if loop.enabled:
        peers = palace_path / "peers.json"
        typer.echo(f"sync: a round every {interval:g} s with the peers of {peers}", err=True)
    sys.stdout.flush()
