"""Validation of remote input: `EventChecker` re-validates a remote event exactly like a local
write (both wire shapes), `parse_remote_artifact` recomputes the sha256.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from mempalace_logstream import errors, hlc
from mempalace_logstream import validation as v
from mempalace_logstream.models import DRAFT_SPEC, Artifact, Event
from mempalace_logstream.replication.reports import reject_report
from mempalace_logstream.replication.wire import (
    CREATED_AT_RE,
    MAX_SEQ,
    ROW_COLUMNS,
    ROWS_FORMAT,
    SHA_RE,
    row_dict,
)
from mempalace_logstream.store import (
    LogStore,
)


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
        return self.parse_dict(raw)

    def from_row(self, row: Any) -> Event:
        """A compact row (`ROW_COLUMNS` order) → Event with seq 0; raises ValidationError."""
        return self.parse_row(row)

    def parse_dict(self, raw: Any) -> Event:
        """An Event with seq 0 (the store numbers it as it appends it); raises
        ValidationError."""
        if not isinstance(raw, Mapping):
            raise v.fail("event", f"must be a JSON object, not {type(raw).__name__}")
        return self._event(*(raw.get(name) for name in ROW_COLUMNS))

    def parse_row(self, row: Any) -> Event:
        """`parse_dict` for a compact row (`ROW_COLUMNS` order)."""
        if not isinstance(row, list) or len(row) != len(ROW_COLUMNS):
            raise v.fail(
                "event",
                f"must be a list of the {len(ROW_COLUMNS)} {ROWS_FORMAT} "
                f"columns, not {type(row).__name__}"
                f"{f' of {len(row)}' if isinstance(row, list) else ''}",
            )
        return self._event(*row)

    def _event(self, *values: Any) -> Event:
        """Check one event's `ROW_COLUMNS` values: the routing and content fields with
        `draft_event`'s validators in its order, then the replication fields."""
        raw = dict(zip(ROW_COLUMNS, values, strict=True))
        clean = self._content(raw)
        clean.update(self._replication(raw, clean["artifact_ids"]))
        event = object.__new__(Event)  # as LogStore builds events read back (no __init__)
        event.__dict__.update(clean, seq=0)
        return event

    def _content(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """LogStore.draft_event's rules, field by field as `Event` declares them (the
        idempotency_key is never sent)."""
        same = self._same
        out = {name: same(name, raw[wire]) for name, wire in _TEXT_FIELDS}
        for name, wire, rule in _OTHER_FIELDS:  # body, metadata, artifact_ids
            if rule == "body":  # the store's own limit
                out[name] = v.body(raw[wire], self.max_body_bytes, wire)
            else:
                out[name] = v.FIELD_RULES[rule](wire, raw[wire])
        return out

    def _replication(self, raw: Mapping[str, Any], artifact_ids: Sequence[str]) -> dict[str, Any]:
        """The replication fields, in parse_remote_event's historical order; the signature's
        shape only (the verdict on it is the apply's, with the keyring)."""
        for i, aid in enumerate(artifact_ids):
            v.remote_id(f"artifact_ids[{i}]", aid)
        origin = self._same("origin_replica", raw["origin_replica"])
        seq = v.strict_int("origin_seq", raw["origin_seq"])
        if seq < 1 or seq > MAX_SEQ:
            raise v.fail(
                "origin_seq",
                f"is {seq}; it must be a positive integer of at most {MAX_SEQ}",
                MAX_SEQ,
            )
        stamp = raw["hlc"]
        if not isinstance(stamp, str) or len(stamp) > 200 or not _HLC_MATCH(stamp):
            raise v.fail("hlc", f"{stamp!r} is not <13-digit ms>-<6 hex counter>-<replica id>")
        return {
            "id": v.remote_id("id", raw["id"]),
            "origin_replica": origin,
            "origin_seq": seq,
            "hlc": stamp,
            "created_at": check_created_at(raw["created_at"]),
            "sig": _optional_text("sig", raw["sig"], SIG_MAX_CHARS),
            "key_id": _optional_text("key_id", raw["key_id"], KEY_ID_MAX_CHARS),
        }


SIG_MAX_CHARS = 200  # an Ed25519 signature is 86 base64url characters
KEY_ID_MAX_CHARS = 100  # ed25519: + 32 hex


def _optional_text(name: str, value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise v.fail(name, f"must be a string of 1 to {limit} characters or null", limit)
    return value


# hlc.parse's own format rule; parse() returns None exactly when this does not match.
_HLC_MATCH = hlc.HLC_RE.match


# The draft fields a checker remembers (their rule's clean value is a short string), and the
# others, checked every time (with their wire names: the remote shape is the wire's).
_TEXT_FIELDS = tuple((name, wire) for name, wire, rule in DRAFT_SPEC if rule in v.TEXT_RULES)
_OTHER_FIELDS = tuple(item for item in DRAFT_SPEC if item[2] not in v.TEXT_RULES)
# The validator of each remembered field, and the origin's replica id rule.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    **{
        name: partial(v.FIELD_RULES[rule], wire)
        for name, wire, rule in DRAFT_SPEC
        if rule in v.TEXT_RULES
    },
    "origin_replica": lambda value: v.replica_id(value, "origin_replica"),
}


