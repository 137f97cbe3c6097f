"""Frozen, keyword-only records returned by the store: Event, Artifact, Page, WaitResult.

`to_dict()` gives the wire shape shared by every surface (S-1.1, S-1.2). Each is a dataclass
made by `dataclasses` on first need (lazy.py `dataclass`): a CLI write, which fills its events
through `__dict__`, loads neither `dataclasses` nor `inspect` (issue 25).
Must not import sqlalchemy, pydantic or any surface.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Required, TypedDict

from mempalace_logstream.lazy import Record, declared, instance
from mempalace_logstream.payload import (
    TOMBSTONE_PREFIX,
    body_digest,
    parse_tombstone,
    read_metadata,
)

if TYPE_CHECKING:
    from dataclasses import dataclass, field
else:  # each made a dataclass on first need, not at import (lazy.py; issue 25)
    from mempalace_logstream.lazy import dataclass, field

PREVIEW_CHARS = 200
_SLIM_DROP = (
    "seq",
    "origin_replica",
    "origin_seq",
    "hlc",
    "metadata",
    "metadata_error",
    "sig",
)
# Set on a read Event (not a field, not compared) that reads `verified: false` although it was
# stored: the code says why (`Keyring.read_mark`: `revoked_key`, `unsigned_name_signs`).
VERIFIED_REASON = "verified_reason"


# Set on a read Event (not a field, not compared) whose stored row held a value of the wrong
# type (store/plan.py `repair_row`): what was wrong, shown as `row_error` like
# `metadata_error`.
ROW_ERROR = "row_error"


class FieldSpec(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """One field of an event, declared once on `Event` (RFC 0006 "One event spec"): the schema's
    columns, the content fields, the sync rows, the signed fields, `to_dict`, the draft (the
    fields a writer gives, `draft_event`, the append operation's parameters) and the checks of
    a draft or a remote event all derive from these."""

    kind: str  # the column: "key", "seq", "int", "text"; "links" lives in event_artifacts
    doc: str
    nullable: bool = False
    content: bool = True  # immutable and replicated: content_key, sync rows, the signature
    check: str | None = None  # a writer gives it, checked by this rule of
    # `validation.FIELD_RULES` (a draft's and a remote event's); None: the store sets it
    indexed: bool = False  # a (column, seq) index: the read filters test it
    wire: str = ""  # its name in to_dict and on the wire, when not the attribute's
    param: str = ""  # what a writer is told of it (the append operation's description)


def _spec(kind: str, doc: str, **options: Any) -> dict[str, FieldSpec]:
    return {"spec": FieldSpec(kind, doc, **options)}


@dataclass(frozen=True, kw_only=True)
class Event(Record):
    """One stored event: its fields are declared here once (`EVENT_SPEC`). (A docstring of its
    own: `dataclass` would otherwise build one from `inspect.signature`.)"""

    id: str = field(metadata=_spec("key", "globally unique event id (evt_<ULID>)"))
    seq: int = field(metadata=_spec("seq", "this store's position (local)", content=False))
    origin_replica: str = field(metadata=_spec("key", "the replica that wrote it"))
    origin_seq: int = field(metadata=_spec("int", "its position at its origin"))
    hlc: str = field(metadata=_spec("key", "hybrid logical clock stamp"))
    type: str = field(
        metadata=_spec(
            "text",
            "event type",
            check="type",
            indexed=True,
            param="e.g. task.reply, note, status (identity.* is the admin's).",
        )
    )
    stream: str = field(
        metadata=_spec(
            "text", "stream", check="required", indexed=True, param="e.g. project/myrepo."
        )
    )
    room: str = field(
        metadata=_spec(
            "text",
            "room",
            check="required",
            indexed=True,
            param="e.g. delegation.",
        )
    )
    topic: str | None = field(
        metadata=_spec(
            "text",
            "topic",
            nullable=True,
            check="routing",
            indexed=True,
            param="Topic within the room.",
        )
    )
    from_agent: str = field(
        metadata=_spec(
            "text",
            "the writer",
            check="writer",
            indexed=True,
            param="Your agent id.",
        )
    )
    to_agent: str | None = field(
        metadata=_spec(
            "text",
            "recipient or *",
            nullable=True,
            check="routing",
            indexed=True,
            param="Addressee, or * for all.",
        )
    )
    correlation_id: str | None = field(
        metadata=_spec(
            "text",
            "thread (task id)",
            nullable=True,
            check="routing",
            indexed=True,
            param="Thread/task id to reply on.",
        )
    )
    branch: str | None = field(
        metadata=_spec(
            "text",
            "Git branch",
            nullable=True,
            check="routing",
            param="Git branch.",
        )
    )
    base_commit: str | None = field(
        metadata=_spec(
            "text",
            "Git commit",
            nullable=True,
            check="routing",
            param="Commit hash the work is based on.",
        )
    )
    status: str | None = field(
        metadata=_spec(
            "text",
            "status word",
            nullable=True,
            check="status",
            indexed=True,
            param="Status.",  # the operation lists the words (validation.STATUSES)
        )
    )
    artifact_ids: tuple[str, ...] = field(
        metadata=_spec(
            "links",
            "artifacts it names",
            check="artifact_ids",
            param="Stored artifacts it refers to.",
        )
    )
    body: str = field(
        metadata=_spec(
            "text",
            "the text (signed through its SHA-256)",
            check="body",
            param="Text, max 256 KiB.",
        )
    )
    created_at: str = field(metadata=_spec("text", "wall-clock time at its origin (UTC)"))
    metadata_json: str = field(
        default="{}",
        metadata=_spec(
            "text",
            "a JSON object",
            wire="metadata",
            check="metadata",
            param="A JSON object, max 64 KiB.",
        ),
    )
    # The Ed25519 signature (base64url) and its key id (RFC 0008); both None when unsigned. A
    # stored signature was verified when the event was stored (nothing forged is stored).
    sig: str | None = field(
        default=None, metadata=_spec("text", "Ed25519 signature", nullable=True, content=False)
    )
    key_id: str | None = field(
        default=None, metadata=_spec("text", "its key's id", nullable=True, content=False)
    )

    @property
    def metadata(self) -> dict[str, Any]:
        return read_metadata(self.metadata_json)[0]

    @property
    def verified(self) -> bool | None:
        """`True` for a signed event (verified before it was stored), `None` when unsigned,
        `False` when a read marked it (`verified_reason`: its key was revoked at an HLC <= its
        own after it was stored, or it is unsigned under a name that signs; RFC 0008)."""
        if VERIFIED_REASON in self.__dict__:
            return False
        return None if self.sig is None else True

    @property
    def verified_reason(self) -> str | None:
        """Why a read shows `verified: false` (None otherwise)."""
        reason: str | None = self.__dict__.get(VERIFIED_REASON)
        return reason

    @property
    def redacted(self) -> dict[str, str] | None:
        """{by, at, reason, event_id} when the body was redacted (else None)."""
        if not self.body.startswith(TOMBSTONE_PREFIX):
            return None
        doc = parse_tombstone(self.body)
        if doc is None:
            return None
        return {k: doc[k] for k in ("by", "at", "reason", "event_id")}

    def with_seq(self, seq: int) -> "Event":
        """A copy of this event at local position `seq` (the store numbers events as it
        appends them: store/append.py). A new object: an Event is never changed."""
        return self._copy_with("seq", seq)

    def with_unverified(self, code: str) -> "Event":
        """A copy of this read event that reads `verified: false` with `verified_reason` =
        `code` (RFC 0008 read marks); a new object: an Event is never changed."""
        return self._copy_with(VERIFIED_REASON, code)

    def _copy_with(self, name: str, value: Any) -> "Event":
        # Cheaper than dataclasses.replace (no __init__, no field-by-field __setattr__): the
        # copy is filled before anyone sees it, the way rows become Events (store/plan.py).
        copy = object.__new__(Event)
        copy.__dict__.update(self.__dict__)
        copy.__dict__[name] = value
        return copy

    def content_key(self) -> tuple[Any, ...]:
        """The immutable, replicated fields (`CONTENT_FIELDS`): equal keys mean the same event.
        The body enters through its digest, so a redacted copy equals the original."""
        return tuple(
            tuple(sorted(self.artifact_ids))
            if name == "artifact_ids"
            else _digest_or_body(self.body)
            if name == "body"
            else getattr(self, name)
            for name in CONTENT_FIELDS
        )

    def to_dict(self, *, preview: bool = False, slim: bool = False) -> dict[str, Any]:
        metadata, problem = read_metadata(self.metadata_json)
        values = self.__dict__
        out: dict[str, Any] = {wire: values[name] for name, wire in _WIRE_NAMES}
        out["artifact_ids"] = list(self.artifact_ids)
        out["metadata"] = metadata
        out["verified"] = self.verified
        reason = self.verified_reason
        if reason is not None:
            out["verified_reason"] = reason
        if problem is not None:
            out["metadata_error"] = problem
        row_error = self.__dict__.get(ROW_ERROR)
        if row_error is not None:
            out[ROW_ERROR] = row_error
        redacted = self.redacted
        if redacted is not None:
            out["redacted"] = redacted
        if preview and len(self.body) > PREVIEW_CHARS:
            out["body"] = self.body[:PREVIEW_CHARS]
            out["body_truncated"] = True
            out["body_length"] = len(self.body)
        if slim:
            for key in _SLIM_DROP:
                out.pop(key, None)
            out = {k: v for k, v in out.items() if v not in (None, "", [], {})}
        return out


# The fields of an event as declared on `Event`, in that order: (attribute, spec).
EVENT_SPEC: tuple[tuple[str, FieldSpec], ...] = tuple(
    (name, metadata["spec"]) for name, _default, metadata in declared(Event)
)
_WIRE_NAMES = tuple((name, spec.wire or name) for name, spec in EVENT_SPEC)
# The immutable, replicated fields by their wire names, in one order: `Event.content_key()`, the
# compact sync rows (`replication.ROW_COLUMNS`) and what a signature covers
# (`identity.SIGNED_FIELDS`, the body through its sha256) all follow it.
CONTENT_FIELDS = tuple(spec.wire or name for name, spec in EVENT_SPEC if spec.content)
# Every replicated field by its wire name (all but the local `seq`): a compact sync row's columns.
ROW_FIELDS = tuple(wire for name, wire in _WIRE_NAMES if name != "seq")
# The fields that may be None (the nullable columns).
NULLABLE_FIELDS = frozenset(name for name, spec in EVENT_SPEC if spec.nullable)
# The fields a writer gives, each with the rule that checks it (`validation.FIELD_RULES`), in
# `Event`'s order: a local draft (`LogStore.draft_event`) and a remote event both run them.
CHECKED_FIELDS = tuple((name, spec.check) for name, spec in EVENT_SPEC if spec.check)
# The fields of a draft (`EventDraft.values`): a stored event takes them as they are; the store
# adds the ids, positions, stamps and signature.
DRAFT_FIELDS = tuple(name for name, _rule in CHECKED_FIELDS)
# Each draft field as (attribute, its name where a writer gives it and on the wire, its rule):
# `EventArgs`, the append operation's parameters and the checks of a draft or a remote event.
DRAFT_SPEC = tuple(
    (name, spec.wire or name, spec.check) for name, spec in EVENT_SPEC if spec.check is not None
)
# The rules that refuse a missing value: the draft fields they check are required.
REQUIRED_RULES = frozenset({"type", "required", "writer"})


def _digest_or_body(body: str) -> str:
    try:
        return body_digest(body)
    except UnicodeEncodeError:
        return body


@dataclass(frozen=True, kw_only=True)
class Artifact(Record):
    """One stored artifact: content-addressed bytes (RFC 0005) with who made it and when."""

    id: str
    kind: str
    sha256: str
    size_bytes: int
    encoding: str
    created_by: str
    created_at: str
    origin_replica: str
    metadata_json: str = "{}"
    content: bytes | None = None
    warnings: tuple[str, ...] = ()
    # {by, at, reason, event_id} when a redaction emptied the content (RFC 0008); `content`
    # is then b"" and `sha256` still the original's.
    redacted: dict[str, str] | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        return read_metadata(self.metadata_json)[0]

    def content_text(self) -> str | None:
        """Content as it travels: text for utf-8 artifacts, base64 for binary ones."""
        if self.content is None:
            return None
        if self.encoding == "utf-8":
            return self.content.decode("utf-8")
        import base64  # here: a write loads no base64 (issue 25)

        return base64.b64encode(self.content).decode("ascii")

    def to_dict(self, *, with_content: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "encoding": self.encoding,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "origin_replica": self.origin_replica,
            "metadata": self.metadata,
        }
        if with_content and self.content is not None:
            out["content"] = self.content_text()
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.redacted is not None:
            out["redacted"] = self.redacted
        return out


@dataclass(frozen=True, kw_only=True)
class Page(Record):
    """One read: the events, the cursor of the newest examined event, and whether more remain.

    `scanned_seq` is the local position behind `cursor`; `preview`/`slim` shape `to_dict`.
    """

    events: tuple[Event, ...]
    cursor: str | None
    has_more: bool
    note: str | None = None
    timed_out: bool = False
    scanned_seq: int = 0
    preview: bool = False
    slim: bool = False

    def replace(self, **changes: Any) -> "Page":
        import dataclasses

        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "events": [e.to_dict(preview=self.preview, slim=self.slim) for e in self.events],
            "count": len(self.events),
            "cursor": self.cursor,
            "has_more": self.has_more,
        }
        if self.note:
            out["note"] = self.note
        return out

    def to_wait_dict(self) -> dict[str, Any]:
        return {"timed_out": self.timed_out, **self.to_dict()}


class EventArgs(TypedDict, total=False):
    """The raw fields a writer gives `LogStore.draft_event` and `event_append`, by their wire
    names, plus the idempotency key: any values (the spec's rules check them). The one place
    besides `Event` that names them, so that mypy checks callers' keyword names;
    tests/test_event_spec.py holds it to `DRAFT_SPEC` (names, order, which are required)."""

    type: Required[Any]
    stream: Required[Any]
    room: Required[Any]
    topic: Any
    from_agent: Required[Any]
    to_agent: Any
    correlation_id: Any
    branch: Any
    base_commit: Any
    status: Any
    artifact_ids: Any
    body: Any
    metadata: Any
    idempotency_key: Any


@dataclass(frozen=True, kw_only=True)
class EventDraft(Record):
    """A validated event, not yet stored (`LogStore.draft_event` makes it): a checked value for
    each field a writer gives (`values`, by attribute name: `DRAFT_FIELDS`) and the
    idempotency key."""

    values: Mapping[str, Any]
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if self.values.keys() != _DRAFT_NAMES:
            odd = sorted(self.values.keys() ^ _DRAFT_NAMES)
            raise ValueError(f"an EventDraft holds exactly {DRAFT_FIELDS}; {odd} differ")

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def replace(self, **values: Any) -> "EventDraft":
        """This draft with some values changed (already checked ones: a workflow's)."""
        merged = {**self.values, **values}  # (made as `EventDraft(...)` makes it: lazy.py)
        return instance(EventDraft, values=merged, idempotency_key=self.idempotency_key)


_DRAFT_NAMES = frozenset(DRAFT_FIELDS)


@dataclass(frozen=True, kw_only=True)
class ArtifactDraft(Record):
    """A validated artifact, not yet stored (`LogStore.artifact_put` makes it)."""

    kind: str
    content: bytes
    encoding: str
    created_by: str
    metadata_json: str = "{}"
    warnings: tuple[str, ...] = field(default=())
