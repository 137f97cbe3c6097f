"""Self-announcement for the commands that run for a while on an agent's behalf (`watch`,
`mcp --agent`, channel mode): with a hub, the agent is announced `watching` at start, refreshed,
and left when the command stops: on a normal end, Ctrl-C, or SIGTERM (left, then the process
ends by the signal as before). `--no-presence` turns it off; without a hub nothing is announced.
Best effort: a hub that is down or slow never blocks or ends the command (one line on stderr).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mempalace_logstream import display

if TYPE_CHECKING:
    from mempalace_logstream.announcer import Announcer

NO_PRESENCE_HELP = (
    "Do not announce yourself in the hub's presence (by default, with --hub and --agent, you "
    "are announced as watching while this runs and leave when it stops)."
)
PRESENCE_TTL_HELP = (
    "Seconds your presence entry lives unless refreshed; refreshed every third of it (3-3600)."
)
NoPresenceOpt = Annotated[bool, typer.Option("--no-presence", help=NO_PRESENCE_HELP)]
PresenceTtlOpt = Annotated[
    int | None,
    typer.Option("--presence-ttl-s", envvar="LOGSTREAM_PRESENCE_TTL_S", help=PRESENCE_TTL_HELP),
]


def _note(message: str) -> None:
    print(f"logstream: {display.terminal(message)}", file=sys.stderr, flush=True)


def announcer(
    agent: str | None,
    hub: str | None,
    token: str | None,
    *,
    enabled: bool,
    ttl_s: int | None,
    what: str,
    hub_told: bool = False,
    path: str | None = None,
) -> Announcer | None:
    """The announcer for this command, not started; None when nothing is to be announced.
    `hub_told`: the command says itself when the hub is lost or refuses the token (channel
    mode), so the announcer keeps quiet about those. `path`: the delivery path this command
    is (watch, channel, codex: presence's wakeable, issue 20).

    Raises ValidationError (a bad agent name or TTL) before anything runs."""
    from mempalace_logstream import backoff
    from mempalace_logstream.announcer import CALL_TIMEOUT_S, Announcer, check_ttl

    check_ttl(ttl_s)
    if not (enabled and hub and agent):
        return None
    from mempalace_logstream.hub_client import HubClient

    def connect() -> HubClient:
        return HubClient(hub, token=token, timeout=CALL_TIMEOUT_S)

    def told(exc: Exception) -> bool:
        return backoff.is_transient(exc) or backoff.is_refusal(exc)

    quiet = told if hub_told else None
    return Announcer(
        connect, agent, note=_note, what=what, hub=hub, ttl_s=ttl_s, quiet=quiet, path=path
    )


@contextlib.contextmanager
def announced(who: Announcer | None) -> Iterator[None]:
    """Announced while the block runs; left however it ends (SIGTERM included)."""
    if who is None:
        yield
        return
    main = threading.current_thread() is threading.main_thread()
    previous: Any = signal.getsignal(signal.SIGTERM) if main else None
    if previous is None:  # a handler not set from Python: the default is what we restore
        previous = signal.SIG_DFL

    def on_term(signum: int, frame: Any) -> None:
        who.stop()
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        else:  # die by the signal, as without presence
            os.kill(os.getpid(), signum)

    if main:
        signal.signal(signal.SIGTERM, on_term)
    who.start()
    try:
        yield
    finally:
        who.stop()
        if main:
            signal.signal(signal.SIGTERM, previous)