def parse_remote_event(store: LogStore, raw: Any) -> Event:
    """Re-validate a remote event dict with the local rules; `seq` is left 0. Raises
    ValidationError naming the field."""
    return EventChecker(store).from_dict(raw)


@dataclass
class ParsedEvents:
    """A batch after validation: the valid events as (Event with seq 0, raw item) sorted by
    origin position, our own echo left out; the refusals as reports; how many were our echo.
    The store numbers the events it stores (copies with their seq: `Transaction.append`)."""

    items: list[tuple[Event, Any]]
    rejected: list[dict[str, Any]]
    own: int = 0

    def artifact_ids(self, origin: str | None = None) -> list[str]:
        """The artifact ids the valid events reference (of one origin's events, if given)."""
        return [
            a for e, _ in self.items if origin in (None, e.origin_replica) for a in e.artifact_ids
        ]


def parse_events(
    store: LogStore,
    raws: Sequence[Any],
    peer: str = "",
    rows: bool = False,
    pause: Callable[[], Any] | None = None,
) -> ParsedEvents:
    """Validate a batch of event objects (or compact rows); never raises for a bad item.
    `pause`, if given, is called before every 256 items (a sync's prefetch thread waits
    there while the applying thread needs the GIL)."""
    checker = EventChecker(store)
    parse = checker.parse_row if rows else checker.parse_dict
    items: list[tuple[Event, Any]] = []
    rejected: list[dict[str, Any]] = []
    for i, raw in enumerate(raws):
        if pause is not None and not i & 255:
            pause()
        try:
            event = parse(raw)
        except errors.ValidationError as exc:
            rejected.append(reject_report("event", row_dict(raw) if rows else raw, exc, peer))
            continue
        items.append((event, raw))
    items.sort(key=_position)
    own = store.replica_id
    mine = [p for p in items if p[0].origin_replica != own]
    return ParsedEvents(mine, rejected, len(items) - len(mine))


def _position(item: tuple[Event, Any]) -> tuple[str, int]:
    return item[0].origin_replica, item[0].origin_seq


def check_created_at(value: Any) -> str:
    if not isinstance(value, str) or not CREATED_AT_RE.match(value):
        raise v.fail(
            "created_at", f"{value!r} is not YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DDTHH:MM:SS.sssZ"
        )
    return value


def _artifact_bytes(content: Any, enc: str, limit: int) -> bytes:
    """A remote artifact's exact bytes: UTF-8 text, or base64 for binary; ValidationError on
    field `content` (absent, not a string, bad base64, over `limit` bytes)."""
    if content is None:
        raise v.fail("content", "is required")
    if isinstance(content, str) and enc == "utf-8":
        v.check_text("content", content)
        data = content.encode("utf-8")
    elif isinstance(content, str):
        try:
            data = base64.b64decode(content.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise v.fail("content", "is not valid base64") from exc
    else:
        raise v.fail("content", f"must be a string, not {type(content).__name__}")
    if len(data) > limit:
        raise v.fail("content", f"is {len(data)} bytes; the limit is {limit} bytes", limit)
    return data


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
    data = _artifact_bytes(raw.get("content"), enc, store.max_artifact_bytes)
    claimed = raw.get("sha256")
    digest = hashlib.sha256(data).hexdigest()
    size = raw.get("size_bytes")
    redacted = not data and isinstance(raw.get("redacted"), Mapping)
    if redacted and isinstance(claimed, str) and SHA_RE.match(claimed):
        # A blob a redaction emptied (RFC 0008): kept empty under its original sha256 and
        # size (doctor flags an empty blob that no redaction held here names).
        digest = claimed
        size_bytes = v.strict_int("size_bytes", size)
    elif not isinstance(claimed, str) or not SHA_RE.match(claimed) or claimed != digest:
        raise v.fail(
            "sha256",
            f"failed verification for artifact {ident}: claimed {str(claimed)[:16]}…, "
            f"computed {digest[:16]}… (tampered or corrupted content)",
        )
    elif size is not None and v.strict_int("size_bytes", size) != len(data):
        raise v.fail("size_bytes", f"is {size} but the content is {len(data)} bytes")
    else:
        size_bytes = len(data)
    return Artifact(
        id=ident,
        kind=kind,
        sha256=digest,
        size_bytes=size_bytes,
        encoding=enc,
        created_by=v.writer("created_by", raw.get("created_by")),
        created_at=check_created_at(raw.get("created_at")),
        origin_replica=v.replica_id(raw.get("origin_replica"), "origin_replica"),
        metadata_json=v.metadata(raw.get("metadata")),
        content=data,
    )
