"""Store-side replication primitives (S-7.1–S-7.3): op listing, remote apply, sync bookkeeping.

Remote events and artifacts are re-validated exactly like local writes, applied through the
store's group-committed write path (so a fresh local `seq` is assigned under the write lock),
and every refusal is recorded: conflicts in `sync_conflicts`, refused or deferred items in
`sync_rejections`, far-future HLC stamps in `sync_clock_anomalies`. Must not import surfaces.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import errors, hlc
from mempalace_logstream import validation as v
from mempalace_logstream.models import Artifact, Event
from mempalace_logstream.schema import (
    artifact_blobs,
    artifacts,
    event_artifacts,
    events,
    sync_clock_anomalies,
    sync_conflicts,
    sync_peers,
    sync_rejections,
)
from mempalace_logstream.store import _EVENT_COLS, LogStore, _artifact_from_row, _now_text

MAX_OPS_LIMIT = 500
MAX_RETRIES = 5  # a deferred event pins its origin's pull position for this many rounds
REPORT_CAP = 100  # conflicts/rejections listed per round result (counts are exact)
_CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class ApplyResult:
    """What one apply call did. Lists hold JSON-ready report dicts."""

    applied_events: int = 0
    applied_artifacts: int = 0
    duplicates: int = 0
    own: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    clock_anomalies: list[dict[str, Any]] = field(default_factory=list)
    applied_ids: list[str] = field(default_factory=list)

    def merge(self, other: ApplyResult) -> None:
        self.applied_events += other.applied_events
        self.applied_artifacts += other.applied_artifacts
        self.duplicates += other.duplicates
        self.own += other.own
        self.conflicts += other.conflicts
        self.rejected += other.rejected
        self.clock_anomalies += other.clock_anomalies

    def to_dict(self) -> dict[str, Any]:
        return {
            "applied_events": self.applied_events,
            "applied_artifacts": self.applied_artifacts,
            "duplicates": self.duplicates,
            "own": self.own,
            "conflicts": self.conflicts[:REPORT_CAP],
            "conflict_count": len(self.conflicts),
            "rejected": self.rejected[:REPORT_CAP],
            "rejected_count": len(self.rejected),
            "clock_anomalies": len(self.clock_anomalies),
        }


# ----------------------------------------------------------------------------- reading


def list_ops(store: LogStore, origin: Any, after_seq: Any = 0, limit: Any = None) -> list[Event]:
    """Events authored by `origin` with origin_seq > after_seq, in origin_seq order (≤500)."""
    clean_origin = v.required_routing("origin", origin)
    after = v.strict_int("after", 0 if after_seq is None else after_seq)
    if after < 0:
        raise v.fail("after", f"is {after}; it must be a non-negative integer")
    n = MAX_OPS_LIMIT if limit is None else v.strict_int("limit", limit)
    if n < 1:
        raise v.fail("limit", f"is {n}; it must be a positive integer", MAX_OPS_LIMIT)
    n = min(n, MAX_OPS_LIMIT)
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(*_EVENT_COLS)
            .where(events.c.origin_replica == clean_origin, events.c.origin_seq > after)
            .order_by(events.c.origin_seq)
            .limit(n)
        ).all()
        return store._hydrate(conn, rows)


def ops_page(store: LogStore, origin: Any, after_seq: Any = 0, limit: Any = None) -> dict:
    """`/sync/ops` wire shape `{origin, events, count}`; artifact_ids sorted like the reference."""
    evs = list_ops(store, origin, after_seq, limit)
    out = []
    for e in evs:
        d = e.to_dict()
        d["artifact_ids"] = sorted(d["artifact_ids"])
        out.append(d)
    return {"origin": v.required_routing("origin", origin), "events": out, "count": len(out)}


def get_artifacts(
    store: LogStore, ids: Sequence[str], max_bytes: int = 16 * 1024 * 1024
) -> tuple[list[Artifact], list[str], list[str]]:
    """Artifacts with content for `ids`: (found, not_found, more). `more` did not fit in budget."""
    clean = list(dict.fromkeys(v.required_routing("ids", i) for i in ids))
    found: dict[str, Artifact] = {}
    with store._storage_errors(), store.engine.connect() as conn:
        for chunk in _chunks(clean, 200):
            q = (
                sa.select(artifacts, artifact_blobs.c.content)
                .join(artifact_blobs, artifact_blobs.c.sha256 == artifacts.c.sha256)
                .where(artifacts.c.id.in_(chunk))
            )
            for row in conn.execute(q):
                found[row.id] = _artifact_from_row(row, bytes(row.content))
    out: list[Artifact] = []
    more: list[str] = []
    budget = 0
    for ident in clean:
        art = found.get(ident)
        if art is None:
            continue
        if out and budget + art.size_bytes > max_bytes:
            more.append(ident)
            continue
        budget += art.size_bytes
        out.append(art)
    return out, [i for i in clean if i not in found], more


def missing_artifacts(store: LogStore, ids: Iterable[str]) -> list[str]:
    """The ids among `ids` that this replica does not hold, order kept."""
    wanted = list(dict.fromkeys(ids))
    have: set[str] = set()
    with store._storage_errors(), store.engine.connect() as conn:
        for chunk in _chunks(wanted, 500):
            have.update(
                conn.execute(sa.select(artifacts.c.id).where(artifacts.c.id.in_(chunk))).scalars()
            )
    return [i for i in wanted if i not in have]


# ----------------------------------------------------------------------------- validation


def parse_remote_event(store: LogStore, raw: Any) -> Event:
    """Re-validate a remote event dict with the local rules; `seq` is left 0. Raises
    ValidationError naming the field."""
    if not isinstance(raw, Mapping):
        raise v.fail("event", f"must be a JSON object, not {type(raw).__name__}")
    draft = store.draft_event(
        type=raw.get("type"), stream=raw.get("stream"), room=raw.get("room"),
        from_agent=raw.get("from_agent"), topic=raw.get("topic"), to_agent=raw.get("to_agent"),
        correlation_id=raw.get("correlation_id"), branch=raw.get("branch"),
        base_commit=raw.get("base_commit"), status=raw.get("status"), body=raw.get("body"),
        metadata=raw.get("metadata"), artifact_ids=raw.get("artifact_ids"),
    )  # fmt: skip
    for i, aid in enumerate(draft.artifact_ids):
        v.remote_id(f"artifact_ids[{i}]", aid)
    origin = v.replica_id(raw.get("origin_replica"), "origin_replica")
    origin_seq = v.strict_int("origin_seq", raw.get("origin_seq"))
    if origin_seq < 1:
        raise v.fail("origin_seq", f"is {origin_seq}; it must be a positive integer")
    stamp = raw.get("hlc")
    if not isinstance(stamp, str) or hlc.parse(stamp) is None or len(stamp) > 200:
        raise v.fail("hlc", f"{stamp!r} is not <13-digit ms>-<6 hex counter>-<replica id>")
    return Event(
        id=v.remote_id("id", raw.get("id")),
        seq=0,
        origin_replica=origin,
        origin_seq=origin_seq,
        hlc=stamp,
        type=draft.type, stream=draft.stream, room=draft.room, topic=draft.topic,
        from_agent=draft.from_agent, to_agent=draft.to_agent,
        correlation_id=draft.correlation_id, branch=draft.branch,
        base_commit=draft.base_commit, status=draft.status,
        artifact_ids=draft.artifact_ids, body=draft.body,
        created_at=_created_at(raw.get("created_at")),
        metadata_json=draft.metadata_json,
    )  # fmt: skip


def _created_at(value: Any) -> str:
    if not isinstance(value, str) or not _CREATED_AT_RE.match(value):
        raise v.fail(
            "created_at", f"{value!r} is not YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DDTHH:MM:SS.sssZ"
        )
    return value


def parse_remote_artifact(store: LogStore, raw: Any) -> Artifact:
    """Re-validate a remote artifact and recompute its sha256 over the exact bytes.

    Text (`encoding` utf-8 or absent, as the reference sends) hashes its UTF-8 bytes; binary
    travels as base64. A digest or size that does not match the bytes raises ValidationError
    on field `sha256`/`size_bytes`: the content was tampered with or corrupted in transit.
    """
    if not isinstance(raw, Mapping):
        raise v.fail("artifact", f"must be a JSON object, not {type(raw).__name__}")
    ident = v.remote_id("id", raw.get("id"))
    kind = v.artifact_kind(raw.get("kind"))
    enc = v.encoding(raw.get("encoding")) or "utf-8"
    content = raw.get("content")
    if content is None:
        raise v.fail("content", "is required")
    if isinstance(content, str) and enc == "utf-8":
        v._check_text("content", content)
        data = content.encode("utf-8")
    elif isinstance(content, str):
        try:
            data = base64.b64decode(content.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise v.fail("content", "is not valid base64") from exc
    else:
        raise v.fail("content", f"must be a string, not {type(content).__name__}")
    if len(data) > store.max_artifact_bytes:
        raise v.fail(
            "content",
            f"is {len(data)} bytes; the limit is {store.max_artifact_bytes} bytes",
            store.max_artifact_bytes,
        )
    claimed = raw.get("sha256")
    digest = hashlib.sha256(data).hexdigest()
    if not isinstance(claimed, str) or not _SHA_RE.match(claimed) or claimed != digest:
        raise v.fail(
            "sha256",
            f"failed verification for artifact {ident}: claimed {str(claimed)[:16]}…, "
            f"computed {digest[:16]}… (tampered or corrupted content)",
        )
    size = raw.get("size_bytes")
    if size is not None and v.strict_int("size_bytes", size) != len(data):
        raise v.fail("size_bytes", f"is {size} but the content is {len(data)} bytes")
    return Artifact(
        id=ident,
        kind=kind,
        sha256=digest,
        size_bytes=len(data),
        encoding=enc,
        created_by=v.required_routing("created_by", raw.get("created_by")),
        created_at=_created_at(raw.get("created_at")),
        origin_replica=v.replica_id(raw.get("origin_replica"), "origin_replica"),
        metadata_json=v.metadata(raw.get("metadata")),
        content=data,
    )


# ----------------------------------------------------------------------------- applying


def apply_remote_artifact(store: LogStore, raw: Any, peer: str = "") -> bool:
    """Apply one remote artifact: True if stored, False if already held (idempotent).

    Raises ValidationError (recorded in sync_rejections) for bad or tampered content and
    ConflictError when the id is held with a different sha256.
    """
    res = apply_remote_artifacts(store, [raw], peer)
    if res.rejected:
        first = res.rejected[0]
        cls = errors.ConflictError if first["reason"] == "conflict" else errors.ValidationError
        raise cls(first["message"], field=first.get("field"))
    return res.applied_artifacts == 1


def apply_remote_event(store: LogStore, raw: Any, peer: str = "") -> bool:
    """Apply one remote event verbatim: True if stored, False for a duplicate or our own echo.

    Raises ValidationError for an invalid event, NotFoundError when a referenced artifact is
    not held yet (deferred), ConflictError for a same-id/different-content event. Every refusal
    is also recorded, so it is reported by `doctor` and in the round results.
    """
    res = apply_remote_events(store, [raw], peer)
    if res.conflicts:
        c = res.conflicts[0]
        raise errors.ConflictError(c["message"], field="id", ident=c["event_id"])
    if res.rejected:
        r = res.rejected[0]
        if r["reason"] == "missing_artifact":
            raise errors.NotFoundError(r["message"], field="artifact_ids", ident=r["ident"])
        raise errors.ValidationError(r["message"], field=r.get("field"))
    return res.applied_events == 1


def apply_remote_artifacts(store: LogStore, raws: Sequence[Any], peer: str = "") -> ApplyResult:
    """Validate and apply a batch of remote artifacts in one transaction; never raises for a
    bad item (it is rejected and recorded), only for storage failures."""
    res = ApplyResult()
    good: list[Artifact] = []
    for raw in raws:
        try:
            good.append(parse_remote_artifact(store, raw))
        except errors.ValidationError as exc:
            res.rejected.append(_reject_report("artifact", raw, exc, peer))
    if not good and not res.rejected:
        return res

    def write(conn: sa.Connection, st: Any) -> None:
        held = _held_artifacts(conn, [a.id for a in good])
        for art in good:
            prior = held.get(art.id)
            if prior is not None:
                if prior == art.sha256:
                    res.duplicates += 1
                else:
                    res.rejected.append(_artifact_conflict(art, prior, peer))
                continue
            store._ensure_blob(conn, art.sha256, art.content or b"")
            store._write_artifact_row(conn, st, art)
            held[art.id] = art.sha256
            res.applied_artifacts += 1
            res.applied_ids.append(art.id)
        _record_rejections(conn, res.rejected, store)
        _resolve(conn, "artifact", res.applied_ids)

    store._submit(write)
    return res


def apply_remote_events(store: LogStore, raws: Sequence[Any], peer: str = "") -> ApplyResult:
    """Validate and apply a batch of remote events in one transaction, in origin_seq order.

    Each event is kept verbatim (id, created_at, hlc, origin stamps) with a fresh local seq.
    Duplicates are no-ops, our own echo is skipped, conflicts and refusals are recorded and
    reported; nothing else in the batch is lost because of them.
    """
    res = ApplyResult()
    parsed: list[tuple[Event, Any]] = []
    for raw in raws:
        try:
            parsed.append((parse_remote_event(store, raw), raw))
        except errors.ValidationError as exc:
            res.rejected.append(_reject_report("event", raw, exc, peer))
    parsed.sort(key=lambda p: (p[0].origin_replica, p[0].origin_seq))
    mine = [p for p in parsed if p[0].origin_replica != store.replica_id]
    res.own = len(parsed) - len(mine)

    def write(conn: sa.Connection, st: Any) -> None:
        _apply_events_tx(store, conn, st, mine, res, peer)

    if mine or res.rejected:
        store._submit(write)
    return res


def _apply_events_tx(
    store: LogStore,
    conn: sa.Connection,
    st: Any,
    items: list[tuple[Event, Any]],
    res: ApplyResult,
    peer: str,
) -> None:
    by_id = _held_events(store, conn, [e.id for e, _ in items])
    by_pos = _held_positions(conn, [(e.origin_replica, e.origin_seq) for e, _ in items])
    have_arts = set(_held_artifacts(conn, [a for e, _ in items for a in e.artifact_ids]))
    rows: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    now = _now_text(store.clock.wall_clock.now_ms())
    for event, raw in items:
        prior = by_id.get(event.id)
        if prior is not None:
            if prior.content_key() == event.content_key():
                res.duplicates += 1
            else:
                res.conflicts.append(_conflict(conn, event, raw, prior.id, "different_content",
                                               peer, now))  # fmt: skip
            continue
        taken = by_pos.get((event.origin_replica, event.origin_seq))
        if taken is not None:
            res.conflicts.append(_conflict(conn, event, raw, taken, "origin_seq_taken", peer, now))
            continue
        lacking = [a for a in event.artifact_ids if a not in have_arts]
        if lacking:
            res.rejected.append(_deferred(event, lacking[0], peer))
            continue
        stored = event.with_seq(st.next_seq)
        st.next_seq += 1
        st.appended.append(stored)
        rows.append({c.name: getattr(stored, c.name) for c in _EVENT_COLS})
        links += [
            {"event_id": stored.id, "artifact_id": a, "position": i}
            for i, a in enumerate(stored.artifact_ids)
        ]
        by_id[stored.id] = stored
        by_pos[(stored.origin_replica, stored.origin_seq)] = stored.id
        _observe(store, conn, stored, res, peer, now)
        res.applied_events += 1
        res.applied_ids.append(stored.id)
    if rows:
        conn.execute(sa.insert(events), rows)
    if links:
        conn.execute(sa.insert(event_artifacts), links)
    _record_rejections(conn, res.rejected, store)
    _resolve(conn, "event", res.applied_ids)


def _observe(store: LogStore, conn: sa.Connection, event: Event, res: ApplyResult, peer: str,
             now: str) -> None:  # fmt: skip
    if store.clock.is_far_future(event.hlc):
        # Kept verbatim on the event (it is the author's stamp) but never adopted by our clock.
        res.clock_anomalies.append({"event_id": event.id, "hlc": event.hlc})
        exists = conn.execute(
            sa.select(sync_clock_anomalies.c.event_id).where(
                sync_clock_anomalies.c.event_id == event.id
            )
        ).first()
        if exists is None:
            conn.execute(
                sa.insert(sync_clock_anomalies).values(
                    event_id=event.id, origin_replica=event.origin_replica, hlc=event.hlc,
                    peer=peer, observed_at=now,
                )
            )  # fmt: skip
        return
    store.clock.observe(event.hlc)


def _held_events(store: LogStore, conn: sa.Connection, ids: list[str]) -> dict[str, Event]:
    out: dict[str, Event] = {}
    for chunk in _chunks(list(dict.fromkeys(ids)), 500):
        rows = conn.execute(sa.select(*_EVENT_COLS).where(events.c.id.in_(chunk))).all()
        for e in store._hydrate(conn, rows):
            out[e.id] = e
    return out


def _held_positions(conn: sa.Connection, pos: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    by_origin: dict[str, list[int]] = {}
    for origin, n in pos:
        by_origin.setdefault(origin, []).append(n)
    for origin, seqs in by_origin.items():
        for chunk in _chunks(sorted(set(seqs)), 500):
            q = sa.select(events.c.origin_seq, events.c.id).where(
                events.c.origin_replica == origin, events.c.origin_seq.in_(chunk)
            )
            for n, ident in conn.execute(q):
                out[(origin, int(n))] = ident
    return out


def _held_artifacts(conn: sa.Connection, ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for chunk in _chunks(list(dict.fromkeys(ids)), 500):
        q = sa.select(artifacts.c.id, artifacts.c.sha256).where(artifacts.c.id.in_(chunk))
        out.update({i: s for i, s in conn.execute(q)})
    return out


# ----------------------------------------------------------------------------- bookkeeping


def _raw_ident(raw: Any) -> str:
    ident = raw.get("id") if isinstance(raw, Mapping) else None
    if isinstance(ident, str) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", ident):
        return ident
    blob = json.dumps(raw, sort_keys=True, default=str, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _raw_position(raw: Any) -> tuple[str | None, int | None]:
    if not isinstance(raw, Mapping):
        return None, None
    origin, seq = raw.get("origin_replica"), raw.get("origin_seq")
    return (
        origin if isinstance(origin, str) else None,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
    )


def _reject_report(kind: str, raw: Any, exc: errors.ValidationError, peer: str) -> dict:
    origin, seq = _raw_position(raw)
    reason = "tampered" if exc.field in ("sha256", "size_bytes") else "invalid"
    return {
        "kind": kind, "ident": _raw_ident(raw), "origin_replica": origin, "origin_seq": seq,
        "reason": reason, "field": exc.field, "message": exc.message, "retryable": False,
        "peer": peer,
    }  # fmt: skip


def _deferred(event: Event, artifact_id: str, peer: str) -> dict[str, Any]:
    return {
        "kind": "event", "ident": event.id, "origin_replica": event.origin_replica,
        "origin_seq": event.origin_seq, "reason": "missing_artifact", "field": "artifact_ids",
        "message": f"event {event.id} references artifact {artifact_id}, which is not held "
        "here (refused or not yet fetched); the event is deferred and retried next round",
        "retryable": True, "peer": peer,
    }  # fmt: skip


def _artifact_conflict(art: Artifact, prior_sha: str, peer: str) -> dict[str, Any]:
    return {
        "kind": "artifact", "ident": art.id, "origin_replica": art.origin_replica,
        "origin_seq": None, "reason": "conflict", "field": "sha256",
        "message": f"artifact {art.id} is held here with sha256 {prior_sha[:16]}…; the peer "
        f"sent {art.sha256[:16]}…",
        "retryable": False, "peer": peer,
    }  # fmt: skip


def _conflict(conn: sa.Connection, event: Event, raw: Any, local_id: str, reason: str,
              peer: str, now: str) -> dict[str, Any]:  # fmt: skip
    remote_json = json.dumps(raw, ensure_ascii=False, default=str, sort_keys=True)
    digest = hashlib.sha256(remote_json.encode("utf-8", "surrogatepass")).hexdigest()
    where = (sync_conflicts.c.event_id == event.id, sync_conflicts.c.remote_sha256 == digest)
    if conn.execute(sa.select(sync_conflicts.c.event_id).where(*where)).first() is None:
        conn.execute(
            sa.insert(sync_conflicts).values(
                event_id=event.id, remote_sha256=digest, origin_replica=event.origin_replica,
                origin_seq=event.origin_seq, local_event_id=local_id, peer=peer, reason=reason,
                remote_json=remote_json, first_seen_at=now,
            )
        )  # fmt: skip
    what = "id" if reason == "different_content" else "origin position"
    return {
        "event_id": event.id, "origin_replica": event.origin_replica,
        "origin_seq": event.origin_seq, "local_event_id": local_id, "reason": reason,
        "message": f"conflict: the peer's event {event.id} has the same {what} as local event "
        f"{local_id} but different content; the local copy is kept and the remote one recorded",
    }  # fmt: skip


def _record_rejections(conn: sa.Connection, reports: list[dict[str, Any]], store: LogStore):
    if not reports:
        return
    now = _now_text(store.clock.wall_clock.now_ms())
    for r in reports:
        key = (sync_rejections.c.kind == r["kind"], sync_rejections.c.ident == r["ident"])
        prior = conn.execute(sa.select(sync_rejections.c.attempts).where(*key)).first()
        if prior is None:
            conn.execute(
                sa.insert(sync_rejections).values(
                    kind=r["kind"], ident=r["ident"], origin_replica=r["origin_replica"],
                    origin_seq=r["origin_seq"], peer=r["peer"], reason=r["reason"],
                    message=r["message"], retryable=r["retryable"], attempts=1,
                    first_seen_at=now, last_seen_at=now,
                )
            )  # fmt: skip
            continue
        attempts = int(prior[0]) + 1
        conn.execute(
            sa.update(sync_rejections).where(*key).values(
                attempts=attempts, last_seen_at=now, message=r["message"], reason=r["reason"],
                peer=r["peer"], retryable=r["retryable"] and attempts < MAX_RETRIES,
            )
        )  # fmt: skip


def _resolve(conn: sa.Connection, kind: str, ids: list[str]) -> None:
    for chunk in _chunks(ids, 500):
        conn.execute(
            sa.delete(sync_rejections).where(
                sync_rejections.c.kind == kind, sync_rejections.c.ident.in_(chunk)
            )
        )


def pull_after(store: LogStore, origin: str, vector_top: int) -> int:
    """Where to resume pulling `origin`: our vector entry, or just before the oldest deferred
    event of that origin (a deferred event left a hole the vector cannot see)."""
    with store._storage_errors(), store.engine.connect() as conn:
        floor = conn.execute(
            sa.select(sa.func.min(sync_rejections.c.origin_seq)).where(
                sync_rejections.c.kind == "event",
                sync_rejections.c.origin_replica == origin,
                sync_rejections.c.retryable.is_(True),
            )
        ).scalar()
    return vector_top if floor is None else min(vector_top, int(floor) - 1)


def origin_top(store: LogStore, origin: str) -> int:
    """Our version-vector entry for one origin (0 if we hold none of its events)."""
    with store._storage_errors(), store.engine.connect() as conn:
        top = conn.execute(
            sa.select(sa.func.max(events.c.origin_seq)).where(events.c.origin_replica == origin)
        ).scalar()
    return int(top or 0)


def count_upto(store: LogStore, origin: Any, upto: Any) -> int:
    """How many events of `origin` with origin_seq <= upto this replica holds (hole probes)."""
    clean = v.required_routing("origin", origin)
    bound = v.strict_int("upto", upto)
    with store._storage_errors(), store.engine.connect() as conn:
        n = conn.execute(
            sa.select(sa.func.count())
            .select_from(events)
            .where(events.c.origin_replica == clean, events.c.origin_seq <= bound)
        ).scalar()
    return int(n or 0)


def list_conflicts(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Recorded same-id/different-content events, newest first."""
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(sync_conflicts).order_by(sync_conflicts.c.first_seen_at.desc()).limit(limit)
        ).mappings()
        return [{**dict(r), "remote": json.loads(r["remote_json"])} for r in rows]


