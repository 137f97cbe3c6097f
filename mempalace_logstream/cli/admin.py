"""The admin commands: `migrate` (create or upgrade the schema; adopts a reference mempalace
logstream file) and `stats` (counts, size, replica id and version vector).

Imports the engine, Alembic's runner and rich only inside the commands.
"""

from __future__ import annotations

import typer

from mempalace_logstream import config, errors
from mempalace_logstream.cli.options import DbOpt, HubOpt, JsonOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import STATE, emit, fail, run


@app.command()
def migrate(db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema (also adopts a reference mempalace logstream file)."""
    from mempalace_logstream import engine as engine_mod
    from mempalace_logstream import migrate as migrate_mod
    from mempalace_logstream.schema import SCHEMA_HEAD

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    try:
        eng = engine_mod.create_engine(url, durability=STATE.durability)
        if engine_mod.was_created(eng) and not STATE.as_json:
            typer.echo(f"created a new log at {eng.url.database}", err=True)
        try:
            before = migrate_mod.upgrade(eng)
        finally:
            eng.dispose()
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    except Exception as exc:  # alembic/sqlalchemy failure at the edge
        if STATE.debug:
            raise
        raise fail(f"migration failed: {exc}") from None
    out = {
        "database": eng.url.render_as_string(hide_password=True),
        "from": before,
        "to": SCHEMA_HEAD,
    }
    emit(out, as_json, f"Schema at {SCHEMA_HEAD} (was {before or 'empty'}): {out['database']}")


@app.command()
def stats(
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Counts per stream, type and writer; database size; replica id and version vector."""
    out = run(db, palace, "stats", hub, token)
    if as_json:
        emit(out, True)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"replica {out['replica_id']} ({out['backend']}): {out['events']} events, "
        f"{out['artifacts']} artifacts, {out.get('db_size_bytes')} bytes"
    )
    console.print(f"database {out['database']}", soft_wrap=True)
    console.print(f"mempalace-logstream {out.get('version', '?')}")
    for key in ("per_stream", "per_type", "per_writer"):
        table = Table(title=key.replace("per_", "events by "))
        table.add_column(key.replace("per_", ""))
        table.add_column("events", justify="right")
        for k, n in out[key].items():
            table.add_row(k, str(n))
        console.print(table)
