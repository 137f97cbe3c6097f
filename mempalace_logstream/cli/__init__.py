"""The `logstream` command line (typer): parse, open the store, make one core call, print.

`root` holds the app and `main()` (the console script `mempalace_logstream.cli:main`); every
other module is one command group that registers its commands on `app` when imported. `main()`
imports only the module of the command it runs (root.COMMANDS); `cli.app` is the whole app,
every module imported (PEP 562 `__getattr__`), for whoever walks or invokes it in-process.
The package is the only typer importer; servers and the store are imported inside commands.
"""

from __future__ import annotations

import typing as _typing

from mempalace_logstream.cli.root import main
from mempalace_logstream.cli.shared import STATE

if _typing.TYPE_CHECKING:
    import typer

    app: typer.Typer

__all__ = ["STATE", "app", "main"]


def __getattr__(name: str) -> object:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from mempalace_logstream.cli import root

    root.load_all()
    globals()["app"] = root.app  # later lookups are plain attribute reads
    return root.app
