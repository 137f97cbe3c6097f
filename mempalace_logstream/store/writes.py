"""Writes: drafts (validation of raw fields), the one insert of an event and of an artifact,
and `Transaction`, the public API inside a group-committed write transaction
(`store.transaction(work)`), which replication, the importer and the workflows use."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import methodcaller
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from mempalace_logstream import errors, lazy
from mempalace_logstream import validation as v
from mempalace_logstream.backends import Executor
from mempalace_logstream.backends.base import Build
from mempalace_logstream.backends.queries import appends as sql
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.identity import actor as actor_mod
from mempalace_logstream.identity.actor import Actor
from mempalace_logstream.identity.keyring import Keyring
from mempalace_logstream.identity.verdict import Verdict
from mempalace_logstream.models import (
    DRAFT_FIELDS,
    DRAFT_SPEC,
    Artifact,
    ArtifactDraft,
    Event,
    EventArgs,
    EventDraft,
)
from mempalace_logstream.payload import TOMBSTONE_PREFIX, parse_tombstone
from mempalace_logstream.store import blobs, guards
from mempalace_logstream.store import rows as row_cols
from mempalace_logstream.store.append import Appended, Local, Origin
from mempalace_logstream.store.append import append as append_events
from mempalace_logstream.store.drafts import event_fields
from mempalace_logstream.store.identity import check_names, check_writer
from mempalace_logstream.store.ids import new_id, new_id_and_time, now_text
from mempalace_logstream.store.marks import PIN_PREFIX
from mempalace_logstream.store.pipeline import CommitPipeline, TxState
from mempalace_logstream.store.redaction_projection import REDACT_TYPE
from mempalace_logstream.store.rows import artifact_from_row, events_from_rows
from mempalace_logstream.store.signatures import takes_args_of
from mempalace_logstream.tasks.guards import BudgetExhausted

if TYPE_CHECKING:
    import dataclasses

    from mempalace_logstream.identity import keys
    from mempalace_logstream.store.core import LogStore
else:  # on first use: an unsigned write never loads them (issue 25)
    dataclasses = lazy.module("dataclasses")
    keys = lazy.module("mempalace_logstream.identity.keys")

T = TypeVar("T")


class Transaction:
    """One write transaction of the store, handed to `store.transaction(work)`.

    `ex` runs statements (`rows`, `insert`, `insert_events`, `held_ids`); `state` holds the
    next seq and artifact seq, which every insert advances, and the events appended so far
    (waiters are woken for them after the commit).
    """

    def __init__(
        self, store: LogStore, ex: Executor, state: TxState, actor: Actor | None = None
    ) -> None:
        self.store, self.ex, self.state = store, ex, state
        # Who the surface proved is acting (RFC 0008), captured where the write was submitted.
        self.actor = actor
        self.verdict: Verdict | None = None  # of the event inserted last

    def rows(self, key: Any, build: Build, params: dict[str, Any]) -> Any:
        return self.ex.rows(key, build, params)

    def find_event(self, ident: str, *, field: str) -> Event:
        """The event `ident`; NotFoundError naming `field` if it is not held."""
        return self.store.event_by_id(self.ex, ident, field=field)

    def find_idempotent(self, draft: EventDraft) -> Event | None:
        """The event stored earlier under the draft's (from_agent, idempotency_key)."""
        select = self.store.event_select
        rows = sql.idempotent(self.ex, select, draft["from_agent"], draft.idempotency_key)
        return events_from_rows(rows)[0] if rows else None

    def insert_event(self, draft: EventDraft) -> Event:
        """The one local write of an event: the idempotent replay, else the event appended
        (checked, sealed, numbered, inserted and projected: `append`)."""
        if draft.idempotency_key is not None:
            prior = self.find_idempotent(draft)
            if prior is not None:
                return same_as_prior(prior, draft)
        key = draft.idempotency_key
        origin = _LOCAL if key is None else Local(key)
        done = append_events(self, [self._new_event(draft)], origin)
        return done.events[0]

    def append(self, events: Sequence[Event], origin: Origin) -> Appended:
        """THE write path of events, for every origin (store/append.py): admit (seal or
        judge), assign seq, insert, run every registered projection."""
        return append_events(self, events, origin)

    def keyring(self) -> Keyring:
        """The keyring as this transaction sees it (identity's one cache: read once per
        transaction, and reused by the next while nobody else committed)."""
        st, store = self.state, self.store
        return store.identity.write_keyring(
            self.ex, store.event_select, st.number, st.unchanged, st.marks, st.generation
        )

    def set_agent_token(self, agent: str, token_hash: str | None) -> None:
        """Store (or, with None, drop) the hash of `agent`'s token in this transaction, so a
        key event and its token commit together (`logstream agent rotate`, RFC 0008)."""
        at = now_text(self.store.clock.wall_clock.now_ms())
        sql.set_agent_token(self.ex, agent, token_hash, at)

    def _new_event(self, draft: EventDraft) -> Event:
        store = self.store
        ms, stamp = store.clock.tick()  # one reading of the wall clock for all three
        ident, created = new_id_and_time("evt", ms)
        seq = self.state.next_seq
        # Filled like a read row becomes an Event (store/plan.py): no frozen __init__'s
        # field-by-field __setattr__ (an Event has no check of its own to skip). Its
        # `__dict__` is the draft's values with the minted fields, made in one display and
        # set whole: no second dict filled key by key.
        values = {
            **draft.values,
            "id": ident,
            "seq": seq,
            "origin_replica": store.replica_id,
            "origin_seq": seq,
            "hlc": stamp,
            "created_at": created,
            **_MINTED_DEFAULTS,
        }
        event = object.__new__(Event)
        object.__setattr__(event, "__dict__", values)
        return event

    def insert_artifact(self, draft: ArtifactDraft) -> Artifact:
        """The one insert of a local artifact (content kept once per sha256)."""
        # An agent puts artifacts under its own name only (RFC 0008), like its events.
        check_writer(self.actor, "created_by", draft.created_by)
        check_names(self.keyring(), created_by=draft.created_by)
        import hashlib  # here: hashlib is not loaded by a plain append (issue 25)

        digest = hashlib.sha256(draft.content).hexdigest()
        held = blobs.ensure(self.ex, digest, len(draft.content), draft.content)
        ms = self.store.clock.wall_clock.now_ms()
        art = Artifact(
            id=new_id("art", ms),
            kind=draft.kind,
            sha256=digest,
            size_bytes=len(draft.content),
            encoding=draft.encoding,
            created_by=draft.created_by,
            created_at=now_text(ms),
            origin_replica=self.store.replica_id,
            metadata_json=draft.metadata_json,
            warnings=draft.warnings,
        )
        self.write_artifact_row(art)
        # A blob emptied by redactions of other copies is refilled for this unredacted one.
        blobs.refill_after(self.ex, held, digest, draft.content)
        return art

    def write_artifact_row(self, art: Artifact) -> None:
        """The artifacts row of `art` (local or replicated), with the next artifact seq."""
        row = {
            "id": art.id,
            "seq": self.state.next_artifact_seq,
            "kind": art.kind,
            "sha256": art.sha256,
            "size_bytes": art.size_bytes,
            "encoding": art.encoding,
            "created_by": art.created_by,
            "created_at": art.created_at,
            "origin_replica": art.origin_replica,
            "metadata_json": art.metadata_json,
        }
        sql.insert_artifact(self.ex, row)
        self.state.next_artifact_seq += 1

    def artifact_meta(self, ident: str) -> Artifact:
        """The artifact `ident` without its content; NotFoundError if unknown."""
        rows = sql.artifact_meta(self.ex, row_cols.ARTIFACT_COLS, ident)
        if not rows:
            raise errors.NotFoundError(f"artifact {ident!r} not found", field="artifact_id")
        return artifact_from_row(rows[0], None)


