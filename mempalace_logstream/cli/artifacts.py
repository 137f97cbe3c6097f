"""The byte-carrying command groups: `artifact put|get` and `patch submit`.

Content travels byte-exact: locally as the bytes themselves, to a hub as UTF-8 text or base64
(sniffed by the core's own rule). Imports the validation rules lazily, the store via `shared`.
"""

from __future__ import annotations

import base64
import sys
from typing import Annotated, Any

import typer

from mempalace_logstream import display
from mempalace_logstream.cli.byteio import out_path, read_bytes, write_out
from mempalace_logstream.cli.options import (
    BaseCommitOpt,
    BodyOpt,
    BranchOpt,
    CorrelationOpt,
    DbOpt,
    FromAgentOpt,
    HubOpt,
    JsonOpt,
    MetadataOpt,
    PalaceOpt,
    RoomOpt,
    ToAgentOpt,
    TokenOpt,
    TopicOpt,
)
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import emit, event_line, fail, run

artifact_app = new_typer(help="Store and fetch byte-exact artifacts.")
patch_app = new_typer(help="Hand a patch to another agent.")
app.add_typer(artifact_app, name="artifact")
app.add_typer(patch_app, name="patch")


def wire_content(raw: bytes, hub: str | None, *, binary: bool = False) -> tuple[Any, str | None]:
    """(content, encoding) for an operation. Locally the bytes themselves: the core sniffs them.
    JSON to a hub cannot carry bytes, so they are sniffed here by the core's own rule (valid
    UTF-8 without NUL is text) and anything else travels as base64, stored as binary."""
    from mempalace_logstream import validation

    asked = "base64" if binary else None
    if not hub:
        return raw, asked
    _, encoding = validation.artifact_content(raw, asked, max_bytes=len(raw))
    if encoding == "utf-8":
        return raw.decode("utf-8"), encoding
    return base64.b64encode(raw).decode("ascii"), encoding


def artifact_bytes(artifact: dict[str, Any]) -> bytes:
    """An artifact's exact bytes from its wire form (UTF-8 text or base64)."""
    if artifact.get("encoding") == "base64":
        return base64.b64decode(artifact["content"])
    return str(artifact["content"]).encode("utf-8")


# --------------------------------------------------------------------------- artifact

KindOpt = Annotated[str, typer.Option("--kind", help="patch|file|log|json|note")]
CreatedByOpt = Annotated[str, typer.Option("--created-by", help="Your agent id.")]
ContentArg = Annotated[str, typer.Argument(help="Content file; - or omitted = stdin.")]
BinaryOpt = Annotated[bool, typer.Option("--binary", help="Store as binary (base64 on the wire).")]


@artifact_app.command("put")
def artifact_put(
    kind: KindOpt,
    created_by: CreatedByOpt,
    file: ContentArg = "-",
    metadata: MetadataOpt = None,
    binary: BinaryOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store an artifact byte-exact (text or binary)."""
    content, encoding = wire_content(read_bytes(file, "content"), hub, binary=binary)
    out = run(
        db,
        palace,
        "artifact_put",
        hub,
        token,
        kind=kind,
        created_by=created_by,
        content=content,
        metadata=metadata,
        encoding=encoding,
    )
    for w in out["artifact"].get("warnings", []):
        typer.echo(display.terminal(f"warning: {w}"), err=True)
    a = out["artifact"]
    emit(
        out, as_json, f"Stored: {a['id']} {a['kind']} {a['size_bytes']} bytes sha256={a['sha256']}"
    )


OUT_HELP = "Write the content to this file (atomically; ~ expands)."
FORCE_HELP = "Let --out replace an existing file (a symlink is replaced, never followed)."
OutOpt = Annotated[str | None, typer.Option("--out", help=OUT_HELP)]
ForceOpt = Annotated[bool, typer.Option("--force", help=FORCE_HELP)]


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="Artifact id.")],
    out_file: OutOpt = None,
    force: ForceOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print an artifact's exact bytes (escaped on a terminal), or write them with --out."""
    target = out_path(out_file, force) if out_file else None
    out = run(db, palace, "artifact_get", hub, token, artifact_id=artifact_id)
    art = out["artifact"]
    if target is not None:
        write_out(target, artifact_bytes(art), force)
        meta = {k: val for k, val in art.items() if k != "content"}
        meta["content_written_to"] = str(target)
        human = f"Wrote {art['id']} to {target} ({art['size_bytes']} bytes, sha256 {art['sha256']})"
        emit({"artifact": meta}, as_json, human)
    elif as_json:
        emit(out, True)
    elif sys.stdout.isatty():
        typer.echo(_for_terminal(art), nl=False)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(artifact_bytes(art))
        sys.stdout.buffer.flush()


def _for_terminal(art: dict[str, Any]) -> str:
    """A text artifact with its controls escaped (`display.terminal`); a binary one is refused:
    its exact bytes go to a pipe or to --out, never raw to a terminal."""
    try:
        return display.terminal(artifact_bytes(art).decode("utf-8"))
    except UnicodeDecodeError:
        raise fail(
            f"artifact {art['id']} is binary ({art['size_bytes']} bytes): write it with --out "
            "FILE or pipe it (a terminal is never sent its raw bytes)",
            field="artifact_id",
        ) from None


# --------------------------------------------------------------------------- patch, task

PATCH_STREAM_HELP = "Stream, e.g. project/x (task create prints it)."
PatchStreamOpt = Annotated[str, typer.Option("--stream", help=PATCH_STREAM_HELP)]
PatchArg = Annotated[str, typer.Argument(help="Patch file; - or omitted = stdin.")]


@patch_app.command("submit")
def patch_submit(
    from_agent: FromAgentOpt,
    stream: PatchStreamOpt,
    file: PatchArg = "-",
    room: RoomOpt = "patches",
    topic: TopicOpt = None,
    to_agent: ToAgentOpt = None,
    correlation_id: CorrelationOpt = None,
    branch: BranchOpt = None,
    base_commit: BaseCommitOpt = None,
    body: BodyOpt = None,
    metadata: MetadataOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a patch and announce it (patch.ready) in one transaction."""
    content, encoding = wire_content(read_bytes(file, "content"), hub)
    fields = {
        "content": content,
        "encoding": encoding,
        "from_agent": from_agent,
        "stream": stream,
        "room": room,
        "topic": topic,
        "to_agent": to_agent,
        "correlation_id": correlation_id,
        "branch": branch,
        "base_commit": base_commit,
        "body": body,
        "metadata": metadata,
    }
    out = run(db, palace, "patch_submit", hub, token, **fields)
    for w in out.get("warnings", []):
        typer.echo(display.terminal(f"warning: {w}"), err=True)
    a = out["artifact"]
    head = f"Patch {a['id']} ({a['size_bytes']} bytes) announced: "
    emit(out, as_json, head + event_line(out["event"]))
