"""The importing half of a bridge: other logs' events from the stream into this log.

A durable pull consumer per log (`logstream_<replica id>`) keeps the position on the server:
a message is acknowledged only after the transaction that imported it committed, so a crash
anywhere redelivers it and the import, idempotent by event id, counts it as a duplicate. The
events go through the peer apply (`replication.apply_remote_batch`: the remote checks, the
signatures' verdicts, conflicts, origin positions, then the store's one write path with its
task and redaction projections), exactly as a page of HTTP sync.

Per message: imported, duplicate or our own echo → ack; refused for good (invalid, forged, a
conflict) → recorded as on HTTP sync, one line on the log, `term` (never redelivered); held
(an artifact not in the object store yet, a key not known yet) → `nak` with a growing delay.
A message that is not one of ours (not JSON, no event, an id or subject that does not match
the event) is termed with one line and writes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from mempalace_logstream import replication
from mempalace_logstream.natsbridge.setup import BridgeConfig, Link, unless_stopped
from mempalace_logstream.natsbridge.subjects import MSG_ID, subject_of
from mempalace_logstream.replication.wire import SHA_RE
from mempalace_logstream.store import LogStore

MAX_ARTIFACTS = 100  # artifact rows one message may carry
NAK_MAX_S = 60.0
FETCH_S = 0.25  # the longest a fetch waits for messages (and a stop for a fetch)


@dataclass
class Tally:
    """What a consumer did since it started."""

    applied: int = 0
    duplicates: int = 0
    own: int = 0
    refused: int = 0
    held: int = 0
    malformed: int = 0
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=100))  # the last lines


@dataclass
class _Item:
    msg: Msg
    event: dict[str, Any]
    artifacts: list[dict[str, Any]]


class Consumer:
    """Imports the stream's events written by other logs into `store`."""

    def __init__(
        self, store: LogStore, link: Link, cfg: BridgeConfig, say: Callable[[str], None]
    ) -> None:
        self.store, self.link, self.cfg, self.say = store, link, cfg, say
        self.peer = f"nats:{cfg.stream}"
        self.tally = Tally()
        self._sub: JetStreamContext.PullSubscription | None = None

    async def subscribe(self) -> None:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_wait=self.cfg.ack_wait_s,
            max_ack_pending=4 * self.cfg.batch,
            description=f"mempalace-logstream bridge of {self.store.replica_id}",
        )
        self._sub = await self.link.js.pull_subscribe(
            "",
            durable=self.cfg.durable(self.store.replica_id),
            stream=self.cfg.stream,
            config=config,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch and import until `stop` is set. The next batch is fetched while one is
        imported (its acks go out meanwhile); errors back off and retry.

        A fetch is never cancelled: messages it already took would stay unacknowledged until
        the server's ack wait (30 s) ran out, and a restarted bridge would wait that long for
        them. So a fetch waits at most `FETCH_S`, and what the last one brings after `stop` is
        still imported and acknowledged."""
        if self._sub is None:
            await self.subscribe()
        sub = self._sub
        assert sub is not None
        failures = 0
        ahead: asyncio.Future[list[Msg]] | None = None
        while True:
            fetching = ahead or asyncio.ensure_future(sub.fetch(self.cfg.batch, timeout=FETCH_S))
            ahead = None
            try:
                msgs = await fetching
            except (nats.errors.TimeoutError, TimeoutError):
                msgs = []
            except (nats.errors.Error, nats.js.errors.Error, OSError) as exc:
                if stop.is_set():
                    return
                failures += 1
                if failures == 1:
                    self.say(f"nats bridge: importing paused: {type(exc).__name__} {exc}")
                await unless_stopped(stop, asyncio.sleep(min(2.0, 0.1 * 2**failures)))
                continue
            failures = 0
            if msgs and not stop.is_set():
                ahead = asyncio.ensure_future(sub.fetch(self.cfg.batch, timeout=FETCH_S))
            if msgs:
                await self.handle(msgs)
            if stop.is_set() and ahead is None:
                return

    async def handle(self, msgs: list[Msg]) -> None:
        """Import one fetched batch; every message is acked, termed or naked after it."""
        items: list[_Item] = []
        for msg in msgs:
            item = await self._decode(msg)
            if item is None:
                continue
            if item.event.get("origin_replica") == self.store.replica_id:
                self.tally.own += 1
                await msg.ack()
                continue
            items.append(item)
        # A batch holds each event id once, so each report names one message.
        group: list[_Item] = []
        ids: set[Any] = set()
        for item in items:
            ident = item.event.get("id")
            if not isinstance(ident, str | int | None) or ident in ids:
                await self._import(group)
                group, ids = [], set()
            group.append(item)
            ids.add(ident if isinstance(ident, str | int | None) else id(item))
        if group:
            await self._import(group)

    async def _decode(self, msg: Msg) -> _Item | None:
        """The message's event and artifact rows, or None (termed, one line) when it is not
        a message of a bridge."""
        why = None
        try:
            body = json.loads(msg.data)
        except (ValueError, UnicodeDecodeError):
            body, why = None, "its payload is not JSON"
        if why is None and not (isinstance(body, dict) and isinstance(body.get("event"), dict)):
            why = "its payload is not an object with an `event` object"
        if why is None:
            assert isinstance(body, dict)
            event, arts = body["event"], body.get("artifacts", [])
            msg_id = (msg.headers or {}).get(MSG_ID)
            if not isinstance(arts, list) or not all(isinstance(a, dict) for a in arts):
                why = "`artifacts` is not a list of objects"
            elif len(arts) > MAX_ARTIFACTS:
                why = f"`artifacts` has {len(arts)} items; the limit is {MAX_ARTIFACTS}"
            elif msg_id != event.get("id"):
                why = f"its {MSG_ID} {msg_id!r} is not the event id {event.get('id')!r}"
            elif subject_of(self.cfg.prefix, event) != msg.subject:
                why = f"its subject {msg.subject!r} does not match the event's routing"
            else:
                return _Item(msg, event, arts)
        self.tally.malformed += 1
        self._line(f"refused message {_seq(msg)} on {msg.subject!r}: {why}; nothing written")
        await msg.term()
        return None

    async def _import(self, items: list[_Item]) -> None:
        held_back: dict[str, str] = {}
        wanted = {a["id"]: a for it in items for a in it.artifacts if isinstance(a.get("id"), str)}
        lacking = await asyncio.to_thread(replication.missing_artifacts, self.store, list(wanted))
        fetched: dict[str, dict[str, Any]] = {}
        for aid in lacking:
            raw = await self._artifact(wanted[aid])
            if raw is None:
                held_back[aid] = "not in the object store yet"
            else:
                fetched[aid] = raw
        batch = []
        for it in items:
            missing = [a for a in it.event.get("artifact_ids") or () if a in held_back]
            if missing:
                await self._hold(it, f"artifact {missing[0]} is {held_back[missing[0]]}")
                continue
            batch.append(it)
        raws = [fetched[a] for a in dict.fromkeys(fetched)]
        if not batch:
            return
        store, peer = self.store, self.peer

        def work() -> replication.ApplyResult:
            parsed = replication.parse_events(store, [it.event for it in batch], peer)
            return replication.apply_remote_batch(store, raws, parsed, peer)

        try:
            res = await asyncio.to_thread(work)
        except Exception as exc:  # storage: nothing committed, everything comes back
            self._line(f"import failed, {len(batch)} messages will be redelivered: {exc}")
            for it in batch:
                await it.msg.nak(delay=1.0)
            return
        await self._settle(batch, res)

    async def _settle(self, batch: list[_Item], res: replication.ApplyResult) -> None:
        """Ack, term or nak each message after the import committed."""
        refused = {r["ident"]: r for r in res.rejected if r["kind"] == "event" and r.get("ident")}
        clashes = {c["event_id"]: c for c in res.conflicts}
        applied = set(res.applied_ids)
        for it in batch:
            ident = it.event.get("id")
            report = refused.get(ident)
            if report is not None and report.get("retryable"):
                await self._hold(it, f"{report['reason']}: {report['message']}")
            elif report is not None or ident in clashes:
                why = report or clashes[ident]
                self.tally.refused += 1
                self._line(
                    f"refused event {ident} (message {_seq(it.msg)}): "
                    f"{why.get('reason') or why.get('kind')}: {why.get('message')}"
                )
                await it.msg.term()
            else:
                if ident in applied:
                    self.tally.applied += 1
                else:
                    self.tally.duplicates += 1
                await it.msg.ack()

    async def _hold(self, it: _Item, why: str) -> None:
        self.tally.held += 1
        n = it.msg.metadata.num_delivered or 1
        delay = min(NAK_MAX_S, 0.25 * 2**n)
        self._line(f"holding event {it.event.get('id')}: {why}; retried in {delay:g} s")
        await it.msg.nak(delay=delay)

    async def _artifact(self, meta: dict[str, Any]) -> dict[str, Any] | None:
        """The artifact row with its content: inline (a redacted, empty one) or from the
        object store by sha256 (checked again by the apply). None when not there yet."""
        if "content" in meta:
            return meta
        sha = meta.get("sha256")
        if not isinstance(sha, str) or not SHA_RE.match(sha):
            return dict(meta, content=None)  # refused by the apply, naming the field
        try:
            found = await self.link.artifacts.get(sha)
        except nats.js.errors.ObjectNotFoundError:
            return None
        data = found.data or b""
        if meta.get("encoding", "utf-8") == "utf-8":
            try:
                return dict(meta, content=data.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        return dict(meta, content=base64.b64encode(data).decode("ascii"))

    def _line(self, text: str) -> None:
        line = f"nats bridge: {text}"
        self.tally.lines.append(line)
        self.say(line)


def _seq(msg: Msg) -> str:
    try:
        return f"#{msg.metadata.sequence.stream}"
    except (AttributeError, nats.errors.Error):
        return "?"
