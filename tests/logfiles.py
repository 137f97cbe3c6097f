"""Empty SQLite logs for tests, made by copying one migrated template per process.

A new file costs its migration (Alembic) and the fsyncs of its creation, ten times what a copy
costs; tests that open a fresh log per case (fixtures, hypothesis examples) copy instead. The
template holds no replica id: the first open of a copy mints one, as the first open of a new
file does, so two copies are two replicas.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_TEMPLATE: list[Path] = []


def template() -> Path:
    """The migrated, empty log every copy is made from (built once per process)."""
    if not _TEMPLATE:
        from mempalace_logstream import migrate
        from mempalace_logstream.backends import engine as engine_mod

        folder = tempfile.mkdtemp(prefix="logstream-template-")
        atexit.register(shutil.rmtree, folder, True)
        path = Path(folder) / "template.sqlite3"
        eng = engine_mod.create_engine(f"sqlite:///{path}")
        migrate.upgrade(eng)
        eng.dispose()
        _TEMPLATE.append(path)
    return _TEMPLATE[0]


def new_log(path: str | Path) -> str:
    """Make `path` (which must not exist) an empty log at the schema head; returns it as str."""
    target = Path(path)
    if target.exists():
        raise FileExistsError(target)
    shutil.copy(template(), target)
    return str(target)
