"""Counts and sizes: the version vector and `stats`."""

from __future__ import annotations

from typing import Any

from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.store.pipeline import CommitPipeline


class Stats(CommitPipeline):
    """What the log holds (a base of `LogStore`)."""

    dialect: str

    def version_vector(self) -> dict[str, int]:
        """{origin_replica: max origin_seq} over every event held here."""
        with self._storage_errors(), self.engine.connect() as conn:
            return log_rows.version_vector(conn)

    def stats(self) -> dict[str, Any]:
        """Counts per stream, type and writer, totals, database size and replica estate."""
        with self._storage_errors(), self.engine.connect() as conn:
            total, arts, blobs, size = log_rows.totals(conn)
            out = {
                "replica_id": self.replica_id,
                "backend": self.dialect,
                "database": self.engine.url.render_as_string(hide_password=True),
                "events": total,
                "artifacts": arts,
                "artifact_blobs": blobs,
                "artifact_bytes": size,
                "per_stream": log_rows.most_common(conn, "stream"),
                "per_type": log_rows.most_common(conn, "type"),
                "per_writer": log_rows.most_common(conn, "from_agent"),
            }
        out["version_vector"] = self.version_vector()
        out["db_size_bytes"] = self._db_size()
        return out

    def _db_size(self) -> int | None:
        return self.backend.db_size()
