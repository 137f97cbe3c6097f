"""A peer's `/sync/version_vector` answer and wire fingerprints, validated (`parse_vector`,
`fingerprint`): every number must fit an origin position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mempalace_logstream import errors, replication
from mempalace_logstream import validation as v
from mempalace_logstream.sync.protocol import Peer

Fingerprints = Mapping[str, replication.Fingerprint]


def parse_vector(remote: Any, peer: Peer) -> tuple[str, dict[str, int], Fingerprints | None]:
    """(replica id, vector, origin_fingerprints or None) of a `/sync/version_vector` body;
    every number must fit an origin position. Raises SyncError naming what is wrong."""
    try:
        if not isinstance(remote, dict) or not isinstance(remote.get("version_vector"), dict):
            raise v.fail("version_vector", "must be a JSON object")
        rid = v.replica_id(remote.get("replica_id"))
        rvv = _position_map(remote["version_vector"], "version_vector")
        raw = remote.get("origin_fingerprints")
        rfps = None
        if raw is not None:
            if not isinstance(raw, dict):
                raise v.fail("origin_fingerprints", "must be a JSON object")
            rfps = {
                v.replica_id(o, "origin_fingerprints key"): fingerprint(fp, "origin_fingerprints")
                for o, fp in raw.items()
            }
    except errors.ValidationError as exc:
        raise errors.SyncError(
            f"{peer.url}: bad version vector: {exc.message}", peer_id=peer.name
        ) from exc
    return rid, rvv, rfps


def _position_map(raw: Any, field: str) -> dict[str, int]:
    out = {}
    for origin, n in raw.items():
        key = v.replica_id(origin, f"{field} key")
        value = replication.seq_int(f"{field} value", n)
        if value < 0:
            raise v.fail(f"{field} value", f"is {value}; it must be a non-negative integer")
        out[key] = value
    return out


def fingerprint(raw: Any, field: str = "fingerprint") -> replication.Fingerprint:
    """A wire fingerprint [count, sum mod FP_P1, sum of squares mod FP_P2]; raises
    ValidationError naming `field`."""
    ok = (
        isinstance(raw, list)
        and len(raw) == 3
        and all(type(x) is int for x in raw)
        and 0 <= raw[0] <= replication.MAX_SEQ
        and 0 <= raw[1] < replication.FP_P1
        and 0 <= raw[2] < replication.FP_P2
    )
    if not ok:
        raise v.fail(field, "must hold [count, sum, sum of squares] of origin positions")
    return raw[0], raw[1], raw[2]
