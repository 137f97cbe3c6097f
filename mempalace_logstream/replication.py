"""Store-side replication primitives (S-7.1–S-7.3): op listing, remote apply, sync bookkeeping.

Remote events and artifacts are re-validated exactly like local writes, applied through the
store's group-committed write path (so a fresh local `seq` is assigned under the write lock),
and every refusal is recorded: conflicts in `sync_conflicts`, refused or deferred items in
`sync_rejections`, far-future HLC stamps in `sync_clock_anomalies`. Must not import surfaces.

Two wire shapes are served: the reference's `/sync/ops` page of event objects (`ops_page`, at
most 500) and our compact `rows-v1` page (`ops_rows`, up to 5,000 events as positional rows,
metadata as its stored JSON text) that only our client asks for. Both are parsed by the same
`EventChecker` and applied by the same transaction code, which runs on the SQLite writer's
DBAPI connection when the store offers it (`LogStore._fast_path`) and through SQLAlchemy
otherwise (PostgreSQL, or an engine with statement listeners).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import errors, hlc
from mempalace_logstream import validation as v
from mempalace_logstream.backends.base import EVENT_COL_NAMES as _EVENT_COL_NAMES
from mempalace_logstream.backends.base import CoreExecutor as _Core
from mempalace_logstream.backends.base import Executor as _Ex
from mempalace_logstream.backends.base import binds as _binds
from mempalace_logstream.backends.base import in_lists as _in_lists
from mempalace_logstream.models import Artifact, Event, read_metadata
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
from mempalace_logstream.store import (
    ARTIFACT_COLS,
    LogStore,
    artifact_from_row,
    events_from_rows,
    links_column,
    now_text,
    parse_links,
)

MAX_OPS_LIMIT = 500
MAX_SEQ = 2**63 - 1  # origin positions are signed 64-bit integers on both backends
MAX_RETRIES = 5  # a deferred event pins its origin's pull position for this many rounds
REPORT_CAP = 100  # conflicts/rejections listed per round result (counts are exact)
_CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

# The compact page (`GET /sync/ops_rows`, our hubs only): one positional row per event in this
# column order, each value as in the event object of `/sync/ops` (the client refuses any other
# order and falls back to `/sync/ops`).
ROWS_FORMAT = "rows-v1"
ROW_COLUMNS = (
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "artifact_ids",
    "body",
    "created_at",
    "metadata",
)
MAX_ROWS_LIMIT = 5000
ROWS_MAX_BYTES = 8 * 1024 * 1024  # body + metadata characters per compact page (>= 1 row)
_READ_CHUNK = 500  # rows per read statement: the same memory bound as a reference page
_ART_AT = ROW_COLUMNS.index("artifact_ids")
_BODY_AT, _META_AT = ROW_COLUMNS.index("body"), ROW_COLUMNS.index("metadata")

# The events row of one stored event, in `EVENT_COLS` order (idempotency_key stays NULL):
# seq, then the "tail" that EventChecker builds while validating (see `_event`).
_TAIL_COLS = (
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "body",
    "created_at",
    "metadata_json",
)
assert _EVENT_COL_NAMES == ("seq", *_TAIL_COLS), "events columns changed: update _TAIL_COLS"


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


def seq_int(field: str, value: Any) -> int:
    """An integer that fits an origin position column (signed 64-bit); raises ValidationError
    naming `field` (a larger number must never reach the database as an OverflowError)."""
    n = v.strict_int(field, value)
    if not -MAX_SEQ - 1 <= n <= MAX_SEQ:
        raise v.fail(field, f"is {n}; the limit is {MAX_SEQ} (a signed 64-bit integer)", MAX_SEQ)
    return n


def _ops_args(origin: Any, after_seq: Any, limit: Any, cap: int) -> tuple[str, int, int]:
    clean_origin = v.required_routing("origin", origin)
    after = seq_int("after", 0 if after_seq is None else after_seq)
    if after < 0:
        raise v.fail("after", f"is {after}; it must be a non-negative integer")
    n = cap if limit is None else v.strict_int("limit", limit)
    if n < 1:
        raise v.fail("limit", f"is {n}; it must be a positive integer", cap)
    return clean_origin, after, min(n, cap)


def list_ops(store: LogStore, origin: Any, after_seq: Any = 0, limit: Any = None) -> list[Event]:
    """Events authored by `origin` with origin_seq > after_seq, in origin_seq order (≤500)."""
    clean_origin, after, n = _ops_args(origin, after_seq, limit, MAX_OPS_LIMIT)

    def build() -> sa.Executable:
        q = store.event_select(
            events.c.origin_replica == sa.bindparam("origin"),
            events.c.origin_seq > sa.bindparam("after"),
        )
        return q.order_by(events.c.origin_seq).limit(sa.bindparam("lim"))

    with store.snapshot() as ex:
        params = {"origin": clean_origin, "after": after, "lim": n}
        return events_from_rows(ex.rows("sync-list-ops", build, params))


def ops_page(store: LogStore, origin: Any, after_seq: Any = 0, limit: Any = None) -> dict:
    """`/sync/ops` wire shape `{origin, events, count}`; artifact_ids sorted like the reference."""
    evs = list_ops(store, origin, after_seq, limit)
    out = []
    for e in evs:
        d = e.to_dict()
        d["artifact_ids"] = sorted(d["artifact_ids"])
        out.append(d)
    return {"origin": v.required_routing("origin", origin), "events": out, "count": len(out)}


def ops_rows(
    store: LogStore,
    origin: Any,
    after_seq: Any = 0,
    limit: Any = None,
    max_bytes: int = ROWS_MAX_BYTES,
) -> dict[str, Any]:
    """The compact page `{origin, format, columns, rows, count}`: events of `origin` with
    origin_seq > after_seq in origin_seq order, at most `limit` (clamped to 5,000) and about
    `max_bytes` of body and metadata text (always at least one event), each a list of the
    `ROW_COLUMNS` values as `/sync/ops` has them (artifact_ids sorted, metadata an object).
    Raises ValidationError."""
    clean_origin, after, n = _ops_args(origin, after_seq, limit, MAX_ROWS_LIMIT)
    backend = store.backend

    def build() -> sa.Executable:
        named = {"artifact_ids": links_column(backend), "metadata": events.c.metadata_json}
        cols = [named[c] if c in named else events.c[c] for c in ROW_COLUMNS]
        q = sa.select(*cols).where(
            events.c.origin_replica == sa.bindparam("origin"),
            events.c.origin_seq > sa.bindparam("after"),
        )
        return q.order_by(events.c.origin_seq).limit(sa.bindparam("lim"))

    out: list[list[Any]] = []
    size = 0
    with store.snapshot() as ex:
        while len(out) < n and size < max_bytes:
            want = min(_READ_CHUNK, n - len(out))
            params = {"origin": clean_origin, "after": after, "lim": want}
            chunk = ex.rows("sync-ops-rows", build, params)
            for row in chunk:
                item = list(row)
                links = item[_ART_AT]
                item[_ART_AT] = sorted(parse_links(links)) if links else []
                meta = item[_META_AT]
                size += len(item[_BODY_AT]) + len(meta)
                item[_META_AT] = _metadata_object(meta)
                out.append(item)
                if size >= max_bytes:
                    break
            if len(chunk) < want:
                break
            after = int(out[-1][2])
    return {
        "origin": clean_origin,
        "format": ROWS_FORMAT,
        "columns": list(ROW_COLUMNS),
        "rows": out,
        "count": len(out),
    }


def ops_rows_json(
    store: LogStore,
    origin: Any,
    after_seq: Any = 0,
    limit: Any = None,
    max_bytes: int = ROWS_MAX_BYTES,
) -> tuple[str, bytes, int]:
    """`ops_rows` with its rows already serialized: (clean origin, the rows as a UTF-8 JSON
    array, count). On SQLite the database writes the JSON (no Python per event), 500 events
    per statement, stopping at the first chunk that reaches `max_bytes`; elsewhere it is
    `ops_rows` dumped. Raises ValidationError."""
    clean_origin, after, n = _ops_args(origin, after_seq, limit, MAX_ROWS_LIMIT)
    rows_sql = store.backend.rows_json_sql
    if rows_sql is None or not store.uses_fast_path():
        page = ops_rows(store, clean_origin, after, n, max_bytes)
        text = json.dumps(page["rows"], ensure_ascii=False, separators=(",", ":"))
        return clean_origin, text.encode("utf-8"), page["count"]
    parts: list[memoryview] = []
    count = size = 0
    with store.snapshot() as ex:
        while count < n and size < max_bytes:
            want = min(_READ_CHUNK, n - count)
            params = {"origin": clean_origin, "after": after, "lim": want}
            text, got, last, chars = ex.query(rows_sql, params)[0]
            if not got:
                break
            parts.append(memoryview(text)[1:-1])  # the array's items, without copying
            count, size, after = count + got, size + int(chars or 0), int(last)
            if got < want:
                break
    return clean_origin, b"[" + b",".join(parts) + b"]", count


def _metadata_object(text: str) -> dict[str, Any]:
    """The metadata object as `/sync/ops` serves it (Event.metadata: `{}` if unreadable)."""
    return read_metadata(text)[0]


def get_artifacts(
    store: LogStore, ids: Sequence[str], max_bytes: int = 16 * 1024 * 1024
) -> tuple[list[Artifact], list[str], list[str]]:
    """Artifacts with content for `ids`: (found, not_found, more). `more` did not fit in budget."""
    clean = list(dict.fromkeys(v.required_routing("ids", i) for i in ids))
    found: dict[str, Artifact] = {}
    with store.connect() as conn:
        for chunk in _chunks(clean, 200):
            q = (
                sa.select(*ARTIFACT_COLS, artifact_blobs.c.content)
                .join(artifact_blobs, artifact_blobs.c.sha256 == artifacts.c.sha256)
                .where(artifacts.c.id.in_(chunk))
            )
            for row in conn.execute(q):
                found[row[0]] = artifact_from_row(row, bytes(row[-1]))
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
    if not wanted:
        return []
    have: set[str] = set()
    with store.snapshot() as ex:
        for n, params in _in_lists(wanted):
            key = ("sync-have-arts", n)
            build = lambda n=n: sa.select(artifacts.c.id).where(artifacts.c.id.in_(_binds(n)))  # noqa: E731
            have.update(r[0] for r in ex.rows(key, build, params))
    return [i for i in wanted if i not in have]


# ----------------------------------------------------------------------------- validation


class EventChecker:
    """Re-validates remote events with the local write rules: the validators `draft_event`
    runs for a local append (same functions, same order, same field names in errors), then
    the replication fields (ids, origin stamps, hlc, created_at). Routing values, types and
    replica ids repeat from event to event, so a checker remembers the clean value of each
    string it has already accepted (never a refusal); everything else is checked every time.
    One checker per batch: the memory is bounded by the batch's distinct values."""

    _MEMO_MAX = 4096  # distinct values remembered per field

    def __init__(self, store: LogStore) -> None:
        self.max_body_bytes = store.max_body_bytes
        self._memo: dict[str, dict[str, Any]] = {name: {} for name in _CHECKS}

    def _same(self, name: str, value: Any) -> Any:
        """`_CHECKS[name](value)`, remembered for a string value it accepted."""
        if type(value) is not str:
            return _CHECKS[name](value)
        memo = self._memo[name]
        try:
            return memo[value]
        except KeyError:
            clean = _CHECKS[name](value)
            if len(memo) < self._MEMO_MAX:
                memo[value] = clean
            return clean

    def from_dict(self, raw: Any) -> Event:
        """A `/sync/ops` (or push) event object → Event with seq 0; raises ValidationError."""
        return self.parse_dict(raw)[0]

    def from_row(self, row: Any) -> Event:
        """A `rows-v1` row (`ROW_COLUMNS` order) → Event with seq 0; raises ValidationError."""
        return self.parse_row(row)[0]

    def parse_dict(self, raw: Any) -> tuple[Event, tuple[Any, ...]]:
        """(Event with seq 0, its events row after seq); raises ValidationError."""
        if not isinstance(raw, Mapping):
            raise v.fail("event", f"must be a JSON object, not {type(raw).__name__}")
        g = raw.get
        return self._event(
            g("id"),
            g("origin_replica"),
            g("origin_seq"),
            g("hlc"),
            g("type"),
            g("stream"),
            g("room"),
            g("topic"),
            g("from_agent"),
            g("to_agent"),
            g("correlation_id"),
            g("branch"),
            g("base_commit"),
            g("status"),
            g("artifact_ids"),
            g("body"),
            g("created_at"),
            g("metadata"),
        )

    def parse_row(self, row: Any) -> tuple[Event, tuple[Any, ...]]:
        """`parse_dict` for a `rows-v1` row (`ROW_COLUMNS` order)."""
        if not isinstance(row, list) or len(row) != len(ROW_COLUMNS):
            raise v.fail(
                "event",
                f"must be a list of the {len(ROW_COLUMNS)} {ROWS_FORMAT} "
                f"columns, not {type(row).__name__}"
                f"{f' of {len(row)}' if isinstance(row, list) else ''}",
            )
        return self._event(*row)

    def _event(
        self,
        ident: Any,
        origin: Any,
        origin_seq: Any,
        stamp: Any,
        type_: Any,
        stream: Any,
        room: Any,
        topic: Any,
        from_agent: Any,
        to_agent: Any,
        correlation_id: Any,
        branch: Any,
        base_commit: Any,
        status: Any,
        artifact_ids: Any,
        body: Any,
        created_at: Any,
        metadata: Any,
    ) -> tuple[Event, tuple[Any, ...]]:
        same = self._same
        # LogStore.draft_event, field by field in its order (idempotency_key is never sent).
        c_type = same("type", type_)
        c_stream = same("stream", stream)
        c_room = same("room", room)
        c_from = same("from_agent", from_agent)
        c_topic = same("topic", topic)
        c_to = same("to_agent", to_agent)
        c_corr = same("correlation_id", correlation_id)
        c_branch = same("branch", branch)
        c_base = same("base_commit", base_commit)
        c_status = same("status", status)
        c_body = v.body(body, self.max_body_bytes)
        c_meta = v.metadata(metadata)
        c_arts = v.artifact_ids(artifact_ids)
        # The replication fields, in parse_remote_event's historical order.
        for i, aid in enumerate(c_arts):
            v.remote_id(f"artifact_ids[{i}]", aid)
        c_origin = same("origin_replica", origin)
        c_seq = v.strict_int("origin_seq", origin_seq)
        if c_seq < 1 or c_seq > MAX_SEQ:
            raise v.fail(
                "origin_seq",
                f"is {c_seq}; it must be a positive integer of at most {MAX_SEQ}",
                MAX_SEQ,
            )
        if not isinstance(stamp, str) or len(stamp) > 200 or not _HLC_MATCH(stamp):
            raise v.fail("hlc", f"{stamp!r} is not <13-digit ms>-<6 hex counter>-<replica id>")
        c_id = v.remote_id("id", ident)
        c_created = _created_at(created_at)
        event = object.__new__(Event)  # as LogStore builds events read back (no __init__)
        event.__dict__.update(
            id=c_id,
            seq=0,
            origin_replica=c_origin,
            origin_seq=c_seq,
            hlc=stamp,
            type=c_type,
            stream=c_stream,
            room=c_room,
            topic=c_topic,
            from_agent=c_from,
            to_agent=c_to,
            correlation_id=c_corr,
            branch=c_branch,
            base_commit=c_base,
            status=c_status,
            artifact_ids=c_arts,
            body=c_body,
            created_at=c_created,
            metadata_json=c_meta,
        )
        tail = (
            c_id,
            c_origin,
            c_seq,
            stamp,
            c_type,
            c_stream,
            c_room,
            c_topic,
            c_from,
            c_to,
            c_corr,
            c_branch,
            c_base,
            c_status,
            c_body,
            c_created,
            c_meta,
        )
        return event, tail


