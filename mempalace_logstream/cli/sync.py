"""The replica commands: `sync` (a round with the peers: pull, optionally push and repair),
`peers` (the per-peer sync estate) and `import` (copy a whole log, SQLite into PostgreSQL).

The sync engine, replication and the importer are imported inside the commands; this module
parses, shows progress on stderr and prints one line (or one JSON document) per result.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mempalace_logstream import config, display, errors
from mempalace_logstream.cli.options import DbOpt, JsonOpt, PalaceOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import (
    STATE,
    check_sync_limits,
    console,
    emit,
    fail,
    open_store,
    said_created,
)

if TYPE_CHECKING:
    from mempalace_logstream.importer import ImportReport
    from mempalace_logstream.store import LogStore

SyncProgress = Callable[[dict[str, Any]], None]
MiB = 1024 * 1024

# --------------------------------------------------------------------------- sync

REPAIR_HELP = (
    "Then probe for holes the version vector cannot see and re-pull them (not supported by "
    "reference hubs)."
)
DEADLINE_HELP = (
    "Seconds a round with one peer may take in all (every socket read included); past it the "
    "round stops and reports it as that peer's error."
)
MAX_BYTES_HELP = (
    "Bytes read from one peer response; a larger response is refused with an error naming the peer."
)
PeerOpt = Annotated[str | None, typer.Option("--peer", help="Hub URL to sync with.")]
PeerTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="LOGSTREAM_PEER_TOKEN",
        help="Bearer token for --peer; prefer the variable: a command line shows in ps.",
        show_default=False,
    ),
]
PeerDbOpt = Annotated[
    str | None, typer.Option("--peer-db", help="Sync with another local database instead.")
]
PushOpt = Annotated[bool, typer.Option("--push", help="Also push what the peer lacks.")]
RepairOpt = Annotated[bool, typer.Option("--repair-holes", help=REPAIR_HELP)]
DeadlineOpt = Annotated[float, typer.Option("--deadline-s", help=DEADLINE_HELP)]
MaxBytesOpt = Annotated[int, typer.Option("--max-response-bytes", help=MAX_BYTES_HELP)]


@app.command("sync")
def sync_cmd(
    peer: PeerOpt = None,
    token: PeerTokenOpt = None,
    peer_db: PeerDbOpt = None,
    push: PushOpt = False,
    repair_holes: RepairOpt = False,
    deadline_s: DeadlineOpt = 300.0,
    max_response_bytes: MaxBytesOpt = 16 * MiB,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pull (and with --push also push) events and artifacts from peers.

    With neither --peer nor --peer-db, syncs with every peer of <palace>/peers.json
    ({"peers": [{"name", "url", "token"}]}). Exits 1 if any peer failed.
    """
    from mempalace_logstream import sync as sync_mod

    if peer and peer_db:
        raise fail("give --peer or --peer-db, not both", 2)
    check_sync_limits(
        "--deadline-s",
        deadline_s,
        "--max-response-bytes",
        max_response_bytes,
        sync_mod.MIN_RESPONSE_BYTES,
    )
    limits = {"deadline_s": deadline_s, "max_response_bytes": max_response_bytes}
    palace_path = config.palace_dir(palace or config.Settings.from_env().palace)
    try:
        store = open_store(db, palace, create=True)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        with _sync_progress(not as_json) as progress:
            results = _run_sync(
                store, peer, token, peer_db, push, palace_path, progress, repair_holes, limits
            )
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps(results, ensure_ascii=False, indent=2))
    else:
        for r in results:
            typer.echo(display.terminal(_sync_line(r)))
    if any("error" in r for r in results):
        raise typer.Exit(1)


