"""File leases (issue 22, RFC 0010): who holds which paths of a project. Pure: the globs and
their overlap (`globs`), the moves and the rules deciding one winner (`rules`), the input rules
(`inputs`). The projection and the operations live in the store (store/leases.py)."""

from __future__ import annotations

from mempalace_logstream.leases.globs import matches, normalize, overlaps
from mempalace_logstream.leases.rules import (
    ACQUIRE,
    RELEASE,
    RENEW,
    TYPES,
    Lease,
    Move,
    Refused,
    classify,
    fold,
)

__all__ = [
    "ACQUIRE",
    "RELEASE",
    "RENEW",
    "TYPES",
    "Lease",
    "Move",
    "Refused",
    "classify",
    "fold",
    "matches",
    "normalize",
    "overlaps",
]
