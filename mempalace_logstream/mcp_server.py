"""MCP tools on the official SDK (S-6.2): `build_server(store)`, stdio, and the hub's /mcp endpoint.

Tools are thin module-level functions: they pass their arguments to the core through
`aio.call` (worker threads; `event_wait` sleeps on the notifier, so a 300 s wait blocks nothing)
and turn domain errors into tool errors. The only `mcp` importer (SDK 2.x, `MCPServer`); must not
import fastapi or typer.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from mempalace_logstream import aio, errors
from mempalace_logstream.store import LogStore

TOOL_PREFIX = "mempalace_"
_log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "A shared, append-only coordination log for agents. Post what you do as events "
    "(mempalace_event_append), read your inbox with mempalace_event_list(to_agent=<you>), block "
    "for new work with mempalace_event_wait(since_event_id=<cursor>), and hand over exact bytes "
    "as artifacts (mempalace_artifact_put / mempalace_patch_submit). Keep the `cursor` each read "
    "returns and pass it back as since_event_id so you never miss or repeat an event."
)


class LogstreamMCP(MCPServer):
    """An MCPServer bound to one LogStore; tools reach it through their Context.

    Tool calls skip the SDK's argument model: the raw arguments go to the core, which checks
    names (`operations.check_args`) and values exactly as for HTTP and the CLI, so every
    surface refuses the same input with the same text. The signatures below only document
    the tools (their JSON schemas).
    """

    def __init__(self, store: LogStore, *, instructions: str = INSTRUCTIONS, **kwargs: Any) -> None:
        # version: serverInfo.version is ours (2.x sends "" when none is given).
        super().__init__(
            "mempalace-logstream", instructions=instructions, version=_version(), **kwargs
        )
        self.store = store
        self.tool_names: set[str] = set()  # what `_add` registered (read-only leaves some out)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        # The SDK turns a ToolError raised here into an isError result whose text is exactly
        # the message (no prefix: the prefix belongs to its own argument model, skipped here).
        if name not in self.tool_names:
            raise ToolError(f"unknown tool {name!r}")
        result = await _run(self.store, name.removeprefix(TOOL_PREFIX), dict(arguments or {}))
        # Compact JSON, once (no structuredContent): every space is a token the agent pays for.
        text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        return CallToolResult(content=[TextContent(type="text", text=text)])


def _version() -> str:
    import mempalace_logstream

    return mempalace_logstream.__version__


async def _run(store: LogStore, op: str, args: dict[str, Any]) -> dict[str, Any]:
    try:
        return await aio.call(store, op, args)
    except errors.LogstreamError as exc:
        raise ToolError(exc.message) from exc


async def _call(ctx: Context, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """The tool functions' own path (a direct call, not through `call_tool`)."""
    server = ctx.mcp_server
    assert isinstance(server, LogstreamMCP)
    return await _run(server.store, op, {k: val for k, val in args.items() if k != "ctx"})


# Parameter types shared by several tools; descriptions are read by agents.
Agent = Annotated[str, Field(description="Your agent id, e.g. 'claude-1'. Max 256 chars.")]
Filter = Annotated[
    str | list[str] | None,
    Field(description="Filter; a list means any of these values (OR). Filters AND together."),
]
Cursor = Annotated[
    str | None,
    Field(
        description="Only events strictly after this event id (the `cursor` of your last read); "
        "'tip' means only events that arrive from now on."
    ),
]
Limit = Annotated[int | None, Field(description="Max events to return, 1-500 (default 50).")]
Metadata = Annotated[
    dict[str, Any] | str | None, Field(description="A JSON object (max 64 KiB serialized).")
]
IdemKey = Annotated[
    str | None,
    Field(description="Retry-safe key: re-sending the same call returns the stored result."),
]