@contextlib.contextmanager
def _sync_progress(enabled: bool) -> Iterator[SyncProgress | None]:
    """A progress callback drawing a rich bar on stderr for long rounds (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("sync", total=None)

        def progress(info: dict[str, Any]) -> None:
            done = info.get("pulled", info.get("pushed", 0))
            origin = str(info.get("origin"))[:16]
            bar.update(
                task, completed=done, total=info.get("total") or None, description=f"sync {origin}"
            )

        yield progress


def _run_sync(
    store: LogStore,
    peer: str | None,
    token: str | None,
    peer_db: str | None,
    push: bool,
    palace_path: Path,
    progress: SyncProgress | None,
    repair: bool,
    limits: dict[str, Any],
) -> list[dict[str, Any]]:
    """One round with --peer-db, --peer, or every peer of peers.json."""
    from mempalace_logstream import sync as sync_mod

    if peer_db:
        from mempalace_logstream.store import LogStore

        other = LogStore.open(
            config.resolve_db(peer_db, None),
            durability=STATE.durability,
            create=False,
            backdate_window_ms=config.Settings.from_env().backdate_window_ms,  # for --push
        )
        try:
            local = sync_mod.LocalPeer(other, name=peer_db)
            return [sync_mod.sync_one(store, local, push, progress, repair, limits["deadline_s"])]
        finally:
            other.close()
    if peer:
        spec = {"url": peer, "token": token}
        return [sync_mod.http_round(store, spec, push, progress, repair, **limits)]
    if not sync_mod.load_peers(palace_path):
        raise errors.ValidationError(
            f"no peers configured ({sync_mod.peers_file(palace_path)}) and no --peer given",
            field="peer",
        )
    return sync_mod.sync_all(
        store, palace_path, push=push, progress=progress, repair=repair, **limits
    )


def _sync_line(r: dict[str, Any]) -> str:
    """One peer's round as one line: counts, then whatever needs attention, loudly."""
    name = r.get("peer_name") or r.get("peer_url")
    if "error" in r:
        return f"  {name}: ERROR {r['error']}"
    line = (
        f"  {name} ({r.get('peer_replica')}): +{r['pulled_events']} events, "
        f"+{r['pulled_artifacts']} artifacts"
    )
    if r.get("pushed_events") or r.get("pushed_artifacts"):
        line += f", pushed {r['pushed_events']} events, {r['pushed_artifacts']} artifacts"
    if r.get("conflict_count"):
        line += f", {r['conflict_count']} CONFLICTS (see `logstream peers --json`)"
    held = r.get("held_count", 0)
    if r.get("rejected_count", 0) > held:
        line += f", {r['rejected_count'] - held} REJECTED"
    if held:
        line += f", {held} events held (signed by keys this replica does not know yet)"
    if r.get("sequence_anomaly_count"):
        line += (
            f", {r['sequence_anomaly_count']} SEQUENCE ANOMALIES "
            f"({r['sequence_anomalies'][0]['message']})"
        )
    if "repair" in r:
        holes = [h for h in r["repair"]["holes"] if h["side"] == "local"]
        line += f", {len(holes)} holes repaired (+{r['repair']['pulled_events']} events)"
    if r.get("repair_error") or r.get("push_error"):
        line += f" [{r.get('repair_error') or r.get('push_error')}]"
    for key in r.get("trust_keys", []):
        line += (
            f"\n  they wait for admin key {key}: if it is your palace's admin key (`logstream "
            'agent list` on the hub\'s host shows it under "pinned admin keys"), trust it '
            f"here and sync again:\n    logstream agent trust {key}"
        )
    return line


# --------------------------------------------------------------------------- peers


@app.command("peers")
def peers_cmd(db: DbOpt = None, palace: PalaceOpt = None, as_json: JsonOpt = False) -> None:
    """Per-peer sync estate: reachable, last success, last error, pulled counts, conflicts."""
    from mempalace_logstream import replication
    from mempalace_logstream import sync as sync_mod

    settings = config.Settings.from_env()
    try:
        store = open_store(db, palace, create=False)
        try:
            out = sync_mod.estate(store, config.palace_dir(palace or settings.palace))
            out["conflicts"] = replication.list_conflicts(store, 20)
            out["rejections"] = replication.list_rejections(store, 20)
        finally:
            store.close()
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    if as_json:
        emit(out, True)
        return
    c = out["sync"]
    typer.echo(peers_table(out))
    typer.echo(
        f"conflicts {c['conflicts']}, rejections {c['rejections']} "
        f"(deferred {c['deferred']}), clock anomalies {c['clock_anomalies']}, "
        f"sequence anomalies {c['sequence_anomalies']}"
    )


