"""The `Peer` Protocol a sync round talks to, and the `Capabilities` a peer declares.

A round never probes a peer for what it can do: it reads `capabilities_of(peer)`. Our peers
declare them (`LocalPeer`, `HttpPeer`; the HTTP peer's change as it learns the hub, e.g. the
reference hub offers no compact pages, no fingerprints and no push). A duck-typed peer that
declares none (a test double wrapping another peer) is described once, here, from the methods
and attributes it has.

Two errors are part of the protocol: `rows()` may raise `RowsRefused` (use `ops()` from then
on) and `push()` may raise `PushRefused` (a pull-only peer; the pull half of a round stands).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mempalace_logstream import errors


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a peer can do, as far as it has said so far."""

    rows_limit: int = 0
    """Compact page size its `rows()` serves (`replication.ROW_COLUMNS`); 0: `ops()` only."""
    push: bool = True
    """Accepts pushed batches (False once a pull-only hub refused one)."""
    fingerprints: bool = False
    """Answers `fingerprint(origin, upto)`; hole searches prefer it to `count`."""
    counts: bool = True
    """Answers `count(origin, upto)` (hole probes by count: a weak fingerprint)."""
    artifact_responses: bool = False
    """Yields artifacts one response at a time (`artifact_responses(ids)`)."""
    prefetch: bool = False
    """Worth pipelining: pages are fetched and validated ahead while one is applied."""
    paced_rows: bool = False
    """`rows()` takes a `pause` callable and reads the answer only once it returns."""
    reference_only: bool = False
    """Speaks only the reference hub's shapes (no compact pages, fingerprints or push)."""


class Peer(Protocol):
    """One remote replica as seen by a sync round. Every method may raise SyncError."""

    name: str
    url: str

    @property
    def capabilities(self) -> Capabilities:
        """What this peer can do (see `Capabilities`)."""
        ...

    def version_vector(self) -> dict[str, Any]:
        """`{replica_id, version_vector}` as served at `/sync/version_vector` (our hubs add
        `origin_fingerprints`: of the positions accounted for up to each entry, see
        `replication.fingerprint_upto`)."""
        ...

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Events of `origin` with origin_seq > after, ascending, at most `limit`."""
        ...

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The artifacts (with content) among `ids` the peer holds; unknown ids are omitted."""
        ...

    def push(
        self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]], sender: str
    ) -> dict[str, Any]:
        """Ask the peer to apply these (artifacts first); returns its apply report."""
        ...

    def count(self, origin: str, upto: int) -> int:
        """How many positions of `origin` <= upto the peer accounts for (hole probes). Our
        peers also offer `fingerprint(origin, upto)`, which hole searches prefer."""
        ...

    def close(self) -> None: ...


def capabilities_of(peer: object) -> Capabilities:
    """The peer's declared capabilities, or, for a peer that declares none, those its
    methods and attributes show."""
    declared = getattr(peer, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    return Capabilities(
        rows_limit=int(getattr(peer, "rows_limit", 0) or 0),
        fingerprints=callable(getattr(peer, "fingerprint", None)),
        counts=callable(getattr(peer, "count", None)),
        artifact_responses=callable(getattr(peer, "artifact_responses", None)),
        prefetch=bool(getattr(peer, "prefetch", False)),
    )


class PushRefused(errors.SyncError):
    """The peer has no push route (the reference hub is pull-only)."""


class RowsRefused(errors.SyncError):
    """The peer serves no compact pages after all: use the reference's `/sync/ops`."""
