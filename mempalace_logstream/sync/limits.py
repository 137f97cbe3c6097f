"""What a round with one peer may cost us: page and batch sizes, the response cap, and the
round's total deadline (`Deadline`, `check_deadline`); plus the two checks every HTTP answer and
peer URL pass (`json_values_bound`, `redact_url`). No I/O.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mempalace_logstream import errors, replication

BATCH = 500  # events per ops request (the reference's cap too)
ROWS_BATCH = replication.MAX_ROWS_LIMIT  # events per compact page (our hubs)
ARTIFACT_BATCH = 100  # ids per batched artifact request
APPLY_ARTIFACT_BYTES = 16 * 1024 * 1024  # artifact content held before it is applied alone
PUSH_MAX_BYTES = 8 * 1024 * 1024  # artifact bytes per push request
DEFAULT_INTERVAL_S = 15.0
HTTP_TIMEOUT_S = 30.0
DEFAULT_DEADLINE_S = 300.0  # a whole round with one peer
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # bytes read from one peer response (decoded)
MIN_RESPONSE_BYTES = 64 * 1024
BYTES_PER_JSON_VALUE = 64  # a response may hold max_response_bytes / 64 JSON values
ABANDON_GRACE_S = 30.0  # past its deadline, a round still running is reported and left

Progress = Callable[[dict[str, Any]], None]


class DeadlineExceededError(errors.SyncError):
    """A round with one peer ran past its total deadline (what it applied stays)."""


class ResponseTooLargeError(errors.SyncError):
    """A peer's response was over the byte (or JSON value) cap; it was not decoded."""


class DeadlinePassed(Exception):
    """Raised inside a socket operation started after the round's deadline (`sockets`)."""


class Deadline:
    """The total time one round with a peer may take, on the monotonic clock; `cancel()`
    ends it at once (the hub is stopping)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds
        self.cancelled = False

    def left(self) -> float | None:
        """Seconds left (<= 0 once passed); None for no deadline."""
        if self.cancelled:
            return 0.0
        return None if self._end is None else self._end - time.monotonic()

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def cancel(self) -> None:
        self.cancelled = True


def check_deadline(peer: Any, doing: str = "") -> None:
    """Raise DeadlineExceededError if the round with `peer` is past its deadline."""
    deadline = getattr(peer, "deadline", None)
    if deadline is None or not deadline.passed():
        return
    where = f" ({doing})" if doing else ""
    if deadline.cancelled:
        message = f"{peer.name}: the round was stopped (the hub is shutting down){where}"
    else:
        message = (
            f"{peer.name}: the round passed its {deadline.seconds:g} s deadline "
            f"(deadline_s){where}; what it applied stays"
        )
    raise DeadlineExceededError(message, peer_id=peer.name)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values_bound(raw: bytes | bytearray, strings: bool = True) -> int:
    """An upper bound on the values and keys a JSON text decodes to: every one but the first
    follows a `[`, `{`, `,` or `:`. With `strings=False` the contents of strings are left
    out first (exact separators; slower, for when the quick bound is over a cap)."""
    if not strings:
        raw = _JSON_STRING.sub(b'""', raw)
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def redact_url(url: Any) -> str:
    """`url` without the `user:password@` of its authority: the form every peer URL is shown,
    logged and stored in (the request itself still uses the full URL)."""
    text = str(url)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*:)?//[^/?#]*@", r"\1//", text)


def url_secrets(url: str) -> list[str]:
    """The credential parts of a URL (user:password, password), longest first, for scrubbing
    them from error texts that a library may have built from the full URL."""
    m = re.match(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//([^/?#]*)@", url)
    if not m or not m.group(1):
        return []
    userinfo = m.group(1)
    parts = [userinfo, userinfo.partition(":")[2]]
    return sorted({p for p in parts if len(p) >= 3}, key=len, reverse=True)


def chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    """`items` in lists of at most `size`."""
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