# hlc.parse's own format rule; parse() returns None exactly when this does not match.
_HLC_MATCH = hlc._HLC_RE.match


def _required(name: str) -> Callable[[Any], str]:
    return lambda value: v.required_routing(name, value)


def _optional(name: str) -> Callable[[Any], str | None]:
    return lambda value: v.routing(name, value)


# The validator of each remembered field: draft_event's, and the origin's replica id rule.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "type": v.event_type,
    **{name: _required(name) for name in ("stream", "room", "from_agent")},
    **{
        name: _optional(name)
        for name in ("topic", "to_agent", "correlation_id", "branch", "base_commit")
    },
    "status": v.status,
    "origin_replica": lambda value: v.replica_id(value, "origin_replica"),
}


def parse_remote_event(store: LogStore, raw: Any) -> Event:
    """Re-validate a remote event dict with the local rules; `seq` is left 0. Raises
    ValidationError naming the field."""
    return EventChecker(store).from_dict(raw)


@dataclass
class ParsedEvents:
    """A batch after validation: the valid events as (Event with seq 0, raw item, events row
    after seq) sorted by origin position, our own echo left out; the refusals as reports;
    how many were our echo. Applied once (the stored events get their seq in place)."""

    items: list[tuple[Event, Any, tuple[Any, ...]]]
    rejected: list[dict[str, Any]]
    own: int = 0

    def artifact_ids(self, origin: str | None = None) -> list[str]:
        """The artifact ids the valid events reference (of one origin's events, if given)."""
        return [
            a
            for e, _, _ in self.items
            if origin in (None, e.origin_replica)
            for a in e.artifact_ids
        ]


