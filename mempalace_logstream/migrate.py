"""Schema migrations through Alembic, applied on open and by `logstream migrate`.

The migration runs inside one write transaction (BEGIN IMMEDIATE on SQLite, an advisory lock on
PostgreSQL), so processes opening a fresh file at once migrate it exactly once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from mempalace_logstream import backends, errors
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.backends.queries import meta as meta_rows
from mempalace_logstream.schema import SCHEMA_HEAD

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported only when a migration actually runs: opening a database that is already
# at head (every CLI call after the first) must not pay about a second of imports.


def _migrations_dir() -> Path:
    """Alembic's scripts: `migrations/` at the top of a source checkout, shipped inside the
    package in a wheel (pyproject's force-include), so `pip install` still migrates."""
    shipped = Path(__file__).with_name("migrations")
    return shipped if shipped.is_dir() else Path(__file__).resolve().parents[1] / "migrations"


MIGRATIONS_DIR = _migrations_dir()
PG_MIGRATE_LOCK = 0x6D696772  # "migr"
KNOWN_REVISIONS = (
    None,
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
    "0014",
    "0015",
    "0016",
)


def alembic_config(connection: sa.Connection | None = None, url: str | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def current_revision(conn: sa.Connection) -> str | None:
    return meta_rows.schema_revision(conn)


@contextlib.contextmanager
def _locked(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One write transaction holding the migration lock (the backend's: SQLite's write lock at
    BEGIN, a PostgreSQL advisory lock), so concurrent first starts migrate once."""
    with engine_mod.writer(engine).begin() as conn:
        backends.for_engine(engine).lock_migrations(conn, PG_MIGRATE_LOCK)
        yield conn


def ensure_schema(engine: sa.Engine, *, create: bool = True) -> str | None:
    """Upgrade to SCHEMA_HEAD if needed; returns the revision found before (None if fresh).

    `create` False (a reader): a database that holds no log is refused (NotFoundError naming
    it and `logstream migrate`), never created; an older log is upgraded, as for a writer."""
    with engine.connect() as probe:
        if current_revision(probe) == SCHEMA_HEAD:
            return SCHEMA_HEAD
        backends.for_engine(engine).check_log(probe, create)
    return upgrade(engine, "head")


def upgrade(engine: sa.Engine, revision: str = "head") -> str | None:
    with _locked(engine) as conn:
        before = current_revision(conn)
        if before is None:
            backends.for_engine(engine).check_log(conn, True)  # a search_path to create in
        if before not in KNOWN_REVISIONS:
            raise errors.SchemaVersionError(
                f"database schema revision {before!r} is newer than this mempalace-logstream "
                f"(knows up to {SCHEMA_HEAD}); upgrade the package"
            )
        if before != SCHEMA_HEAD or revision != "head":
            from alembic import command

            command.upgrade(alembic_config(conn), revision)
    return before


def downgrade(engine: sa.Engine, revision: str = "base") -> None:
    from alembic import command

    with _locked(engine) as conn:
        command.downgrade(alembic_config(conn), revision)


def check_schema(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        rev = current_revision(conn)
    if rev != SCHEMA_HEAD:
        raise errors.SchemaVersionError(
            f"database schema is at {rev!r}, expected {SCHEMA_HEAD}; run `logstream migrate`"
        )
