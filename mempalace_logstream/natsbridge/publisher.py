"""The publishing half of a bridge: this log's own events onto the stream, in order.

Only the events this replica authored are published (RFC 0011 "Own events only"): every
log on the stream publishes its own, so the stream holds each event once, in its author's
`origin_seq` order, and no event echoes around the fleet once per hub. The position (the
highest `origin_seq` the server acknowledged, contiguously) is kept in the stream's KV bucket
under the replica id, so a restart resumes there: nothing is lost, and the few events
published after the last stored position are dropped by JetStream's dedupe (`Nats-Msg-Id`)
or, past its window, counted as duplicates by the importing logs.

Several hubs serving one PostgreSQL log share its replica id, its position and its events:
only the hub that leads the log's background loops publishes (`leads`, asked at most every
`LEAD_CHECK_S`); a hub that takes the lead reads the position again and goes on from where
the previous leader stopped. Every hub consumes (the durable consumer shares the messages out;
an import is idempotent).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors

from mempalace_logstream import errors, replication
from mempalace_logstream.natsbridge.setup import BridgeConfig, Link, unless_stopped
from mempalace_logstream.natsbridge.subjects import headers, subject
from mempalace_logstream.store import LogStore

LEAD_CHECK_S = 1.0  # how often a hub asks whether it leads (a database round trip)


class Publisher:
    """Publishes the own events of `store` after the stored position, while `leads()` says
    this process leads its log (None: always, as the one process on a SQLite file)."""

    def __init__(
        self,
        store: LogStore,
        link: Link,
        cfg: BridgeConfig,
        say: Callable[[str], None],
        leads: Callable[[], bool] | None = None,
    ) -> None:
        self.store, self.link, self.cfg, self.say = store, link, cfg, say
        self.leads = leads
        self.key = store.replica_id
        self.position = 0
        self.published = 0
        self._put: set[str] = set()  # sha256 already in the object store (this run)

    async def load_position(self) -> int:
        try:
            entry = await self.link.positions.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            return 0
        raw = (entry.value or b"0").decode("ascii", "replace")
        self.position = int(raw) if raw.isdigit() else 0
        return self.position

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set; waits on the store's commits, retries on errors."""
        await self.load_position()
        failures = 0
        leading, asked = self.leads is None, float("-inf")
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if self.leads is not None and loop.time() - asked >= LEAD_CHECK_S:
                asked = loop.time()
                was, leading = leading, await asyncio.to_thread(self.leads)
                if leading and not was:  # another hub may have published meanwhile
                    await self.load_position()
            if not leading:
                await _pause(stop, LEAD_CHECK_S)
                continue
            seen = self.store.notifier.version
            try:
                sent = await self.step()
                failures = 0
            except (
                nats.errors.Error,
                nats.js.errors.Error,
                errors.LogstreamError,
                TimeoutError,
                OSError,
            ) as exc:  # a storage error is retried the same way
                failures += 1
                if failures == 1:
                    self.say(f"nats bridge: publishing paused: {type(exc).__name__} {exc}")
                await _pause(stop, min(2.0, 0.1 * 2**failures))
                continue
            if not sent:
                await unless_stopped(stop, self.store.notifier.wait_async(seen, LEAD_CHECK_S))

    async def step(self) -> int:
        """Publish the next batch of own events; how many were acknowledged."""
        events = await asyncio.to_thread(
            replication.list_ops, self.store, self.key, self.position, self.cfg.batch
        )
        if not events:
            return 0
        payloads = []
        for event in events:
            item = event.to_dict()
            item["artifact_ids"] = sorted(item["artifact_ids"])
            arts = await self._artifacts(item["artifact_ids"]) if item["artifact_ids"] else []
            payloads.append((item, arts))
        js = self.link.js
        futures = []
        for item, arts in payloads:
            # UTF-8 as is (not \u escapes): a body at the store's limit fits NATS's 1 MiB.
            body = json.dumps(
                {"event": item, "artifacts": arts}, separators=(",", ":"), ensure_ascii=False
            )
            where = subject(
                self.cfg.prefix, item["origin_replica"], item["stream"], item["to_agent"]
            )
            futures.append(
                await js.publish_async(where, body.encode("utf-8"), headers=headers(item))
            )
        done = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), self.cfg.publish_timeout_s
        )
        acked = 0
        for item_ack in done:
            if isinstance(item_ack, BaseException):
                break
            acked += 1
        if acked:
            self.position = int(payloads[acked - 1][0]["origin_seq"])
            self.published += acked
            await self.link.positions.put(self.key, str(self.position).encode("ascii"))
        failed = next((x for x in done if isinstance(x, BaseException)), None)
        if failed is not None:
            raise failed
        return acked

    async def _artifacts(self, ids: list[str]) -> list[dict[str, Any]]:
        """The artifacts' rows for the payload; their bytes put in the object store under
        their sha256 first (a redacted one travels empty, inline, with its tombstone)."""
        found, _, more = await asyncio.to_thread(replication.get_artifacts, self.store, ids)
        while more:
            extra, _, more = await asyncio.to_thread(replication.get_artifacts, self.store, more)
            found += extra
        out = []
        for art in found:
            if art.redacted is not None:
                out.append(art.to_dict())
                continue
            if art.sha256 not in self._put:
                try:
                    await self.link.artifacts.get_info(art.sha256)
                except nats.js.errors.ObjectNotFoundError:
                    await self.link.artifacts.put(art.sha256, art.content or b"")
                self._put.add(art.sha256)
            out.append(art.to_dict(with_content=False))
        return out


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Back off before a retry, returning early when the bridge stops."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return
