"""The blocking driver of backoff.py's policy (issue 19), for the CLI clients that follow a
hub: `watch`, `tail`, `wait` and Monitor mode.

    policy = Reconnect(hub_url, note=print_state, give_up_after_s=None)
    page = policy.call(lambda: client.call("event_wait", since_event_id=cursor, ...))
    reader = policy.client(client)    # the same for every call of a read-only client

`call(fn)` runs `fn()` until it returns. What is worth another try is backoff.py's rule, the
one channel mode and the MCP subscriptions follow (`is_transient`: the hub cannot be reached,
does not answer in time, or answers 5xx, 503 at its wait cap or while it stops included; never
a refused token, `is_refusal`, nor an answer about the request itself), and so are the pauses
(`Backoff`: doubling up to 5 s), except that a `Retry-After` is honoured up to that cap. The
first failure of an outage is told in one line (the hub and why), its end in one line; nothing
in between. After `give_up_after_s` of one outage, or at the instant a call is given as
`until` (a `wait`'s timeout), `GaveUpError` (the CLI exits `EXIT_GAVE_UP`).

The callers resume from their cursor: `fn` reads after the cursor the caller holds, and the
cursor moves only with an answer the caller has delivered, so a retried call neither skips
nor repeats an event. Must not import fastapi, typer, mcp, httpx or the store.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeVar

from mempalace_logstream import backoff, errors

MAX_DELAY_S = backoff.MAX_DELAY_S
EXIT_GAVE_UP = 3  # the CLI's exit code once --give-up-after has passed
T = TypeVar("T")


class GaveUpError(errors.LogstreamError):
    """The hub stayed unreachable for longer than the client was told to wait."""


class Caller(Protocol):
    def call(self, name: str, /, **args: Any) -> dict[str, Any]: ...


class Client(Caller, Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class HubState:
    """A change of a hub's reachability, as told to `note`: `state` is `lost` (the first
    failure of an outage), `back` (the first answer after one) or `gave_up`; `reason` says
    why it was lost; `down_s` how long it has been down."""

    hub: str
    state: str
    reason: str
    down_s: float
    message: str


def reason(exc: BaseException, hub: str) -> str:
    """Why `hub` is lost, in a few words: `connection refused`, `DNS lookup failed`, `no answer
    in time`, `connection lost`, `HTTP 503: hub is stopping` and the like."""
    if isinstance(exc, errors.PeerUnavailableError):
        return _transport_reason(exc)
    why = backoff.reason(exc, f"hub {hub}")
    if isinstance(exc, errors.BusyError | errors.StorageError):
        return f"HTTP 503: {why}"
    if isinstance(exc, errors.SyncError):
        return f"HTTP 502: {why}"
    return why


def _transport_reason(exc: errors.PeerUnavailableError) -> str:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return "DNS lookup failed"
        if isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(seen, ConnectionError):
            return "connection lost"
        name = type(seen).__name__
        if "Timeout" in name:
            return "no answer in time"
        if name in ("RemoteProtocolError", "ReadError"):
            return "connection lost"
        seen = seen.__cause__ or seen.__context__
    return exc.message


class Reconnect:
    """The reconnect policy for one hub (see the module docstring). `sleep` and `clock` are
    injectable for tests; `note` gets each `HubState` change."""

    def __init__(
        self,
        hub: str,
        *,
        note: Callable[[HubState], None],
        give_up_after_s: float | None = None,
        max_delay_s: float = MAX_DELAY_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if give_up_after_s is not None and give_up_after_s < 0:
            raise errors.ValidationError(
                f"give_up_after is {give_up_after_s}; it must be 0 or more seconds",
                field="give_up_after",
            )
        self.hub = hub
        self.note = note
        self.give_up_after_s = give_up_after_s
        self.max_delay_s = max_delay_s
        self._pause = backoff.Backoff(cap_s=max_delay_s)
        self._sleep, self._clock = sleep, clock
        self._down_since: float | None = None  # the outage under way, if any
        self._reason = ""
        self.outages = 0  # how many outages this policy rode through (read by tests)

    def call(self, fn: Callable[[], T], *, until: float | None = None) -> T:
        """`fn()`, retried through an outage; raises its other errors (a refused token
        included) at once, or GaveUpError past `give_up_after_s`. `until` (an instant of
        the policy's clock) ends the ride too: a failure at or after it gives up (`wait`,
        whose timeout it is, when no `give_up_after_s` was given); a try is made right at it."""
        while True:
            try:
                result = fn()
            except errors.LogstreamError as exc:
                if errors.interrupted(exc) or backoff.is_refusal(exc):
                    raise
                if not backoff.is_transient(exc):
                    raise
                left = self._lost(exc, until)
                self._sleep(min(self._delay(exc), left))
                continue
            self._back()
            return result

    def client(self, client: Caller) -> Client:
        """`client` with every call run through `call` (for clients that only read); closing
        it closes `client` when that has a `close`."""
        return _Riding(client, self)

    def _delay(self, exc: errors.LogstreamError) -> float:
        if isinstance(exc, errors.BusyError):
            return min(float(exc.retry_after_s), self.max_delay_s)
        return self._pause.delay()

    def _lost(self, exc: errors.LogstreamError, until: float | None = None) -> float:
        """Tell the first failure of an outage; give up past the bound or at `until`.
        Returns the seconds left before the nearer of the two (a try is made right at it)."""
        now = self._clock()
        if self._down_since is None:
            self._down_since, self._reason = now, reason(exc, self.hub)
            self.outages += 1
            if self.give_up_after_s is not None:
                bound = f", giving up after {self.give_up_after_s:g} s (--give-up-after)"
            elif until is not None:
                bound = ", giving up once the wait's timeout has passed"
            else:
                bound = ""
            self._tell(
                "lost",
                0.0,
                f"hub {self.hub} is unreachable ({self._reason}); resuming from the cursor once "
                f"it is back; retrying at most {self.max_delay_s:g} s apart{bound}",
            )
        down = now - self._down_since
        left = self.max_delay_s
        if self.give_up_after_s is not None:
            if down >= self.give_up_after_s:
                self._give_up(exc, down, f"--give-up-after {self.give_up_after_s:g}")
            left = self.give_up_after_s - down
        if until is not None:
            if now >= until:
                self._give_up(exc, down, "the wait's timeout has passed")
            left = min(left, until - now)
        return left

    def _give_up(self, exc: errors.LogstreamError, down: float, why: str) -> NoReturn:
        message = (
            f"gave up on hub {self.hub} after {down:.1f} s without it "
            f"({reason(exc, self.hub)}; {why})"
        )
        self._tell("gave_up", down, message)
        raise GaveUpError(message)

    def _back(self) -> None:
        if self._down_since is None:
            return
        down = self._clock() - self._down_since
        self._down_since = None
        self._pause.reset()
        self._tell("back", down, f"hub {self.hub} is back after {down:.1f} s; resuming")

    def _tell(self, state: str, down: float, message: str) -> None:
        self.note(
            HubState(hub=self.hub, state=state, reason=self._reason, down_s=down, message=message)
        )


class _Riding:
    """A client whose calls ride through outages (`Reconnect.client`)."""

    def __init__(self, client: Caller, policy: Reconnect) -> None:
        self._client, self._policy = client, policy

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        return self._policy.call(lambda: self._client.call(name, **args))

    def close(self) -> None:
        close: Callable[[], None] | None = getattr(self._client, "close", None)
        if close is not None:
            close()
