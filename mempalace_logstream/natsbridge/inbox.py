"""Per-agent delivery on JetStream (RFC 0011 "Per-agent consumers"): a durable consumer per
log and agent, filtered on the server to the agent's inbox subjects and the broadcasts
(`filter_subjects`, honoured from nats-server 2.10; `setup.connect` refuses older servers,
which accept the filter and ignore it).

A feed hands out the event objects addressed to the agent (or to everyone) in stream order,
acknowledging what it handed out; a restart resumes after the last acknowledged message.
A token may be a hash, so a collision could widen the filter: a message whose full `to_agent`
is not the agent (or `*`) is acknowledged and dropped here. What arrives is a wake-up hint
with the event; the log (imported by the bridge through the peer apply) stays the authority.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import nats.errors
from nats.js import api

from mempalace_logstream.natsbridge.setup import BridgeConfig, Link
from mempalace_logstream.natsbridge.subjects import inbox_filters


def feed_name(replica_id: str, agent: str) -> str:
    """The durable name of one agent's consumer (any agent name: hashed)."""
    return f"logstream_{replica_id}_inbox_{hashlib.sha256(agent.encode()).hexdigest()[:16]}"


class AgentFeed:
    """The events addressed to `agent` or broadcast, from the stream, in order."""

    def __init__(self, link: Link, cfg: BridgeConfig, replica_id: str, agent: str) -> None:
        self.link, self.cfg, self.agent = link, cfg, agent
        self.durable = feed_name(replica_id, agent)
        self._sub: Any = None

    async def open(self) -> AgentFeed:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_wait=self.cfg.ack_wait_s,
            filter_subjects=inbox_filters(self.cfg.prefix, self.agent),
            description=f"mempalace-logstream inbox of {self.agent}",
        )
        self._sub = await self.link.js.pull_subscribe(
            "", durable=self.durable, stream=self.cfg.stream, config=config
        )
        return self

    async def fetch(self, batch: int = 100, timeout: float = 1.0) -> list[dict[str, Any]]:
        """The next events for the agent (empty after `timeout` with none), acknowledged."""
        try:
            msgs = await self._sub.fetch(batch, timeout=timeout)
        except (nats.errors.TimeoutError, TimeoutError):
            return []
        out = []
        for msg in msgs:
            try:
                event = json.loads(msg.data)["event"]
            except (ValueError, KeyError, TypeError):
                event = None
            if isinstance(event, dict) and event.get("to_agent") in (self.agent, "*"):
                out.append(event)
            await msg.ack()
        return out
