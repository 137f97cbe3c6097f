"""The exception tree of mempalace_logstream. Imports nothing from the package.

LogstreamError
├── ValidationError        bad input; names the field and the limit; nothing was written
├── NotFoundError          an event, artifact or cursor that does not exist here
├── ForbiddenError         this writer may not do that (not the requester, not the assignee)
├── ConflictError          same id or idempotency key with different content, or a move the
│                          task's state refuses (it is cancelled; another agent holds it)
├── BusyError              a server is at its cap for this call (open waits); retry later
├── UnauthorizedError      a hub refused the token (401) or the request (403): not transient
├── StorageError           the database failed (disk, lock timeout, corruption)
│   ├── SchemaVersionError the file was written by a newer schema than this code knows
│   └── IntegrityError     stored bytes no longer match their sha256 (changed behind the log)
└── SyncError              a replica round failed
    └── PeerUnavailableError
"""

from __future__ import annotations


class LogstreamError(Exception):
    """The logstream failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ValidationError(LogstreamError, ValueError):
    """Invalid input; nothing was written."""

    def __init__(self, message: str, *, field: str | None = None, limit: object = None) -> None:
        super().__init__(message)
        self.field = field
        self.limit = limit


class NotFoundError(LogstreamError, LookupError):
    """No such event or artifact."""

    def __init__(self, message: str, *, field: str | None = None, ident: str | None = None):
        super().__init__(message)
        self.field = field
        self.ident = ident


class ForbiddenError(LogstreamError):
    """This writer may not do that."""

    def __init__(self, message: str, *, field: str | None = None, ident: str | None = None):
        super().__init__(message)
        self.field = field
        self.ident = ident


class ConflictError(LogstreamError):
    """The same id or idempotency key already holds different content."""

    def __init__(self, message: str, *, field: str | None = None, ident: str | None = None):
        super().__init__(message)
        self.field = field
        self.ident = ident


class BusyError(LogstreamError):
    """The server is at capacity for this call; retry later."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnauthorizedError(LogstreamError):
    """The hub refused the token; retrying with the same token cannot help."""


class StorageError(LogstreamError):
    """The database failed; the operation did not complete."""


class SchemaVersionError(StorageError):
    """The database schema is newer than this version of mempalace-logstream."""


class IntegrityError(StorageError):
    """Stored content does not match its sha256; it was changed behind the log."""

    def __init__(self, message: str, *, ident: str | None = None) -> None:
        super().__init__(message)
        self.ident = ident


class SyncError(LogstreamError):
    """A sync round with a peer failed."""

    def __init__(self, message: str | None = None, *, peer_id: str | None = None) -> None:
        super().__init__(message)
        self.peer_id = peer_id


class PeerUnavailableError(SyncError):
    """The peer could not be reached."""


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` was raised while a Ctrl-C was being handled (a query or an HTTP answer
    cut short leaves its connection in a state the clean-up then trips on): the caller ends as
    for the Ctrl-C, and never retries it as an outage."""
    seen: BaseException | None = exc
    for _ in range(16):  # a chain is short; never loop on a cycle
        seen = seen.__context__ if seen is not None else None
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
    return False
