"""mempalace-logstream: a local-first coordination log for AI agents."""

from __future__ import annotations

from mempalace_logstream.errors import (
    ConflictError,
    ForbiddenError,
    IntegrityError,
    LogstreamError,
    NotFoundError,
    PeerUnavailableError,
    SchemaVersionError,
    StorageError,
    SyncError,
    ValidationError,
)
from mempalace_logstream.models import Artifact, Event, Page
from mempalace_logstream.store import LogStore

__version__ = "0.1.0"

__all__ = [
    "Artifact",
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
    "ValidationError",
    "__version__",
]