def parse_events(
    store: LogStore,
    raws: Sequence[Any],
    peer: str = "",
    rows: bool = False,
    pause: Callable[[], Any] | None = None,
) -> ParsedEvents:
    """Validate a batch of event objects (or `rows-v1` rows); never raises for a bad item.
    `pause`, if given, is called before every 256 items (a sync's prefetch thread waits
    there while the applying thread needs the GIL)."""
    checker = EventChecker(store)
    parse = checker.parse_row if rows else checker.parse_dict
    items: list[tuple[Event, Any, tuple[Any, ...]]] = []
    rejected: list[dict[str, Any]] = []
    for i, raw in enumerate(raws):
        if pause is not None and not i & 255:
            pause()
        try:
            event, tail = parse(raw)
        except errors.ValidationError as exc:
            rejected.append(_reject_report("event", _row_dict(raw) if rows else raw, exc, peer))
            continue
        items.append((event, raw, tail))
    items.sort(key=_position)
    own = store.replica_id
    mine = [p for p in items if p[0].origin_replica != own]
    return ParsedEvents(mine, rejected, len(items) - len(mine))


def _position(item: tuple[Event, Any, Any]) -> tuple[str, int]:
    return item[0].origin_replica, item[0].origin_seq


def _row_dict(raw: Any) -> Any:
    """A row as the event object it stands for (reports and recorded conflicts)."""
    if not isinstance(raw, list) or len(raw) != len(ROW_COLUMNS):
        return raw
    return dict(zip(ROW_COLUMNS, raw, strict=True))


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
    is also recorded (the sync_rejections and sync_conflicts tables) and in the round results.
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
    return apply_remote_batch(store, raws, ParsedEvents([], []), peer)