class Writes:
    """Validated writes (a part of `LogStore`): drafts checked against the size limits, run
    in the pipeline's group-committed transactions, each handed a `Transaction` of `store`
    (what projections and workflows reach through `tx.store`)."""

    def __init__(
        self,
        store: LogStore,
        pipeline: CommitPipeline,
        *,
        max_body_bytes: int,
        max_artifact_bytes: int,
    ) -> None:
        self.store, self.pipeline = store, pipeline
        self.max_body_bytes, self.max_artifact_bytes = max_body_bytes, max_artifact_bytes

    def transaction(
        self, work: Callable[[Transaction], T], on_bulk: Callable[[], Any] | None = None
    ) -> T:
        """Run `work(tx)` in a group-committed write transaction and return its result.

        Every write of the store goes through here. `on_bulk` is called when
        the rest of the transaction is long work that releases the GIL (a big sync page).
        Raises what `work` raises (nothing is written then), or StorageError.
        """
        who = actor_mod.current()
        try:
            store = self.store
            result: T = self.pipeline.write(
                lambda ex, st: work(Transaction(store, ex, st, who)), on_bulk
            )
        except BudgetExhausted as exc:  # a loop guard refused it: tell the requester once
            guards.send_notice(self, exc)
            raise
        return result

    def pinned_admins(self) -> list[str]:
        """The admin key ids this replica trusts as roots (RFC 0008 "Admin key")."""
        with self.store.snapshot() as ex:
            held = meta_rows.with_prefix(ex, PIN_PREFIX)
        return sorted(k[len(PIN_PREFIX) :] for k, _value in held)

    def set_agent_token(self, agent: str, token_hash: str | None) -> None:
        """Store (or, with None, drop) the hash of `agent`'s bearer token. Local to this
        hub, never replicated (RFC 0008)."""

        def work(ex: Executor, _state: TxState) -> None:
            at = now_text(self.pipeline.clock.wall_clock.now_ms())
            sql.set_agent_token(ex, agent, token_hash, at)

        self.pipeline.write(work)

    def agent_token_hashes(self) -> dict[str, str]:
        """agent -> the stored hash of its token."""
        with self.pipeline.connect() as conn:
            return sql.agent_token_hashes(conn)

    def pin_admin(self, key_id: Any, *, pinned: bool = True) -> bool:
        """Trust (or, with `pinned=False`, stop trusting) an admin key id as a root; returns
        whether anything changed. Local to this replica, never replicated."""
        if not keys.is_key_id(key_id):
            raise v.fail("key_id", f"{key_id!r} is not ed25519:<32 hex>")
        name = PIN_PREFIX + key_id
        identity = self.pipeline.identity

        def work(ex: Executor, _state: TxState) -> bool:
            held = meta_rows.get(ex, name) is not None
            if pinned == held:
                return False
            if pinned:
                meta_rows.insert(ex, name, "admin")
            else:
                meta_rows.delete(ex, [name])
            # The keyring changed: a write transaction must not reuse the one it (or the one
            # before it, while nobody else committed) read without this pin.
            identity.moved()
            return True

        changed: bool = self.pipeline.write(work)
        return changed

    def draft_event(self, **fields: Unpack[EventArgs]) -> EventDraft:
        """Validate raw event fields (S-4; `models.EventArgs` names them) into a draft: each
        by its rule of the spec, in `Event`'s field order (a remote event's checks run the
        same rules), then the idempotency key. Raises ValidationError naming the field."""
        return self.draft_of(fields)

    def draft_of(self, raw: Mapping[str, Any]) -> EventDraft:
        """`draft_event` of the fields in `raw` (a caller's own mapping: not copied into
        keyword arguments again, issue 25)."""
        if not _ARG_NAMES.issuperset(raw):
            raise v.fail(min(raw.keys() - _ARG_NAMES), "is not a known parameter")
        values = event_fields(raw, self.max_body_bytes)
        if values["body"].startswith(TOMBSTONE_PREFIX):  # the cheap test first
            _not_tombstone(values["body"])
        key = raw.get("idempotency_key")
        if key is not None:  # a key left out is None (`v.idempotency_key(None)`)
            key = v.idempotency_key(key)
        # Made like `EventDraft(values=values, idempotency_key=key)` without its check that
        # `values` holds exactly the draft fields: `event_fields` gives exactly those.
        draft = object.__new__(EventDraft)
        object.__setattr__(draft, "__dict__", {"values": values, "idempotency_key": key})
        return draft

    def event_append(self, **fields: Unpack[EventArgs]) -> Event:
        """Append one event. Idempotent per (from_agent, idempotency_key).

        Referenced artifacts must exist. Durable at the configured level when it returns.
        Raises ValidationError, NotFoundError (unknown artifact), ConflictError (a reused
        idempotency key with different content).
        """
        return self.append_of(fields)

    def append_of(self, raw: Mapping[str, Any]) -> Event:
        """`event_append` of the fields in `raw` (`draft_of`)."""
        draft = self.draft_of(raw)
        if draft.values["type"] == REDACT_TYPE:  # it must be applied where it is written, too
            raise v.fail("type", f"{REDACT_TYPE} is written by event_redact (`logstream redact`)")
        # `tx.insert_event(draft)` called from C: no Python frame of its own (issue 25)
        event: Event = self.transaction(methodcaller("insert_event", draft))
        return event

    def draft_artifact(
        self,
        *,
        kind: Any,
        content: Any,
        created_by: Any,
        metadata: Any = None,
        encoding: Any = None,
        content_field: str = "content",
    ) -> ArtifactDraft:
        clean_kind = v.artifact_kind(kind)
        raw, enc = v.artifact_content(
            content, v.encoding(encoding), self.max_artifact_bytes, content_field
        )
        return ArtifactDraft(
            kind=clean_kind,
            content=raw,
            encoding=enc,
            created_by=v.writer("created_by", created_by),
            metadata_json=v.metadata(metadata),
            warnings=v.patch_warnings(raw) if clean_kind == "patch" else (),
        )

    @takes_args_of(draft_artifact)
    def artifact_put(self, **fields: Any) -> Artifact:
        """Store an artifact byte-exact; content is kept once per sha256. Returns no content."""
        draft = self.draft_artifact(**fields)
        return self.transaction(lambda tx: tx.insert_artifact(draft))

    def artifact_get(self, artifact_id: Any) -> Artifact:
        """The artifact with its exact content; NotFoundError if unknown."""
        ident = v.required_routing("artifact_id", artifact_id)
        with self.pipeline.connect() as conn:
            row = sql.artifact_with_content(conn, row_cols.ARTIFACT_COLS, ident)
            mine = blobs.redactions_of_artifacts(conn, [ident]).get(ident) if row else None
        if row is None:
            raise errors.NotFoundError(
                f"artifact {ident!r} not found", field="artifact_id", ident=ident
            )
        content = bytes(row[-1])
        if mine is not None:  # redacted itself: its tombstone, whatever the shared blob holds
            return dataclasses.replace(artifact_from_row(row, b""), redacted=mine)
        # Re-hashed on every read (cheap next to the I/O): bytes changed behind the log are
        # never served under the original digest.
        import hashlib  # here: hashlib is not loaded by a plain append (issue 25)

        actual = hashlib.sha256(content).hexdigest()
        if actual != row.sha256 and not content:
            raise errors.IntegrityError(
                f"artifact {ident!r} has no content here: its blob was emptied (by a "
                "redaction of another artifact with the same bytes, or it came emptied from a "
                "peer) but it is not redacted itself; `logstream doctor` lists it, and putting "
                "the same bytes again (as any artifact) restores them",
                ident=ident,
            )
        if actual != row.sha256:
            raise errors.IntegrityError(
                f"artifact {ident!r} is corrupt: its stored content hashes to {actual}, not "
                f"its sha256 {row.sha256}; restore the database from a backup or a replica",
                ident=ident,
            )
        return artifact_from_row(row, content)


