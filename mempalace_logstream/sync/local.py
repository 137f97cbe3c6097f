"""`LocalPeer`: another `LogStore` in this process as a peer (`logstream sync --peer-db`), and
`apply_push`, the receiving side of a push (the hub's `/sync/push` calls it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mempalace_logstream import errors, replication
from mempalace_logstream import validation as v
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.limits import BATCH, ROWS_BATCH, Deadline
from mempalace_logstream.sync.protocol import Capabilities


class LocalPeer:
    """A peer that is another LogStore in this process (`logstream sync --peer-db PATH`)."""

    rows_limit = ROWS_BATCH
    prefetch = False  # a page costs no round trip: nothing to gain from a pipeline
    deadline: Deadline | None = None

    def __init__(self, store: LogStore, name: str | None = None) -> None:
        self.store = store
        self.url = str(store.engine.url.render_as_string(hide_password=True))
        self.name = name or self.url

    @property
    def capabilities(self) -> Capabilities:
        """Everything our hubs offer (a subclass may change `rows_limit` or `prefetch`)."""
        return Capabilities(rows_limit=self.rows_limit, fingerprints=True, prefetch=self.prefetch)

    def version_vector(self) -> dict[str, Any]:
        positions = replication.origin_positions(self.store)
        return {
            "replica_id": self.store.replica_id,
            "version_vector": {o: top for o, (top, _) in positions.items()},
            "origin_fingerprints": {o: list(fp) for o, (_, fp) in positions.items()},
        }

    def ops(self, origin: str, after: int, limit: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = replication.ops_page(self.store, origin, after, limit)[
            "events"
        ]
        return events

    def rows(self, origin: str, after: int, limit: int) -> list[Any]:
        """A compact page (`replication.ROW_COLUMNS` rows)."""
        rows: list[Any] = replication.ops_rows(self.store, origin, after, limit)["rows"]
        return rows

    def artifacts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        found, _, more = replication.get_artifacts(self.store, ids)
        out = [a.to_dict() for a in found]
        if more:
            out += self.artifacts(more)
        return out

    def push(
        self, artifacts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]], sender: str
    ) -> dict[str, Any]:
        return apply_push(self.store, artifacts, events, sender)

    def count(self, origin: str, upto: int) -> int:
        return replication.count_upto(self.store, origin, upto)

    def fingerprint(self, origin: str, upto: int) -> replication.Fingerprint:
        return replication.fingerprint_upto(self.store, origin, upto)

    def close(self) -> None:
        return None


def apply_push(store: LogStore, artifacts: Any, events: Any, sender: Any) -> dict[str, Any]:
    """Apply a pushed batch (artifacts first), fully validated; the receiver side of --push."""
    if not isinstance(artifacts, list) or not isinstance(events, list):
        raise errors.ValidationError("artifacts and events must be lists", field="events")
    if len(events) > BATCH:
        raise v.fail("events", f"has {len(events)} items; the limit is {BATCH}", BATCH)
    peer = f"push:{sender}" if isinstance(sender, str) and sender else "push"
    res = replication.apply_remote_artifacts(store, artifacts, peer)
    res.merge(replication.apply_remote_events(store, events, peer))
    return res.to_dict()
