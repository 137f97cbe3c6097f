"""One socket write per response (issue 25): uvicorn's httptools protocol writes a response's
status line and headers, then its body, as two `transport.write`s, so a small answer (an
append's JSON) costs the hub two send syscalls and the client two TCP segments to read.
`OneWriteTransport` holds a write that is a response's head (`HTTP/…` up to the blank line)
and what is written after it in the same step of the event loop (a `Response`'s body), and
sends them as one write at the end of that step (`loop.call_soon`); the answers of the
requests read in one loop iteration leave together, after it. Every write made while no head
is held goes out at once, as before: a stream's later chunks are never held (200 SSE
subscribers woken by one event each get their frame as soon as their task writes it).
Closing sends what is held first.

`OneWriteProtocol` is uvicorn's `HttpToolsProtocol` on such a transport; `HubServer` uses it
when uvicorn would pick httptools anyway (`http="auto"` with httptools installed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OneWriteTransport(asyncio.Transport):
    """A transport that sends a response's head with what follows it in the same event-loop
    step, in one write (see the module); every other call goes to the wrapped transport."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self.inner = transport
        self.loop = asyncio.get_running_loop()
        self.held: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        chunk = bytes(data)
        if self.held is not None:
            self.held.append(chunk)
        elif chunk.startswith(b"HTTP/") and chunk.endswith(b"\r\n\r\n"):
            self.held = [chunk]
            self.loop.call_soon(self.flush)
        else:
            self.inner.write(chunk)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is held, as one write (a no-op when nothing is or the socket closes)."""
        held, self.held = self.held, None
        if held is not None and not self.inner.is_closing():
            self.inner.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self.inner.close()

    def write_eof(self) -> None:
        self.flush()
        self.inner.write_eof()

    def abort(self) -> None:
        self.held = None
        self.inner.abort()

    def get_write_buffer_size(self) -> int:
        return self.inner.get_write_buffer_size() + sum(map(len, self.held or ()))

    def is_closing(self) -> bool:
        return self.inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def pause_reading(self) -> None:
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.inner.get_write_buffer_limits()

    def can_write_eof(self) -> bool:
        return self.inner.can_write_eof()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol, writing through a `OneWriteTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWriteTransport(transport))