def apply_remote_events(store: LogStore, raws: Sequence[Any], peer: str = "") -> ApplyResult:
    """Validate and apply a batch of remote events in one transaction, in origin_seq order.

    Each event is kept verbatim (id, created_at, hlc, origin stamps) with a fresh local seq.
    Duplicates are no-ops, our own echo is skipped, conflicts and refusals are recorded and
    reported; nothing else in the batch is lost because of them.
    """
    return apply_remote_batch(store, (), parse_events(store, raws, peer), peer)


def apply_remote_batch(
    store: LogStore,
    artifact_raws: Sequence[Any],
    parsed: ParsedEvents,
    peer: str = "",
    on_bulk: Callable[[], Any] | None = None,
) -> ApplyResult:
    """Artifacts (validated here, sha256 recomputed) then already-parsed events, in ONE
    transaction: a page of a pull costs one commit. Never raises for a bad item. `on_bulk`
    is called when the rest of the transaction is long SQLite work that releases the GIL
    (the events' index updates, then the commit)."""
    res = ApplyResult(own=parsed.own, rejected=list(parsed.rejected))
    good: list[Artifact] = []
    for raw in artifact_raws:
        try:
            good.append(parse_remote_artifact(store, raw))
        except errors.ValidationError as exc:
            res.rejected.append(_reject_report("artifact", raw, exc, peer))
    if not (good or parsed.items or res.rejected):
        return res

    def work(ex: _Ex, st: Any) -> None:
        art_ids = _apply_artifacts_tx(store, ex, st, good, res, peer) if good else []
        if parsed.items:
            _apply_events_tx(store, ex, st, parsed.items, res, peer)
        _record_rejections(store, ex, res.rejected)
        _resolve(store, ex, "artifact", art_ids)
        _resolve(store, ex, "event", res.applied_ids[len(art_ids) :])

    store.transaction(lambda tx: work(tx.ex, tx.state), on_bulk)
    return res


def _apply_artifacts_tx(
    store: LogStore, ex: _Ex, st: Any, good: list[Artifact], res: ApplyResult, peer: str
) -> list[str]:
    held = _held_artifacts(ex, [a.id for a in good])
    applied: list[str] = []
    for art in good:
        prior = held.get(art.id)
        if prior is not None:
            if prior == art.sha256:
                res.duplicates += 1
            else:
                res.rejected.append(_artifact_conflict(art, prior, peer))
            continue
        _ensure_blob(ex, art.sha256, art.content or b"")
        # The row LogStore._write_artifact_row writes for a local put, with the next seq.
        ex.insert(
            "sync-ins-artifact",
            artifacts,
            [
                {
                    "id": art.id,
                    "seq": st.next_artifact_seq,
                    "kind": art.kind,
                    "sha256": art.sha256,
                    "size_bytes": art.size_bytes,
                    "encoding": art.encoding,
                    "created_by": art.created_by,
                    "created_at": art.created_at,
                    "origin_replica": art.origin_replica,
                    "metadata_json": art.metadata_json,
                }
            ],
        )
        st.next_artifact_seq += 1
        held[art.id] = art.sha256
        res.applied_artifacts += 1
        applied.append(art.id)
    res.applied_ids += applied
    return applied


