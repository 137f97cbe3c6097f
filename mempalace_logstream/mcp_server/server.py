"""The MCP server on the official SDK (2.x `MCPServer`): one server class over a backend (a local
`LogStore`, or a remote hub through its client), its tools, and stdio.

The tools are the operation table (`operations`): one `mempalace_<op>` per operation, its
description and input schema those of the operation's parameters model (`op_params`), so a tool
cannot drift from the HTTP route or the CLI. Tool calls skip the SDK's argument model: the raw
arguments go to the core, which checks names (`operations.check_args`) and values exactly as
for HTTP and the CLI, so every surface refuses the same input with the same text. A server
lists a profile of them (`toolsets`: the coordination set unless told otherwise); a tool it
does not list is refused as unknown.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from mempalace_logstream import errors, operations
from mempalace_logstream.identity.actor import ACTOR_SCOPE_KEY, Actor, acting_as
from mempalace_logstream.mcp_server import toolsets
from mempalace_logstream.presence import NEEDS_A_HUB, Registry

if TYPE_CHECKING:  # the store (SQLAlchemy) is loaded by whoever opens one, not by this module
    from mempalace_logstream.store import LogStore

TOOL_PREFIX = toolsets.TOOL_PREFIX
# The ASGI scope key of an anyio.Event set when the HTTP client of a request at /mcp
# disconnects (endpoint.py); a wait of that request is cancelled then.
GONE_SCOPE_KEY = "logstream.client_gone"
# The ASGI scope key of the operations a request at /mcp chose (`?tools=`, endpoint.py).
TOOLS_SCOPE_KEY = "logstream.mcp_tools"

INSTRUCTIONS = (
    "A shared, append-only coordination log for agents. Post what you do as events "
    "(mempalace_event_append), read your inbox with mempalace_event_list(to_agent=<you>), block "
    "for new work with mempalace_event_wait(since_event_id=<cursor>), and hand over exact bytes "
    "as artifacts (mempalace_artifact_put / mempalace_patch_submit). Keep the `cursor` each read "
    "returns and pass it back as since_event_id so you never miss or repeat an event."
)


@runtime_checkable
class Backend(Protocol):
    """Where the tools' operations run: `call(op, args)` with raw arguments."""

    async def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]: ...


class StoreBackend:
    """A LogStore in this process; waits sleep on its notifier, not in a thread."""

    def __init__(self, store: LogStore) -> None:
        self.store = store

    async def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        from mempalace_logstream import aio

        return await aio.call(self.store, op, args)


