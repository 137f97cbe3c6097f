"""File leases (issue 22, RFC 0010): who holds which paths of a project. Pure: the globs and
their overlap (`globs`), the moves and the rules deciding one winner (`rules`), the input rules
(`inputs`). The projection and the operations live in the store (store/leases.py).

The event types are defined here; every other name is loaded on first use (PEP 562), so the
lease projection every store registers (store/lease_projection.py) can tell a lease event
from another without importing the rules: a plain append's process never loads them (issue 25).
`from mempalace_logstream.leases import Lease` works as before.
"""

from __future__ import annotations

import typing as _typing

if _typing.TYPE_CHECKING:
    from mempalace_logstream.leases.globs import matches, normalize, overlaps
    from mempalace_logstream.leases.rules import Lease, Move, Refused, classify, fold

ACQUIRE, RENEW, RELEASE = "lease.acquire", "lease.renew", "lease.release"
TYPES = (ACQUIRE, RENEW, RELEASE)

# name -> the module of this package that defines it, loaded on first access.
_LAZY = {
    **{name: "globs" for name in ("matches", "normalize", "overlaps")},
    **{name: "rules" for name in ("Lease", "Move", "Refused", "classify", "fold")},
}

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


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
