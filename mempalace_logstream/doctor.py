"""`logstream doctor` (RFC 0008 "Doctor"): one pass over a log that says whether it is healthy.

Checks: the database's integrity check, stored blob bytes against their SHA-256, the task
projection against the fold, the task rules a peer's history broke (unverified moves that verified
history undid, second requests, delegation limits), the signatures of the whole log (verified /
unverified / refused /
held, and stored events that read false now: late revocations), the keyring's refused key
events, the admin pin, redactions (tombstones no redaction names, redactions not applied),
outstanding conflicts and rejections, clock anomalies, the sync estate and the database size.

`run(store)` returns a `Report`: `healthy` is False when any finding was made; surfaces print
`to_dict()` and exit 1 then. The scans are the store's (store/health.py), chunked over the log.
The hub runs `integrity_only` in the background at startup and keeps it: its `/healthz`
answers 503 once the database's integrity check failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mempalace_logstream import replication
from mempalace_logstream.identity.actor import ADMIN_NAME
from mempalace_logstream.replication import verify
from mempalace_logstream.store import LogStore, task_health
from mempalace_logstream.store import health as health_mod


@dataclass
class Finding:
    check: str
    message: str
    ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "message": self.message}
        if self.ids:
            out["ids"] = self.ids[: health_mod.LIST_MAX]
        return out


@dataclass
class Report:
    checks: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        return not self.findings

    def add(self, check: str, message: str, ids: list[str] | None = None) -> None:
        self.findings.append(Finding(check, message, list(ids or [])))

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "findings": [f.to_dict() for f in self.findings],
            "checks": self.checks,
            "seconds": round(self.seconds, 3),
        }


def integrity_only(store: LogStore) -> Report:
    """The database's integrity check alone (the hub runs it at startup)."""
    report = Report()
    started = time.monotonic()
    _integrity(store, report)
    report.seconds = time.monotonic() - started
    return report


def run(store: LogStore) -> Report:
    """Every check; never raises for what it finds (a failing check is a finding)."""
    report = Report()
    started = time.monotonic()
    timings: dict[str, float] = {}
    for check in (_integrity, _blobs, _projection, _task_rules, _signatures, _sync):
        name = check.__name__.lstrip("_")
        t0 = time.monotonic()
        try:
            check(store, report)
        except Exception as exc:  # a check that cannot run is itself a finding
            report.add(name, f"could not run: {exc}")
        timings[name] = round(time.monotonic() - t0, 3)
    report.checks["seconds"] = timings
    report.checks["database"] = {
        "backend": store.backend.name,
        "size_bytes": store.backend.db_size(),
    }
    report.seconds = time.monotonic() - started
    return report


def _integrity(store: LogStore, report: Report) -> None:
    try:
        method, problems = health_mod.integrity(store)
    except Exception as exc:
        method, problems = "none", [f"the check could not run: {exc}"]
    report.checks["integrity"] = {"ok": not problems, "method": method, "problems": problems[:20]}
    if problems:
        report.add("integrity", f"the database's integrity check failed: {problems[0]}")


def _blobs(store: LogStore, report: Report) -> None:
    found = health_mod.blobs(store)
    report.checks["blobs"] = {
        "checked": found.checked,
        "redacted": found.redacted,
        "corrupt": len(found.corrupt),
        "emptied_without_redaction": len(found.unattested),
        "emptied_but_named": len(found.emptied_but_named),
    }
    if found.corrupt:
        report.add(
            "blobs",
            f"{len(found.corrupt)} artifact blob(s) do not hash to their SHA-256 (corrupt: "
            "restore from a backup or a replica)",
            found.corrupt,
        )
    if found.unattested:
        report.add(
            "blobs",
            f"{len(found.unattested)} blob(s) are empty but no redaction held here names them "
            "(a peer sent them redacted; the redaction may still arrive by sync)",
            found.unattested,
        )
    if found.emptied_but_named:
        report.add(
            "blobs",
            f"{len(found.emptied_but_named)} artifact(s) are not redacted but their blob is "
            "empty, so they read no content (emptied by a redaction of another artifact with "
            "the same bytes, or sent emptied by a peer); putting the same bytes again restores "
            "them",
            found.emptied_but_named,
        )


