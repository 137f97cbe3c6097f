"""`module(name)`: a stand-in for a module that is imported on first attribute access.

The store's statement builders name SQLAlchemy and the schema's tables only inside the
functions that build a statement, and a statement is built once per shape and store (the
`Compiler`'s cache) -- never on the lean local writer's path (store/lean_write.py), which
serves the compiled text from a generated table. Importing those modules through this
stand-in keeps SQLAlchemy (~170 ms) out of a CLI write that never builds a statement, while
the full store, whose first build touches the stand-in, loads the real module as before.
Type checkers see the real import (`if TYPE_CHECKING:` beside each use). Nothing is put in
`sys.modules` until the first access: a test can tell that a process never loaded it.

`dataclass(...)`: the same for the records the write path makes (below): a class made a
dataclass by `dataclasses` itself when first needed (tests/test_lean_records.py);
`instance` and `replace` make and copy one without making it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    import re

R = TypeVar("R")
P = ParamSpec("P")


class _Deferred:
    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None  # once imported: the module (no import machinery per read)

    def __getattr__(self, attr: str) -> Any:
        found = self._module
        if found is None:
            found = self._module = importlib.import_module(self._name)
        return getattr(found, attr)

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


class _Pattern:
    """`re.compile(text, flags)`, compiled on the first use of an attribute (`match`,
    `search`, `pattern`, ...), which is then kept in the instance: a later use is a plain
    attribute read of the compiled pattern's bound method."""

    def __init__(self, text: str, flags: int) -> None:
        self._text, self._flags = text, flags

    def __getattr__(self, name: str) -> Any:
        import re

        value = getattr(re.compile(self._text, self._flags), name)
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"<pattern {self._text!r}, compiled on first use>"


def pattern(text: str, flags: int = 0) -> re.Pattern[str]:
    """A module's regular expression, compiled on first use: each `re.compile` at import is
    ~0.5-1M instructions, paid by every CLI call whether or not it checks that field (issue
    25). It answers what the compiled pattern answers (not `isinstance(x, re.Pattern)`)."""
    return cast("re.Pattern[str]", _Pattern(text, flags))


# ----------------------------------------------------------------------- deferred dataclasses

# `dataclasses` imports `inspect` (and with it ast, dis, tokenize: ~40 M instructions, ~10 ms
# of a CLI write), and making a frozen dataclass execs its generated methods (~5 M
# instructions each). The records every write and read makes (models.py: `Event`, `Page`, …)
# are filled through `__dict__` on the hot paths and never need those methods there, so they
# are declared with `dataclass` below: the class is made a real dataclass, by
# `dataclasses.dataclass` itself and in place, the first time anything needs it -- a call,
# `==`, `hash`, `repr`, an assignment, or `dataclasses.fields`/`replace`/`asdict`/
# `is_dataclass` (issue 25). Until then its `Record` base answers those, each by making the
# class ready first and handing the call to the generated method.

MISSING: Any = object()  # a declared field without a default


class Field:
    """`field(default=…, default_factory=…, metadata=…)` as declared on a `Record` (the rest
    of `dataclasses.field` is not taken: no such field is declared)."""

    __slots__ = ("default", "factory", "metadata")

    def __init__(self, default: Any, factory: Any, metadata: Mapping[str, Any] | None) -> None:
        self.default, self.factory, self.metadata = default, factory, metadata


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """What the class body of a `Record` declares in place of `dataclasses.field`."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, metadata)


# Each deferred class: its `dataclass` options and declared fields (name, default, metadata),
# until it is made ready; `_DECLARED` keeps the fields for good, `_FACTORIES` the default
# factories (a field with one is declared without a default, as `dataclasses.fields` says).
_PENDING: dict[type, dict[str, Any]] = {}
_DECLARED: dict[type, tuple[tuple[str, Any, Mapping[str, Any]], ...]] = {}
# Each deferred class's field names, in order and as a set (what `replace` copies and allows).
_NAMES: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}
_NO_CHANGES: dict[str, Any] = {}
_FACTORIES: dict[type, dict[str, Any]] = {}
_LOCK = threading.RLock()
_MAKING: set[type] = set()  # being made by the thread holding the lock


def dataclass(cls: type[R] | None = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass(**options)`, applied to the class on first need (see above).
    The class derives from `Record` and declares plain fields (no ClassVar, InitVar or
    KW_ONLY); its class attributes are those of the dataclass it becomes from the start."""

    def defer(cls: type[R]) -> type[R]:
        if not issubclass(cls, Record):
            raise TypeError(f"{cls.__name__} must derive from lazy.Record")
        declared, factories = [], {}
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name, MISSING)
            if isinstance(value, Field):
                declared.append((name, value.default, value.metadata or {}))
                if value.factory is not MISSING:
                    factories[name] = value.factory
                if value.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value.default)
            else:
                declared.append((name, value, {}))
        _DECLARED[cls] = tuple(declared)
        _NAMES[cls] = (tuple(n for n, _, _ in declared), frozenset(n for n, _, _ in declared))
        _FACTORIES[cls] = factories
        _PENDING[cls] = options
        if not options.get("frozen"):  # assigned as on any object: nothing to make first
            cls.__setattr__ = object.__setattr__  # type: ignore[method-assign]
            cls.__delattr__ = object.__delattr__  # type: ignore[method-assign]
        return cls

    return defer if cls is None else defer(cls)


