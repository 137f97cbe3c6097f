"""The wire formats: the reference's `/sync/ops` page of event objects (`ops_page`, at most
500) and our compact `rows-v2` page (`ops_rows`, up to 5,000 positional rows), op listing and
artifact fetches, all read from one store snapshot.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.backends.queries import sync
from mempalace_logstream.models import ROW_FIELDS, Artifact, Event
from mempalace_logstream.payload import read_metadata
from mempalace_logstream.store import (
    ARTIFACT_COLS,
    LogStore,
    artifact_from_row,
    events_from_rows,
    links_column,
    parse_links,
    repair_row,
)
from mempalace_logstream.store.blobs import (
    EMPTY_SHA256,
    redaction_of_blob,
    redactions_of_artifacts,
)

MAX_OPS_LIMIT = 500


MAX_SEQ = 2**63 - 1  # origin positions are signed 64-bit integers on both backends


MAX_RETRIES = 5  # a deferred event pins its origin's pull position for this many rounds


REPORT_CAP = 100  # conflicts/rejections listed per round result (counts are exact)


CREATED_AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


SHA_RE = re.compile(r"^[0-9a-f]{64}$")


# The compact page (`GET /sync/ops_rows`, our hubs only): one positional row per event in this
# column order, each value as in the event object of `/sync/ops` (the client refuses any other
# order and falls back to `/sync/ops`).
ROWS_FORMAT = "rows-v2"


# The content fields, then the signature and its key id (RFC 0008; rows-v1 had no signature).
ROW_COLUMNS = ROW_FIELDS


MAX_ROWS_LIMIT = 5000


ROWS_MAX_BYTES = 8 * 1024 * 1024  # body + metadata characters per compact page (>= 1 row)


READ_CHUNK = 500  # rows per read statement: the same memory bound as a reference page


_ART_AT = ROW_COLUMNS.index("artifact_ids")


_BODY_AT, _META_AT = ROW_COLUMNS.index("body"), ROW_COLUMNS.index("metadata")


_OSEQ_AT = ROW_COLUMNS.index("origin_seq")
# A compact row's values as the store writes them (store/plan.py `repair_row` for the rest).
_PLAIN = frozenset({str, int, type(None)}).issuperset


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
    with store.snapshot() as ex:
        return events_from_rows(sync.ops_events(ex, store.event_select, clean_origin, after, n))


def ops_page(store: LogStore, origin: Any, after_seq: Any = 0, limit: Any = None) -> dict[str, Any]:
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
    links = functools.partial(links_column, store.backend)
    out: list[list[Any]] = []
    size = 0
    with store.snapshot() as ex:
        while len(out) < n and size < max_bytes:
            want = min(READ_CHUNK, n - len(out))
            chunk = sync.ops_rows(ex, links, clean_origin, after, want)
            for row in chunk:
                item = list(row)
                if not _PLAIN(map(type, row)) or type(row[_OSEQ_AT]) is not int:
                    item = list(repair_row(ROW_COLUMNS, row)[0])  # read with stand-ins
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
    if rows_sql is not None:
        try:
            done = _rows_json(store, rows_sql, clean_origin, after, n, max_bytes)
        except errors.StorageError:
            done = None  # "JSON cannot hold BLOB values": a BLOB written behind the API
        if done is not None:
            return clean_origin, *done
        # A row of the wrong type: the page is built in Python, which reads it with stand-ins.
    page = ops_rows(store, clean_origin, after, n, max_bytes)
    text = json.dumps(page["rows"], ensure_ascii=False, separators=(",", ":"))
    return clean_origin, text.encode("utf-8"), page["count"]


def _rows_json(
    store: LogStore, rows_sql: str, origin: str, after: int, n: int, max_bytes: int
) -> tuple[bytes, int] | None:
    """The rows of `ops_rows_json` as SQLite writes them; None when one of them holds text
    that is not UTF-8 (SQLite's JSON passes its bytes through, which no client could read)."""
    parts: list[memoryview] = []
    count = size = 0
    with store.snapshot() as ex:
        while count < n and size < max_bytes:
            want = min(READ_CHUNK, n - count)
            text, got, last, chars = sync.ops_rows_json(ex, rows_sql, origin, after, want)
            if not got:
                break
            try:
                text.decode("utf-8")  # mostly ASCII: a fast check
            except UnicodeDecodeError:
                return None
            parts.append(memoryview(text)[1:-1])  # the array's items, without copying
            count, size, after = count + got, size + int(chars or 0), int(last)
            if got < want:
                break
    return b"[" + b",".join(parts) + b"]", count


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
            redacted = redactions_of_artifacts(conn, chunk)
            for row in sync.artifacts_with_content(conn, ARTIFACT_COLS, chunk):
                held = artifact_from_row(row, bytes(row[-1]))
                mine = redacted.get(row[0])
                if mine is not None:
                    # Redacted (RFC 0008): served empty with its tombstone, sha256 unchanged,
                    # whatever the blob holds for other artifacts with the same bytes.
                    held = replace(held, content=b"", redacted=mine)
                elif not held.content and held.sha256 != EMPTY_SHA256:
                    # Emptied here but not redacted itself: what this replica holds.
                    held = replace(held, redacted=redaction_of_blob(conn, held.sha256) or {})
                found[row[0]] = held
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
    with store.snapshot() as ex:
        have = sync.held_artifact_ids(ex, wanted)
    return [i for i in wanted if i not in have]


def row_dict(raw: Any) -> Any:
    """A row as the event object it stands for (reports and recorded conflicts)."""
    if not isinstance(raw, list) or len(raw) != len(ROW_COLUMNS):
        return raw
    return dict(zip(ROW_COLUMNS, raw, strict=True))


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
