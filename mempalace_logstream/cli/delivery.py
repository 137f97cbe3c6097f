"""`logstream delivery EVENT_ID`: who an event reached, from the delivery ledger (issue 20,
RFC 0009): per recipient when a path pushed it (and which), when it was read, when acked."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mempalace_logstream.cli.options import DbOpt, HubOpt, JsonOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import emit, run


def recipient_line(row: dict[str, Any]) -> str:
    """One recipient's delivery, e.g. `w1: pushed 2026-…Z (channel), seen 2026-…Z, not acked`."""
    pushed = f"pushed {row['pushed_at']} ({row['pushed_path']})" if row["pushed_at"] else None
    seen = f"seen {row['seen_at']}" if row["seen_at"] else "not seen"
    acked = f"acked {row['acked_at']}" if row["acked_at"] else "not acked"
    return f"{row['recipient']}: " + ", ".join(p for p in (pushed or "not pushed", seen, acked))


@app.command()
def delivery(
    event_id: Annotated[str, typer.Argument(help="The event id.")],
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who an event reached: pushed (by which path), seen and acked, per recipient."""
    out = run(db, palace, "delivery_status", hub, token, event_id=event_id)
    lines = [f"{out['event_id']}: {out['count']} recipient(s) in the delivery ledger"]
    lines += ["  " + recipient_line(row) for row in out["recipients"]]
    emit(out, as_json, "\n".join(lines))