def same_as_prior(prior: Event, draft: EventDraft) -> Event:
    """The earlier event of an idempotency key, or ConflictError if its content differs."""
    same = all(getattr(prior, name) == value for name, value in draft.values.items())
    if not same:
        raise errors.ConflictError(
            f"idempotency_key {draft.idempotency_key!r} was already used by "
            f"{draft['from_agent']!r} for a different event ({prior.id}); use a new key",
            field="idempotency_key",
            ident=prior.id,
        )
    return prior


# The fields of an Event neither a draft nor `_new_event` gives: their declared defaults.
_MINTED_DEFAULTS = {
    name: default
    for name, default, _metadata in lazy.declared(Event)
    if name not in DRAFT_FIELDS and default is not lazy.MISSING
}
_MINTED = frozenset(("id", "seq", "origin_replica", "origin_seq", "hlc", "created_at"))
if {name for name, *_ in lazy.declared(Event)} != {*DRAFT_FIELDS, *_MINTED, *_MINTED_DEFAULTS}:
    raise RuntimeError("Transaction._new_event does not give every field of Event")
_LOCAL = Local()  # the origin of a local event without an idempotency key (it holds nothing else)
# What `draft_event` takes: the draft fields by their wire names, and the idempotency key.
_ARG_NAMES = frozenset([wire for _name, wire, _rule in DRAFT_SPEC] + ["idempotency_key"])


def _not_tombstone(body: str) -> None:
    """Only a redaction writes a tombstone (it stands for another body's SHA-256)."""
    if parse_tombstone(body) is not None:
        raise v.fail("body", "is a redaction tombstone; only `logstream redact` writes one")