def _projection(store: LogStore, report: Report) -> None:
    found = health_mod.projection(store)
    report.checks["tasks"] = {
        "tasks": found.tasks,
        "differ": len(found.differ),
        "missing": len(found.missing),
        "extra": len(found.extra),
    }
    bad = found.differ + found.missing + found.extra
    if bad:
        report.add(
            "tasks",
            f"the task projection differs from the fold of the log for {len(bad)} task(s) "
            "(rebuild it from the log: nothing in the log is lost)",
            bad,
        )


def _task_rules(store: LogStore, report: Report) -> None:
    found = task_health.task_rules(store)
    limits = store.task_settings
    report.checks["task_rules"] = {
        "unverified_undone": len(found.unverified),
        "second_requests": len(found.second_requests),
        "too_deep": len(found.too_deep),
        "too_many_children": len(found.crowded),
    }
    if found.unverified:
        report.add(
            "task_rules",
            f"{len(found.unverified)} unverified task move(s) contradicted verified history "
            "and were undone or refused (backdated or forged by a peer?)",
            found.unverified,
        )
    if found.second_requests:
        report.add(
            "task_rules",
            f"{len(found.second_requests)} second task.request(s) on another agent's task, "
            "from a peer (anomalies: they changed nothing)",
            found.second_requests,
        )
    if found.too_deep:
        report.add(
            "task_rules",
            f"{len(found.too_deep)} task(s) deeper than the limit of {limits.max_depth}, "
            "delegated on a peer",
            found.too_deep,
        )
    if found.crowded:
        report.add(
            "task_rules",
            f"{len(found.crowded)} task(s) with more than {limits.max_children} open children, "
            "delegated on a peer",
            found.crowded,
        )


def _signatures(store: LogStore, report: Report) -> None:
    found, ring = health_mod.signatures(store)
    counts = replication.counts(store)
    # The late ones as sync apply's verification module lists them (RFC 0008 "Doctor").
    late = verify.late_revoked(store)
    under_key = verify.unsigned_signing_names(store)
    unsigned = [u.event_id for u in under_key if not u.before_first_key]
    report.checks["signatures"] = {
        "events": found.events,
        "verified": found.verified,
        "unverified": found.unverified,
        "refused": counts.get("refused_signatures", 0),
        "held": counts.get("held_for_key", 0),
        "read_false": len(found.reads_false),
        "read_false_codes": dict(found.codes),
        "late_revoked": len(late),
        "late_unsigned": len(unsigned),
        "unsigned_name_signs": len(under_key),
    }
    report.checks["redactions"] = {
        "redacted_bodies": found.redacted,
        "tombstones_without_redaction": len(found.unattested_tombstones),
        "not_applied": len(found.redactions_not_applied),
    }
    if late:
        first = late[0]
        report.add(
            "signatures",
            f"{len(late)} stored event(s) are signed by a key revoked at an HLC before theirs "
            f"(received before the revocation arrived, or backdated; e.g. {first.key_agent}'s "
            f"{first.key_id}, revoked at {first.revoked_hlc})",
            [x.event_id for x in late],
        )
    if unsigned:
        report.add(
            "signatures",
            f"{len(unsigned)} stored event(s) are unsigned under a name that signs at their "
            "HLC (stored before its key event arrived here)",
            unsigned,
        )
    _backdating(store, report)
    _unsigned_backdated(under_key, report)
    explained = {x.event_id for x in late} | set(unsigned)
    other = [i for i in found.reads_false if i not in explained]
    if other:
        report.add(
            "signatures",
            f"{len(other)} stored event(s) no longer verify ({dict(found.codes)}): changed "
            "behind the API?",
            other,
        )
    _redaction_findings(found, report)
    _keyring(store, ring, report)
    report.checks["sync_counts"] = counts


