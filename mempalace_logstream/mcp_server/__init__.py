"""MCP on the official SDK (S-6.2): the tools, stdio, the hub's /mcp endpoint and channel mode.

    server.py    LogstreamMCP over a backend (a LogStore, or a hub client), its tools (one per
                 operation of the table, described by its parameters model), build_server, stdio
    deferred.py  the local log of `logstream mcp`, opened once its first answer is out
    protocol.py  the SDK's low-level `Server` that speaks MCP for it on every transport
    resources.py the logstream:// resources and their subscriptions
    endpoint.py  streamable HTTP for the hub's /mcp, sessions bounded, disconnects quiet
    late.py      that endpoint built in a worker thread once the hub serves (no SDK at start)
    channel.py   `logstream mcp --agent NAME --channel`: new inbox events pushed into the session
    channel_text.py  what channel mode writes for the model: instructions, events, bursts

The only `mcp` importer; must not import fastapi or typer. The names below are imported on
first use (PEP 562): stdio (`logstream mcp`) never loads the HTTP endpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mempalace_logstream import lazy

if TYPE_CHECKING:
    from mempalace_logstream.mcp_server.deferred import DeferredStore
    from mempalace_logstream.mcp_server.endpoint import http_endpoint, quiet_disconnects
    from mempalace_logstream.mcp_server.late import late_http_endpoint
    from mempalace_logstream.mcp_server.server import (
        INSTRUCTIONS,
        TOOL_PREFIX,
        Backend,
        ClientBackend,
        LogstreamMCP,
        StoreBackend,
        build_server,
        run_stdio,
        spec_tool,
    )

# Each exported name, and the submodule that defines it.
_HOMES = {
    "DeferredStore": "deferred",
    "http_endpoint": "endpoint",
    "quiet_disconnects": "endpoint",
    "late_http_endpoint": "late",
    **dict.fromkeys(
        (
            "INSTRUCTIONS",
            "TOOL_PREFIX",
            "Backend",
            "ClientBackend",
            "LogstreamMCP",
            "StoreBackend",
            "build_server",
            "run_stdio",
            "spec_tool",
        ),
        "server",
    ),
}

__all__ = [
    "INSTRUCTIONS",
    "TOOL_PREFIX",
    "Backend",
    "ClientBackend",
    "DeferredStore",
    "LogstreamMCP",
    "StoreBackend",
    "build_server",
    "http_endpoint",
    "late_http_endpoint",
    "quiet_disconnects",
    "run_stdio",
    "spec_tool",
]


__getattr__ = lazy.attributes(__name__, _HOMES, globals())
