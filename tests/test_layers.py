"""STYLE §1 as a test: walk every module's imports with `ast` (lazy imports inside functions
included) and check that imports point down the layer table, never up or sideways.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "mempalace_logstream"
SURFACE_LIBS = ("fastapi", "sse_starlette", "starlette", "typer", "mcp", "httpx", "uvicorn")

# module -> what it must never import (top-level or lazily). Package modules are given as
# their short names; libraries by their top-level distribution module.
RULES: dict[str, tuple[str, ...]] = {
    "errors": ("<package>",),
    "hlc": ("sqlalchemy", "<package>", *SURFACE_LIBS),
    "models": ("sqlalchemy", "pydantic", "store", "engine", *SURFACE_LIBS),
    "validation": ("sqlalchemy", "store", "engine", "schema", *SURFACE_LIBS),
    "schema": ("engine", "store", "alembic", "migrate", *SURFACE_LIBS),
    "engine": ("store", "migrate", *SURFACE_LIBS),
    "store": SURFACE_LIBS,
    "migrate": ("store", *SURFACE_LIBS),
    "config": ("store", "engine", *SURFACE_LIBS),
    "operations": SURFACE_LIBS,
    "tasks": ("sqlalchemy", "store", "engine", "schema", "notify", "sync", *SURFACE_LIBS),
    "notify": ("fastapi", "typer", "mcp", "store"),
    "watch": ("fastapi", "typer", "mcp", "store"),
    # The lean inbox path (issue 13): no CLI framework, no servers, no store in the core.
    "inbox": ("fastapi", "typer", "mcp", "store", "engine", "sqlalchemy", "rich", "httpx", "click"),
    "hook": ("fastapi", "typer", "mcp", "sse_starlette", "rich", "click", "uvicorn"),
    "sync": ("fastapi", "typer", "mcp", "sse_starlette"),
    "replication": SURFACE_LIBS,
    "importer": (*SURFACE_LIBS, "rich"),
    "aio": ("fastapi", "mcp", "typer", "httpx"),
    "hub_client": ("fastapi", "mcp", "typer"),
    "mcp_server": ("fastapi", "typer", "sse_starlette"),
    "http_app": ("typer", "mcp"),
    "sync_routes": ("typer", "mcp"),
}
MIGRATION_RULES = ("store", "engine", "migrate", *SURFACE_LIBS)
# Surfaces never import each other; the CLI alone may do so lazily, inside a command.
SURFACES = {"cli": "cli", "http_app": "http", "sync_routes": "http", "mcp_server": "mcp"}
SOLE_IMPORTERS = {
    "typer": {"cli"},
    "mcp": {"mcp_server"},
    "fastapi": {"http_app", "sync_routes"},
    "sse_starlette": {"http_app"},
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
        assert bad == [], f"{path.relative_to(PKG)} imports {bad}"


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
        for heavy in ("http_app", "mcp_server", "store", "sync", "fastapi", "uvicorn", "mcp"):
            assert not any(heavy in _names(m) for m in eager), f"cli/{path.name} imports {heavy}"


# --------------------------------------------------------------------------- the CLI package
# Inside cli/: shared plumbing at the bottom, the root app above it, command groups on top;
# a group never imports another group. cli module -> the cli modules it may import.
CLI_BASE = ("shared", "options", "filters", "byteio", "root")
CLI_RULES: dict[str, tuple[str, ...]] = {
    "shared": (),
    "testhooks": (),
    "options": ("shared",),
    "byteio": ("shared",),
    "filters": ("shared", "options"),
    "root": ("shared", "options"),
    "events": CLI_BASE,
    "waiting": (*CLI_BASE, "testhooks"),
    "artifacts": CLI_BASE,
    "hub": CLI_BASE,
    "sync": CLI_BASE,
    "admin": CLI_BASE,
    "tail": CLI_BASE,
    "inbox": (*CLI_BASE, "testhooks"),
    "__init__": (
        "root",
        "shared",
        "events",
        "waiting",
        "artifacts",
        "hub",
        "sync",
        "admin",
        "tail",
        "inbox",
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


def test_test_only_seams_live_in_cli_testhooks():
    """The crash hook's variable is read in one clearly named module, nowhere else."""
    homes = [
        str(p.relative_to(PKG))
        for p in sorted(PKG.rglob("*.py"))
        if "LOGSTREAM_TEST_" in p.read_text(encoding="utf-8")
    ]
    assert homes == ["cli/testhooks.py"]


def test_errors_is_importable_alone_and_imports_nothing_from_the_package():
    assert not [m for m, _ in _imports(PKG / "errors.py") if m.startswith("mempalace_logstream")]