def _ensure_blob(ex: _Ex, digest: str, content: bytes) -> None:
    def build() -> sa.Executable:
        col = artifact_blobs.c.sha256
        return sa.select(col).where(col == sa.bindparam("sha"))

    if not ex.rows("sync-blob", build, {"sha": digest}):
        ex.insert(
            "sync-ins-blob",
            artifact_blobs,
            [{"sha256": digest, "size_bytes": len(content), "content": content}],
        )


def _apply_events_tx(
    store: LogStore,
    ex: _Ex,
    st: Any,
    items: list[tuple[Event, Any, tuple[Any, ...]]],
    res: ApplyResult,
    peer: str,
) -> None:
    by_id = _held_events(store, ex, [e.id for e, _, _ in items])
    by_pos = _held_positions(ex, items)
    have_arts = set(_held_artifacts(ex, [a for e, _, _ in items for a in e.artifact_ids]))
    rows: list[tuple[Any, ...]] = []
    links: list[dict[str, Any]] = []
    now_ms = store.clock.wall_clock.now_ms()
    now = now_text(now_ms)
    far = now_ms + hlc.MAX_FUTURE_DRIFT_MS
    newest: str | None = None  # the greatest adoptable stamp applied (one observe per batch)
    newest_key = (-1, "")
    for event, raw, tail in items:
        prior = by_id.get(event.id)
        if prior is not None:
            if prior.content_key() == event.content_key():
                res.duplicates += 1
            else:
                res.conflicts.append(
                    _conflict(store, ex, event, raw, prior.id, "different_content", peer, now)
                )
            continue
        taken = by_pos.get((event.origin_replica, event.origin_seq))
        if taken is not None:
            res.conflicts.append(
                _conflict(store, ex, event, raw, taken, "origin_seq_taken", peer, now)
            )
            continue
        lacking = [a for a in event.artifact_ids if a not in have_arts]
        if lacking:
            res.rejected.append(_deferred(event, lacking[0], peer))
            continue
        # The batch's own fresh Event becomes the stored one: it gets its local seq.
        stored = event
        seq = st.next_seq
        stored.__dict__["seq"] = seq
        st.next_seq = seq + 1
        st.appended.append(stored)
        rows.append((seq, *tail))
        if stored.artifact_ids:
            links += [
                {"event_id": stored.id, "artifact_id": a, "position": i}
                for i, a in enumerate(stored.artifact_ids)
            ]
        by_id[stored.id] = stored
        by_pos[(stored.origin_replica, stored.origin_seq)] = stored.id
        # The HLC: a stamp more than 60 s ahead is kept on the event but never adopted;
        # observing the greatest of the others once is observing each (the clock takes max).
        stamp = stored.hlc
        wall = int(stamp[:13])
        if wall > far:
            _clock_anomaly(ex, stored, res, peer, now)
        elif (wall, stamp[14:20]) > newest_key:
            newest, newest_key = stamp, (wall, stamp[14:20])
        res.applied_events += 1
        res.applied_ids.append(stored.id)
    if rows:
        ex.insert_events(rows)
    if links:
        ex.insert("sync-ins-link", event_artifacts, links)
    if newest is not None:
        store.clock.observe(newest)


def _clock_anomaly(ex: _Ex, event: Event, res: ApplyResult, peer: str, now: str) -> None:
    res.clock_anomalies.append({"event_id": event.id, "hlc": event.hlc})

    def build() -> sa.Executable:
        col = sync_clock_anomalies.c.event_id
        return sa.select(col).where(col == sa.bindparam("event_id"))

    if not ex.rows("sync-anomaly-held", build, {"event_id": event.id}):
        ex.insert(
            "sync-ins-anomaly",
            sync_clock_anomalies,
            [
                {
                    "event_id": event.id,
                    "origin_replica": event.origin_replica,
                    "hlc": event.hlc,
                    "peer": peer,
                    "observed_at": now,
                }
            ],
        )


def _held_events(store: LogStore, ex: _Ex, ids: list[str]) -> dict[str, Event]:
    """The held events among `ids`: a cheap id probe first, then only those read back."""
    out: dict[str, Event] = {}
    held = ex.held_ids(list(dict.fromkeys(ids)))
    for n, params in _in_lists([i for i in dict.fromkeys(ids) if i in held]):
        build = lambda n=n: store.event_select(events.c.id.in_(_binds(n)))  # noqa: E731
        for e in events_from_rows(ex.rows(("sync-held-events", n), build, params)):
            out[e.id] = e
    return out


def _held_positions(ex: _Ex, items: list[tuple[Event, Any, Any]]) -> dict[tuple[str, int], str]:
    """(origin, origin_seq) -> id of the held events at the batch's origin positions: one
    range read per origin when the batch is dense (a page), IN lists when it is sparse."""
    by_origin: dict[str, list[int]] = {}
    for e, _, _ in items:
        by_origin.setdefault(e.origin_replica, []).append(e.origin_seq)
    out: dict[tuple[str, int], str] = {}
    for origin, seqs in by_origin.items():
        lo, hi = min(seqs), max(seqs)
        if hi - lo < 2 * len(seqs) + 16:

            def build() -> sa.Executable:
                c = events.c
                return sa.select(c.origin_seq, c.id).where(
                    c.origin_replica == sa.bindparam("origin"),
                    c.origin_seq >= sa.bindparam("lo"),
                    c.origin_seq <= sa.bindparam("hi"),
                )

            found = ex.rows("sync-held-range", build, {"origin": origin, "lo": lo, "hi": hi})
        else:
            found = []
            for n, params in _in_lists(sorted(set(seqs))):

                def build_in(n: int = n) -> sa.Executable:
                    c = events.c
                    return sa.select(c.origin_seq, c.id).where(
                        c.origin_replica == sa.bindparam("origin"), c.origin_seq.in_(_binds(n))
                    )

                found += ex.rows(("sync-held-pos", n), build_in, {**params, "origin": origin})
        for n_seq, ident in found:
            out[(origin, int(n_seq))] = ident
    return out


