"""The admin commands: `migrate` (create or upgrade the schema; adopts a reference mempalace
logstream file) and `stats` (counts, size, replica id and version vector).

Imports the engine, Alembic's runner and rich only inside the commands.
"""

from __future__ import annotations

from typing import Any

import typer

from mempalace_logstream import config, display, errors
from mempalace_logstream.cli.options import DbOpt, HubOpt, JsonOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import STATE, console, emit, fail, run


@app.command()
def migrate(db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False) -> None:
    """Create or upgrade the schema (also adopts a reference mempalace logstream file)."""
    from mempalace_logstream import migrate as migrate_mod
    from mempalace_logstream.backends import engine as engine_mod
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
    from rich.table import Table

    screen = console()
    screen.print(
        f"replica {out['replica_id']} ({out['backend']}): {out['events']} events, "
        f"{out['artifacts']} artifacts, {out.get('db_size_bytes')} bytes"
    )
    screen.print(f"database {display.terminal(out['database'])}", soft_wrap=True)
    screen.print(f"mempalace-logstream {out.get('version', '?')}")
    for key in ("per_stream", "per_type", "per_writer"):
        table = Table(title=key.replace("per_", "events by "))
        table.add_column(key.replace("per_", ""))
        table.add_column("events", justify="right")
        for k, n in out[key].items():
            table.add_row(display.terminal(k), str(n))
        screen.print(table)


@app.command()
def doctor(db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False) -> None:
    """Check the log: integrity, blobs vs SHA-256, task projection vs fold, signatures of the
    whole log, keyring and pin, redactions, conflicts/rejections, clock, sync estate, size.
    Exit 0 when healthy, 1 with the findings."""
    from mempalace_logstream import doctor as doctor_mod
    from mempalace_logstream.cli.shared import open_store

    try:
        store = open_store(db, palace, create=False)
        try:
            report = doctor_mod.run(store)
        finally:
            store.close()
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    out = report.to_dict()
    if as_json:
        emit(out, True)
    else:
        typer.echo(display.terminal(_doctor_text(out)))
    if not report.healthy:
        raise typer.Exit(1)


def _doctor_text(out: dict[str, Any]) -> str:
    c = out["checks"]
    lines = ["healthy" if out["healthy"] else f"{len(out['findings'])} finding(s):"]
    for f in out["findings"]:
        ids = (
            f" ({', '.join(f['ids'][:5])}{', …' if len(f['ids']) > 5 else ''})"
            if f.get("ids")
            else ""
        )
        lines.append(f"  - [{f['check']}] {f['message']}{ids}")
    sig = c.get("signatures", {})
    lines.append(
        f"events {sig.get('events')}: verified {sig.get('verified')}, unverified "
        f"{sig.get('unverified')}, refused {sig.get('refused')}, held {sig.get('held')}, "
        f"late revoked {sig.get('late_revoked')}"
    )
    blobs, red = c.get("blobs", {}), c.get("redactions", {})
    lines.append(
        f"blobs {blobs.get('checked')} (redacted {blobs.get('redacted')}, corrupt "
        f"{blobs.get('corrupt')}); redacted bodies {red.get('redacted_bodies')}; tasks "
        f"{c.get('tasks', {}).get('tasks')}"
    )
    db = c.get("database", {})
    lines.append(f"database {db.get('backend')}, {db.get('size_bytes')} bytes; {out['seconds']} s")
    return "\n".join(lines)
