"""Counts and sizes: the version vector and `stats`."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from mempalace_logstream.schema import artifact_blobs, artifacts, events
from mempalace_logstream.store.pipeline import CommitPipeline


class Stats(CommitPipeline):
    """What the log holds (a base of `LogStore`)."""

    dialect: str

    def version_vector(self) -> dict[str, int]:
        """{origin_replica: max origin_seq} over every event held here."""
        with self._storage_errors(), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(events.c.origin_replica, sa.func.max(events.c.origin_seq)).group_by(
                    events.c.origin_replica
                )
            ).all()
        return {r[0]: int(r[1]) for r in rows}

    def stats(self) -> dict[str, Any]:
        """Counts per stream, type and writer, totals, database size and replica estate."""
        with self._storage_errors(), self.engine.connect() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(events)).scalar() or 0
            arts = conn.execute(sa.select(sa.func.count()).select_from(artifacts)).scalar() or 0
            blobs = conn.execute(
                sa.select(
                    sa.func.count(), sa.func.coalesce(sa.func.sum(artifact_blobs.c.size_bytes), 0)
                )
            ).first()

            def per(col: sa.ColumnElement[Any]) -> dict[str, int]:
                q = sa.select(col, sa.func.count()).group_by(col).order_by(sa.func.count().desc())
                return {str(k): int(n) for k, n in conn.execute(q.limit(100))}

            out = {
                "replica_id": self.replica_id,
                "backend": self.dialect,
                "database": self.engine.url.render_as_string(hide_password=True),
                "events": int(total),
                "artifacts": int(arts),
                "artifact_blobs": int(blobs[0]) if blobs else 0,
                "artifact_bytes": int(blobs[1]) if blobs else 0,
                "per_stream": per(events.c.stream),
                "per_type": per(events.c.type),
                "per_writer": per(events.c.from_agent),
            }
        out["version_vector"] = self.version_vector()
        out["db_size_bytes"] = self._db_size()
        return out

    def _db_size(self) -> int | None:
        return self.backend.db_size()
