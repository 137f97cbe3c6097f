"""Bookkeeping of refusals (`sync_conflicts`, `sync_rejections`, `sync_clock_anomalies`), their
listing, and the estate of peers (`sync_peers`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from mempalace_logstream import errors
from mempalace_logstream.backends.base import Executor as _Ex
from mempalace_logstream.backends.queries import sync
from mempalace_logstream.models import Artifact, Event
from mempalace_logstream.replication.wire import MAX_RETRIES, MAX_SEQ, row_dict
from mempalace_logstream.store import LogStore, Transaction, now_text

# Rejections retried until they resolve (the verdict `unknown_key`, and the keyring refusals
# of a key event that a later key event may cure: see replication/verify.py).
HELD_REASONS = frozenset({"unknown_key", "bad_replaces", "bad_revoke"})
# Rejections held until an operator accepts them (a sync round with the backdating window at
# 0, RFC 0008 "Threat model"): retried every round, never dropped, never counted as refused.
HELD_SUSPECT_REASONS = frozenset({"backdated"})


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


def reject_report(kind: str, raw: Any, exc: errors.ValidationError, peer: str) -> dict[str, Any]:
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


def deferred(event: Event, artifact_id: str, peer: str) -> dict[str, Any]:
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


def artifact_conflict(art: Artifact, prior_sha: str, peer: str) -> dict[str, Any]:
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


def conflict(
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
        row_dict(raw) if isinstance(raw, list) else raw,
        ensure_ascii=False,
        default=str,
        sort_keys=True,
    )
    digest = hashlib.sha256(remote_json.encode("utf-8", "surrogatepass")).hexdigest()

    sync.record_conflict(
        ex,
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
        },
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


def record_rejections(store: LogStore, ex: _Ex, reports: list[dict[str, Any]]) -> None:
    if not reports:
        return
    now = now_text(store.clock.wall_clock.now_ms())
    for r in reports:
        prior = sync.rejection_attempts(ex, r["kind"], r["ident"])
        if prior is None:
            row = {k: r[k] for k in _REJECTION_FIELDS}
            sync.insert_rejection(
                ex, {**row, "attempts": 1, "first_seen_at": now, "last_seen_at": now}
            )
            continue
        attempts = prior + 1
        # The position follows the latest report: a held event keeps it, a forged copy of the
        # same id does not (else its position would read as refused for good, hiding a hole).
        values = {k: r[k] for k in ("message", "reason", "peer", "origin_seq")}
        values.update(attempts=attempts, last_seen_at=now, retryable=_still_retryable(r, attempts))
        sync.update_rejection(ex, r["kind"], r["ident"], values)


# What a rejection row takes from its report (then attempts and when it was seen).
_REJECTION_FIELDS = (
    *("kind", "ident", "origin_replica", "origin_seq"),
    *("peer", "reason", "message", "retryable"),
)


def _still_retryable(report: Mapping[str, Any], attempts: int) -> bool:
    """A deferred event is retried MAX_RETRIES rounds; one held for its signing key until the
    key events arrive (RFC 0008: held, never dropped)."""
    if not report["retryable"]:
        return False
    reason = report["reason"]
    return attempts < MAX_RETRIES or reason in HELD_REASONS or reason in HELD_SUSPECT_REASONS


def resolve(store: LogStore, ex: _Ex, kind: str, ids: list[str]) -> None:
    """Forget the refusals of items now applied (skipped when none of `kind` is outstanding)."""
    if ids:
        sync.resolve_rejections(ex, kind, ids)


def record_sequence_anomalies(store: LogStore, reports: list[dict[str, Any]]) -> None:
    """Remember events that claim an origin position beyond what that origin itself says it
    has written (kind `sequence` in sync_rejections; the events stay, nothing is retried)."""
    if reports:
        store.transaction(lambda tx: record_rejections(store, tx.ex, reports))


def list_conflicts(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Recorded same-id/different-content events, newest first."""
    with store.connect() as conn:
        rows = sync.conflicts(conn, limit)
    return [{**r, "remote": json.loads(r["remote_json"])} for r in rows]


def list_rejections(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    """Refused and deferred remote items still outstanding, newest first."""
    with store.connect() as conn:
        rows = sync.rejections(conn, limit)
    return [{**r, "retryable": bool(r["retryable"])} for r in rows]


def list_clock_anomalies(store: LogStore, limit: int = 100) -> list[dict[str, Any]]:
    with store.connect() as conn:
        return sync.clock_anomalies(conn, limit)


def origin_summary(store: LogStore) -> dict[str, dict[str, int]]:
    """{origin: {max, count}}: two replicas with equal `max` but different `count` for an
    origin have a hole the version vector cannot show."""
    with store.connect() as conn:
        rows = sync.origin_counts(conn)
    return {origin: {"max": top, "count": n} for origin, top, n in rows}


def record_estate(
    store: LogStore, name: str, url: str, result: Mapping[str, Any] | None, error: str | None
) -> None:
    """Remember how the last round with a peer went (tokens are never stored)."""
    now = now_text(store.clock.wall_clock.now_ms())

    def write(tx: Transaction) -> None:
        prior = sync.peer(tx.ex, name)
        row: dict[str, Any] = (
            dict(prior)
            if prior is not None
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
        sync.put_peer(tx.ex, row, exists=prior is not None)

    store.transaction(write)


def estate_rows(store: LogStore) -> list[dict[str, Any]]:
    with store.connect() as conn:
        rows = sync.peers(conn)
    out = []
    for r in rows:
        d = dict(r)
        d["reachable"] = None if d["reachable"] is None else bool(d["reachable"])
        d["remote_version_vector"] = json.loads(d["remote_version_vector"] or "{}")
        out.append(d)
    return out


# The verdict codes (RFC 0008) a signed event is refused with on sync apply, and the keyring's
# refusals of a key event: the reasons of rejections that were forged or unverifiable.
SIGNATURE_REASONS = frozenset(
    {
        "bad_signature",
        "revoked_key",
        "wrong_agent",
        "unsigned_required",
        "not_admin",
        "malformed",
        "unsigned",
        "duplicate_key",
        "conflict",
    }
)


def counts(store: LogStore) -> dict[str, int]:
    """Outstanding conflicts, rejections, deferred events, clock anomalies and sequence
    anomalies (events held beyond their origin's own tip); of the rejections, the events held
    for their signing key (`held_for_key`), those held as backdating suspects
    (`held_backdated`) and those refused by their verdict (`refused_signatures`, RFC 0008)."""
    with store.connect() as conn:
        return sync.refusal_counts(conn, HELD_REASONS, HELD_SUSPECT_REASONS, SIGNATURE_REASONS)
