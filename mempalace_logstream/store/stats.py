"""Counts and sizes: the version vector and `stats`."""

from __future__ import annotations

from typing import Any

from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.store.pipeline import CommitPipeline


class Stats:
    """What the log holds (a part of `LogStore`): reads through the pipeline's connections."""

    def __init__(self, pipeline: CommitPipeline, replica_id: str) -> None:
        self.pipeline, self.replica_id = pipeline, replica_id

    def version_vector(self) -> dict[str, int]:
        """{origin_replica: max origin_seq} over every event held here."""
        with self.pipeline.connect() as conn:
            return log_rows.version_vector(conn)

    def stats(self) -> dict[str, Any]:
        """Counts per stream, type and writer, totals, database size and replica estate."""
        pipeline = self.pipeline
        with pipeline.connect() as conn:
            total, arts, blobs, size = log_rows.totals(conn)
            out = {
                "replica_id": self.replica_id,
                "backend": pipeline.backend.name,
                "database": pipeline.engine.url.render_as_string(hide_password=True),
                "events": total,
                "artifacts": arts,
                "artifact_blobs": blobs,
                "artifact_bytes": size,
                "per_stream": log_rows.most_common(conn, "stream"),
                "per_type": log_rows.most_common(conn, "type"),
                "per_writer": log_rows.most_common(conn, "from_agent"),
            }
        out["version_vector"] = self.version_vector()
        out["db_size_bytes"] = pipeline.backend.db_size()
        return out