def _held_artifacts(ex: _Ex, ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, params in _in_lists(list(dict.fromkeys(ids))):

        def build(n: int = n) -> sa.Executable:
            return sa.select(artifacts.c.id, artifacts.c.sha256).where(
                artifacts.c.id.in_(_binds(n))
            )

        out.update({i: s for i, s in ex.rows(("sync-held-arts", n), build, params)})
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
        seq if type(seq) is int and 0 <= seq <= MAX_SEQ else None,  # a column, never overflow
    )


def _reject_report(kind: str, raw: Any, exc: errors.ValidationError, peer: str) -> dict:
    origin, seq = _raw_position(raw)
    reason = "tampered" if exc.field in ("sha256", "size_bytes") else "invalid"
    return {
        "kind": kind,
        "ident": _raw_ident(raw),
        "origin_replica": origin,
        "origin_seq": seq,
        "reason": reason,
        "field": exc.field,
        "message": exc.message,
        "retryable": False,
        "peer": peer,
    }


def _deferred(event: Event, artifact_id: str, peer: str) -> dict[str, Any]:
    return {
        "kind": "event",
        "ident": event.id,
        "origin_replica": event.origin_replica,
        "origin_seq": event.origin_seq,
        "reason": "missing_artifact",
        "field": "artifact_ids",
        "message": f"event {event.id} references artifact {artifact_id}, which is not held "
        "here (refused or not yet fetched); the event is deferred and retried next round",
        "retryable": True,
        "peer": peer,
    }


def _artifact_conflict(art: Artifact, prior_sha: str, peer: str) -> dict[str, Any]:
    return {
        "kind": "artifact",
        "ident": art.id,
        "origin_replica": art.origin_replica,
        "origin_seq": None,
        "reason": "conflict",
        "field": "sha256",
        "message": f"artifact {art.id} is held here with sha256 {prior_sha[:16]}…; the peer "
        f"sent {art.sha256[:16]}…",
        "retryable": False,
        "peer": peer,
    }


def _conflict(
    store: LogStore,
    ex: _Ex,
    event: Event,
    raw: Any,
    local_id: str,
    reason: str,
    peer: str,
    now: str,
) -> dict[str, Any]:
    remote_json = json.dumps(
        _row_dict(raw) if isinstance(raw, list) else raw,
        ensure_ascii=False,
        default=str,
        sort_keys=True,
    )
    digest = hashlib.sha256(remote_json.encode("utf-8", "surrogatepass")).hexdigest()

    def build() -> sa.Executable:
        c = sync_conflicts.c
        return sa.select(c.event_id).where(
            c.event_id == sa.bindparam("event_id"), c.remote_sha256 == sa.bindparam("sha")
        )

    if not ex.rows("sync-conflict-held", build, {"event_id": event.id, "sha": digest}):
        ex.insert(
            "sync-ins-conflict",
            sync_conflicts,
            [
                {
                    "event_id": event.id,
                    "remote_sha256": digest,
                    "origin_replica": event.origin_replica,
                    "origin_seq": event.origin_seq,
                    "local_event_id": local_id,
                    "peer": peer,
                    "reason": reason,
                    "remote_json": remote_json,
                    "first_seen_at": now,
                }
            ],
        )
    what = "id" if reason == "different_content" else "origin position"
    return {
        "event_id": event.id,
        "origin_replica": event.origin_replica,
        "origin_seq": event.origin_seq,
        "local_event_id": local_id,
        "reason": reason,
        "message": f"conflict: the peer's event {event.id} has the same {what} as local event "
        f"{local_id} but different content; the local copy is kept and the remote one recorded",
    }


def _record_rejections(store: LogStore, ex: _Ex, reports: list[dict[str, Any]]) -> None:
    if not reports:
        return
    now = now_text(store.clock.wall_clock.now_ms())
    c = sync_rejections.c

    def key(prefix: str) -> list[sa.ColumnElement[bool]]:
        # An UPDATE reserves the column names as bind names: the key binds are prefixed.
        return [c.kind == sa.bindparam(f"{prefix}kind"), c.ident == sa.bindparam(f"{prefix}ident")]

    def build_prior() -> sa.Executable:
        return sa.select(c.attempts).where(*key(""))

    def build_update() -> sa.Executable:
        names = ("attempts", "last_seen_at", "message", "reason", "peer", "retryable")
        return (
            sa.update(sync_rejections)
            .where(*key("key_"))
            .values({n: sa.bindparam(f"new_{n}") for n in names})
        )

    for r in reports:
        ident = {"kind": r["kind"], "ident": r["ident"]}
        prior = ex.rows("sync-rejection-prior", build_prior, ident)
        if not prior:
            ex.insert(
                "sync-ins-rejection",
                sync_rejections,
                [
                    {
                        **ident,
                        "origin_replica": r["origin_replica"],
                        "origin_seq": r["origin_seq"],
                        "peer": r["peer"],
                        "reason": r["reason"],
                        "message": r["message"],
                        "retryable": r["retryable"],
                        "attempts": 1,
                        "first_seen_at": now,
                        "last_seen_at": now,
                    }
                ],
            )
            continue
        attempts = int(prior[0][0]) + 1
        ex.run(
            "sync-rejection-update",
            build_update,
            {
                "key_kind": r["kind"],
                "key_ident": r["ident"],
                "new_attempts": attempts,
                "new_last_seen_at": now,
                "new_message": r["message"],
                "new_reason": r["reason"],
                "new_peer": r["peer"],
                "new_retryable": r["retryable"] and attempts < MAX_RETRIES,
            },
        )


