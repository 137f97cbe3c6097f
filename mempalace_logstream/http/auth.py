"""Who a request is (RFC 0008): the hub's `--token` is the admin token, a per-agent token
(`logstream agent add`) is its agent, anything else is refused. A request without a token is
refused too once the hub has agent tokens or its log has key events (even after every agent
token was revoked); only on a hub with neither (and no `--token`) does it run, as ANONYMOUS:
never as a local process, so it is never signed with a key the hub holds and never writes a
key event.

`Authenticator.actor(presented)` answers for the guard; the guard runs the rest of the request
inside `acting_as(actor)` and leaves the actor in the ASGI scope under `ACTOR_SCOPE_KEY` (the
MCP endpoint's tools run in the session's task, not the request's, and read it from there).
The rules themselves (who may write as whom, which key signs) are the store's.

The agent tokens' hashes (and whether the log has key events) are read from the store and kept
for `REFRESH_S`, so `agent add`, `rotate` and `revoke` run by another process on the hub host
take effect within that time; a token not found forces a fresh read first, so a new token
works at once. Once the log has key events it always will (append-only): that is kept.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass

from mempalace_logstream import agents, aio
from mempalace_logstream.identity import tokens
from mempalace_logstream.identity.actor import ADMIN, ANONYMOUS, Actor
from mempalace_logstream.store import LogStore

REFRESH_S = 1.0


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    field: str


MISSING = Refusal(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "token")
NEEDS_AGENT_TOKEN = Refusal(
    401,
    "this hub has agent tokens: send Authorization: Bearer <your agent token> "
    "(`logstream agent add NAME` prints one)",
    "token",
)
NEEDS_A_TOKEN = Refusal(
    401,
    "this hub's log has agents' keys: send Authorization: Bearer <an agent token or the hub's "
    "--token>; a request without a token is refused even when no agent token is left",
    "token",
)


class Authenticator:
    """The admin token (None: none set) and the store's agent tokens."""

    def __init__(self, admin_token: str | None, store: LogStore | None) -> None:
        self.expected = admin_token.encode() if admin_token else None
        self.store = store
        self._hashes: dict[str, str] = {}
        self._keyed = False  # the log has key events (once true, for good)
        self._read_at = -REFRESH_S  # monotonic time of the last read; never read yet

    async def actor(self, presented: bytes) -> Actor | Refusal:
        """The actor of a request presenting `presented` (b"" when it sent no bearer token):
        ADMIN, an agent, ANONYMOUS (no tokens and no keys at all on this hub, as before
        identity), or the Refusal to answer with."""
        if self.expected is not None and hmac.compare_digest(presented, self.expected):
            return ADMIN
        text = presented.decode("latin-1")
        if tokens.is_token(text):
            agent = await self._agent(text)
            if agent is not None:
                return Actor(agent=agent)
            return MISSING
        if self.expected is not None:
            return MISSING
        if await self._has_agent_tokens():
            return NEEDS_AGENT_TOKEN
        if self._keyed:  # read with the hashes just now
            return NEEDS_A_TOKEN
        return ANONYMOUS

    async def _agent(self, token: str) -> str | None:
        found = tokens.find_agent(token, await self._current())
        if found is None:  # perhaps minted a moment ago by `agent add`: read again once
            found = tokens.find_agent(token, await self._reload())
        return found

    async def _has_agent_tokens(self) -> bool:
        return bool(await self._current())

    async def _current(self) -> dict[str, str]:
        if time.monotonic() - self._read_at >= REFRESH_S:
            return await self._reload()
        return self._hashes

    async def _reload(self) -> dict[str, str]:
        if self.store is None:
            return {}
        at = time.monotonic()
        hashes = await aio.run(agents.token_hashes, self.store)
        if not self._keyed:
            self._keyed = await aio.run(agents.identity_in_use, self.store)
        self._hashes, self._read_at = hashes, at
        return hashes
