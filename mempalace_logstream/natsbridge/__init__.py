"""The NATS JetStream bridge (RFC 0011, issue 24): a log's own events published onto a
JetStream stream, other logs' events imported from it through the peer apply.

Needs the `nats` extra (`pip install 'mempalace-logstream[nats]'`); imported only by the
commands that bridge (`logstream bridge nats`, `logstream serve --nats`), never by the lean
paths. Modules: subjects.py (subjects and headers, pure), setup.py (settings, server and
stream checks), publisher.py, consumer.py, bridge.py (both halves, in the foreground or a
thread), inbox.py (per-agent consumers).
"""

from __future__ import annotations

from mempalace_logstream.natsbridge.bridge import Bridge, BridgeThread, run_bridge
from mempalace_logstream.natsbridge.consumer import Tally
from mempalace_logstream.natsbridge.inbox import AgentFeed, feed_name
from mempalace_logstream.natsbridge.setup import (
    MIN_VERSION,
    BridgeConfig,
    BridgeRefused,
    required_stream,
    stream_differences,
    version_refusal,
)
from mempalace_logstream.natsbridge.subjects import inbox_filters, subject, token

__all__ = [
    "MIN_VERSION",
    "AgentFeed",
    "Bridge",
    "BridgeConfig",
    "BridgeRefused",
    "BridgeThread",
    "Tally",
    "feed_name",
    "inbox_filters",
    "required_stream",
    "run_bridge",
    "stream_differences",
    "subject",
    "token",
    "version_refusal",
]
