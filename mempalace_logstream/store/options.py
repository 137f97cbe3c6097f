"""The local log a command names, and how it is opened: `log_options(db, palace)` gives the
URL and `LogStore.open`'s keyword arguments from the environment's settings. The CLI's
`open_store` opens the store with them, and a lean local write (store/lean_write.py,
`open_lean_writer(url, **options)`) the same log with the same settings: one rule for both.
"""

from __future__ import annotations

from typing import Any

from mempalace_logstream import config
from mempalace_logstream.store.identity import keys_path_for


def log_options(
    db: str | None, palace: str | None, *, durability: str = "full"
) -> tuple[str, dict[str, Any]]:
    """(URL, keyword arguments of `LogStore.open` but `create`) of the local log named by
    `db` / `palace` or, unset, by the environment (`config.Settings`)."""
    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    return url, {
        # Agents' keys: beside a SQLite file, else <palace>/keys (RFC 0008). A str, which
        # `LogStore.open` takes as a Path: no pathlib on the lean writer's path (issue 25).
        "keys_dir": keys_path_for(url, config.palace_path(palace or settings.palace)),
        "durability": durability,
        "max_body_bytes": settings.max_body_bytes,
        "max_artifact_bytes": settings.max_artifact_bytes,
        "task_settings": settings.task_settings(),
        "backdate_window_ms": settings.backdate_window_ms,
    }
