"""The root of `logstream`: the typer app, its global options (before the subcommand:
--version, --debug, --durability and the ones a command may also take), the group that turns
usage errors into one JSON object with --json, and `main()`, the console script's edge.

Imports no command module statically (they import `app` from here and register themselves):
`COMMANDS` says which module defines each command, and the root group imports it when that
command is looked up, so `logstream list` builds `list` alone (issue 25).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from mempalace_logstream import __version__, errors
from mempalace_logstream.cli import options, plain
from mempalace_logstream.cli.shared import STATE, click_errors, fail

_NO_ARGS = getattr(click_errors, "NoArgsIsHelpError", ())  # click >= 8.2


class _Group(TyperGroup):
    """Usage errors as one JSON object with --json; global options a command lacks refused."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        STATE.reset()
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(
                argv, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        try:
            code = super().main(argv, prog_name, complete_var, False, windows_expand_args, **extra)
        except _NO_ARGS as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            if not (STATE.as_json or "--json" in argv[: _end_of_options(argv)]):
                exc.show()
            else:
                STATE.as_json = True
                fail(exc.format_message(), field=_error_field(exc))
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):
            takes = {p.name for p in cmd.params if options.is_global(p)}
            root = ctx.find_root()
            for key, flag in options.GLOBAL_OPTIONS.items():
                if options.given(root, key) and key not in takes:
                    path = " ".join([*ctx.command_path.split()[1:], name or ""]).strip()
                    raise click_errors.UsageError(
                        f"{flag} does not apply to `logstream {path}`", ctx
                    )
        return name, cmd, rest


# Each command and the module under cli/ that defines it, in the order `--help` lists them.
COMMANDS = {
    **dict.fromkeys(("append", "list", "get", "ack", "redact"), "events"),
    **dict.fromkeys(("migrate", "stats", "doctor"), "admin"),
    "serve": "hub",
    "mcp": "mcp_stdio",
    **dict.fromkeys(("sync", "peers", "import"), "sync"),
    "deliver": "deliver",
    **dict.fromkeys(("wait", "watch"), "waiting"),
    "tail": "tail",
    "inbox": "inbox",
    "delivery": "delivery",
    **dict.fromkeys(("artifact", "patch"), "artifacts"),
    "task": "tasks",
    "lease": "lease",
    "hook": "harness",
    "presence": "presence",
    "agent": "agent",
    "bridge": "bridge",
}


class _Root(_Group):
    """The root group: a command's module is imported, and its click command built, when the
    command is looked up. Importing every module and building all ~60 commands cost about
    0.1 s of each call; `--help` (which lists them all) still loads them all."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[cmd_name]}")
            found = build_command(cmd_name)
            if found is not None:
                self.add_command(found, cmd_name)
        return found


def build_command(name: str) -> Any:
    """The click command (or group) `name` of the root app, from what its module registered;
    None when no module registered it."""
    for info in app.registered_commands:
        given = info.name or (info.callback and typer.main.get_command_name(info.callback.__name__))
        if given == name:
            return typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(
                group,
                pretty_exceptions_short=app.pretty_exceptions_short,
                suggest_commands=app.suggest_commands,
                rich_markup_mode=app.rich_markup_mode,
            )
    return None


def load_all() -> None:
    """Import every command module (the whole app registered: tests and docs walk it)."""
    for module in dict.fromkeys(COMMANDS.values()):
        importlib.import_module(f"{__package__}.{module}")


def _end_of_options(argv: list[str]) -> int:
    return argv.index("--") if "--" in argv else len(argv)


def _error_field(exc: Any) -> str | None:
    """The field a usage error is about (`--max-bytes` → `max_bytes`), if it names one."""
    param = getattr(exc, "param", None)
    name = getattr(param, "name", None) or getattr(exc, "option_name", None)
    return (name or "").lstrip("-").replace("-", "_") or None


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"logstream {__version__}")
        raise typer.Exit()


def new_typer(cls: type[TyperGroup] = _Group, **kw: Any) -> typer.Typer:
    """A typer app (the root or a group) with the JSON-aware group class and plain help."""
    # Plain help (rich_markup_mode=None): typer's rich help prints flags as `--json <bool>`.
    return typer.Typer(cls=cls, rich_markup_mode=None, no_args_is_help=True, **kw)


app = new_typer(
    cls=_Root,
    name="logstream",
    help="A local-first coordination log for AI agents: events, artifacts, tasks, watch, sync.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

DURABILITY_HELP = "full (default: survives power loss) or normal (survives a crash of the process)."
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]
DurabilityOpt = Annotated[
    str, typer.Option("--durability", envvar="MEMPALACE_LOGSTREAM_DURABILITY", help=DURABILITY_HELP)
]
VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version", help="Print the version and exit.", is_eager=True, callback=_show_version
    ),
]
# Before the command, the global options are plain; the command's own copy reads them.
RootDbOpt = Annotated[str | None, typer.Option("--db", help=options.DB_HELP)]
RootPalaceOpt = Annotated[str | None, typer.Option("--palace", help=options.PALACE_HELP)]
RootHubOpt = Annotated[str | None, typer.Option("--hub", help=options.HUB_HELP)]
RootTokenOpt = Annotated[str | None, typer.Option("--token", help=options.TOKEN_HELP)]
RootJsonOpt = Annotated[bool, typer.Option("--json", help=options.JSON_HELP)]


@app.callback()
def _root(
    debug: DebugOpt = False,
    durability: DurabilityOpt = "full",
    version: VersionOpt = False,
    db: RootDbOpt = None,
    palace: RootPalaceOpt = None,
    hub: RootHubOpt = None,
    token: RootTokenOpt = None,
    as_json: RootJsonOpt = False,
) -> None:
    """Global options; --db, --palace, --hub, --token and --json may also follow the command."""
    STATE.debug = debug
    STATE.durability = durability
    STATE.as_json = STATE.as_json or as_json


def main() -> None:
    """The typer app (the console script's, after the lean path, hook.py): run it; any error
    is one line on stderr unless --debug. The cyclic garbage collector is on while it runs
    (the console script's lean paths ran without it)."""
    from mempalace_logstream import cli  # the package: `console` paused the collector

    cli.gc_resume()
    try:
        app()
    except SystemExit as exc:
        # A harness reads exit 2 of a PreToolUse hook as "block this tool call" (Claude Code),
        # so a misconfigured lease hook (a usage error) would stop every edit: exit 1, which
        # the harness reports without blocking. The usage text is on stderr already.
        if exc.code == 2 and _tool_hook(sys.argv[1:]):
            raise SystemExit(1) from None
        raise
    except errors.LogstreamError as exc:  # a domain error outside run(): same one-line form
        if STATE.debug:
            raise
        raise SystemExit(_exit_with(exc.message)) from None
    except Exception as exc:  # the outermost edge: no traceback without --debug
        if STATE.debug:
            raise
        raise SystemExit(_exit_with(plain.unexpected_text(exc))) from None
    finally:
        # Every store is closed by now: let the interpreter exit without a last cyclic-GC scan
        # of all it imported (about 0.3 s with SQLAlchemy loaded, paid by every `wait` script).
        import gc

        gc.freeze()


def _tool_hook(argv: list[str]) -> bool:
    """Whether the command line runs `hook pretooluse` (global options may come first)."""
    return "hook" in argv and "pretooluse" in argv[argv.index("hook") :]


def _exit_with(message: str) -> int:
    fail(message)
    return 1
