"""The local log of `logstream mcp`, opened once the server's first answer is out.

An MCP client starts the server and sends `initialize` at once; the answer needs the tools, not
the log. Opening the log (SQLAlchemy, the schema check, maybe creating the file) is a fifth of
the start, so stdio answers first and opens the log right after, in a worker thread; a tool call
that comes before it is open waits for it. A log that cannot be opened is reported by
`on_failure` (the CLI: its error line, exit 1, at once, as before serving: `logstream mcp --db
BAD` still fails with the same message whether or not a client said anything); without one,
the session is cancelled and `serve_stdio` raises the error once it ends (stdio ends only when
the client closes stdin: the SDK's reader waits in a read that cannot be cancelled).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from mempalace_logstream.operations import LocalClient

T = TypeVar("T")


class DeferredStore:
    """A backend (`call(op, args)`) over the store of a LocalClient opened by `open_client`
    when first wanted: after the first answer is sent (`after_first_send`), at the first call,
    or when the session ends (`opened`), whichever comes first. `run` opens it; `close` closes
    what was opened; `failure` is what opening raised, given to `on_failure` if any."""

    def __init__(
        self,
        open_client: Callable[[], LocalClient],
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        self._open = open_client
        self._on_failure = on_failure
        self.client: LocalClient | None = None
        self.failure: Exception | None = None
        self._events: tuple[anyio.Event, anyio.Event] | None = None  # (wanted, settled)

    def _wanted_settled(self) -> tuple[anyio.Event, anyio.Event]:
        if self._events is None:  # made in the event loop, on first use
            self._events = anyio.Event(), anyio.Event()
        return self._events

    def want(self) -> None:
        """Open the log now (`run` does it)."""
        self._wanted_settled()[0].set()

    async def run(self, session: anyio.CancelScope) -> None:
        """Open the log once wanted, in a worker thread (the event loop answers meanwhile); a
        failure is kept in `failure`, told to `on_failure`, and cancels `session`."""
        wanted, settled = self._wanted_settled()
        await wanted.wait()
        try:
            self.client = await anyio.to_thread.run_sync(self._open)
        except Exception as exc:  # noqa: BLE001 - kept, raised by serve_stdio once it ends
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)
            session.cancel()
        finally:
            settled.set()

    async def opened(self) -> LocalClient:
        """The client, once open (asked for now if it was not yet)."""
        wanted, settled = self._wanted_settled()
        wanted.set()
        await settled.wait()
        if self.client is None:
            raise self.failure or RuntimeError("the log was not opened")
        return self.client

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        from mempalace_logstream import aio

        client = await self.opened()
        return await aio.call(client.store, op, args)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def after_first_send(self, stream: T) -> T:
        """`stream` (the server's write stream) that asks for the log once its first message
        (the answer to `initialize`) is handed to the transport."""
        return _FirstSend(stream, self.want)  # type: ignore[return-value]


class _FirstSend(Generic[T]):
    """A write stream that calls `then` after its first `send`; all else is the stream's."""

    def __init__(self, stream: T, then: Callable[[], None]) -> None:
        self._stream: Any = stream
        self._then: Callable[[], None] | None = then

    async def send(self, item: Any, /) -> None:
        await self._stream.send(item)
        if self._then is not None:
            then, self._then = self._then, None
            then()

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _FirstSend[T]:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._stream.__aexit__(exc_type, exc, tb)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
