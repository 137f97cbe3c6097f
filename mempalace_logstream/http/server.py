"""`HubServer`: uvicorn's server for the hub, with a clean stop (issue 19).

When a stop begins (SIGTERM, SIGINT, or `should_exit` set by a caller), before uvicorn closes
any connection: the app's open waits answer 503 "hub is stopping" and its SSE streams end
(`app.stop_serving`), the mounts' answers in flight are sent (`app.drain_mounts`: the MCP
endpoint's tool calls), and only then are the streams the SDK serves ended; one line says so.
uvicorn then waits for nothing long, so no task is cancelled and nothing is logged as an error.

Where uvicorn would use httptools (`http="auto"`, httptools installed), the server uses
`one_write.OneWriteProtocol`: a response leaves in one socket write (issue 25).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI
from sse_starlette.sse import AppStatus

from mempalace_logstream.http.app import drain_mounts, stop_serving


class HubServer(uvicorn.Server):
    """A `uvicorn.Server` for `create_app`'s app that stops it cleanly (see the module).

    `say` gets the one line a stop prints. With `owns_process` (the `serve` command: the
    process ends with the server), sse_starlette's own end-of-streams on a signal is held back
    until the answers of the stopped waits are out (else it could cut an MCP answer's stream
    first), and then set; without it (a hub in a thread of a test) the process-wide flag is
    never touched.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        app: FastAPI,
        *,
        say: Callable[[str], None] = lambda _line: None,
        owns_process: bool = False,
    ) -> None:
        if config.http == "auto":
            config.http = _one_write_protocol() or "auto"
        super().__init__(config)
        self.hub_app = app
        self.say = say
        self.owns_process = owns_process
        self.stop_reason: str | None = None
        self._stopped = False
        if owns_process:
            AppStatus.enable_automatic_graceful_drain = False  # what its (untyped) disable does

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stop_reason is None:
            self.stop_reason = signal.Signals(sig).name
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.stop_app()
        await super().shutdown(sockets)

    async def stop_app(self) -> None:
        """Answer the waits, end the streams, say it once (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        stopped = stop_serving(self.hub_app)
        await drain_mounts(self.hub_app, self.config.timeout_graceful_shutdown or 3.0)
        if self.owns_process:
            AppStatus.should_exit = True  # now sse_starlette may end the SDK's streams
        why = self.stop_reason or "asked to stop"
        waits = f"{stopped.waits} open wait{'' if stopped.waits == 1 else 's'}"
        streams = f"{stopped.streams} SSE stream{'' if stopped.streams == 1 else 's'}"
        self.say(
            f"logstream hub stopping ({why}): answered {waits} with 503 'hub is stopping', "
            f"ended {streams}"
        )


def _one_write_protocol() -> type[asyncio.Protocol] | None:
    """`OneWriteProtocol` when httptools is installed (what uvicorn's "auto" picks), else None."""
    try:
        from mempalace_logstream.http.one_write import OneWriteProtocol
    except ImportError:
        return None
    return OneWriteProtocol
