"""mempalace-logstream: a local-first coordination log for AI agents.

`LogStore` is loaded on first use (PEP 562 `__getattr__`): importing the package, its errors
or its models does not import the store and SQLAlchemy, so the lean `logstream inbox` hook
path (hook.py) stays fast. `from mempalace_logstream import LogStore` works as before.
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
from mempalace_logstream.models import Artifact, Event, Page

if _typing.TYPE_CHECKING:
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
_LAZY = {"LogStore": "mempalace_logstream.store"}


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