def declared(cls: type) -> tuple[tuple[str, Any, Mapping[str, Any]], ...]:
    """The fields of a `dataclass` above as declared: (name, default or MISSING, metadata),
    in order, without making it ready (what `dataclasses.fields` would give: a field with a
    default factory has no default)."""
    return _DECLARED[cls]


def instance(made_by: Callable[P, R], /, *args: P.args, **values: P.kwargs) -> R:
    """An instance of a `dataclass` above as its `__init__` makes it from `values` and the
    declared defaults (then its `__post_init__`, if any), filled through `__dict__` without
    making the class ready (as rows become Events, store/plan.py). Typed as a call of the
    class, so mypy checks the names and types of `values` against its fields; keywords only
    (the records are `kw_only`)."""
    cls: Any = made_by  # the class (no `cast` call: this is on hot paths)
    if args:
        raise TypeError(f"{cls.__name__} takes keyword arguments only")
    filled = {}
    for name, default, _metadata in _DECLARED[cls]:
        value = values.pop(name, default)
        if value is MISSING:
            factory = _FACTORIES[cls].get(name)
            if factory is None:
                raise TypeError(f"{cls.__name__} needs {name}")
            value = factory()
        filled[name] = value
    made: R = _made(cls, filled, values)
    return made


def replace(obj: R, /, **changes: Any) -> R:
    """`dataclasses.replace(obj, **changes)` for an instance of a `dataclass` above, made
    through `__dict__` (then its `__post_init__`, if any) without making the class ready,
    and without the generated `__init__`'s one `object.__setattr__` per field of a frozen
    one (the task fold replaces a task at every move: tasks/steps.py)."""
    cls = type(obj)
    names, known = _NAMES[cls]
    held = obj.__dict__
    # The held fields copied by name, then the changes over them: a third of the cost of one
    # test per field (the task fold replaces a task at every move of a pulled thread).
    filled = {name: held[name] for name in names}
    if not changes.keys() <= known:  # refused, naming what is not a field
        return _made(cls, filled, dict.fromkeys(changes.keys() - known))
    filled.update(changes)
    return _made(cls, filled, _NO_CHANGES)


def _made(cls: type[R], filled: dict[str, Any], unknown: dict[str, Any]) -> R:
    """An instance of `cls` holding `filled` as its `__dict__`, then its `__post_init__` (if
    any); refused when `unknown` names anything that is not a field."""
    if unknown:
        raise TypeError(f"{cls.__name__} takes no {sorted(unknown)}")
    made: Any = object.__new__(cls)
    object.__setattr__(made, "__dict__", filled)
    if hasattr(cls, "__post_init__"):
        made.__post_init__()
    return made  # type: ignore[no-any-return]


def ready(cls: type) -> None:
    """Make `cls` (and any deferred class it derives from) the dataclass it was declared."""
    for klass in reversed(cls.__mro__):
        if klass in _PENDING:  # left only once it is made: another thread waits for it here
            with _LOCK:
                options = _PENDING.get(klass)
                if options is not None and klass not in _MAKING:
                    _MAKING.add(klass)
                    try:
                        _make(klass, options)
                        del _PENDING[klass]
                    finally:
                        _MAKING.discard(klass)


def _make(cls: type, options: dict[str, Any]) -> None:
    import dataclasses

    factories = _FACTORIES[cls]
    for name, default, metadata in _DECLARED[cls]:  # the fields as `dataclasses.field`s
        if name in factories:
            setattr(
                cls, name, dataclasses.field(default_factory=factories[name], metadata=metadata)
            )
        elif default is MISSING:
            setattr(cls, name, dataclasses.field(metadata=metadata))
        else:
            setattr(cls, name, dataclasses.field(default=default, metadata=metadata))
    dataclasses.dataclass(**options)(cls)  # which sets the class attributes back


def _generated(cls: type, name: str) -> Any:
    """`cls`'s `name` as its dataclass made it (object's where none was made)."""
    ready(cls)
    method = getattr(cls, name)
    if method is None:  # `__hash__` of a dataclass that is compared but not frozen
        raise TypeError(f"unhashable type: {cls.__name__!r}")
    return getattr(object, name) if method is getattr(Record, name) else method


class _Ready:
    """A class attribute the dataclass sets (`__dataclass_fields__`, …): read on a deferred
    class, the class is made ready and its own is returned."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type) -> Any:
        if owner is not Record:
            ready(owner)
            for klass in owner.__mro__:
                if klass is Record:
                    break
                if self.name in klass.__dict__:
                    return klass.__dict__[self.name]
        raise AttributeError(self.name)


class Record:
    """The base of a deferred dataclass: what a dataclass generates, answered by making the
    class ready and calling its generated method (which then answers without coming here)."""

    if not TYPE_CHECKING:  # the type checker sees the dataclass (`models.py`)
        __dataclass_fields__ = _Ready("__dataclass_fields__")
        __dataclass_params__ = _Ready("__dataclass_params__")
        __match_args__ = _Ready("__match_args__")

        def __init__(self, *args, **kwargs):
            _generated(type(self), "__init__")(self, *args, **kwargs)

        def __repr__(self):
            return _generated(type(self), "__repr__")(self)

        def __eq__(self, other):
            return _generated(type(self), "__eq__")(self, other)

        def __hash__(self):
            return _generated(type(self), "__hash__")(self)

        def __setattr__(self, name, value):
            _generated(type(self), "__setattr__")(self, name, value)

        def __delattr__(self, name):
            _generated(type(self), "__delattr__")(self, name)