def _resolve(store: LogStore, ex: _Ex, kind: str, ids: list[str]) -> None:
    """Forget the refusals of items now applied (skipped when none of `kind` is outstanding)."""
    if not ids:
        return
    c = sync_rejections.c
    build_any = lambda: sa.select(c.ident).where(c.kind == sa.bindparam("kind")).limit(1)  # noqa: E731
    if not ex.rows("sync-rejection-any", build_any, {"kind": kind}):
        return
    for n, params in _in_lists(ids):

        def build(n: int = n) -> sa.Executable:
            return sa.delete(sync_rejections).where(
                c.kind == sa.bindparam("kind"), c.ident.in_(_binds(n))
            )

        ex.run(("sync-resolve", n), build, {**params, "kind": kind})


def pull_after(store: LogStore, origin: str, vector_top: int) -> int:
    """Where to resume pulling `origin`: our vector entry, or just before the oldest deferred
    event of that origin (a deferred event left a hole the vector cannot see)."""
    with store.connect() as conn:
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
    with store.connect() as conn:
        top = conn.execute(
            sa.select(sa.func.max(events.c.origin_seq)).where(events.c.origin_replica == origin)
        ).scalar()
    return int(top or 0)


Fingerprint = tuple[int, int, int]
FP_P1, FP_P2 = 2_147_483_647, 1_000_000_007  # two primes: sums stay well inside 64 bits
NO_POSITIONS: Fingerprint = (0, 0, 0)


def count_upto(store: LogStore, origin: Any, upto: Any) -> int:
    """How many positions of `origin` up to `upto` this replica accounts for (hole probes):
    the events it holds plus the positions it refused for good (invalid, conflicting, deferred
    past MAX_RETRIES) and does not hold. Two replicas that account for the same positions
    agree, so an event one of them refuses is not a hole to re-pull every round."""
    return fingerprint_upto(store, origin, upto)[0]


def fingerprint_upto(store: LogStore, origin: Any, upto: Any) -> Fingerprint:
    """(count, sum of seq mod FP_P1, sum of seq² mod FP_P2) over the positions of `origin` up
    to `upto` that this replica accounts for (as `count_upto`). Equal fingerprints mean the
    same set of positions, short of a deliberate collision; a count alone does not (two
    replicas may each hold a position the other lacks). An index-only range scan."""
    clean = v.required_routing("origin", origin)
    bound = seq_int("upto", upto)
    c = events.c
    with store.connect() as conn:
        row = conn.execute(
            sa.select(*_fp_aggregates(c.origin_seq)).where(
                c.origin_replica == clean, c.origin_seq <= bound
            )
        ).one()
        return _fp_add(_fp_row(row), _fp_of(_refused_positions(conn, clean, bound)))


def _fp_aggregates(col: Any) -> list[Any]:
    return [
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(col % FP_P1), 0),
        sa.func.coalesce(sa.func.sum((col % FP_P2) * (col % FP_P2) % FP_P2), 0),
    ]


def _fp_row(row: Sequence[Any]) -> Fingerprint:
    return int(row[0] or 0), int(row[1] or 0) % FP_P1, int(row[2] or 0) % FP_P2


def _fp_of(positions: Iterable[int]) -> Fingerprint:
    n = s1 = s2 = 0
    for p in positions:
        n, s1, s2 = n + 1, s1 + p % FP_P1, s2 + (p % FP_P2) ** 2 % FP_P2
    return n, s1 % FP_P1, s2 % FP_P2


def _fp_add(a: Fingerprint, b: Fingerprint) -> Fingerprint:
    return a[0] + b[0], (a[1] + b[1]) % FP_P1, (a[2] + b[2]) % FP_P2


def fp_between(lower: Fingerprint, upper: Fingerprint) -> Fingerprint:
    """The fingerprint of the positions in (a, b] from the prefix fingerprints at a and b."""
    return upper[0] - lower[0], (upper[1] - lower[1]) % FP_P1, (upper[2] - lower[2]) % FP_P2


def _refused_union() -> sa.Subquery:
    r, c = sync_rejections.c, sync_conflicts.c
    return sa.union(
        sa.select(r.origin_replica, r.origin_seq).where(
            r.kind == "event", r.retryable.is_(False), r.origin_seq.is_not(None)
        ),
        sa.select(c.origin_replica, c.origin_seq).where(c.origin_seq.is_not(None)),
    ).subquery()


def _refused_positions(conn: sa.Connection, origin: str, upto: int) -> list[int]:
    """Distinct positions of `origin` <= upto refused for good (rejections that are no longer
    retried, conflicts) at which no event is held. Both tables are empty on a healthy log."""
    u = _refused_union()
    held = sa.exists().where(
        events.c.origin_replica == u.c.origin_replica, events.c.origin_seq == u.c.origin_seq
    )
    q = sa.select(u.c.origin_seq).where(u.c.origin_replica == origin, u.c.origin_seq <= upto, ~held)
    return [int(r[0]) for r in conn.execute(q)]


