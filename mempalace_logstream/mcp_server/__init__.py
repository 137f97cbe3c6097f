"""MCP on the official SDK (S-6.2): the tools, stdio, the hub's /mcp endpoint and channel mode.

    server.py    LogstreamMCP over a backend (a LogStore, or a hub client), build_server, stdio
    tools.py     the tool functions agents call (signatures and docstrings are their schemas)
    endpoint.py  streamable HTTP for the hub's /mcp, sessions bounded, disconnects quiet
    channel.py   `logstream mcp --agent NAME --channel`: new inbox events pushed into the session
    channel_text.py  what channel mode writes for the model: instructions, events, bursts

The only `mcp` importer; must not import fastapi or typer.
"""

from mempalace_logstream.mcp_server.endpoint import http_endpoint, quiet_disconnects
from mempalace_logstream.mcp_server.server import (
    INSTRUCTIONS,
    TOOL_PREFIX,
    Backend,
    ClientBackend,
    LogstreamMCP,
    StoreBackend,
    build_server,
    run_stdio,
)
from mempalace_logstream.mcp_server.tools import (
    READ_TOOLS,
    WRITE_TOOLS,
    mempalace_artifact_get,
    mempalace_artifact_put,
    mempalace_event_ack,
    mempalace_event_append,
    mempalace_event_get,
    mempalace_event_list,
    mempalace_event_redact,
    mempalace_event_wait,
    mempalace_patch_submit,
    mempalace_presence_announce,
    mempalace_presence_leave,
    mempalace_presence_list,
    mempalace_stats,
    mempalace_task_create,
    mempalace_task_list,
    mempalace_task_status,
    mempalace_task_update,
    mempalace_version_vector,
)

__all__ = [
    "INSTRUCTIONS",
    "READ_TOOLS",
    "TOOL_PREFIX",
    "WRITE_TOOLS",
    "Backend",
    "ClientBackend",
    "LogstreamMCP",
    "StoreBackend",
    "build_server",
    "http_endpoint",
    "mempalace_artifact_get",
    "mempalace_artifact_put",
    "mempalace_event_ack",
    "mempalace_event_append",
    "mempalace_event_get",
    "mempalace_event_list",
    "mempalace_event_redact",
    "mempalace_event_wait",
    "mempalace_patch_submit",
    "mempalace_presence_announce",
    "mempalace_presence_leave",
    "mempalace_presence_list",
    "mempalace_stats",
    "mempalace_task_create",
    "mempalace_task_list",
    "mempalace_task_status",
    "mempalace_task_update",
    "mempalace_version_vector",
    "quiet_disconnects",
    "run_stdio",
]
