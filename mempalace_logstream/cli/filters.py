"""The event filters of the reading commands, declared once (the sqlite-utils model: one
reusable group of options). `@filter_options` gives a command every filter option, with the
same flags and help texts everywhere, and hands it one dict, `filters`, of those given.

Used by `list`, `wait` and `watch`; a new reader (say `tail`) takes them the same way.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from mempalace_logstream.cli.options import Multi
from mempalace_logstream.cli.plain import FILTERS
from mempalace_logstream.cli.shared import click_errors


def _not_a_filter(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> None:
    if value is not None:
        exc = click_errors.UsageError(
            f"--from-agent is your identity on writes, not a filter: to read what {value} wrote, "
            f"use --writer {value} (and --to-agent {value} for what was sent to {value})",
            ctx,
        )
        exc.param = param  # the field of a --json error
        raise exc


def _keyword(name: str, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


PARAMETERS = (
    *(
        _keyword(name, Annotated[Multi, typer.Option(flag, help=text)])
        for name, flag, text in FILTERS
    ),
    # `list --from-agent bob` reads as "bob's events" but would list everyone's: refused.
    _keyword(
        "from_agent",
        Annotated[str | None, typer.Option("--from-agent", hidden=True, callback=_not_a_filter)],
    ),
)
NAMES = tuple(p.name for p in PARAMETERS)
# What a command receives: the raw values of the filters given (the core validates them).
FilterArgs = dict[str, Any]


def filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """Put the filter options where `command` has its `filters` parameter; the command gets
    `filters` as a dict of the filters given (each a list of values, OR within a field)."""
    own = inspect.signature(command, eval_str=True)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own.parameters.values()]
    at = [p.name for p in params].index("filters")
    params[at : at + 1] = PARAMETERS

    @functools.wraps(command)
    def with_filters(**kwargs: Any) -> None:
        filters = {n: val for n in NAMES if (val := kwargs.pop(n)) not in (None, [])}
        command(filters=filters, **kwargs)

    # typer reads a command's options from its signature and annotations: show it the filters.
    with_filters.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    with_filters.__annotations__ = {p.name: p.annotation for p in params}
    return with_filters
