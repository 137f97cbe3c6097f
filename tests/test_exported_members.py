"""The package's public surface is a curated `__all__` (as in httpx tests/test_exported_members).

Every public, non-module name of `mempalace_logstream` is listed, every listed name exists and
belongs to the package, and the error tree of errors.py is exported whole.
"""

from __future__ import annotations
import __future__

import inspect
import subprocess
import sys
import types

import mempalace_logstream as pkg
from mempalace_logstream import errors


def _public_members() -> set[str]:
    """Through `dir()`: the package loads `LogStore` lazily (PEP 562), so it may not be in
    `vars()` yet."""
    return {
        name
        for name in dir(pkg)
        if not name.startswith("_")
        and not isinstance(getattr(pkg, name), types.ModuleType | __future__._Feature)
    }


def test_all_lists_exactly_the_public_members():
    assert set(pkg.__all__) == _public_members() | {"__version__"}
    assert len(pkg.__all__) == len(set(pkg.__all__))


def test_all_is_sorted_so_additions_stay_reviewable():
    names = [n for n in pkg.__all__ if not n.startswith("__")]
    assert names == sorted(names, key=str.casefold)


def test_every_exported_name_resolves_to_a_package_object():
    for name in pkg.__all__:
        value = getattr(pkg, name)
        if name == "__version__":
            assert isinstance(value, str) and value.count(".") == 2
            continue
        assert value.__module__.startswith("mempalace_logstream."), name


def test_the_whole_error_tree_is_exported():
    tree = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.LogstreamError)
    }
    assert tree <= set(pkg.__all__)
    assert issubclass(pkg.ValidationError, ValueError)  # callers may catch the builtin too
    assert issubclass(pkg.NotFoundError, LookupError)
    assert issubclass(pkg.SchemaVersionError, pkg.StorageError)
    assert issubclass(pkg.PeerUnavailableError, pkg.SyncError)


def test_the_core_api_is_exported():
    for name in (
        "LogStore",
        "Event",
        "Artifact",
        "Page",
        "LogstreamError",
        "ValidationError",
        "NotFoundError",
        "ConflictError",
        "ForbiddenError",
        "StorageError",
    ):
        assert name in pkg.__all__


def test_importing_the_package_does_not_load_the_store():
    """The hook path (issue 13) imports the package: LogStore and SQLAlchemy come on first use."""
    code = (
        "import sys, mempalace_logstream as p; assert 'sqlalchemy' not in sys.modules; "
        "from mempalace_logstream import LogStore; assert 'sqlalchemy' in sys.modules; "
        "assert p.LogStore is LogStore and LogStore.__name__ == 'LogStore'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_star_import_gives_exactly_all():
    namespace: dict[str, object] = {}
    exec("from mempalace_logstream import *", namespace)
    assert {k for k in namespace if k != "__builtins__"} == set(pkg.__all__)


def test_the_hub_is_imported_from_its_one_home():
    """The hub's names come from `mempalace_logstream.http` (its `__all__`); the old homes
    `http_app` and `sync_routes` are gone (issue 21), so nothing can import through them."""
    import importlib.util

    from mempalace_logstream import http

    hub_names = {"create_app", "HubSettings", "ExtraMount", "listen_socket", "check_token"}
    assert hub_names | {"is_loopback_host", "version"} == set(http.__all__)
    for old in ("http_app", "sync_routes"):
        assert importlib.util.find_spec(f"mempalace_logstream.{old}") is None, old
