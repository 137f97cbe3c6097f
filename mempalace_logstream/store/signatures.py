"""`takes_args_of(target)`: a method that passes its keyword arguments on to `target` (a facade
of `LogStore`, a write that drafts first) takes `target`'s parameters, so mypy checks callers'
keyword names where they call it, and the parameters are listed once, on `target` (issue 21).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def takes_args_of(
    target: Callable[Concatenate[Any, P], Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """Decorate a method `(self, **args) -> R` that calls `target(**args)`: to mypy and to
    `inspect.signature` it takes `target`'s parameters (after `self`) and returns `R`."""

    def typed(method: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        returns = inspect.signature(method).return_annotation
        # What `help()` and `inspect.signature` show: the parameters it takes.
        shown: Any = method
        shown.__signature__ = inspect.signature(target).replace(return_annotation=returns)
        return method

    return typed