PEER_COLUMNS = (
    ("name", "name"),
    ("url", "url"),
    ("reachable", "reachable"),
    ("last success", "last_success_at"),
    ("pulled (last)", "last_pulled_events"),
    ("last error", "last_error"),  # last: free text ends the line
)


def peers_table(out: dict[str, Any]) -> str:
    """The peers as text that never cuts a URL, date or error: a table folded to the terminal's
    width, or one `key=value` line per peer when stdout is not a terminal (pipes, files)."""
    title = f"peers of {out['self']['replica_id']}"
    cells = [
        [display.terminal(str(p[k])) if p[k] is not None else "" for _, k in PEER_COLUMNS]
        for p in out["peers"]
    ]
    if not sys.stdout.isatty():
        keys = [k for _, k in PEER_COLUMNS[1:]]
        rows = [
            f"{row[0]} " + " ".join(f"{k}={v}" for k, v in zip(keys, row[1:], strict=True))
            for row in cells
        ]
        return "\n".join([title, *rows])
    from rich.table import Table

    table = Table(title=title)
    for header, _ in PEER_COLUMNS:
        table.add_column(header, overflow="fold")
    for row in cells:
        table.add_row(*row)
    screen = console()
    with screen.capture() as captured:
        screen.print(table)
    return captured.get().rstrip("\n")


# --------------------------------------------------------------------------- import

FROM_HELP = (
    "Source log: a SQLite file (ours or a reference mempalace logstream.sqlite3) or a "
    "SQLAlchemy URL."
)
FromOpt = Annotated[str, typer.Option("--from", help=FROM_HELP)]
BatchOpt = Annotated[int, typer.Option("--batch-size", help="Events per target transaction.")]
ProgressOpt = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
]


@app.command("import")
def import_(
    from_: FromOpt,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    batch_size: BatchOpt = 2000,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Copy a log into this one, keeping ids, seq, hlc and origins (SQLite into PostgreSQL, say).

    The target must be empty or hold a prefix of the same source (a previous, possibly
    interrupted import): re-running resumes and skips what is there.
    """
    from mempalace_logstream import importer
    from mempalace_logstream.store import LogStore

    settings = config.Settings.from_env()
    url = config.resolve_db(db or settings.db, palace or settings.palace)
    try:
        with importer.open_source(from_) as source:  # a missing source: refused, no target made
            target = said_created(LogStore.open(url, durability=STATE.durability))
            with target:
                report = _run_import(source, target, batch_size, progress)
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None
    human = (
        f"Imported {report.events_imported} events ({report.events_skipped} already there) and "
        f"{report.artifacts_imported} artifacts ({report.artifacts_skipped} already there) "
        f"in {report.seconds:.1f}s: {report.source} -> {report.target}"
    )
    emit(report.to_dict(), as_json, human)


def _run_import(source: LogStore, target: LogStore, batch_size: int, show: bool) -> ImportReport:
    """The import, with a progress bar per phase on stderr when `show`."""
    from mempalace_logstream import importer

    if not show:
        return importer.import_log(source, target, batch_size=batch_size)
    from rich import progress as rp
    from rich.console import Console

    columns = (
        rp.TextColumn("{task.description:>9}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeRemainingColumn(),
    )
    with rp.Progress(*columns, console=Console(stderr=True)) as bar:
        tasks: dict[str, Any] = {}

        def tick(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        return importer.import_log(source, target, batch_size=batch_size, progress=tick)
