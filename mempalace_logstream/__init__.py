"""mempalace-logstream: a local-first coordination log for AI agents.

`LogStore` and the models are loaded on first use (PEP 562 `__getattr__`): importing the
package or its errors imports neither the store and SQLAlchemy nor the models, so the lean
hook paths (hook.py: `logstream inbox`, `logstream hook pretooluse`) stay fast.
`from mempalace_logstream import LogStore, Event` works as before.
"""

from __future__ import annotations

import typing as _typing

from mempalace_logstream.errors import (
    BusyError,
    ConflictError,
    ForbiddenError,
    IntegrityError,
    LogstreamError,
    NotFoundError,
    PeerUnavailableError,
    SchemaVersionError,
    StorageError,
    SyncError,
    UnauthorizedError,
    ValidationError,
)

if _typing.TYPE_CHECKING:
    from mempalace_logstream.models import Artifact, Event, Page
    from mempalace_logstream.store import LogStore

__version__ = "0.1.0"

__all__ = [
    "Artifact",
    "BusyError",
    "ConflictError",
    "Event",
    "ForbiddenError",
    "IntegrityError",
    "LogStore",
    "LogstreamError",
    "NotFoundError",
    "Page",
    "PeerUnavailableError",
    "SchemaVersionError",
    "StorageError",
    "SyncError",
    "UnauthorizedError",
    "ValidationError",
    "__version__",
]
# Exported names loaded on first access: name -> the module that defines it.
_LAZY = {
    "LogStore": "mempalace_logstream.store",
    **{name: "mempalace_logstream.models" for name in ("Artifact", "Event", "Page")},
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
