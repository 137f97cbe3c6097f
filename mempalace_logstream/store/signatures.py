"""`takes_args_of(target)`: a method that passes its keyword arguments on to `target` (a facade
of `LogStore`, a write that drafts first) takes `target`'s parameters, so mypy checks callers'
keyword names where they call it, and the parameters are listed once, on `target` (issue 21).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def takes_args_of(
    target: Callable[Concatenate[Any, P], Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """Decorate a method `(self, **args) -> R` that calls `target(**args)`: to mypy and to
    `inspect.signature` it takes `target`'s parameters (after `self`) and returns `R`. The
    signature is made when the method is first read from its class (`inspect` is ~36 M
    instructions to import: a CLI write that never reads the method never loads it, issue 25)."""

    def typed(method: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        shown: Callable[Concatenate[Any, P], R] = _Typed(method, target)  # type: ignore[assignment]
        return shown

    return typed


class _Typed:
    """The method in its class until it is first read: then its `__signature__` is set and the
    class holds the method itself (nothing between it and a call after that)."""

    owner: type | None = None  # the class whose body it was made in, and its name there
    name = ""

    def __init__(self, method: Callable[..., Any], target: Callable[..., Any]) -> None:
        self.method, self.target = method, target

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        import inspect

        method: Any = self.method
        returns = inspect.signature(method).return_annotation
        # What `help()` and `inspect.signature` show: the parameters it takes.
        method.__signature__ = inspect.signature(self.target).replace(return_annotation=returns)
        if self.owner is not None:
            setattr(self.owner, self.name, method)
        return method.__get__(obj, owner)
