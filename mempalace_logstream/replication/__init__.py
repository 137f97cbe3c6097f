"""Store-side replication primitives (S-7.1–S-7.3): op listing, remote apply, sync bookkeeping.

Remote events and artifacts are re-validated exactly like local writes, applied through the
store's group-committed write path (so a fresh local `seq` is assigned under the write lock),
and every refusal is recorded: conflicts in `sync_conflicts`, refused or deferred items in
`sync_rejections`, far-future HLC stamps in `sync_clock_anomalies`. Must not import surfaces.

Two wire shapes are served: the reference's `/sync/ops` page of event objects (`ops_page`, at
most 500) and our compact `rows-v1` page (`ops_rows`, up to 5,000 events as positional rows,
metadata as its stored JSON text) that only our client asks for. Both are parsed by the same
`EventChecker` and applied by the same transaction code, which runs on the SQLite writer's
DBAPI connection when the store offers it (`LogStore.uses_fast_path`) and through SQLAlchemy
otherwise (PostgreSQL, or an engine with statement listeners).

Modules: wire.py (the two page formats, op listing, artifact fetches), checks.py (validation
of remote input), apply.py (one transaction per page), reports.py (refusals and the peer
estate), positions.py (pull positions, fingerprints, version vector holes).
"""

from __future__ import annotations

# What the single module imported, for code that reached it through `replication.`.
from mempalace_logstream import errors, hlc  # noqa: F401
from mempalace_logstream.replication.apply import (  # noqa: F401
    _apply_artifacts_tx,
    _apply_events_tx,
    _clock_anomaly,
    _ensure_blob,
    _held_artifacts,
    _held_events,
    _held_positions,
    apply_remote_artifact,
    apply_remote_artifacts,
    apply_remote_batch,
    apply_remote_event,
    apply_remote_events,
)
from mempalace_logstream.replication.checks import (  # noqa: F401
    _CHECKS,
    _HLC_MATCH,
    EventChecker,
    ParsedEvents,
    _created_at,
    _optional,
    _position,
    _required,
    parse_events,
    parse_remote_artifact,
    parse_remote_event,
)
from mempalace_logstream.replication.positions import (  # noqa: F401
    FP_P1,
    FP_P2,
    NO_POSITIONS,
    Fingerprint,
    _fp_add,
    _fp_aggregates,
    _fp_of,
    _fp_row,
    _refused_positions,
    _refused_union,
    count_upto,
    fingerprint_upto,
    fp_between,
    held_above,
    highest_held,
    origin_positions,
    origin_top,
    pull_after,
)
from mempalace_logstream.replication.reports import (  # noqa: F401
    _artifact_conflict,
    _conflict,
    _deferred,
    _raw_ident,
    _raw_position,
    _record_rejections,
    _reject_report,
    _resolve,
    counts,
    estate_rows,
    list_clock_anomalies,
    list_conflicts,
    list_rejections,
    origin_summary,
    record_estate,
    record_sequence_anomalies,
)
from mempalace_logstream.replication.wire import (  # noqa: F401
    _ART_AT,
    _BODY_AT,
    _CREATED_AT_RE,
    _META_AT,
    _READ_CHUNK,
    _SHA_RE,
    _TAIL_COLS,
    MAX_OPS_LIMIT,
    MAX_RETRIES,
    MAX_ROWS_LIMIT,
    MAX_SEQ,
    REPORT_CAP,
    ROW_COLUMNS,
    ROWS_FORMAT,
    ROWS_MAX_BYTES,
    ApplyResult,
    _chunks,
    _metadata_object,
    _ops_args,
    _row_dict,
    get_artifacts,
    list_ops,
    missing_artifacts,
    ops_page,
    ops_rows,
    ops_rows_json,
    seq_int,
)
from mempalace_logstream.schema import (  # noqa: F401
    artifact_blobs,
    artifacts,
    event_artifacts,
    events,
    sync_clock_anomalies,
    sync_conflicts,
    sync_peers,
    sync_rejections,
)
from mempalace_logstream.store import LogStore  # noqa: F401
