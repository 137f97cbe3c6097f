"""Copy a whole log (a SQLite file, ours or the reference's, or any store URL) into another store.

Owns the `logstream import` rule set: ids, seq, hlc, origin stamps, created_at, metadata text,
idempotency keys, artifacts (blobs verified by sha256; a blob a redaction emptied is copied
empty) and event-artifact links are copied verbatim; the target keeps its own replica id, so
imported events look like synced ones. Events enter through the store's one write path
(`Transaction.append` with the `Imported` origin), so every projection follows them: the
task rows, and the redactions, applied on the target as on the source. Resumable and
idempotent because the target must hold a prefix of the source (see `check_prefix`). It writes
through the target's write lock and group commit, so it never races local appends. Must not
import typer, rich or any surface.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import errors
from mempalace_logstream.backends.queries import imports
from mempalace_logstream.models import Event
from mempalace_logstream.schema import artifacts, events
from mempalace_logstream.store import LogStore, Transaction, blobs
from mempalace_logstream.store.append import Imported

DEFAULT_BATCH = 2000
BLOB_BATCH_BYTES = 16 * 1024 * 1024  # bytes of artifact content held in memory at once
PREFIX_PAGE = 5000

# phase ("artifacts" | "events"), done, total
Progress = Callable[[str, int, int], None]


@dataclass
class ImportReport:
    """What one `import_log` run did; `*_skipped` were already in the target (a resumed run)."""

    source: str
    target: str
    events_total: int = 0
    events_imported: int = 0
    events_skipped: int = 0
    artifacts_total: int = 0
    artifacts_imported: int = 0
    artifacts_skipped: int = 0
    blobs_copied: int = 0
    blob_bytes_copied: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_url(source: str) -> str:
    """A SQLAlchemy URL for `--from`: URLs pass through, anything else is a SQLite file that
    must exist (opening a missing path would silently create an empty log)."""
    if "://" in source:
        return source
    path = os.path.abspath(os.path.expanduser(source))
    if not os.path.isfile(path):
        raise errors.NotFoundError(f"from: no SQLite log at {path}", field="from", ident=path)
    return f"sqlite:///{path}"


def open_source(source: str) -> LogStore:
    """Open the source as a store, so a reference file is adopted and an old one migrated."""
    url = source_url(source)
    if url.startswith("sqlite:") and not os.path.isfile(sa.make_url(url).database or ""):
        raise errors.NotFoundError(f"from: no SQLite log at {url}", field="from", ident=url)
    return LogStore.open(url, create=False)


def import_log(
    source: LogStore,
    target: LogStore,
    *,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> ImportReport:
    """Copy every event and artifact of `source` missing from `target`, in seq order.

    Rule: the target must be empty or hold a prefix of the source (the same ids at the same
    seq, for events and for artifacts); anything else raises ConflictError before writing. Each
    batch is one target transaction, so a crash leaves a prefix and a re-run resumes after it.
    Raises ConflictError, StorageError (corrupt blob: sha256 mismatch).
    """
    if batch_size < 1 or batch_size > 50_000:
        raise errors.ValidationError(
            f"batch_size is {batch_size}; it must be between 1 and 50000", field="batch_size"
        )
    started = time.monotonic()
    report = ImportReport(source=_name(source), target=_name(target))
    # The event bound first: any artifact an event up to it references was committed before
    # it, so the artifact bound read next covers it (sources may be written to while we copy).
    top_event = _max(source, events)
    top_artifact = _max(source, artifacts)
    art_done = check_prefix(source, target, artifacts, top_artifact)
    ev_done = check_prefix(source, target, events, top_event)
    report.artifacts_total = _count(source, artifacts, top_artifact)
    report.events_total = _count(source, events, top_event)
    report.artifacts_skipped = _count(target, artifacts, art_done)
    report.events_skipped = _count(target, events, ev_done)
    tick = progress or (lambda phase, done, total: None)
    tick("artifacts", report.artifacts_skipped, report.artifacts_total)
    _copy_artifacts(source, target, art_done, top_artifact, batch_size, report, tick)
    tick("events", report.events_skipped, report.events_total)
    _copy_events(source, target, ev_done, top_event, batch_size, report, tick)
    report.seconds = round(time.monotonic() - started, 3)
    return report


# --------------------------------------------------------------------------- the prefix rule


def check_prefix(source: LogStore, target: LogStore, table: sa.Table, source_top: int) -> int:
    """The highest seq already imported (0 for an empty target), after proving that the target
    rows of `table` are exactly the source rows up to it: same seq, same id, same order."""
    target_top = _max(target, table)
    if target_top == 0:
        return 0
    if target_top > source_top:
        raise _not_a_prefix(
            table, f"the target goes up to seq {target_top}, the source to {source_top}"
        )
    with source.engine.connect() as src, target.engine.connect() as dst:
        lo = 0
        while lo < target_top:
            theirs = imports.seq_ids(dst, table, lo, target_top, PREFIX_PAGE)
            ours = imports.seq_ids(src, table, lo, target_top, PREFIX_PAGE)
            if theirs != ours:
                pairs = itertools.zip_longest(theirs, ours)
                first = next(t for t, o in pairs if t != o)
                raise _not_a_prefix(table, f"first difference at target row {first}")
            lo = int(theirs[-1][0])
    return target_top


def _not_a_prefix(table: sa.Table, detail: str) -> errors.ConflictError:
    return errors.ConflictError(
        f"the target's {table.name} are not a prefix of the source's ({detail}); import only "
        "into an empty log or one that a previous import of this source filled. To merge two "
        "logs that both took writes, use `logstream sync` instead.",
        field="db",
    )


# --------------------------------------------------------------------------- artifacts


def _copy_artifacts(
    source: LogStore,
    target: LogStore,
    done: int,
    top: int,
    batch_size: int,
    report: ImportReport,
    tick: Progress,
) -> None:
    for rows in _pages(source, artifacts, done, top, batch_size):
        _copy_blobs(source, target, {r["sha256"] for r in rows}, report)
        expect = done

        def write(tx: Transaction, rows: list[dict[str, Any]] = rows, expect: int = expect) -> None:
            st = tx.state
            _require_tip(st.next_artifact_seq - 1, expect, artifacts)
            imports.insert_artifacts(tx.ex, rows)  # verbatim, seq included
            st.next_artifact_seq = max(st.next_artifact_seq, int(rows[-1]["seq"]) + 1)

        target.transaction(write)
        done = int(rows[-1]["seq"])
        report.artifacts_imported += len(rows)
        tick(
            "artifacts",
            report.artifacts_skipped + report.artifacts_imported,
            report.artifacts_total,
        )


def _copy_blobs(source: LogStore, target: LogStore, shas: set[str], report: ImportReport) -> None:
    """Copy the blobs the target lacks, verifying each sha256, holding ≤ BLOB_BATCH_BYTES."""
    with target.engine.connect() as dst:
        have = imports.held_blobs(dst, shas)
    missing = sorted(shas - have)
    chunk: list[dict[str, Any]] = []
    size = 0
    with source.engine.connect() as src:
        for sha in missing:
            content, size_bytes = imports.blob(src, sha)
            if hashlib.sha256(content).hexdigest() != sha and not _emptied(src, sha, content):
                raise errors.StorageError(
                    f"source artifact blob {sha} does not match its sha256; the source is "
                    "corrupt, nothing of this batch was imported"
                )
            chunk.append({"sha256": sha, "size_bytes": size_bytes, "content": content})
            size += len(content)
            if size >= BLOB_BATCH_BYTES:
                _write_blobs(target, chunk, report)
                chunk, size = [], 0
    if chunk:
        _write_blobs(target, chunk, report)


def _emptied(src: sa.Connection, sha: str, content: bytes) -> bool:
    """Whether a blob that does not hash to its sha256 was emptied by a redaction (RFC 0008):
    copied empty, under its size; the imported redaction marks its artifact redacted."""
    return not content and imports.redaction_names_blob(src, sha)


def _write_blobs(target: LogStore, chunk: list[dict[str, Any]], report: ImportReport) -> None:
    def write(tx: Transaction) -> None:
        for b in chunk:  # content-addressed: a blob held meanwhile is the same bytes
            blobs.ensure(tx.ex, b["sha256"], b["size_bytes"], b["content"])

    target.transaction(write)
    report.blobs_copied += len(chunk)
    report.blob_bytes_copied += sum(len(b["content"]) for b in chunk)


# --------------------------------------------------------------------------- events


def _copy_events(
    source: LogStore,
    target: LogStore,
    done: int,
    top: int,
    batch_size: int,
    report: ImportReport,
    tick: Progress,
) -> None:
    for rows in _pages(source, events, done, top, batch_size):
        links = _links(source, int(rows[0]["seq"]) - 1, int(rows[-1]["seq"]))
        batch = _as_events(rows, links)
        keys = {r["id"]: r["idempotency_key"] for r in rows if r["idempotency_key"] is not None}
        # The store's one write path: the prefix rule checked under the write lock, the
        # source's seq kept, and every projection (tasks, redactions) run on the copy.
        target.transaction(functools.partial(_append, batch, Imported(done, keys)))
        done = int(rows[-1]["seq"])
        report.events_imported += len(rows)
        tick("events", report.events_skipped + report.events_imported, report.events_total)


def _append(batch: list[Event], origin: Imported, tx: Transaction) -> None:
    tx.append(batch, origin)


def _links(source: LogStore, lo: int, hi: int) -> list[dict[str, Any]]:
    with source.connect() as conn:
        return imports.links_between(conn, lo, hi)


def _as_events(rows: list[dict[str, Any]], links: list[dict[str, Any]]) -> list[Event]:
    by_event: dict[str, list[str]] = {}
    for link in links:
        by_event.setdefault(link["event_id"], []).append(link["artifact_id"])
    fields = set(Event.__dataclass_fields__) - {"artifact_ids"}
    return [
        Event(**{k: r[k] for k in fields}, artifact_ids=tuple(by_event.get(r["id"], ())))
        for r in rows
    ]


# --------------------------------------------------------------------------- helpers


def _require_tip(tip: int, expect: int, table: sa.Table) -> None:
    # Checked under the target's write lock: a local append or a second import in between
    # would otherwise interleave with the copy and break the prefix rule.
    if tip != expect:
        raise errors.ConflictError(
            f"the target's {table.name} changed during the import (its newest seq is {tip}, "
            f"expected {expect}); stop other writers and run the import again",
            field="db",
        )


def _pages(
    store: LogStore, table: sa.Table, lo: int, hi: int, size: int
) -> Iterator[list[dict[str, Any]]]:
    """Rows of `table` with lo < seq ≤ hi in seq order, `size` at a time (bounded memory)."""
    while lo < hi:
        with store.connect() as conn:
            rows = imports.rows_between(conn, table, lo, hi, size)
        if not rows:
            return
        yield rows
        lo = int(rows[-1]["seq"])


def _max(store: LogStore, table: sa.Table) -> int:
    with store.connect() as conn:
        return imports.top_seq(conn, table)


def _count(store: LogStore, table: sa.Table, upto: int) -> int:
    with store.connect() as conn:
        return imports.count_upto(conn, table, upto)


def _name(store: LogStore) -> str:
    return store.engine.url.render_as_string(hide_password=True)