def list_rejections(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Refused and deferred remote items still outstanding, newest first."""
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(sync_rejections).order_by(sync_rejections.c.last_seen_at.desc()).limit(limit)
        ).mappings()
        return [{**dict(r), "retryable": bool(r["retryable"])} for r in rows]


def list_clock_anomalies(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(sa.select(sync_clock_anomalies).limit(limit)).mappings()
        return [dict(r) for r in rows]


def origin_summary(store: LogStore) -> dict[str, dict[str, int]]:
    """{origin: {max, count}}: two replicas with equal `max` but different `count` for an
    origin have a hole the version vector cannot show (used by `doctor`)."""
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                events.c.origin_replica, sa.func.max(events.c.origin_seq), sa.func.count()
            ).group_by(events.c.origin_replica)
        ).all()
    return {r[0]: {"max": int(r[1]), "count": int(r[2])} for r in rows}


# ----------------------------------------------------------------------------- estate


def record_estate(
    store: LogStore, name: str, url: str, result: Mapping[str, Any] | None, error: str | None
) -> None:
    """Remember how the last round with a peer went (tokens are never stored)."""
    now = _now_text(store.clock.wall_clock.now_ms())

    def write(conn: sa.Connection, st: Any) -> None:
        key = sync_peers.c.name == name
        prior = conn.execute(sa.select(sync_peers).where(key)).mappings().first()
        row: dict[str, Any] = dict(prior) if prior else {
            "name": name, "replica_id": None, "reachable": None, "last_success_at": None,
            "last_error": None, "last_error_at": None, "last_pulled_events": 0,
            "last_pulled_artifacts": 0, "last_pushed_events": 0, "total_pulled_events": 0,
            "rounds": 0, "remote_version_vector": "{}",
        }  # fmt: skip
        row.update(url=url, updated_at=now, rounds=int(row["rounds"]) + 1)
        if result is not None:
            row.update(
                replica_id=result.get("peer_replica"), reachable=True, last_success_at=now,
                last_pulled_events=int(result.get("pulled_events", 0)),
                last_pulled_artifacts=int(result.get("pulled_artifacts", 0)),
                last_pushed_events=int(result.get("pushed_events", 0)),
                total_pulled_events=int(row["total_pulled_events"])
                + int(result.get("pulled_events", 0)),
                remote_version_vector=json.dumps(result.get("remote_version_vector") or {}),
            )  # fmt: skip
        else:
            row.update(reachable=False, last_error=error, last_error_at=now)
        if prior is None:
            conn.execute(sa.insert(sync_peers).values(**row))
        else:
            conn.execute(sa.update(sync_peers).where(key).values(**row))

    store._submit(write)


def estate_rows(store: LogStore) -> list[dict[str, Any]]:
    with store._storage_errors(), store.engine.connect() as conn:
        rows = conn.execute(sa.select(sync_peers).order_by(sync_peers.c.name)).mappings().all()
    out = []
    for r in rows:
        d = dict(r)
        d["reachable"] = None if d["reachable"] is None else bool(d["reachable"])
        d["remote_version_vector"] = json.loads(d["remote_version_vector"] or "{}")
        out.append(d)
    return out


def counts(store: LogStore) -> dict[str, int]:
    """Outstanding conflicts, rejections, deferred events and clock anomalies."""
    with store._storage_errors(), store.engine.connect() as conn:

        def n(q: Any) -> int:
            return int(conn.execute(q).scalar() or 0)

        return {
            "conflicts": n(sa.select(sa.func.count()).select_from(sync_conflicts)),
            "rejections": n(sa.select(sa.func.count()).select_from(sync_rejections)),
            "deferred": n(
                sa.select(sa.func.count())
                .select_from(sync_rejections)
                .where(sync_rejections.c.retryable.is_(True))
            ),
            "clock_anomalies": n(sa.select(sa.func.count()).select_from(sync_clock_anomalies)),
        }


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
