"""Who is acting: the identity a surface has proven for the current call (RFC 0008).

A surface that authenticates a caller (the hub with a per-agent or the admin token, `logstream
mcp --agent NAME`) runs the call inside `acting_as(actor)`; the store reads `current()` when the
call submits its write, so the rules (who may write as whom, which key signs) live once in the
core. No actor (a local process with the files) is trusted as today and signs with the keys it
holds. A hub request without any token runs as ANONYMOUS, never as None: it writes under any
name where no agent has a key (as before identity), but is never signed with a key this
process holds and never writes a key event. A context variable: each thread and each asyncio
task sees its own.
"""

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

ADMIN_NAME = "admin"  # the agent name of the palace's admin key (`keys/admin.key`)
# Where the hub's guard leaves a request's actor in its ASGI scope: the MCP endpoint's tools
# run in the session's task, not the request's, and read the actor from the request there.
ACTOR_SCOPE_KEY = "logstream.actor"


class _Proof(NamedTuple):
    agent: str | None
    admin: bool
    anonymous: bool


class Actor(_Proof):
    """`agent`: the agent a per-agent token or `--agent` proves; `admin`: the admin token,
    which may act for anyone (its writes are signed with the admin key); `anonymous`: a hub
    request that presented no token where none is required (see ANONYMOUS). Immutable (a
    NamedTuple, not a dataclass: nothing generated at import, ~0.4 ms of every call: issue 25)."""

    __slots__ = ()

    def __new__(
        cls, agent: str | None = None, admin: bool = False, anonymous: bool = False
    ) -> "Actor":
        if (agent is not None) + admin + anonymous != 1:
            raise ValueError("an Actor is an agent, the admin or anonymous")
        return super().__new__(cls, agent, admin, anonymous)

    @property
    def name(self) -> str:
        if self.anonymous:
            return ANONYMOUS_NAME
        return ADMIN_NAME if self.admin else str(self.agent)


ANONYMOUS_NAME = "anonymous"
ADMIN = Actor(admin=True)
# A hub request without a token on a hub that requires none: not a local process.
ANONYMOUS = Actor(anonymous=True)

_CURRENT: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "logstream_actor", default=None
)


# The actor of the running call, or None (a local, trusted process): the context variable's
# own `get` (a C call: no Python frame on every write, issue 25).
current: Callable[[], Actor | None] = _CURRENT.get


@contextlib.contextmanager
def acting_as(actor: Actor | None) -> Iterator[None]:
    """Run the block as `actor` (None: as a local process)."""
    token = _CURRENT.set(actor)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def reader(args: dict[str, Any]) -> str | None:
    """Who reads (the delivery ledger marks what they were shown, delivery_hook.py): the agent
    a token proves, else the read's `from_agent`, else its single `to_agent` (an inbox read;
    not the admin's, who reads anyone's inbox); None: nobody in particular."""
    who = current()
    if who is not None and who.agent is not None:
        return who.agent
    named = args.get("from_agent")
    if isinstance(named, str):
        return named
    if who is not None and who.admin:
        return None
    to = args.get("to_agent")
    if isinstance(to, str) and to != "*":
        return to
    if isinstance(to, list) and len(to) == 1 and to[0] != "*":
        return str(to[0])
    return None
