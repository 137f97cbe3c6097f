"""Riding through a hub that goes away (issue 19): capped backoff between tries, which failures
are worth another try, and the one line said when a hub is lost and the one when it is back.

Used by the followers that outlive a hub restart in one process (channel mode and MCP resource
subscriptions over `--hub`); small and self-contained so that the CLI clients (`watch`, `tail`,
`wait`) can adopt it. Imports errors only; its only output is the `note` it is given.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from mempalace_logstream import errors

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0  # the longest pause between two tries (issue 19: at most 5 s)


@dataclass
class Backoff:
    """Delays between tries: doubling from `first_s` up to `cap_s`, each drawn from its upper
    half (clients that lost one hub together do not all come back in the same instant)."""

    first_s: float = FIRST_DELAY_S
    cap_s: float = MAX_DELAY_S
    _next_s: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._next_s = self.first_s

    def delay(self) -> float:
        """The pause before the next try (never above `cap_s`), growing for the one after."""
        base = self._next_s
        self._next_s = min(self.cap_s, base * 2)
        return random.uniform(base / 2, base)

    def reset(self) -> None:
        self._next_s = self.first_s


def is_refusal(exc: BaseException) -> bool:
    """The hub said no to the token or the request: the same try would get the same answer."""
    return isinstance(exc, errors.UnauthorizedError)


def is_transient(exc: BaseException) -> bool:
    """A hub that cannot be reached, is stopping or failed (503, 502, 5xx, a timeout): worth
    another try. An answer about the request itself (invalid, not found, conflict, forbidden)
    and a refused token are not."""
    if isinstance(exc, errors.PeerUnavailableError | errors.StorageError | errors.BusyError):
        return True
    if isinstance(exc, errors.SyncError):
        return True
    return type(exc) is errors.LogstreamError  # an answer no table maps (HTTP 500, 504, ...)


def reason(exc: BaseException, name: str) -> str:
    """Why `name` ("hub URL") failed, in one line, without repeating it."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = " ".join(text.split())
    for prefix in (f"cannot reach {name}: ", f"{name} "):
        if text.startswith(prefix):
            return text.removeprefix(prefix)
    return text


class Outage:
    """What a follower says about its log (`name`: "hub URL"): one line when it is lost (naming
    it and why), one when it is back, and one if it refuses the token. Tries in between are
    quiet."""

    def __init__(self, name: str, note: Callable[[str], None], *, meanwhile: str, back: str):
        self.name = name
        self.lost = False
        self._note = note
        self._meanwhile = meanwhile  # what happens while it is down ("the tools answer ...")
        self._back = back  # what happens now that it is back ("pushing from the cursor")

    def note(self, message: str) -> None:
        """Any other line about this follower, through the same sink."""
        self._note(message)

    def failed(self, exc: BaseException) -> None:
        if self.lost:
            return
        self.lost = True
        self._note(
            f"{self.name} is unreachable ({reason(exc, self.name)}); {self._meanwhile}; "
            f"retrying at most {MAX_DELAY_S:g} s apart"
        )

    def refused(self, exc: BaseException, stopped: str) -> None:
        self._note(f"{self.name} {reason(exc, self.name)}; not retrying: {stopped}")

    def ok(self) -> None:
        if self.lost:
            self.lost = False
            self._note(f"{self.name} is back; {self._back}")
