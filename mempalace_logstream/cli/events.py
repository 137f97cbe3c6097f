"""The event commands: `append`, `list`, `get` and `ack`, each one core operation through
`shared.run` (the local store, or a hub with --hub) and a printed answer; their arguments and
answers are plain.py's and writes.py's, shared with the fast path (cli/fast.py).

Imports only the CLI's own modules; the store is opened lazily by `shared`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from mempalace_logstream.cli import plain, writes
from mempalace_logstream.cli.byteio import refusals
from mempalace_logstream.cli.filters import FilterArgs, filter_options
from mempalace_logstream.cli.options import (
    BaseCommitOpt,
    BodyFileOpt,
    BodyOpt,
    BranchOpt,
    CorrelationOpt,
    DbOpt,
    FromAgentOpt,
    HubOpt,
    JsonOpt,
    LimitOpt,
    MetadataOpt,
    Multi,
    PalaceOpt,
    PreviewOpt,
    RoomOpt,
    ToAgentOpt,
    TokenOpt,
    TopicOpt,
)
from mempalace_logstream.cli.root import app
from mempalace_logstream.cli.shared import emit, run, warn

TypeOpt = Annotated[str, typer.Option("--type", help="Event type, e.g. task.reply.")]
StreamOpt = Annotated[str, typer.Option("--stream", help="Stream, e.g. project/x.")]
StatusOpt = Annotated[str | None, typer.Option("--status", help="open|claimed|ready|applied|...")]
ArtifactIdsOpt = Annotated[
    Multi, typer.Option("--artifact-id", help="Referenced artifact (repeat).")
]
IDEMPOTENCY_HELP = "Retry-safe key: the same key and content return the first event."
IdempotencyOpt = Annotated[str | None, typer.Option("--idempotency-key", help=IDEMPOTENCY_HELP)]


@app.command()
def append(
    type: TypeOpt,
    stream: StreamOpt,
    room: RoomOpt,
    from_agent: FromAgentOpt,
    to_agent: ToAgentOpt = None,
    topic: TopicOpt = None,
    correlation_id: CorrelationOpt = None,
    branch: BranchOpt = None,
    base_commit: BaseCommitOpt = None,
    status: StatusOpt = None,
    body: BodyOpt = None,
    body_file: BodyFileOpt = None,
    metadata: MetadataOpt = None,
    artifact_id: ArtifactIdsOpt = None,
    idempotency_key: IdempotencyOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Append one event to the log."""
    # The parameters by name: writes.py builds the call from them, as the fast path does.
    with refusals():
        fields = writes.append_args(locals())
    out = run(db, palace, "event_append", hub, token, **fields)
    emit(out, as_json, writes.appended_text(out))
    warn(out)


LIST_SINCE_HELP = "Only events after this id (oldest first); 'tip' = none yet."
BEFORE_HELP = "Only events before this id (page back)."
CREATED_HELP = "Only events created at or after YYYY-MM-DD[THH:MM:SSZ] (a window, not a cursor)."
ListSinceOpt = Annotated[str | None, typer.Option("--since-event-id", help=LIST_SINCE_HELP)]
BeforeOpt = Annotated[str | None, typer.Option("--before-event-id", help=BEFORE_HELP)]
CreatedOpt = Annotated[str | None, typer.Option("--since-created-at", help=CREATED_HELP)]
OrderOpt = Annotated[str | None, typer.Option("--order", help="asc or desc.")]


@app.command("list")
@filter_options
def list_(
    filters: FilterArgs,
    since_event_id: ListSinceOpt = None,
    before_event_id: BeforeOpt = None,
    since_created_at: CreatedOpt = None,
    limit: LimitOpt = None,
    order: OrderOpt = None,
    preview: PreviewOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List events (newest first without a cursor, oldest first after --since-event-id)."""
    args = plain.list_args(
        filters, since_event_id, before_event_id, since_created_at, limit, order, preview
    )
    out = run(db, palace, "event_list", hub, token, **args)
    emit(out, as_json, plain.list_text(out))


@app.command()
def get(
    event_id: Annotated[str, typer.Argument(help="Event id.")],
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one event."""
    out = run(db, palace, "event_get", hub, token, event_id=event_id)
    emit(out, as_json, plain.get_text(out))


ACK_STATUS_HELP = "open|claimed|ready|applied|blocked|failed|superseded."
AckStatusOpt = Annotated[str | None, typer.Option("--status", help=ACK_STATUS_HELP)]


@app.command()
def ack(
    event_id: Annotated[str, typer.Argument(help="The event to acknowledge.")],
    from_agent: FromAgentOpt,
    status: AckStatusOpt = None,
    body: BodyOpt = None,
    body_file: BodyFileOpt = None,
    topic: TopicOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Acknowledge an event (appends event.ack; the target never changes)."""
    # The parameters by name: writes.py builds the call from them, as the fast path does.
    with refusals():
        fields = writes.ack_args(locals())
    out = run(db, palace, "event_ack", hub, token, **fields)
    emit(out, as_json, writes.acked_text(out))


@app.command()
def redact(
    event_id: Annotated[str, typer.Argument(help="The event whose content is removed.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the tombstone).")],
    from_agent: Annotated[
        str | None,
        typer.Option("--from-agent", help="Who redacts: the admin (default) or its writer."),
    ] = None,
    artifact: Annotated[
        list[str] | None,
        typer.Option("--artifact", help="An artifact of the event whose bytes go too."),
    ] = None,
    keep_body: Annotated[
        bool, typer.Option("--keep-body", help="Remove only the --artifact bytes.")
    ] = False,
    body_sha256: Annotated[
        str | None,
        typer.Option("--body-sha256", help="Refuse unless the body held hashes to this."),
    ] = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Redact a leaked secret: the body (and --artifact bytes) become a tombstone on every
    replica; the SHA-256, the signature and who/when/why stay (RFC 0008)."""
    out = run(
        db,
        palace,
        "event_redact",
        hub,
        token,
        event_id=event_id,
        reason=reason,
        from_agent=from_agent,
        artifact_ids=artifact or None,
        keep_body=keep_body or None,
        body_sha256=body_sha256,
    )
    emit(
        out, as_json, f"Redacted {out['target']} ({', '.join(out['parts'])}): {out['event']['id']}"
    )