class ClientBackend:
    """Anything with a blocking `call(op, **args)`: the hub client of `--hub`. Each call runs in
    a thread that cancellation leaves behind, so a long-poll to a hub never holds up the end of
    a session (stdin closed) or of the process."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        from mempalace_logstream import aio

        given = {k: val for k, val in args.items() if val is not None}
        result: dict[str, Any] = await aio.run_detached(
            functools.partial(self.client.call, op, **given)
        )
        return result


class LogstreamMCP(MCPServer):
    """An MCPServer bound to one backend; tools reach it through their Context.

    The signatures of the tool functions only document the tools (their JSON schemas).
    Every tool call runs as an actor (RFC 0008): over the hub's /mcp the one its request's
    bearer token proved (the hub's guard leaves it in the request's scope), else `actor`
    (`logstream mcp --agent NAME`: that agent; None: a local process, as before identity).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        instructions: str = INSTRUCTIONS,
        presence: Registry | None = None,
        actor: Actor | None = None,
        **kwargs: Any,
    ) -> None:
        # version: serverInfo.version is ours (2.x sends "" when none is given).
        super().__init__(
            "mempalace-logstream", instructions=instructions, version=_version(), **kwargs
        )
        self.backend = backend
        self.presence = presence  # the hub's table when this server runs inside a hub
        self.actor = actor
        self.tools: dict[str, Tool] = {}  # what it may offer here (read-only: no writes)
        self.offered: frozenset[str] = frozenset()  # the tools listed unless a request chooses
        from mempalace_logstream.mcp_server import protocol, resources

        self.subscriptions = resources.install(self)
        # What speaks MCP on every transport: the SDK's low-level server, over this one.
        self.protocol = protocol.protocol_server(self)

    async def list_tools(self, context: Context | None = None) -> list[Tool]:
        names = self._offered_to(self._scope_of(context))
        return [tool for name, tool in self.tools.items() if name in names]

    def _offered_to(self, scope: dict[str, Any] | None) -> frozenset[str]:
        """The tool names listed to a request: its `?tools=` at /mcp, else the server's."""
        if scope is None or TOOLS_SCOPE_KEY not in scope:
            return self.offered
        return frozenset(TOOL_PREFIX + op for op in scope[TOOLS_SCOPE_KEY])

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        # The SDK turns a ToolError raised here into an isError result whose text is exactly
        # the message (no prefix: the prefix belongs to its own argument model, skipped here).
        scope = self._scope_of(context)
        if name not in self.tools or name not in self._offered_to(scope):
            raise ToolError(f"unknown tool {name!r}")
        op, args = name.removeprefix(TOOL_PREFIX), dict(arguments or {})
        gone = scope.get(GONE_SCOPE_KEY) if scope is not None else None
        with acting_as(self._actor_of(scope)):
            if op != "event_wait" or not isinstance(gone, anyio.Event):
                result = await self.run_op(op, args)
            else:  # over HTTP, a wait ends with its client (stdio: the SDK cancels the call)
                from mempalace_logstream import waits

                answered, out = await waits.unless_gone(lambda: self.run_op(op, args), gone.wait)
                if not answered or out is None:
                    raise ToolError("the client went away before its wait ended")
                result = out
        # Compact JSON, once (no structuredContent): every space is a token the agent pays for.
        text = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
        return CallToolResult(content=[TextContent(type="text", text=text)])

    @staticmethod
    def _scope_of(context: Context | None) -> dict[str, Any] | None:
        """The ASGI scope of this call's HTTP request (None over stdio)."""
        try:
            request = context.request_context.request if context is not None else None
        except ValueError:  # a Context made outside a request
            request = None
        scope = getattr(request, "scope", None)
        return scope if isinstance(scope, dict) else None

    def _actor_of(self, scope: dict[str, Any] | None) -> Actor | None:
        """The actor of this call: its HTTP request's, else the server's. Read from the
        request's scope, not inherited: tool calls run in the session's tasks, and only the SDK's
        own plumbing (2.3 snapshots the sender's context per message) carries the request's
        context there; a session opened with one token and used with another must run as the
        other (tests/test_identity_surfaces.py)."""
        if scope is not None and ACTOR_SCOPE_KEY in scope:
            actor: Actor | None = scope[ACTOR_SCOPE_KEY]
            return actor
        return self.actor

    async def run_op(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            if op in operations.PRESENCE_PARAMS:
                return await self._presence(op, args)
            return await self.backend.call(op, args)
        except errors.LogstreamError as exc:
            raise ToolError(exc.message) from exc

    async def _presence(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Presence is the hub's: its own table inside a hub, the hub's routes over `--hub`."""
        if self.presence is not None:
            store = self.backend.store if isinstance(self.backend, StoreBackend) else None
            return operations.presence_call(self.presence, op, args, store)
        if isinstance(self.backend, ClientBackend):
            return await self.backend.call(op, args)
        raise errors.ValidationError(NEEDS_A_HUB, field="hub")


def _version() -> str:
    import mempalace_logstream

    return mempalace_logstream.__version__


def build_server(
    source: LogStore | Backend,
    *,
    read_only: bool = False,
    tools: str | None = None,
    presence: Registry | None = None,
    actor: Actor | None = None,
    **kwargs: Any,
) -> LogstreamMCP:
    """An MCP server with the logstream tools: the `tools` profile (`toolsets.resolve`: None is
    the coordination set; ValidationError for an unknown name) of those that can work here
    (presence needs a hub: `presence`, or a hub client as `source`); `read_only` leaves the
    mutating ones out; `actor` is who its tool calls run as when no request says otherwise."""
    backend = source if isinstance(source, Backend) else StoreBackend(source)
    hub = presence is not None or isinstance(backend, ClientBackend)
    offered = toolsets.resolve(tools, hub=hub)
    server = LogstreamMCP(backend, log_level="WARNING", presence=presence, actor=actor, **kwargs)
    for name in toolsets.usable(toolsets.PROFILES["all"], hub=hub):
        op = operations.every_operation()[name]
        if not (read_only and op.mutating):
            server.tools[TOOL_PREFIX + name] = spec_tool(name, op)
    server.offered = frozenset(TOOL_PREFIX + name for name in offered)
    return server


def spec_tool(name: str, op: operations.Operation) -> Tool:
    """The tool of operation `name`: the operation's description (one line) and its parameters
    as agents read them (`Params.tool_schema`: names, types, descriptions, required ones).
    Text results only (no output schema): the result is returned once, as compact JSON text.
    Hints: read-only, or a write that destroys nothing (all but event_redact); MCP's defaults
    (not read-only, destructive) are left unsaid: each byte is the agent's context."""
    hints = None  # a write that destroys (event_redact): MCP's defaults say it all
    if not op.mutating:
        hints = ToolAnnotations(read_only_hint=True)
    elif not op.destructive:
        hints = ToolAnnotations(destructive_hint=False)
    return Tool(
        name=TOOL_PREFIX + name,
        description=op.description,
        input_schema=op.params.tool_schema(),
        annotations=hints,
    )


def run_stdio(
    source: LogStore | Backend,
    *,
    read_only: bool = False,
    tools: str | None = None,
    actor: Actor | None = None,
    name: str = "the log",
) -> None:
    """Serve the tools (the `tools` profile) and resources over stdio until the client closes
    the pipe; every tool call runs as `actor`. `name` names the log in the resource follower's
    lines ("hub URL"). A `DeferredStore` source is opened after the first answer (deferred.py);
    what opening it raised is raised here."""
    server = build_server(source, read_only=read_only, tools=tools, actor=actor)
    speak_on_stderr(server, name)
    anyio.run(serve_stdio, server)


def speak_on_stderr(server: LogstreamMCP, name: str) -> None:
    """A stdio server's resource follower says on stderr when its log (hub) is lost and back."""
    from mempalace_logstream.mcp_server import resources

    server.subscriptions.outage = resources.outage(name, resources.note)


async def serve_stdio(server: LogstreamMCP) -> None:
    """`server` over stdio, with its resource follower beside it (and the opening of its log,
    when that is deferred)."""
    from mempalace_logstream.mcp_server.deferred import DeferredStore

    lowlevel = server.protocol
    log = server.backend if isinstance(server.backend, DeferredStore) else None
    async with anyio.create_task_group() as tg, stdio_server() as (read, write):
        tg.start_soon(server.subscriptions.run)
        if log is not None:
            tg.start_soon(log.run, tg.cancel_scope)
            write = log.after_first_send(write)
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
        if log is not None:  # a session that said nothing still opens (and checks) its log
            await log.opened()
        tg.cancel_scope.cancel()
    if log is not None:
        log.raise_failure()
