"""Self-announcement (S-8.4): a process that watches for an agent (`logstream watch --hub`,
`logstream mcp --agent --hub`, channel mode) keeps that agent's presence at the hub: `watching`
at start, announced again every `ttl_s / 3` so the entry never lapses while it runs, and `leave`
when it stops.

Best effort, off the caller's thread: every call has a short deadline, a hub that is down, slow
or refusing never blocks or crashes the process, and the first failure is told once (one line
through `note`); later ones are quiet, and a hub that comes back is announced to again.
Must not import fastapi, typer, mcp or the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from mempalace_logstream import notify, presence
from mempalace_logstream import validation as v

CALL_TIMEOUT_S = 2.0  # one announce or leave; the whole stop waits at most twice this
MIN_TTL_S = 3  # refreshed every ttl/3: at least a second apart


class Client(Protocol):
    def call(self, op: str, /, **args: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...


def check_ttl(value: Any) -> int:
    """The TTL of a self-announcement, `presence_ttl_s` (3..3600 s)."""
    ttl = presence.DEFAULT_TTL_S if value is None else v.strict_int("presence_ttl_s", value)
    if not MIN_TTL_S <= ttl <= presence.MAX_TTL_S:
        raise v.fail(
            "presence_ttl_s",
            f"is {ttl}; it must be between {MIN_TTL_S} and {presence.MAX_TTL_S} seconds",
            presence.MAX_TTL_S,
        )
    return ttl


class Announcer:
    """Keeps `agent` announced at a hub until `stop()`; `connect()` makes a client per thread."""

    def __init__(
        self,
        connect: Callable[[], Client],
        agent: Any,
        *,
        note: Callable[[str], None],
        what: str,
        hub: str,
        ttl_s: Any = None,
        state: str = "watching",
        path: str | None = None,
        quiet: Callable[[Exception], bool] | None = None,
    ) -> None:
        name = v.routing("agent", agent, required=True)
        assert name is not None
        self.agent = name
        self.ttl_s = check_ttl(ttl_s)
        self.state = state
        self.what = what  # the entry's note: which process this is ("logstream watch")
        self.path = path  # the delivery path this process is (presence.PATHS), if it pushes
        self.hub = hub
        self.announced = 0  # successful announcements (tests and the leave decision)
        self._connect = connect
        self._note = note
        # Failures another part of the process tells about already (channel mode says when
        # its hub is lost or refuses the token): not told twice.
        self._quiet = quiet
        self._told = False
        self._stopping = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="presence", daemon=True)

    @property
    def refresh_s(self) -> float:
        return self.ttl_s / 3

    def start(self) -> Announcer:
        notify.start_deaf(self._thread)  # a Ctrl-C of `watch --announce` is the main thread's
        return self

    def stop(self) -> None:
        """Leave (once), waiting at most about 2 * CALL_TIMEOUT_S for a slow hub."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._thread.join(CALL_TIMEOUT_S)
        if not self.announced and not self._thread.is_alive():
            return  # nothing was announced and nothing is in flight: nothing to take back
        leaving = threading.Thread(target=self._leave, name="presence-leave", daemon=True)
        leaving.start()
        leaving.join(CALL_TIMEOUT_S + 0.5)

    def _run(self) -> None:
        client = self._open()
        if client is None:
            return
        try:
            while not self._stopping.is_set():
                self._call(client, "announce")
                self._stopping.wait(self.refresh_s)
        finally:
            client.close()

    def _leave(self) -> None:
        client = self._open()
        if client is not None:
            try:
                self._call(client, "leave")
            finally:
                client.close()

    def _open(self) -> Client | None:
        try:
            return self._connect()
        except Exception as exc:  # the edge of a background thread: tell once, never raise
            self._tell(f"cannot open a client ({exc})")
            return None

    def _call(self, client: Client, op: str) -> None:
        try:
            if op == "announce":
                client.call(
                    "presence_announce",
                    agent=self.agent,
                    state=self.state,
                    note=self.what,
                    ttl_s=self.ttl_s,
                    **({"path": self.path} if self.path else {}),
                )
                self.announced += 1
            else:
                client.call("presence_leave", agent=self.agent)
        except Exception as exc:  # the edge of a background thread: tell once, never raise
            if self._quiet is not None and self._quiet(exc):
                return
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            self._tell(f"could not {op} {self.agent} ({message})")

    def _tell(self, problem: str) -> None:
        if self._told:
            return
        self._told = True
        self._note(
            f"presence: {problem} at hub {self.hub}; going on without it "
            "(--no-presence turns presence off)"
        )
