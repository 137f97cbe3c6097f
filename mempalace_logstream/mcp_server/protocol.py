"""The protocol server of a `LogstreamMCP`: the SDK's documented low-level `Server`, its request
handlers given at construction, each answering through the `MCPServer`'s public methods
(`list_tools`, `call_tool`, `list_resource_templates`, `read_resource`) or the resource
subscriptions. Stdio, the hub's /mcp and channel mode all run this one server; channel mode
adds its own notification handler and capability on it, through the same public API.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    BlobResourceContents,
    CallToolRequestParams,
    CallToolResult,
    InputRequiredResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
    TextResourceContents,
)

if TYPE_CHECKING:
    from mempalace_logstream.mcp_server.server import LogstreamMCP

_log = logging.getLogger("mempalace_logstream.mcp_server")


def protocol_server(app: LogstreamMCP) -> Server[Any]:
    """The low-level server that speaks MCP for `app`."""

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        context: Context[Any, Any] = Context(request_context=ctx, mcp_server=app)
        return ListToolsResult(tools=await app.list_tools(context))

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        context: Context[Any, Any] = Context(request_context=ctx, mcp_server=app)
        try:
            return await app.call_tool(params.name, params.arguments or {}, context)
        except ToolError as exc:  # the text is exactly the core's message
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    async def list_resources(ctx: Any, params: Any) -> ListResourcesResult:
        return ListResourcesResult(resources=await app.list_resources())

    async def list_templates(ctx: Any, params: Any) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=await app.list_resource_templates())

    async def read_resource(ctx: Any, params: ReadResourceRequestParams) -> ReadResourceResult:
        return await _read(app, ctx, params)

    subs = app.subscriptions
    return Server(
        app.name,
        version=app.version,
        instructions=app.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subs.subscribe,
        on_unsubscribe_resource=subs.unsubscribe,
        on_subscriptions_listen=subs.listen,
    )


async def _read(
    app: LogstreamMCP, ctx: Any, params: ReadResourceRequestParams
) -> ReadResourceResult:
    """`resources/read`: the resource's text (or bytes), an unknown URI an INVALID_PARAMS."""
    context: Context[Any, Any] = Context(request_context=ctx, mcp_server=app)
    try:
        results = await app.read_resource(params.uri, context)
    except ResourceError as err:
        code = INVALID_PARAMS if isinstance(err, ResourceNotFoundError) else INTERNAL_ERROR
        _log.info("resource %r failed: %r", str(params.uri), str(err))
        raise MCPError(code=code, message=str(err), data={"uri": str(params.uri)}) from err
    if isinstance(results, InputRequiredResult):  # our resources never ask for input
        raise MCPError(code=INTERNAL_ERROR, message="unexpected input request")
    contents: list[TextResourceContents | BlobResourceContents] = []
    for item in results:
        if isinstance(item.content, bytes):
            blob = base64.b64encode(item.content).decode()
            mime = item.mime_type or "application/octet-stream"
            contents.append(BlobResourceContents(uri=params.uri, blob=blob, mime_type=mime))
        else:
            mime = item.mime_type or "text/plain"
            contents.append(TextResourceContents(uri=params.uri, text=item.content, mime_type=mime))
    return ReadResourceResult(contents=contents)
