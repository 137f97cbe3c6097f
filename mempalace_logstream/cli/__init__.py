"""The `logstream` command line (typer): parse, open the store, make one core call, print.

`main()` is the console script: a command line the lean path understands (`inbox`, hook.py)
runs without typer; any other goes to the typer app of `root`, which imports only the module
of the command it runs (root.COMMANDS). Every other module is one command group that registers
its commands on `app` when imported; `cli.app` is the whole app, every module imported, and
`cli.STATE` the run's state (PEP 562 `__getattr__`: importing this package loads no typer).
The package is the only typer importer; servers and the store are imported inside commands.
"""

from __future__ import annotations

import typing as _typing

if _typing.TYPE_CHECKING:
    import typer

    from mempalace_logstream.cli.shared import State

    app: typer.Typer
    STATE: State

__all__ = ["STATE", "app", "console", "gc_resume", "main"]


def main() -> None:
    """`logstream`: the lean paths first (hook.py), else the typer app; ends by raising
    SystemExit, as a function called in a process that goes on must."""
    from mempalace_logstream import hook

    hook.main()


def console() -> None:
    """The `logstream` console script: `main()`, but a call the lean paths answered (a local
    write, read or inbox) ends the process as soon as its output is flushed, without the
    interpreter's teardown, and runs without the cyclic garbage collector (issue 25): a
    one-call process makes little garbage, and the collections its imports set off were
    ~6 % of an append's instructions. The typer app turns it back on first (`gc_resume`):
    a command there may serve for hours."""
    import gc

    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True
    from mempalace_logstream import hook

    hook.main(exit_now=True)


_gc_paused = False  # whether `console` turned the cyclic garbage collector off


def gc_resume() -> None:
    """Turn the cyclic garbage collector back on if `console` turned it off."""
    global _gc_paused
    if _gc_paused:
        import gc

        gc.enable()
        _gc_paused = False


def __getattr__(name: str) -> object:
    if name == "STATE":
        from mempalace_logstream.cli import shared

        return shared.STATE
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mempalace_logstream.cli import root

    root.load_all()
    globals()["app"] = root.app  # later lookups are plain attribute reads
    return root.app
