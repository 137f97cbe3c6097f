"""The old home of the hub's `/sync/*` routes; they now live in `mempalace_logstream.http`.

Kept so that names imported from here keep working.
"""

from __future__ import annotations

from mempalace_logstream.http.sync_routes import (
    ARTIFACTS_MAX_BYTES,
    ROWS_OFFER,
    SyncContext,
    install,
    int_param,
    router,
)

_int_param = int_param  # the name tests/properties/test_sync_wire_properties.py uses

__all__ = ["ARTIFACTS_MAX_BYTES", "ROWS_OFFER", "SyncContext", "install", "int_param", "router"]
