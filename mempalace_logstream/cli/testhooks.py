"""Seams that exist only for the test suite. Nothing here acts unless a test sets its
environment variable; no user-facing behaviour depends on this module.

LOGSTREAM_TEST_KILL_AT=print:N (or checkpoint:N): `watch` SIGKILLs itself right after printing
(or checkpointing) matched batch N, so the at-least-once tests can crash it at exact points.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

KILL_AT = "LOGSTREAM_TEST_KILL_AT"


def watch_crash_hook() -> Callable[[str, int], None] | None:
    """The watcher's crash hook asked for by LOGSTREAM_TEST_KILL_AT, or None (the normal case)."""
    raw = os.environ.get(KILL_AT)
    if not raw:
        return None
    where, _, n = raw.partition(":")
    target = int(n or 1)

    def hook(point: str, printed: int) -> None:
        if point == where and printed >= target:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook
