"""`module(name)`: a stand-in for a module that is imported on first attribute access.

The store's statement builders name SQLAlchemy and the schema's tables only inside the
functions that build a statement, and a statement is built once per shape and store (the
`Compiler`'s cache) -- never on the lean local writer's path (store/lean_write.py), which
serves the compiled text from a generated table. Importing those modules through this
stand-in keeps SQLAlchemy (~170 ms) out of a CLI write that never builds a statement, while
the full store, whose first build touches the stand-in, loads the real module as before.
Type checkers see the real import (`if TYPE_CHECKING:` beside each use). Nothing is put in
`sys.modules` until the first access: a test can tell that a process never loaded it.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Deferred:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


def module(name: str) -> Any:
    """The module `name`, imported when one of its attributes is first read."""
    return _Deferred(name)


def attributes(
    module: str, homes: dict[str, str], into: dict[str, Any], package: str | None = None
) -> Any:
    """A `__getattr__` (PEP 562) for the module `module`: a name of `homes` is read from the
    submodule `<package>.<home>` (`package` defaults to `module`) on first use and kept in
    `into` (the module's globals), so the next read does not come here; any other name is an
    AttributeError naming `module`."""
    where = module if package is None else package

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{where}.{home}"), name)
        into[name] = value
        return value

    return __getattr__
