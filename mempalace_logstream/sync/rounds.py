"""One anti-entropy round with one peer: plan the pulls from the version vectors, pull each
origin page by page, optionally push what the peer lacks (`sync_with_peer`); `sync_one` wraps
it with a deadline and the estate record; `repair_holes` re-pulls from the first hole.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from mempalace_logstream import errors, replication
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.holes import (
    author_check,
    find_holes,
    hole_start,
    pull_start,
    push_start,
)
from mempalace_logstream.sync.limits import (
    ARTIFACT_BATCH,
    BATCH,
    DEFAULT_DEADLINE_S,
    PUSH_MAX_BYTES,
    Deadline,
    DeadlineExceededError,
    Progress,
    check_deadline,
    chunks,
    redact_url,
)
from mempalace_logstream.sync.pipeline import Gate, apply_page, pull_pages
from mempalace_logstream.sync.protocol import Peer, PushRefused
from mempalace_logstream.sync.vector import Fingerprints, parse_vector

log = logging.getLogger(__name__)


def sync_with_peer(
    store: LogStore, peer: Peer, push: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """One anti-entropy round: pull every origin the peer holds events of that we lack
    (artifacts before the events that use them), then with `push` send what the peer lacks.

    Memory is bounded by three pages, each within the response cap. Raises SyncError (also
    DeadlineExceededError, ResponseTooLargeError, PeerUnavailableError) if the peer fails;
    refused items do not raise, they are reported in the result, and so are origin positions
    that do not add up (`sequence_anomalies`, see `pull_start`).
    """
    mine = replication.origin_positions(store)  # before the peer's vector: see author_check
    remote = peer.version_vector()
    peer_replica, rvv, rfps = parse_vector(remote, peer)
    res = replication.ApplyResult()
    stats = _new_stats(peer, peer_replica, rvv)
    anomalies: list[dict[str, Any]] = []
    plan = _plan_pulls(store, peer, peer_replica, mine, rvv, rfps, anomalies)
    total = sum(rvv[o] - after for o, after in plan.items())
    for origin in sorted(plan):
        top = rvv[origin]
        n = _pull_origin(store, peer, origin, plan[origin], top, res, stats, progress, total)
        # Pulling up to the peer's top cannot fill a hole below where we started: the peer's
        # fingerprint can (one more pass at most, so a round always ends). Deferred events
        # are left to their own retries (`replication.pull_after`).
        again = None
        if replication.pull_after(store, origin, top) >= top:
            again = hole_start(store, peer, origin, top, top, None, rfps, anomalies)
        if again is not None:
            n += _pull_origin(store, peer, origin, again, top, res, stats, progress, total)
        if n:
            stats["per_origin"][origin] = n
    if push:
        try:
            _push(store, peer, peer_replica, rvv, rfps, res, stats, progress, anomalies)
        except PushRefused as exc:  # a pull-only (reference) hub: the pull half still counts
            stats["push_error"] = exc.message
    stats["pulled_events"] = res.applied_events
    stats.update(_outcome(res, anomalies))
    return stats


def _new_stats(peer: Peer, peer_replica: str, rvv: dict[str, int]) -> dict[str, Any]:
    counts = ("pulled_events", "pulled_artifacts", "pushed_events", "pushed_artifacts")
    return {
        "peer_name": peer.name,
        "peer_url": peer.url,
        "peer_replica": peer_replica,
        **dict.fromkeys(counts, 0),
        "per_origin": {},
        "remote_version_vector": rvv,
    }


def _outcome(res: replication.ApplyResult, anomalies: list[dict[str, Any]]) -> dict[str, Any]:
    """What a round reports beyond its counts: at most 100 items of each list. Of the
    rejections, `held_count` wait for a later round (a key not known yet) and `trust_keys` are
    the self-signed admin keys among them (what a new replica has not pinned yet)."""
    held = [r for r in res.rejected if r.get("retryable")]
    return {
        "held_count": len(held),
        "trust_keys": sorted({r["root_key_id"] for r in held if r.get("root_key_id")}),
        "duplicates": res.duplicates,
        "own_echo": res.own,
        "conflicts": res.conflicts[:100],
        "conflict_count": len(res.conflicts),
        "rejected": res.rejected[:100],
        "rejected_count": len(res.rejected),
        "clock_anomalies": len(res.clock_anomalies),
        "sequence_anomalies": anomalies[:100],
        "sequence_anomaly_count": len(anomalies),
    }


def _plan_pulls(
    store: LogStore,
    peer: Peer,
    peer_replica: str,
    mine: Mapping[str, tuple[int, replication.Fingerprint]],
    rvv: Mapping[str, int],
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> dict[str, int]:
    """{origin: the origin_seq to pull after} for every origin the peer has something of
    that we lack; deferred events pin their origin lower (see `replication.pull_after`)."""
    plan = {}
    for origin, top in rvv.items():
        if origin == store.replica_id:
            continue
        held_top, fp = mine.get(origin, (0, replication.NO_POSITIONS))
        after = pull_start(store, peer, origin, top, held_top, fp, rfps, anomalies)
        if origin == peer_replica and held_top > top:
            anomalies += author_check(store, peer, origin, top, held_top)
        floor = replication.pull_after(store, origin, top)
        if floor < top:
            after = floor if after is None else min(after, floor)
        if after is not None and after < top:
            plan[origin] = after
    return plan


def _pull_origin(
    store: LogStore,
    peer: Peer,
    origin: str,
    after: int,
    top: int,
    res: replication.ApplyResult,
    stats: dict[str, Any],
    progress: Progress | None,
    total: int,
) -> int:
    pulled = 0
    gate = Gate()
    for parsed, nxt, fetched in pull_pages(store, peer, origin, after, top, gate):
        # Events of another origin are applied too (validated, idempotent) but only the
        # artifacts of the origin asked for are fetched.
        pulled += apply_page(store, peer, parsed, origin, res, stats, gate, fetched)
        if progress is not None:
            pulled_now = res.applied_events
            progress(
                {"origin": origin, "pulled": pulled_now, "total": total, "after": nxt, "top": top}
            )
    return pulled


def repair_holes(store: LogStore, peer: Peer, progress: Progress | None = None) -> dict[str, Any]:
    """Find holes against `peer` and re-pull each affected origin from its first hole
    (idempotent: events already held are skipped). Returns {holes, pulled_events, ...}."""
    rvv = parse_vector(peer.version_vector(), peer)[1]
    holes = find_holes(store, peer, rvv)
    res = replication.ApplyResult()
    stats: dict[str, Any] = {"pulled_artifacts": 0}
    for hole in holes:
        if hole["side"] != "local":
            continue
        origin, start = hole["origin"], hole["first_missing_origin_seq"]
        for parsed, _nxt, fetched in pull_pages(store, peer, origin, start - 1, hole["upto"]):
            # Artifacts of every origin's events (the pipeline fetched the origin's ahead).
            apply_page(store, peer, parsed, None, res, stats, None, fetched)
    return {
        "holes": holes,
        "pulled_events": res.applied_events,
        **stats,
        "rejected_count": len(res.rejected),
        "conflict_count": len(res.conflicts),
    }


def _push(
    store: LogStore,
    peer: Peer,
    peer_replica: str,
    rvv: Mapping[str, int],
    rfps: Fingerprints | None,
    res: replication.ApplyResult,
    stats: dict[str, Any],
    progress: Progress | None,
    anomalies: list[dict[str, Any]],
) -> None:
    local = replication.origin_positions(store)
    for origin in sorted(local):
        if origin == peer_replica:
            continue  # its own events: an author keeps only what it wrote (and drops the rest)
        top, fp = local[origin]
        after = push_start(store, peer, origin, top, fp, rvv.get(origin, 0), rfps, anomalies)
        while after is not None and after < top:
            check_deadline(peer, f"pushing {origin}")
            evs = replication.list_ops(store, origin, after, BATCH)
            if not evs:
                break
            ids = sorted({a for e in evs for a in e.artifact_ids})
            for arts in _artifact_chunks(store, ids):
                report = peer.push(arts, [], store.replica_id)
                stats["pushed_artifacts"] += _report_int(report, "applied_artifacts")
            report = peer.push([], [e.to_dict() for e in evs], store.replica_id)
            stats["pushed_events"] += _report_int(report, "applied_events")
            stats["push_conflicts"] = stats.get("push_conflicts", 0) + _report_int(
                report, "conflict_count"
            )
            stats["push_rejected"] = stats.get("push_rejected", 0) + _report_int(
                report, "rejected_count"
            )
            after = evs[-1].origin_seq
            if progress is not None:
                progress(
                    {"origin": origin, "pushed": stats["pushed_events"], "after": after, "top": top}
                )


def _report_int(report: Any, key: str) -> int:
    n = report.get(key) if isinstance(report, dict) else None
    return n if type(n) is int and 0 <= n <= replication.MAX_SEQ else 0


def _artifact_chunks(store: LogStore, ids: list[str]) -> Iterator[list[dict[str, Any]]]:
    for chunk in chunks(ids, ARTIFACT_BATCH):
        pending = list(chunk)
        while pending:
            found, _, more = replication.get_artifacts(store, pending, PUSH_MAX_BYTES)
            if found:
                yield [a.to_dict() for a in found]
            if len(more) >= len(pending):
                break
            pending = more


def sync_one(
    store: LogStore,
    peer: Peer,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
) -> dict[str, Any]:
    """A round with one peer that never raises for a peer failure: the error is reported in
    the result (`error`) and recorded in the estate, so other peers still run. With `repair`,
    holes are then probed and re-pulled (`repair` / `repair_error` in the result). The round
    (repair included) ends at `deadline_s` seconds with that as its error; None: no deadline."""
    deadline = Deadline(deadline_s)
    peer.deadline = deadline  # type: ignore[attr-defined]  # read by check_deadline, sockets
    try:
        result = sync_with_peer(store, peer, push=push, progress=progress)
        if repair:
            try:
                result["repair"] = repair_holes(store, peer, progress)
            except DeadlineExceededError:
                raise
            except errors.SyncError as exc:
                result["repair_error"] = exc.message
    except (errors.SyncError, errors.ValidationError, errors.NotFoundError) as exc:
        error = exc.message
        _safe_estate(store, peer, None, error)
        return {"peer_name": peer.name, "peer_url": peer.url, "error": error}
    _safe_estate(store, peer, result, None)
    return result


def _safe_estate(
    store: LogStore, peer: Peer, result: dict[str, Any] | None, error: str | None
) -> None:
    try:
        replication.record_estate(store, peer.name, redact_url(peer.url), result, error)
    except errors.StorageError as exc:  # the estate is advisory; the round itself stands
        log.warning("could not record sync estate for %s: %s", peer.name, exc)
