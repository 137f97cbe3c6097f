"""`logstream bridge nats` (RFC 0011, issue 24): a log bridged to a NATS JetStream stream in
the foreground, for a laptop without a hub (a hub runs the same with `serve --nats`).

The bridge package and the NATS client are imported inside the command only.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mempalace_logstream import errors
from mempalace_logstream.cli.options import DbOpt, PalaceOpt
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import fail, nats_config, open_store

bridge_app = new_typer(help="Bridge this log to a fleet's streaming engine (RFC 0011).")
app.add_typer(bridge_app, name="bridge")

NATS_HELP = "The NATS server (2.10 or later, with JetStream), e.g. nats://127.0.0.1:4222."
NatsUrlOpt = Annotated[str, typer.Option("--nats", help=NATS_HELP)]
StreamOpt = Annotated[
    str, typer.Option("--stream", help="The JetStream stream every bridged log shares.")
]
PrefixOpt = Annotated[
    str,
    typer.Option("--prefix", help="Subject prefix: events go to <prefix>.<origin>.<stream>.<to>."),
]


@bridge_app.command("nats")
def nats_bridge(
    nats: NatsUrlOpt,
    stream: StreamOpt = "LOGSTREAM",
    prefix: PrefixOpt = "logstream",
    db: DbOpt = None,
    palace: PalaceOpt = None,
) -> None:
    """Publish this log's own events to a JetStream stream and import the others' events from
    it, until interrupted. Refuses a server older than 2.10, one without JetStream, and a
    stream configured differently, in one line."""
    cfg = nats_config(nats, stream, prefix)
    from mempalace_logstream.natsbridge import run_bridge

    try:
        store = open_store(db, palace, create=True)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        run_bridge(store, cfg)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    finally:
        store.close()
