"""Alembic environment: runs on the caller's connection (see migrate.py) or on a URL."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from mempalace_logstream.schema import metadata

config = context.config


def run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as conn:
            run(conn)
    finally:
        engine.dispose()  # no pooled connection left for the garbage collector to close
