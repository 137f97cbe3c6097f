"""Store-side replication primitives (S-7.1–S-7.3): op listing, remote apply, sync bookkeeping.

Remote events and artifacts are re-validated exactly like local writes, applied through the
store's group-committed write path (so a fresh local `seq` is assigned under the write lock),
and every refusal is recorded: conflicts in `sync_conflicts`, refused or deferred items in
`sync_rejections`, far-future HLC stamps in `sync_clock_anomalies`. Must not import surfaces.

Two wire shapes are served: the reference's `/sync/ops` page of event objects (`ops_page`, at
most 500) and our compact `rows-v2` page (`ops_rows`, up to 5,000 events as positional rows,
metadata as its stored JSON text) that only our client asks for. Both are parsed by the same
`EventChecker` and applied by the same transaction code, which runs on the backend's own
DBAPI connection (`store.transaction`), like every write.

Modules: wire.py (the two page formats, op listing, artifact fetches), checks.py (validation
of remote input), apply.py (one transaction per page), reports.py (refusals and the peer
estate), positions.py (pull positions, fingerprints, version vector holes), verify.py
(signatures on apply, what doctor lists). They build no SQL: their statements are the
functions of `backends/queries/sync.py`.
"""

from __future__ import annotations

from mempalace_logstream.replication.apply import (
    apply_remote_artifact,
    apply_remote_artifacts,
    apply_remote_batch,
    apply_remote_event,
    apply_remote_events,
)
from mempalace_logstream.replication.checks import (
    EventChecker,
    ParsedEvents,
    check_created_at,
    parse_events,
    parse_remote_artifact,
    parse_remote_event,
)
from mempalace_logstream.replication.positions import (
    FP_P1,
    FP_P2,
    NO_POSITIONS,
    Fingerprint,
    count_upto,
    fingerprint_upto,
    fp_between,
    fp_of,
    fp_span,
    fp_sum,
    held_above,
    held_fingerprint,
    highest_held,
    origin_positions,
    origin_top,
    pull_after,
)
from mempalace_logstream.replication.reports import (
    counts,
    estate_rows,
    list_clock_anomalies,
    list_conflicts,
    list_rejections,
    origin_summary,
    record_estate,
    record_sequence_anomalies,
)
from mempalace_logstream.replication.wire import (
    MAX_OPS_LIMIT,
    MAX_RETRIES,
    MAX_ROWS_LIMIT,
    MAX_SEQ,
    READ_CHUNK,
    REPORT_CAP,
    ROW_COLUMNS,
    ROWS_FORMAT,
    ROWS_MAX_BYTES,
    ApplyResult,
    get_artifacts,
    list_ops,
    missing_artifacts,
    ops_page,
    ops_rows,
    ops_rows_json,
    seq_int,
)

__all__ = [
    "ApplyResult",
    "EventChecker",
    "FP_P1",
    "FP_P2",
    "Fingerprint",
    "MAX_OPS_LIMIT",
    "MAX_RETRIES",
    "MAX_ROWS_LIMIT",
    "MAX_SEQ",
    "NO_POSITIONS",
    "ParsedEvents",
    "READ_CHUNK",
    "REPORT_CAP",
    "ROWS_FORMAT",
    "ROWS_MAX_BYTES",
    "ROW_COLUMNS",
    "apply_remote_artifact",
    "apply_remote_artifacts",
    "apply_remote_batch",
    "apply_remote_event",
    "apply_remote_events",
    "check_created_at",
    "count_upto",
    "counts",
    "estate_rows",
    "fingerprint_upto",
    "fp_between",
    "fp_span",
    "fp_of",
    "fp_sum",
    "get_artifacts",
    "held_above",
    "held_fingerprint",
    "highest_held",
    "list_clock_anomalies",
    "list_conflicts",
    "list_ops",
    "list_rejections",
    "missing_artifacts",
    "ops_page",
    "ops_rows",
    "ops_rows_json",
    "origin_positions",
    "origin_summary",
    "origin_top",
    "parse_events",
    "parse_remote_artifact",
    "parse_remote_event",
    "pull_after",
    "record_estate",
    "record_sequence_anomalies",
    "seq_int",
]
