"""The `logstream` command line (typer): parse, open the store, make one core call, print.

`root` holds the app and `main()` (the console script `mempalace_logstream.cli:main`); every
other module is one command group that registers its commands on `app` when imported below.
The package is the only typer importer; servers and the store are imported inside commands.
"""

from __future__ import annotations

from mempalace_logstream.cli.root import app, main
from mempalace_logstream.cli.shared import STATE

# Each import registers a group's commands; their order is the order `--help` lists them in.
# isort: off
from mempalace_logstream.cli import events as events
from mempalace_logstream.cli import admin as admin
from mempalace_logstream.cli import hub as hub
from mempalace_logstream.cli import mcp_stdio as mcp_stdio
from mempalace_logstream.cli import sync as sync
from mempalace_logstream.cli import waiting as waiting
from mempalace_logstream.cli import artifacts as artifacts
from mempalace_logstream.cli import tasks as tasks
from mempalace_logstream.cli import lease as lease
from mempalace_logstream.cli import tail as tail
from mempalace_logstream.cli import inbox as inbox
from mempalace_logstream.cli import deliver as deliver
from mempalace_logstream.cli import presence as presence
from mempalace_logstream.cli import agent as agent
from mempalace_logstream.cli import delivery as delivery

# isort: on

__all__ = ["STATE", "app", "main"]
