"""STYLE §1 as a test: walk every module's imports with `ast` (lazy imports inside functions
included) and check that imports point down the layer table, never up or sideways.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "mempalace_logstream"
SURFACE_LIBS = ("fastapi", "sse_starlette", "starlette", "typer", "mcp", "httpx", "uvicorn")

BRIDGE_FORBIDS = ("fastapi", "typer", "mcp", "store", "backends", "sqlalchemy", "httpx")
# module -> what it must never import (top-level or lazily). Package modules are given as
# their short names; libraries by their top-level distribution module.
RULES: dict[str, tuple[str, ...]] = {
    "errors": ("<package>",),
    # The deferred import of the statement builders (SQLAlchemy, the schema): stdlib only.
    "lazy": ("<package>", "sqlalchemy", *SURFACE_LIBS),
    # How sender text is shown to a terminal or a model (S-8.11): pure, the standard library.
    "display": ("<package>", "sqlalchemy", "rich", *SURFACE_LIBS),
    "hlc": ("sqlalchemy", "<package>", *SURFACE_LIBS),
    "models": ("sqlalchemy", "pydantic", "store", "backends", *SURFACE_LIBS),
    "validation": ("sqlalchemy", "store", "backends", "schema", *SURFACE_LIBS),
    "confusables": ("sqlalchemy", "<package>", *SURFACE_LIBS),
    # The names of agents with a key and their look-alikes: validation and confusables only.
    "names": ("sqlalchemy", "store", "backends", "schema", *SURFACE_LIBS),
    # An event's metadata read back and redaction tombstones: pure, the standard library.
    "payload": ("sqlalchemy", "<package>", *SURFACE_LIBS),
    # The tables; the dialect column types come from backends/ddl.py.
    "schema": ("store", "alembic", "migrate", *SURFACE_LIBS),
    "store": SURFACE_LIBS,
    "migrate": ("store", *SURFACE_LIBS),
    "config": ("store", "backends", *SURFACE_LIBS),
    "operations": SURFACE_LIBS,
    # The operations' handlers and call rule, without the parameter models (the lean writer).
    "op_handlers": ("pydantic", "op_params", "sqlalchemy", "schema", "backends", *SURFACE_LIBS),
    # The operations' parameters (issue 21): pure descriptions, read by every surface.
    "op_params": ("sqlalchemy", "store", "schema", "backends", *SURFACE_LIBS),
    "presence": ("sqlalchemy", "store", "backends", "schema", "notify", "sync", *SURFACE_LIBS),
    # Presence shared by the hubs of a PostgreSQL log (issue 23): its SQL in backends/.
    "shared_presence": ("sqlalchemy", "schema", "sync", "store", *SURFACE_LIBS),
    "tasks": ("sqlalchemy", "store", "backends", "schema", "notify", "sync", *SURFACE_LIBS),
    # File leases (issue 22): pure rules; the lean hook path will read the globs.
    "leases": ("sqlalchemy", "store", "backends", "schema", "notify", "sync", *SURFACE_LIBS),
    "identity": ("sqlalchemy", "store", "backends", "schema", "notify", "sync", *SURFACE_LIBS),
    "notify": ("fastapi", "typer", "mcp", "store"),
    "watch": ("fastapi", "typer", "mcp", "store"),
    "announcer": ("fastapi", "typer", "mcp", "sse_starlette", "store", "backends", "sqlalchemy"),
    # Riding through hub outages (issue 19): backoff and the lost/back lines; errors only.
    "backoff": ("store", "backends", "sqlalchemy", "watch", "notify", *SURFACE_LIBS),
    # Default cursor files, one per log and agent: on the lean hook path.
    "cursors": ("store", "backends", "sqlalchemy", "rich", "click", "watch", *SURFACE_LIBS),
    # The lean inbox path (issue 13): no CLI framework, no servers, no store in the core.
    "inbox": (
        "fastapi",
        "typer",
        "mcp",
        "store",
        "backends",
        "sqlalchemy",
        "rich",
        "httpx",
        "click",
    ),
    "hook": ("fastapi", "typer", "mcp", "sse_starlette", "rich", "click", "uvicorn"),
    # The lease PreToolUse hook (issue 22): on the hook path, as the inbox is.
    "lease_hook": ("fastapi", "typer", "mcp", "sse_starlette", "rich", "click", "uvicorn"),
    # The Codex queue bridge (issue 19): its records are on the lean hook path; the deliverer
    # follows the inbox through a client and runs `codex queue`.
    "codex_thread": (*BRIDGE_FORBIDS, "click", "rich"),
    "deliver": (*BRIDGE_FORBIDS, "sse_starlette"),
    "sync": ("fastapi", "typer", "mcp", "sse_starlette"),
    # The NATS JetStream bridge (issue 24): the peer apply and the store's public API; no SQL.
    "natsbridge": ("backends", "sqlalchemy", "schema", "http", "mcp_server", "cli", *SURFACE_LIBS),
    "replication": SURFACE_LIBS,
    "importer": (*SURFACE_LIBS, "rich"),
    "workflows": ("sqlalchemy", "backends", "schema", *SURFACE_LIBS),
    "agents": ("sqlalchemy", "backends", "schema", *SURFACE_LIBS),
    "doctor": ("sqlalchemy", "backends", "schema", *SURFACE_LIBS),
    "backends": ("store", "replication", "importer", "sync", "watch", *SURFACE_LIBS),
    "aio": ("fastapi", "mcp", "typer", "httpx"),
    # The servers' hop to a worker thread (issue 25): the standard library and anyio only.
    "workers": ("<package>", "sqlalchemy", *SURFACE_LIBS),
    # Monitor mode (issue 19): the inbox in Monitor-tool lines; lean, as the inbox is.
    "monitor": ("fastapi", "typer", "mcp", "store", "backends", "sqlalchemy", "rich", "httpx"),
    # The reconnect policy of hub clients (issue 19): errors in, retries out; no transport.
    "reconnect": ("fastapi", "mcp", "typer", "httpx", "sse_starlette", "store", "sqlalchemy"),
    "waits": ("fastapi", "mcp", "typer", "httpx", "sse_starlette"),
    # Reminders for unclaimed tasks (issue 20): the store's public API, no SQL, no surface.
    # The delivery ledger and wakeable presence (issue 20): its SQL in backends/queries.
    "deliveries": ("sqlalchemy", "engine", "schema", "sync", *SURFACE_LIBS),
    "delivery_hook": ("sqlalchemy", "backends", "engine", "schema", "sync", *SURFACE_LIBS),
    "reminders": ("sqlalchemy", "backends", "schema", "sync", *SURFACE_LIBS),
    "hub_client": ("fastapi", "mcp", "typer"),
    "http_errors": ("fastapi", "mcp", "typer", "sse_starlette", "store", "backends", "sync"),
    "mcp_server": ("fastapi", "typer", "sse_starlette"),
    "http": ("typer", "mcp"),
}
MIGRATION_RULES = ("store", "migrate", *SURFACE_LIBS)
# Of the backends, a migration uses only the guards' DDL (it passes its own frozen lists).
MIGRATION_BACKENDS = {"mempalace_logstream.backends.ddl"}
# Surfaces never import each other; the CLI alone may do so lazily, inside a command.
SURFACES = {
    "cli": "cli",
    "http": "http",
    "mcp_server": "mcp",
}
SOLE_IMPORTERS = {
    "typer": {"cli"},
    "mcp": {"mcp_server"},
    "fastapi": {"http"},
    "sse_starlette": {"http"},
    "nats": {"natsbridge"},
}


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, is_top_level) for every import statement in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    out: list[tuple[str, bool]] = []
    type_only = {  # `if TYPE_CHECKING:` blocks never run
        id(n)
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = "mempalace_logstream" + ("." + node.module if node.module else "")
            else:
                base = node.module or ""
            if base == "mempalace_logstream":
                out += [(f"{base}.{alias.name}", id(node) in top) for alias in node.names]
            else:
                out.append((base, id(node) in top))
    return out


def _names(module: str) -> set[str]:
    """What a forbidden-list entry can match for one imported module name."""
    if module.startswith("mempalace_logstream"):
        parts = module.split(".")
        return {"<package>", parts[1]} if len(parts) > 1 else {"<package>"}
    return {module.split(".")[0]}


def _modules() -> list[str]:
    """The package's modules by short name; a subpackage (cli/) counts as one module."""
    files = [p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")]
    return sorted(files + [p.parent.name for p in PKG.glob("*/__init__.py")])


def _files(module: str) -> list[Path]:
    """The source files of a module: its .py file, or every file of a subpackage."""
    path = PKG / f"{module}.py"
    return [path] if path.exists() else sorted((PKG / module).glob("*.py"))


def _all_imports(module: str) -> list[tuple[str, bool]]:
    return [imp for path in _files(module) for imp in _imports(path)]


@pytest.mark.parametrize("module", sorted(RULES))
def test_core_modules_import_only_downwards(module):
    if not _files(module):
        pytest.fail(f"{module}.py is listed in the layer table but does not exist")
    bad = [m for m, _top in _all_imports(module) if _names(m) & set(RULES[module])]
    assert bad == [], f"{module}.py imports {bad}, which STYLE §1 forbids"


def test_every_package_module_is_covered_by_the_layer_table():
    missing = [m for m in _modules() if m not in RULES and m not in SURFACES]
    assert missing == [], f"add {missing} to the layer table in tests/test_layers.py"


def test_migrations_import_only_the_schema():
    for path in sorted((PKG.parent / "migrations").rglob("*.py")):
        bad = [m for m, _top in _imports(path) if _names(m) & set(MIGRATION_RULES)]
        bad += [
            m
            for m, _top in _imports(path)
            if "backends" in _names(m) and m not in MIGRATION_BACKENDS
        ]
        assert bad == [], f"{path.relative_to(PKG.parent)} imports {bad}"


def test_surfaces_never_import_each_other_except_the_cli_lazily():
    for module, group in SURFACES.items():
        for imported, top in _all_imports(module):
            other = _names(imported) - {"<package>"}
            for name in other:
                if name in SURFACES and SURFACES[name] != group:
                    assert module == "cli" and not top, f"{module}.py imports surface {name} " + (
                        "at module level" if top else "(only the CLI may, lazily)"
                    )


def test_each_framework_has_exactly_one_home():
    for module in _modules():
        for imported, _top in _all_imports(module):
            lib = imported.split(".")[0]
            if lib in SOLE_IMPORTERS:
                assert module in SOLE_IMPORTERS[lib], f"{module}.py imports {lib}"


def test_the_cli_imports_servers_and_the_store_lazily():
    for path in _files("cli"):
        eager = {m for m, top in _imports(path) if top}
        for heavy in ("http", "mcp_server", "store", "sync", "fastapi", "uvicorn", "mcp"):
            assert not any(heavy in _names(m) for m in eager), f"cli/{path.name} imports {heavy}"


# --------------------------------------------------------------------------- the CLI package
# Inside cli/: shared plumbing at the bottom, the root app above it, command groups on top;
# a group never imports another group. cli module -> the cli modules it may import.
CLI_BASE = ("shared", "options", "filters", "byteio", "root", "plain", "writes")
CLI_RULES: dict[str, tuple[str, ...]] = {
    # What the typer commands and the fast path share (issue 25), and the fast path: no typer.
    "plain": (),
    "writes": ("plain",),
    "fastargs": (),
    "fast": ("plain", "writes", "fastargs"),
    "shared": ("plain", "writes"),
    "testhooks": (),
    "announce": (),
    "options": ("shared",),
    "byteio": ("shared", "writes"),
    "filters": ("shared", "options", "plain"),
    "root": ("shared", "options", "plain"),
    "events": CLI_BASE,
    "waiting": (*CLI_BASE, "testhooks", "announce", "deliver"),
    "deliver": (*CLI_BASE, "testhooks", "announce"),
    "artifacts": CLI_BASE,
    "hub": CLI_BASE,
    "mcp_stdio": (*CLI_BASE, "testhooks", "announce"),
    "tasks": CLI_BASE,
    "presence": CLI_BASE,
    "lease": CLI_BASE,
    "harness": CLI_BASE,
    "sync": CLI_BASE,
    "admin": CLI_BASE,
    "tail": (*CLI_BASE, "announce"),
    "agent": CLI_BASE,
    "bridge": CLI_BASE,
    "delivery": CLI_BASE,
    "inbox": (*CLI_BASE, "testhooks"),
    "__init__": (
        *("root", "shared", "events", "waiting", "artifacts", "hub", "mcp_stdio", "sync"),
        *("admin", "tasks", "tail", "inbox", "deliver", "presence", "agent"),
        "delivery",
    ),
}


def _cli_imports(path: Path) -> set[str]:
    """The cli modules a cli file imports (`from mempalace_logstream.cli import x` too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "mempalace_logstream.cli"
        ):
            parts = (node.module or "").split(".")
            out |= {parts[2]} if len(parts) > 2 else {a.name for a in node.names}
    return out


def test_every_cli_module_is_in_the_cli_layer_table():
    names = sorted(p.stem for p in _files("cli"))
    assert names == sorted(CLI_RULES), "add the new cli module to CLI_RULES in test_layers.py"


@pytest.mark.parametrize("module", sorted(CLI_RULES))
def test_cli_modules_import_only_downwards(module):
    bad = _cli_imports(PKG / "cli" / f"{module}.py") - set(CLI_RULES[module]) - {module}
    assert not bad, f"cli/{module}.py imports cli modules {sorted(bad)}"


# --------------------------------------------------------------------------- the HTTP package
# Inside http/: settings and the error shape at the bottom, route modules above them, the app
# on top; a route module never imports another. http module -> the http modules it may import.
HTTP_BASE = ("settings", "responses", "params")
HTTP_RULES: dict[str, tuple[str, ...]] = {
    "settings": (),
    "responses": (),
    "params": (),
    "auth": (),
    "session": (),
    "guard": ("settings", "responses", "session", "auth"),
    "pages": HTTP_BASE,
    "ops": HTTP_BASE,
    "sse": HTTP_BASE,
    "sync_routes": HTTP_BASE,
    "presence_routes": HTTP_BASE,
    "dashboard_routes": (*HTTP_BASE, "session"),
    "app": (
        *HTTP_BASE,
        "guard",
        "pages",
        "ops",
        "sse",
        "sync_routes",
        "presence_routes",
        "dashboard_routes",
    ),
    # uvicorn's HTTP protocol writing each response in one socket write (issue 25): uvicorn only.
    "one_write": (),
    # The uvicorn server that stops the app cleanly (issue 19): above the app.
    "server": ("app", "one_write"),
    "__init__": ("app", "settings"),
}


def _http_imports(path: Path) -> set[str]:
    """The http modules an http file imports (`from mempalace_logstream.http import x` too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "mempalace_logstream.http"
        ):
            parts = (node.module or "").split(".")
            out |= {parts[2]} if len(parts) > 2 else {a.name for a in node.names}
    return out


def test_every_http_module_is_in_the_http_layer_table():
    names = sorted(p.stem for p in _files("http"))
    assert names == sorted(HTTP_RULES), "add the new http module to HTTP_RULES in test_layers.py"


@pytest.mark.parametrize("module", sorted(HTTP_RULES))
def test_http_modules_import_only_downwards(module):
    bad = _http_imports(PKG / "http" / f"{module}.py") - set(HTTP_RULES[module]) - {module}
    assert not bad, f"http/{module}.py imports http modules {sorted(bad)}"


def test_test_only_seams_live_in_cli_testhooks():
    """The crash hook's variable is read in one clearly named module, nowhere else."""
    homes = [
        str(p.relative_to(PKG))
        for p in sorted(PKG.rglob("*.py"))
        if "LOGSTREAM_TEST_" in p.read_text(encoding="utf-8")
    ]
    assert homes == ["cli/testhooks.py"]


def _is_reexport(node: ast.stmt) -> bool:
    """An import from the package, `__all__ = …`, an alias `a = b`, a docstring or a future."""
    if isinstance(node, ast.ImportFrom):
        return (
            node.module == "__future__"
            or bool(node.level)
            or (node.module or "").startswith("mempalace_logstream")
        )
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.Assign):
        target = node.targets[0]
        return isinstance(node.value, ast.Name) or (
            isinstance(target, ast.Name) and target.id == "__all__"
        )
    return False


