"""The fast path's grammar (cli/fast.py, issue 25): a command line read against a table of
each command's options as its typer command declares them, with typer's precedence (the
command's own option, else the one given before the command, else the environment variable,
else the default). Anything it does not fully understand is None: typer reads that line.

Imports nothing of the package: it runs before anything else is loaded.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from mempalace_logstream import lazy

# An option: flag -> (parameter, kind). Kinds: "str", "int" and "float" take a value, "multi" a
# value each time it is given (a list), "on"/"off" are the two flags of a boolean.
Options = dict[str, tuple[str, str]]

# The options every command here takes, before the command or after it (cli/options.py).
GLOBALS: Options = {
    "--db": ("db", "str"),
    "--palace": ("palace", "str"),
    "--hub": ("hub", "str"),
    "--token": ("token", "str"),
    "--json": ("as_json", "on"),
}
# The root's own options (cli/root.py), before the command only.
ROOT: Options = {**GLOBALS, "--debug": ("debug", "on"), "--durability": ("durability", "str")}
ROOT_DEFAULTS: dict[str, Any] = {"debug": False, "durability": "full"}
# The environment variable each option reads when it is not on the command line.
ENVVARS = {
    "db": "LOGSTREAM_DB",
    "palace": "MEMPALACE_PALACE_PATH",
    "hub": "LOGSTREAM_HUB",
    "token": "LOGSTREAM_TOKEN",
    "durability": "MEMPALACE_LOGSTREAM_DURABILITY",
}
# The numbers taken here: plain decimals (click reads more, "1e3", "inf": those are typer's).
NUMBERS = {
    "int": (lazy.pattern(r"-?[0-9]+"), int),
    "float": (lazy.pattern(r"-?[0-9]+(\.[0-9]+)?"), float),
}


class Command(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """A command the fast path answers: its words, positional arguments, options, the
    defaults of its parameters (typer's), the typer command's parameters left to typer (not
    in `options`: given, the command line is typer's), and `run(params)` -> exit code, or
    None to hand the command line to typer."""

    words: tuple[str, ...]
    arguments: tuple[str, ...]
    options: Options
    run: Callable[[dict[str, Any]], int | None]
    defaults: Mapping[str, Any] = MappingProxyType({})
    slow: tuple[str, ...] = ()
    hub: bool = False  # answers through --hub too (else a hub's call is the typer path's)
    optional: tuple[tuple[str, str], ...] = ()  # (argument, kind) that may follow `arguments`
    required: tuple[str, ...] = ()  # options typer requires (missing: its usage error)


def parse(
    commands: dict[tuple[str, ...], Command], argv: Sequence[str]
) -> tuple[Command, dict[str, Any]] | None:
    """(command of `commands`, its parameters) for a command line this parser fully
    understands, else None. Parameters are as typer gives them: the command's own option,
    else the one given before the command, else the environment variable, else the
    default."""
    head = _scan(argv, ROOT, None)
    if head is None:
        return None
    root, at = head
    rest = list(argv[at:])
    cmd = commands.get(tuple(rest[:2])) or commands.get(tuple(rest[:1]))
    if cmd is None:
        return None
    positional: list[str] = []
    tail = _scan(rest[len(cmd.words) :], cmd.options, positional)
    extra = len(positional) - len(cmd.arguments)
    if tail is None or not 0 <= extra <= len(cmd.optional):
        return None
    own = tail[0]
    for (name, kind), text in zip(cmd.optional, positional[len(cmd.arguments) :], strict=False):
        own[name] = _number(kind, text)
        if own[name] is None:
            return None
    names = {name for name, _kind in cmd.options.values()}
    params: dict[str, Any] = {**ROOT_DEFAULTS, **cmd.defaults}
    for name, var in ENVVARS.items():
        if (name in names or name in ROOT_DEFAULTS) and os.environ.get(var):
            params[name] = os.environ[var]
    for name, value in root.items():
        if name not in names and name not in ROOT_DEFAULTS:
            return None  # typer: "--x does not apply to `logstream cmd`"
        params[name] = value
    params.update(own)
    params.update(zip(cmd.arguments, positional[: len(cmd.arguments)], strict=True))
    if any(params[name] is None for name in cmd.required):
        return None
    return cmd, params


def _scan(
    args: Sequence[str], table: Options, positional: list[str] | None
) -> tuple[dict[str, Any], int] | None:
    """Options of `table` (`--opt value`, `--opt=value`, flags) up to the first bare word
    when `positional` is None (the command), else to the end, bare words into `positional`.
    None on anything else: an unknown option, a value that starts with "-" (but "-" itself,
    stdin), a bad number, an option given twice (typer keeps the last), "--"."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if positional is None:
                return out, i
            positional.append(arg)
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        spec = table.get(flag)
        if spec is None:
            return None
        name, kind = spec
        if kind in ("on", "off"):
            if eq:
                return None
            value: Any = kind == "on"
        elif eq:
            value = inline
        elif i + 1 < len(args) and (args[i + 1] == "-" or not args[i + 1].startswith("-")):
            i += 1
            value = args[i]
        else:
            return None
        if kind in NUMBERS:
            value = _number(kind, value)
            if value is None:
                return None
        if kind == "multi":
            out.setdefault(name, []).append(value)
        elif name in out:
            return None
        else:
            out[name] = value
        i += 1
    return None if positional is None else (out, i)


def _number(kind: str, text: str) -> int | float | None:
    pattern, convert = NUMBERS[kind]
    return convert(text) if pattern.fullmatch(text) else None