def origin_positions(store: LogStore) -> dict[str, tuple[int, Fingerprint]]:
    """{origin: (top, fingerprint)}: our version-vector entry and `fingerprint_upto(origin,
    top)`, for every origin we hold events of. One scan, like `version_vector()`; served to our
    peers as `origin_fingerprints` next to the vector, so that a round sees a hole below equal
    tops."""
    c = events.c
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(
                c.origin_replica, sa.func.max(c.origin_seq), *_fp_aggregates(c.origin_seq)
            ).group_by(c.origin_replica)
        ).all()
        out = {r[0]: (int(r[1]), _fp_row(r[2:])) for r in rows}
        u = _refused_union()
        refused = [r[0] for r in conn.execute(sa.select(u.c.origin_replica).distinct())]
        for origin in refused:
            if origin in out:
                top, fp = out[origin]
                out[origin] = (top, _fp_add(fp, _fp_of(_refused_positions(conn, origin, top))))
    return out


def highest_held(store: LogStore, origin: str, upto: int) -> int:
    """The highest origin_seq of `origin` <= upto that we hold (0 if none): one index seek."""
    with store.connect() as conn:
        top = conn.execute(
            sa.select(sa.func.max(events.c.origin_seq)).where(
                events.c.origin_replica == origin, events.c.origin_seq <= seq_int("upto", upto)
            )
        ).scalar()
    return int(top or 0)


def held_above(store: LogStore, origin: str, above: int, limit: int = REPORT_CAP) -> list:
    """(id, origin_seq) of the first `limit` events of `origin` held above `above`."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(events.c.id, events.c.origin_seq)
            .where(events.c.origin_replica == origin, events.c.origin_seq > above)
            .order_by(events.c.origin_seq)
            .limit(limit)
        ).all()
    return [(r[0], int(r[1])) for r in rows]


def record_sequence_anomalies(store: LogStore, reports: list[dict[str, Any]]) -> None:
    """Remember events that claim an origin position beyond what that origin itself says it
    has written (kind `sequence` in sync_rejections; the events stay, nothing is retried)."""
    if reports:
        store.core_transaction(lambda conn, st: _record_rejections(store, _Core(conn), reports))


def list_conflicts(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Recorded same-id/different-content events, newest first."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(sync_conflicts).order_by(sync_conflicts.c.first_seen_at.desc()).limit(limit)
        ).mappings()
        return [{**dict(r), "remote": json.loads(r["remote_json"])} for r in rows]


def list_rejections(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Refused and deferred remote items still outstanding, newest first."""
    with store.connect() as conn:
        rows = conn.execute(
            sa.select(sync_rejections).order_by(sync_rejections.c.last_seen_at.desc()).limit(limit)
        ).mappings()
        return [{**dict(r), "retryable": bool(r["retryable"])} for r in rows]


def list_clock_anomalies(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    with store.connect() as conn:
        rows = conn.execute(sa.select(sync_clock_anomalies).limit(limit)).mappings()
        return [dict(r) for r in rows]


def origin_summary(store: LogStore) -> dict[str, dict[str, int]]:
    """{origin: {max, count}}: two replicas with equal `max` but different `count` for an
    origin have a hole the version vector cannot show."""
    with store.connect() as conn:
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
    now = now_text(store.clock.wall_clock.now_ms())

    def write(conn: sa.Connection, st: Any) -> None:
        key = sync_peers.c.name == name
        prior = conn.execute(sa.select(sync_peers).where(key)).mappings().first()
        row: dict[str, Any] = (
            dict(prior)
            if prior
            else {
                "name": name,
                "replica_id": None,
                "reachable": None,
                "last_success_at": None,
                "last_error": None,
                "last_error_at": None,
                "last_pulled_events": 0,
                "last_pulled_artifacts": 0,
                "last_pushed_events": 0,
                "total_pulled_events": 0,
                "rounds": 0,
                "remote_version_vector": "{}",
            }
        )
        row.update(url=url, updated_at=now, rounds=int(row["rounds"]) + 1)
        if result is not None:
            row.update(
                replica_id=result.get("peer_replica"),
                reachable=True,
                last_success_at=now,
                last_pulled_events=int(result.get("pulled_events", 0)),
                last_pulled_artifacts=int(result.get("pulled_artifacts", 0)),
                last_pushed_events=int(result.get("pushed_events", 0)),
                total_pulled_events=int(row["total_pulled_events"])
                + int(result.get("pulled_events", 0)),
                remote_version_vector=json.dumps(result.get("remote_version_vector") or {}),
            )
        else:
            row.update(reachable=False, last_error=error, last_error_at=now)
        if prior is None:
            conn.execute(sa.insert(sync_peers).values(**row))
        else:
            conn.execute(sa.update(sync_peers).where(key).values(**row))

    store.core_transaction(write)


def estate_rows(store: LogStore) -> list[dict[str, Any]]:
    with store.connect() as conn:
        rows = conn.execute(sa.select(sync_peers).order_by(sync_peers.c.name)).mappings().all()
    out = []
    for r in rows:
        d = dict(r)
        d["reachable"] = None if d["reachable"] is None else bool(d["reachable"])
        d["remote_version_vector"] = json.loads(d["remote_version_vector"] or "{}")
        out.append(d)
    return out


def counts(store: LogStore) -> dict[str, int]:
    """Outstanding conflicts, rejections, deferred events, clock anomalies and sequence
    anomalies (events held beyond their origin's own tip)."""
    with store.connect() as conn:

        def n(q: Any) -> int:
            return int(conn.execute(q).scalar() or 0)

        rejections = sa.select(sa.func.count()).select_from(sync_rejections)
        anomaly = sync_rejections.c.kind == "sequence"
        return {
            "conflicts": n(sa.select(sa.func.count()).select_from(sync_conflicts)),
            "rejections": n(rejections.where(~anomaly)),
            "sequence_anomalies": n(rejections.where(anomaly)),
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
