"""The options several commands share, declared once with their help texts: the global ones
(--db, --palace, --hub, --token, --json: given before the command or after it) and the event
fields that `append`, `ack`, `patch submit`, `list` and `wait` have in common.

Only typer and `shared`; a command module picks aliases from here instead of restating them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mempalace_logstream.cli.shared import STATE

# --------------------------------------------------------------------------- global options

GLOBAL_OPTIONS = {
    "db": "--db",
    "palace": "--palace",
    "hub": "--hub",
    "token": "--token",
    "as_json": "--json",
}
DB_HELP = "SQLAlchemy URL or SQLite file path."
PALACE_HELP = "Palace dir (default ~/.mempalace/palace)."
HUB_HELP = "Run against a remote hub (http://host:port)."
TOKEN_HELP = "Bearer token for --hub; prefer the variable: a command line shows in ps."
JSON_HELP = "Print JSON (errors too: one JSON object on stderr)."


def given(ctx: Any, name: str) -> bool:
    """Whether option `name` was typed on the command line of `ctx` (not env or default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def take_global(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A global option on a command: its own value if given there, else the one given before
    the command (`logstream --db x stats`), else the environment or the default."""
    name = param.name or ""
    root = ctx.find_root()
    if root is not ctx and not given(ctx, name) and given(root, name):
        value = root.params[name]
    if name == "as_json" and value:
        STATE.as_json = True
    if name == "hub" and (given(ctx, name) or given(root, name)):
        STATE.hub_typed = True
    return value


def is_global(param: Any) -> bool:
    """Whether a click parameter is one of the global options (its callback is take_global)."""
    return getattr(getattr(param, "callback", None), "__wrapped__", None) is take_global


DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="LOGSTREAM_DB", help=DB_HELP, callback=take_global),
]
PalaceOpt = Annotated[
    str | None,
    typer.Option(
        "--palace", envvar="MEMPALACE_PALACE_PATH", help=PALACE_HELP, callback=take_global
    ),
]
HubOpt = Annotated[
    str | None,
    typer.Option("--hub", envvar="LOGSTREAM_HUB", help=HUB_HELP, callback=take_global),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="LOGSTREAM_TOKEN",
        help=TOKEN_HELP,
        show_default=False,
        callback=take_global,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP, callback=take_global)]

# --------------------------------------------------------------------------- event fields

Multi = list[str] | None  # a repeatable option; typer gives None (or []) when absent

FromAgentOpt = Annotated[str, typer.Option("--from-agent", help="Your agent id.")]
ToAgentOpt = Annotated[str | None, typer.Option("--to-agent", help="Addressee or *.")]
RoomOpt = Annotated[str, typer.Option("--room", help="Room within the stream.")]
TopicOpt = Annotated[str | None, typer.Option("--topic", help="Topic.")]
CorrelationOpt = Annotated[
    str | None, typer.Option("--correlation-id", help="Thread id (a task's id).")
]
BranchOpt = Annotated[str | None, typer.Option("--branch", help="Git branch.")]
BaseCommitOpt = Annotated[
    str | None, typer.Option("--base-commit", help="Git commit the work is based on.")
]
BodyOpt = Annotated[str | None, typer.Option("--body", help="Body text.")]
BodyFileOpt = Annotated[
    str | None, typer.Option("--body-file", help="Body from a file, - = stdin.")
]
MetadataOpt = Annotated[str | None, typer.Option("--metadata", help="Metadata as a JSON object.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="1-500 (default 50).")]
PreviewOpt = Annotated[
    bool, typer.Option("--preview/--no-preview", help="Cut bodies to 200 characters.")
]

# --------------------------------------------------------------------------- following a hub

GIVE_UP_HELP = (
    "With --hub: seconds the hub may stay lost (refused, DNS, no answer, 5xx) before this "
    "exits 3; default: reconnect until it is back (at most 5 s between tries), for `wait` "
    "until its --timeout-ms has passed."
)
GiveUpOpt = Annotated[
    float | None,
    typer.Option("--give-up-after", min=0.0, help=GIVE_UP_HELP, show_default=False),
]