def test_no_module_is_an_old_home_re_exporting_another():
    """A moved module leaves no shim behind (issue 21): its importers point at the new home.
    A module (not a package's __init__) made only of package imports and aliases is one."""
    shims = [
        str(path.relative_to(PKG))
        for path in sorted(PKG.rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and all(_is_reexport(n) for n in ast.parse(path.read_text(encoding="utf-8")).body)
    ]
    assert shims == [], f"{shims} only re-export other modules: import from the real home"


def test_errors_is_importable_alone_and_imports_nothing_from_the_package():
    assert not [m for m, _ in _imports(PKG / "errors.py") if m.startswith("mempalace_logstream")]


# --------------------------------------------------------------------------- the storage seam
# Only the backends name a dialect. engine.py is the connection factory: it dispatches the URL
# scheme and opens SQLite files (PRAGMAs, read-only and immutable modes), which is below the
# store and its backends (a backend receives an engine made there). schema.py may name
# dialect-specific types (`with_variant`); migrations live outside the package.
DIALECT_HOMES = {"backends"}
DIALECT_MODULES = ("sqlite3", "psycopg")
DIALECT_NAMES = ("sqlite", "postgresql")


def _dialect_mentions(path: Path) -> list[str]:
    """Imports of a DBAPI driver, `….dialect.name`, and the dialect names as string literals."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] in DIALECT_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").split(".")[0] in DIALECT_MODULES:
                out.append(node.module or "")
        elif isinstance(node, ast.Attribute) and node.attr == "name":
            if isinstance(node.value, ast.Attribute) and node.value.attr == "dialect":
                out.append(f"{ast.unparse(node)} (line {node.lineno})")
        elif isinstance(node, ast.Constant) and node.value in DIALECT_NAMES:
            out.append(f"{node.value!r} (line {node.lineno})")
    return out


@pytest.mark.parametrize("module", [m for m in _modules() if m not in DIALECT_HOMES])
def test_only_the_backends_name_a_dialect(module):
    bad = [f"{p.name}: {m}" for p in _files(module) for m in _dialect_mentions(p)]
    assert bad == [], f"{module} names a dialect; move the decision into backends/: {bad}"


# --------------------------------------------------------------------------- private names
# No module touches another module's private names, nor a library's: an attribute access
# `x._name` (x neither `self` nor `cls`) is refused unless `_name` is defined in the accessing
# file, and `from m import _name` is refused outright. An allowance would name its reason;
# none is left (the last ones were inside replication/, issue 21).
# (file name, private name) -> why that file may read it.
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("hook.py", "_exit"): "os._exit, the standard library's documented exit without teardown",
    ("mcp_stdio.py", "_exit"): "os._exit: a log that fails after `initialize` ends stdio now",
}
# file -> the private names it may import from its sibling modules.
PRIVATE_IMPORTS_ALLOWED: dict[str, frozenset[str]] = {}


def _private_definitions(path: Path) -> set[str]:
    """Private names a file defines: functions, classes, assignments, attributes of self."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            out.add(node.asname)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


# A NamedTuple's public methods carry an underscore only so as not to clash with its fields.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})


def _private_accesses(path: Path) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in NAMEDTUPLE_API:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        out.append((node.attr, node.lineno))
    return out


def _private_imports(path: Path) -> list[tuple[str, int]]:
    """(name, line) of every `from <package module> import _name` in the file."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if not (node.level or (node.module or "").startswith("mempalace_logstream")):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                out.append((alias.name, node.lineno))
    return out


def test_no_module_touches_another_modules_private_names():
    files = sorted(PKG.rglob("*.py"))
    bad = []
    for path in files:
        defined = _private_definitions(path)
        for name, line in _private_accesses(path):
            if name in defined or (path.name, name) in PRIVATE_ALLOWED:
                continue
            bad.append(f"{path.relative_to(PKG)}:{line} reads another module's .{name}")
    assert bad == [], "\n".join(bad)


def test_no_module_imports_another_modules_private_names():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        where = str(path.relative_to(PKG))
        allowed = PRIVATE_IMPORTS_ALLOWED.get(where, frozenset())
        bad += [
            f"{where}:{line} imports {n}" for n, line in _private_imports(path) if n not in allowed
        ]
    assert bad == [], "make the name public, or merge the modules:\n" + "\n".join(bad)


def test_the_private_import_allowances_are_all_still_needed():
    """An allowance the code no longer uses is dropped, so the list only shrinks."""
    for where, names in PRIVATE_IMPORTS_ALLOWED.items():
        used = {n for n, _line in _private_imports(PKG / where)}
        assert names <= used, f"{where} no longer imports {sorted(names - used)}: drop them"


def test_the_private_name_checks_see_what_they_refuse(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from mempalace_logstream.hlc import _HLC_RE\n"
        "from mempalace_logstream import validation as v\n"
        "def f(client, _own):\n"
        "    return client._transport, v._check_text, _own._x, self._fine\n",
        encoding="utf-8",
    )
    assert _private_imports(sample) == [("_HLC_RE", 1)]
    assert [n for n, _ in _private_accesses(sample) if n not in _private_definitions(sample)] == [
        "_transport",
        "_check_text",
        "_x",
    ]


# --------------------------------------------------------------------------- the sync package
# Inside sync/: limits and the protocol at the bottom, the peers above them, then the round's
# parts, the round, peers.json and the loop on top. sync module -> the sync modules it may import.
SYNC_RULES: dict[str, tuple[str, ...]] = {
    "limits": (),
    "protocol": (),
    "sockets": ("limits",),
    "vector": ("protocol",),
    "local": ("limits", "protocol"),
    "http_peer": ("limits", "protocol", "sockets", "vector"),
    "holes": ("limits", "protocol", "vector"),
    "pipeline": ("limits", "protocol"),
    "rounds": ("limits", "protocol", "vector", "holes", "pipeline"),
    "peers": ("limits", "protocol", "http_peer", "rounds"),
    "loop": ("limits", "peers"),
}
SYNC_ROOT = ("limits", "protocol", "sockets", "vector", "local", "http_peer", "holes")
SYNC_RULES["__init__"] = (*SYNC_ROOT, "pipeline", "rounds", "peers", "loop")


def _sync_imports(path: Path) -> set[str]:
    """The sync modules a sync file imports (`from mempalace_logstream.sync.x import y`)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if parts[:2] == ["mempalace_logstream", "sync"] and len(parts) > 2:
                out.add(parts[2])
    return out


def test_every_sync_module_is_in_the_sync_layer_table():
    names = sorted(p.stem for p in _files("sync"))
    assert names == sorted(SYNC_RULES), "add the new sync module to SYNC_RULES in test_layers.py"


@pytest.mark.parametrize("module", sorted(SYNC_RULES))
def test_sync_modules_import_only_downwards(module):
    bad = _sync_imports(PKG / "sync" / f"{module}.py") - set(SYNC_RULES[module]) - {module}
    assert not bad, f"sync/{module}.py imports sync modules {sorted(bad)}"


def test_sync_peers_declare_their_capabilities():
    """A round asks a peer what it can do; our peers say so rather than being probed."""
    from mempalace_logstream.sync import Capabilities, HttpPeer, LocalPeer

    for cls in (LocalPeer, HttpPeer):
        assert isinstance(cls.__dict__.get("capabilities"), property), cls
    assert Capabilities.__dataclass_params__.frozen  # type: ignore[attr-defined]
