"""What `logstream doctor` reads (RFC 0008 "Doctor"): the database's own integrity check, the
stored blobs against their SHA-256, the task projection against the fold, the signatures of the
whole log and the redactions. Every scan walks the log in chunks of `CHUNK` rows by key (one
short read snapshot each), so memory stays bounded on a log of any size.

The verdicts and the fold are the pure cores'; this module only feeds them rows.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors
from mempalace_logstream.backends.queries import artifacts as artifact_rows
from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.identity.keyring import Keyring
from mempalace_logstream.identity.verdict import verdict
from mempalace_logstream.models import Event
from mempalace_logstream.payload import TOMBSTONE_PREFIX, parse_tombstone
from mempalace_logstream.store import blobs as blob_rows
from mempalace_logstream.store import tasks as task_rows
from mempalace_logstream.store.identity import artifact_sha256s
from mempalace_logstream.store.redaction import BODY, REDACT_TYPE, Refused, spec_of
from mempalace_logstream.store.rows import events_from_rows
from mempalace_logstream.tasks.model import REQUEST_TYPE

if TYPE_CHECKING:
    from mempalace_logstream.store.core import LogStore
    from mempalace_logstream.store.writes import Transaction

CHUNK = 5000
BLOB_CHUNK = 16  # blobs per read: at most 64 MiB of content at the 4 MiB artifact limit
LIST_MAX = 20  # ids listed per finding (the counts are exact)


def integrity(store: LogStore) -> tuple[str, list[str]]:
    """The database's own check (the backend's: `PRAGMA integrity_check` on SQLite, every
    table read through and amcheck if installed on PostgreSQL): (what, problems)."""
    with store.connect() as conn:
        return store.backend.integrity_problems(conn)


@dataclass
class BlobReport:
    checked: int = 0
    redacted: int = 0
    corrupt: list[str] = field(default_factory=list)  # sha256 of blobs whose bytes differ
    unattested: list[str] = field(default_factory=list)  # emptied, no redaction names it
    # ids of artifacts that are not redacted but whose blob is empty (they read no content)
    emptied_but_named: list[str] = field(default_factory=list)


def blobs(store: LogStore) -> BlobReport:
    """Every stored blob re-hashed (in chunks by sha256). An empty blob is redacted when
    every artifact naming it is; one an unredacted artifact still names is listed (by
    artifact) as emptied but named: emptied by a redaction of another writer's copy (before
    0007), or served emptied by a peer."""
    out = BlobReport()
    with store.connect() as conn:
        named = blob_rows.redacted_blob_shas(conn)
    after = ""
    while True:
        with store.connect() as conn:
            rows = artifact_rows.blob_chunk(conn, after, BLOB_CHUNK)
        if not rows:
            return out
        emptied: list[str] = []
        for sha, content in rows:
            out.checked += 1
            data = bytes(content)
            if hashlib.sha256(data).hexdigest() == sha:
                continue
            if data:
                out.corrupt.append(sha)
            else:
                emptied.append(sha)
        _sort_emptied(store, emptied, named, out)
        after = rows[-1][0]


def _sort_emptied(store: LogStore, emptied: list[str], named: set[str], out: BlobReport) -> None:
    if not emptied:
        return
    with store.connect() as conn:
        bare = blob_rows.unredacted_on_empty_blobs(conn, emptied)
        shas = artifact_rows.sha256s_of(conn, bare) if bare else set()
    out.emptied_but_named += bare
    for sha in emptied:
        if sha in shas:
            continue
        if sha in named:
            out.redacted += 1
        else:
            out.unattested.append(sha)


@dataclass
class ProjectionReport:
    tasks: int = 0
    differ: list[str] = field(default_factory=list)  # task ids whose row is not the fold's
    missing: list[str] = field(default_factory=list)  # folded tasks without a row
    extra: list[str] = field(default_factory=list)  # rows the fold does not produce


_COMPARED = ("state", "requester", "to_agent", "assignee", "stream", "parent_task_id")


def projection(store: LogStore) -> ProjectionReport:
    """The task rows against `tasks.fold` of each thread (the rebuild's logic, nothing
    written: it runs in a write transaction only to read one consistent state)."""

    def work(tx: Transaction) -> ProjectionReport:
        out = ProjectionReport()
        stored = {str(r[0]): r for r in log_rows.task_rows(tx.ex, _COMPARED)}
        folded: set[str] = set()
        for task_id in log_rows.requested_tasks(tx.ex, REQUEST_TYPE):
            task, _seq = task_rows.refold(tx, task_id)
            if task is None:
                continue
            folded.add(task_id)
            want = task_rows.to_row(task, 0)
            have = stored.get(task_id)
            if have is None:
                out.missing.append(task_id)
            elif want["doc_json"] != have[1] or any(
                want[c] != have[2 + i] for i, c in enumerate(_COMPARED)
            ):
                out.differ.append(task_id)
        out.tasks = len(folded)
        out.extra = sorted(set(stored) - folded)
        return out

    result: ProjectionReport = store.transaction(work)
    return result


@dataclass
class SignatureReport:
    events: int = 0
    verified: int = 0
    unverified: int = 0  # unsigned (null)
    reads_false: list[str] = field(default_factory=list)  # stored, but false now
    codes: Counter[str] = field(default_factory=Counter)  # the codes of those
    late_revoked: list[str] = field(default_factory=list)
    late_unsigned: list[str] = field(default_factory=list)  # stored before the key was known
    redacted: int = 0
    unattested_tombstones: list[str] = field(default_factory=list)
    redactions_not_applied: list[str] = field(default_factory=list)


def chunks(store: LogStore) -> Iterator[list[Event]]:
    """The whole log in seq order, CHUNK events at a time (one read snapshot each)."""
    after = 0
    while True:
        with store.snapshot() as ex:
            rows = log_rows.chunk(ex, store.event_select, after, CHUNK)
        if not rows:
            return
        batch = events_from_rows(rows)
        yield batch
        after = batch[-1].seq


def signatures(store: LogStore) -> tuple[SignatureReport, Keyring]:
    """Every stored event judged again with the keyring as it stands now: a signed event that
    reads false was stored before its key's revocation reached this replica (late revocation,
    or the row changed behind the API). Also checks tombstones against their redactions."""
    out = SignatureReport()
    with store.snapshot() as ex:
        ring = store.identity.keyring(ex, store.event_select)
    anyone_signs = bool(ring.records())  # else an unsigned event needs no verdict work
    for batch in chunks(store):
        tombs: list[Event] = []
        redacts: list[Event] = []
        shas: dict[str, str] = {}
        linked = [a for e in batch if e.sig is not None for a in e.artifact_ids]
        if linked:
            with store.snapshot() as ex:
                shas = artifact_sha256s(ex, linked)
        for event in batch:
            out.events += 1
            if event.body.startswith(TOMBSTONE_PREFIX):
                tombs.append(event)
            if event.type == REDACT_TYPE:
                redacts.append(event)
            if event.sig is None and not anyone_signs:
                out.unverified += 1
                continue
            judged = verdict(event, event.sig, event.key_id, ring, artifact_sha256s=shas)
            if judged.verified is True:
                out.verified += 1
            elif judged.verified is None:
                out.unverified += 1
            else:
                out.codes[judged.code] += 1
                out.reads_false.append(event.id)
                if judged.code == "revoked_key":
                    out.late_revoked.append(event.id)
                elif judged.code == "unsigned_required":
                    out.late_unsigned.append(event.id)
        _check_tombstones(store, tombs, out)
        _check_redactions(store, redacts, out)
    return out, ring


def _check_tombstones(store: LogStore, tombs: list[Event], out: SignatureReport) -> None:
    if not tombs:
        return
    with store.connect() as conn:
        named = log_rows.body_tombstones(conn, [e.id for e in tombs], BODY)
    for event in tombs:
        if parse_tombstone(event.body) is None:
            continue
        out.redacted += 1
        if (event.id, event.body) not in named:
            out.unattested_tombstones.append(event.id)


def _check_redactions(store: LogStore, redacts: list[Event], out: SignatureReport) -> None:
    """Each `event.redact` whose target is held must have taken effect."""
    for redaction in redacts:
        try:
            spec = spec_of(redaction)
        except Refused:
            out.redactions_not_applied.append(redaction.id)
            continue
        try:
            target = store.event_get(spec.target_id)
        except errors.NotFoundError:
            continue  # the target is not held (yet): applied when it arrives
        if any(p.part == BODY for p in spec.parts) and parse_tombstone(target.body) is None:
            out.redactions_not_applied.append(redaction.id)
        elif not _artifacts_redacted(store, redaction.id, spec.parts):
            out.redactions_not_applied.append(redaction.id)


def _artifacts_redacted(store: LogStore, redaction_id: str, parts: Any) -> bool:
    """Whether each artifact part of the redaction took effect (an artifact_redactions row)."""
    wanted = {p.part for p in parts if p.part != BODY}
    if not wanted:
        return True
    with store.connect() as conn:
        return wanted <= artifact_rows.redacted_by(conn, redaction_id)