async def mempalace_event_append(
    ctx: Context,
    type: Annotated[str, Field(description="Event type, e.g. 'task.reply', 'note', 'status'.")],
    stream: Annotated[str, Field(description="Stream, e.g. 'project/myrepo'.")],
    room: Annotated[str, Field(description="Room within the stream, e.g. 'delegation'.")],
    from_agent: Agent,
    topic: str | None = None,
    to_agent: Annotated[str | None, Field(description="Addressee agent id, or '*'.")] = None,
    correlation_id: Annotated[str | None, Field(description="Thread/task id to reply on.")] = None,
    branch: str | None = None,
    base_commit: str | None = None,
    status: Annotated[
        str | None,
        Field(description="open, claimed, ready, applied, blocked, failed or superseded."),
    ] = None,
    body: Annotated[str, Field(description="Text body, max 256 KiB; never truncated.")] = "",
    metadata: Metadata = None,
    artifact_ids: Annotated[
        list[str] | None, Field(description="Artifacts this event refers to.")
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Append one event to the shared log and return it ({event}) with its id.

    Use it to post a status, a reply on a task (set correlation_id), a claim (status=claimed)
    or a note to another agent (to_agent). Events are immutable: to change a status, append a
    new event. Invalid input is an error naming the field; nothing is written.
    """
    return await _call(ctx, "event_append", locals())


async def mempalace_event_list(
    ctx: Context,
    stream: Filter = None,
    room: Filter = None,
    topic: Filter = None,
    type: Filter = None,
    to_agent: Annotated[
        str | list[str] | None, Field(description="Inbox: events addressed to you (or to '*').")
    ] = None,
    from_agent: Annotated[
        str | None, Field(description="Your identity; NOT a filter (use writer).")
    ] = None,
    writer: Annotated[
        str | list[str] | None, Field(description="Filter by author agent id.")
    ] = None,
    exclude_writer: Annotated[
        str | list[str] | None, Field(description="Leave out events by these authors.")
    ] = None,
    correlation_id: Filter = None,
    status: Filter = None,
    since_event_id: Cursor = None,
    before_event_id: Annotated[str | None, Field(description="Only events before this id.")] = None,
    since_created_at: Annotated[
        str | None, Field(description="Time window start: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ.")
    ] = None,
    limit: Limit = None,
    order: Annotated[
        str | None, Field(description="'asc' or 'desc'; default asc with a cursor, else desc.")
    ] = None,
    preview: Annotated[
        bool | None, Field(description="Cut bodies to 200 characters (body_truncated).")
    ] = None,
    slim: Annotated[
        bool | None, Field(description="Drop replication fields and empty values.")
    ] = None,
) -> dict[str, Any]:
    """Read events now, without waiting: {events, count, cursor, has_more[, note]}.

    Newest first without a cursor; oldest first after since_event_id. Pass the returned `cursor`
    as since_event_id next time to get only newer events (it also skips rows your filters
    rejected). To block until something arrives, use mempalace_event_wait instead.
    """
    return await _call(ctx, "event_list", locals())


async def mempalace_event_wait(
    ctx: Context,
    stream: Filter = None,
    room: Filter = None,
    topic: Filter = None,
    type: Filter = None,
    to_agent: Annotated[
        str | list[str] | None, Field(description="Wait for events addressed to you (or '*').")
    ] = None,
    from_agent: Annotated[
        str | None, Field(description="Your identity; NOT a filter (use writer).")
    ] = None,
    writer: Annotated[
        str | list[str] | None, Field(description="Filter by author agent id.")
    ] = None,
    exclude_writer: Annotated[
        str | list[str] | None, Field(description="Ignore events by these authors (e.g. you).")
    ] = None,
    correlation_id: Filter = None,
    status: Filter = None,
    since_event_id: Cursor = None,
    since_created_at: str | None = None,
    timeout_ms: Annotated[
        int | None, Field(description="How long to block, 0-300000 ms (default 60000).")
    ] = None,
    limit: Limit = None,
    preview: bool | None = None,
    slim: bool | None = None,
) -> dict[str, Any]:
    """Block until a matching event exists after since_event_id, then return it.

    Returns {timed_out, events, count, cursor, has_more}. Returns at once if matches already
    exist after the cursor (or at all, without one; use since_event_id='tip' for only new ones).
    A timeout is a normal answer (timed_out=true, events=[]): call again with the same cursor.
    Wake-up is push-based (milliseconds), and a long wait does not block other calls.
    """
    return await _call(ctx, "event_wait", locals())


async def mempalace_event_get(
    ctx: Context, event_id: Annotated[str, Field(description="The event id.")]
) -> dict[str, Any]:
    """Fetch one event by id: {event}. Errors if the id is unknown on this log."""
    return await _call(ctx, "event_get", locals())


async def mempalace_event_ack(
    ctx: Context,
    event_id: Annotated[str, Field(description="The event you acknowledge.")],
    from_agent: Agent,
    status: Annotated[
        str | None, Field(description="e.g. claimed, applied, blocked, failed.")
    ] = None,
    body: str = "",
    topic: str | None = None,
    metadata: Metadata = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Acknowledge an event: appends an `event.ack` addressed to its author on the same thread.

    Returns {event}. The acknowledged event never changes. Use status=claimed to claim a task,
    status=applied after applying a patch.
    """
    return await _call(ctx, "event_ack", locals())


async def mempalace_artifact_put(
    ctx: Context,
    kind: Annotated[str, Field(description="patch, file, log, json or note.")],
    content: Annotated[
        str, Field(description="Exact content (UTF-8 text, or base64 with encoding=base64).")
    ],
    created_by: Agent,
    metadata: Metadata = None,
    encoding: Annotated[
        str | None, Field(description="'utf-8' (default for text) or 'base64' for binary.")
    ] = None,
) -> dict[str, Any]:
    """Store content byte-exact (max 4 MiB) and return {artifact} with its id and sha256.

    Reference the id from an event (artifact_ids) so others can fetch it with
    mempalace_artifact_get. For a patch meant for review, mempalace_patch_submit does both steps.
    """
    return await _call(ctx, "artifact_put", locals())


async def mempalace_artifact_get(
    ctx: Context, artifact_id: Annotated[str, Field(description="The artifact id.")]
) -> dict[str, Any]:
    """Fetch an artifact with its exact content: {artifact: {id, kind, sha256, content, ...}}.

    Binary content comes base64-encoded (encoding=base64). Check `sha256` against the bytes.
    """
    return await _call(ctx, "artifact_get", locals())


async def mempalace_patch_submit(
    ctx: Context,
    content: Annotated[str, Field(description="The unified diff, exact (max 4 MiB).")],
    from_agent: Agent,
    stream: Annotated[str, Field(description="Stream, e.g. the task's 'project/<slug>'.")],
    room: str = "patches",
    topic: str | None = None,
    to_agent: Annotated[str | None, Field(description="Who should review/apply it.")] = None,
    correlation_id: Annotated[str | None, Field(description="The task's correlation_id.")] = None,
    branch: str | None = None,
    base_commit: str | None = None,
    body: str = "",
    metadata: Metadata = None,
    encoding: Annotated[
        str | None, Field(description="'utf-8' (default) or 'base64' for a non-UTF-8 diff.")
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Deliver a patch: stores it as an artifact and appends `patch.ready`, in one transaction.

    Returns {artifact, event[, warnings]}. Warnings (e.g. no trailing newline) are advice;
    the content is stored exactly as sent.
    """
    return await _call(ctx, "patch_submit", locals())


async def mempalace_task_create(
    ctx: Context,
    project: Annotated[str, Field(description="Project name; the stream is project/<slug>.")],
    from_agent: Agent,
    to_agent: Annotated[str, Field(description="The agent that should do the work.")],
    goal: Annotated[str, Field(description="What to do, in plain words.")],
    branch: Annotated[str, Field(description="Branch to work on.")],
    base_commit: Annotated[str, Field(description="Commit hash (7-64 hex), not a branch name.")],
    done: Annotated[str, Field(description="Definition of done: how to tell it is finished.")],
    parent_correlation_id: str | None = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Delegate work: appends a `task.request` (status=open) and returns {task, handoff}.

    The task's correlation_id is the thread for claims, replies and the patch. Give `handoff`
    (one line) to the worker so it can find the task.
    """
    return await _call(ctx, "task_create", locals())


async def mempalace_version_vector(ctx: Context) -> dict[str, Any]:
    """This log's replica id and version vector: {replica_id, version_vector}.

    The vector maps each origin replica to the highest origin_seq held here; compare two hubs'
    vectors to see whether they are in sync.
    """
    return await _call(ctx, "version_vector", {})


async def mempalace_stats(ctx: Context) -> dict[str, Any]:
    """Overview of the log: event counts per stream, type and writer, artifact totals and the
    database size. Cheap; use it to find which streams are active before listing."""
    return await _call(ctx, "stats", {})


READ_TOOLS: tuple[Callable[..., Any], ...] = (
    mempalace_event_list,
    mempalace_event_wait,
    mempalace_event_get,
    mempalace_artifact_get,
    mempalace_version_vector,
    mempalace_stats,
)
WRITE_TOOLS: tuple[Callable[..., Any], ...] = (
    mempalace_event_append,
    mempalace_event_ack,
    mempalace_artifact_put,
    mempalace_patch_submit,
    mempalace_task_create,
)


def build_server(store: LogStore, *, read_only: bool = False, **kwargs: Any) -> LogstreamMCP:
    """An MCP server with the logstream tools; `read_only` leaves the mutating ones out."""
    server = LogstreamMCP(store, log_level="WARNING", **kwargs)
    for fn in READ_TOOLS:
        _add(server, fn, ToolAnnotations(read_only_hint=True, open_world_hint=False))
    if not read_only:
        for fn in WRITE_TOOLS:
            hints = ToolAnnotations(
                read_only_hint=False, destructive_hint=False, open_world_hint=False
            )
            _add(server, fn, hints)
    return server


def _add(server: LogstreamMCP, fn: Callable[..., Any], hints: ToolAnnotations) -> None:
    # The docstring without its source indentation; text only (no outputSchema), since the
    # result is returned once, as compact JSON text.
    doc = inspect.cleandoc(fn.__doc__ or "")
    server.add_tool(fn, description=doc, annotations=hints, structured_output=False)
    server.tool_names.add(fn.__name__)


def run_stdio(store: LogStore, *, read_only: bool = False) -> None:
    """Serve the tools over stdio until the client closes the pipe."""
    build_server(store, read_only=read_only).run("stdio")


_NO_SDK_LIMIT = 1 << 62  # bytes; the SDK wants a positive number
SESSION_IDLE_S = 6 * 3600.0
MAX_SESSIONS = 1000


class _Endpoint:
    """ASGI endpoint (a class, so Starlette routes it as an app) for streamable HTTP."""

    def __init__(self, server: LogstreamMCP) -> None:
        # Builds the session manager; its app is not mounted (the hub routes here instead).
        server.streamable_http_app(
            # The hub's guard checks Host/Origin and the token.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            # The hub's guard owns the body limit (--max-request-bytes); 2.x would add 4 MiB,
            # too small for a 4 MiB artifact in its JSON envelope.
            max_request_body_size=_NO_SDK_LIMIT,
            # Bounded memory against clients that never say goodbye (S-8.10): a session idle
            # for 6 h is reaped (a spec-following client re-initializes on its 404), and at
            # most 1,000 live at once. 2.x's 30 min would end an agent's session over lunch.
            session_idle_timeout=SESSION_IDLE_S,
            max_sessions=MAX_SESSIONS,
        )
        self.manager = server.session_manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Bad JSON, nested past any depth included, is the SDK's JSON-RPC parse error (400).
        exchange = _Exchange(scope, receive, send)
        await self.manager.handle_request(scope, exchange.receive, exchange.send)


class _Exchange:
    """One request at /mcp; a client that leaves before its answer is complete (gives up on a
    call, closes its GET stream, exits) is normal: one debug line, whatever the SDK does."""

    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.what = f"{scope.get('method')} {scope.get('path')}"
        self._receive, self._send = receive, send
        self.answered = self.gone = False

    async def receive(self) -> Any:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not (self.answered or self.gone):
            self.gone = True
            _log.debug("MCP client went away (%s, before its answer was complete)", self.what)
        return message

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True
        await self._send(message)


def http_endpoint(
    store: LogStore, *, read_only: bool = False
) -> tuple[Any, Callable[[], AbstractAsyncContextManager[Any]]]:
    """(ASGI app, lifespan) for streamable HTTP; the hub mounts it at /mcp.

    The hub's own guard checks Host/Origin, the token and the body size, so the SDK's checks
    are off here.
    """
    quiet_disconnects()
    endpoint = _Endpoint(build_server(store, read_only=read_only))

    def lifespan() -> AbstractAsyncContextManager[Any]:
        return endpoint.manager.run()

    return endpoint, lifespan


# SDK 1.x logged a client that closed its session or its GET stream as an error with a full
# traceback (about 45 lines per disconnect). 2.x catches those itself, but its transport still
# logs any other exception in its stream tasks with a traceback ("Error in SSE writer", "SSE
# response error", "Error in message router", "Session ... crashed"): a safety net for when
# one of these is a client that went away.
_DISCONNECTS = ("ClosedResourceError", "BrokenResourceError", "EndOfStream", "ClientDisconnect")
_SDK_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")


class _QuietDisconnects(logging.Filter):
    """Turns the SDK's tracebacks for a client that went away into one debug line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not _is_disconnect(exc):
            return True
        _log.debug("MCP client went away (%s: %s)", record.getMessage(), type(exc).__name__)
        return False


def _is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e) for e in exc.exceptions)
    return type(exc).__name__ in _DISCONNECTS


def quiet_disconnects() -> None:
    """Install the filter on the SDK's HTTP transport loggers (once per process)."""
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietDisconnects) for f in logger.filters):
            logger.addFilter(_QuietDisconnects())


__all__ = ["LogstreamMCP", "build_server", "http_endpoint", "run_stdio"]