def _backdating(store: LogStore, report: Report) -> None:
    """Backdating suspects (RFC 0008 "Doctor"): events signed by a key before its revocation
    but first received here after it; held on sync apply within the window."""
    window = store.backdate_window_ms
    held = verify.held_backdated(store)
    stored = verify.backdating_suspects(store, window)
    within = [x.event_id for x in stored if x.within_window]
    report.checks["backdating"] = {
        "window_ms": window,
        "held": len(held),
        "stored_within_window": len(within),
        "stored_outside_window": len(stored) - len(within),
    }
    if held:
        report.add(
            "backdating",
            f"{len(held)} event(s) held as backdating suspects: signed by a key less than "
            f"{window} ms before its revocation, first received here after it. If honest (the "
            f"writer was offline during the revocation), accept them: run one `logstream sync` "
            f"with {verify.WINDOW_ENV}=0",
            held,
        )
    if stored:
        first = stored[0]
        report.add(
            "backdating",
            f"{len(stored)} stored event(s) are backdating suspects: signed by a key at an HLC "
            f"before its revocation, stored here after the revocation arrived ({len(within)} "
            f"within the {window} ms window, accepted or stored before it was enforced; "
            f"{len(stored) - len(within)} outside it; e.g. {first.key_agent}'s "
            f"{first.key_id}, {first.gap_ms} ms before its revocation at {first.revoked_hlc})",
            [x.event_id for x in stored],
        )


def _unsigned_backdated(under_key: list[verify.UnsignedUnderKey], report: Report) -> None:
    suspects = [u.event_id for u in under_key if u.before_first_key and u.stored_after_key]
    report.checks["signatures"]["unsigned_backdated"] = len(suspects)
    if suspects:
        report.add(
            "signatures",
            f"{len(suspects)} stored unsigned event(s) under a name that signs are stamped "
            "before its first key yet were stored here after that key arrived (backdated "
            "under the name, or its history reached this replica late); they read "
            "verified: false (unsigned_name_signs)",
            suspects,
        )


def _redaction_findings(found: health_mod.SignatureReport, report: Report) -> None:
    if found.unattested_tombstones:
        report.add(
            "redactions",
            f"{len(found.unattested_tombstones)} body(ies) are tombstones no redaction held "
            "here names",
            found.unattested_tombstones,
        )
    if found.redactions_not_applied:
        report.add(
            "redactions",
            f"{len(found.redactions_not_applied)} redaction(s) whose target is held did not "
            "take effect (refused: not the admin or the writer, or a SHA-256 that does not match)",
            found.redactions_not_applied,
        )


def _keyring(store: LogStore, ring: Any, report: Report) -> None:
    pins = store.pinned_admins()
    records = ring.records()
    admin_keys = [r.key_id for r in records if r.role == "admin"]
    held = store.identity.pairs().get(ADMIN_NAME)
    refused = [r.event_id for r in ring.refused]
    report.checks["keyring"] = {
        "keys": len(records),
        "refused_key_events": len(refused),
        "pinned_admins": pins,
        "admin_key_present": held is not None and held.key_id in pins,
    }
    if refused:
        report.add("keyring", f"{len(refused)} key event(s) refused by the keyring", refused)
    if records and not pins:
        report.add("pin", "the log has keys but no admin key is pinned here (`agent trust`)")
    elif pins and not any(k in pins for k in admin_keys):
        report.add("pin", "no pinned admin key is in the log's keyring")


def _sync(store: LogStore, report: Report) -> None:
    counts = report.checks.get("sync_counts") or replication.counts(store)
    report.checks.pop("sync_counts", None)
    estate = replication.estate_rows(store)
    report.checks["sync"] = {**counts, "peers": estate}
    if counts.get("conflicts"):
        report.add("sync", f"{counts['conflicts']} sync conflict(s) outstanding")
    if counts.get("rejections"):
        report.add("sync", f"{counts['rejections']} sync rejection(s) outstanding")
    if counts.get("clock_anomalies"):
        report.add("clock", f"{counts['clock_anomalies']} event(s) stamped more than 60 s ahead")
    if counts.get("sequence_anomalies"):
        report.add("sync", f"{counts['sequence_anomalies']} sequence anomaly(ies) outstanding")
