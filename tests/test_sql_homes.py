"""Issue 21 item 2 as a test: SQL lives in the backends. A module outside `backends/`,
`schema.py` and `migrations/` that builds a statement (SQLAlchemy Core's constructors, or SQL
text) is refused; the modules that still do are listed below, and the list only shrinks.

The statements themselves live in `backends/queries/` (SQLAlchemy Core, shared by both
dialects) and in the backend modules (what one dialect does differently); the domain calls
them as functions of an executor and plain values.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mempalace_logstream"
HOMES = ("backends/", "migrations/", "schema.py")
# SQLAlchemy Core constructors that build a statement or a clause of one.
BUILDERS = frozenset(
    {
        *("select", "insert", "update", "delete", "text", "union_all", "union", "exists"),
        *("bindparam", "and_", "or_", "not_", "case", "literal", "literal_column"),
        *("tuple_", "table", "column", "func", "null", "true", "false", "cast", "values"),
        *("distinct", "desc", "asc", "lateral", "join", "outerjoin"),
    }
)
SQL_TEXT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|WITH|BEGIN|SAVEPOINT)\b"
)
# Methods that only statements and their clauses have.
CALLS = (
    *("exec_driver_sql", "where", "order_by", "group_by", "returning", "in_", "not_in"),
    *("is_not", "label", "on_conflict_do_nothing", "on_conflict_do_update", "scalar_subquery"),
)

# module (relative to the package) -> still builds SQL outside the backends. Shrink only.
STILL_BUILDING_SQL: frozenset[str] = frozenset()


def builds_sql(path: Path) -> list[str]:
    """Where `path` builds a statement: `sa.<constructor>`, SQL text, `exec_driver_sql`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    sa_names = {"sa", "sqlalchemy"}
    direct: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sa_names |= {a.asname or a.name for a in node.names if a.name == "sqlalchemy"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            direct |= {a.asname or a.name for a in node.names if a.name in BUILDERS}
    out = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in sa_names
            and node.attr in BUILDERS
        ):
            out.append(f"{line}: sa.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in direct:
            out.append(f"{line}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in CALLS:
            out.append(f"{line}: .{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL_TEXT.match(node.value)
            and not _is_docstring(tree, node)
        ):
            out.append(f"{line}: SQL text")
    return out


def _is_docstring(tree: ast.AST, const: ast.Constant) -> bool:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if body[0].value is const:
                return True
    return False


def _outside_homes() -> list[Path]:
    return [p for p in sorted(PKG.rglob("*.py")) if not str(p.relative_to(PKG)).startswith(HOMES)]


def test_no_module_outside_the_backends_builds_sql():
    bad = []
    for path in _outside_homes():
        where = str(path.relative_to(PKG))
        if where in STILL_BUILDING_SQL:
            continue
        found = builds_sql(path)
        if found:
            bad.append(f"{where}: " + ", ".join(found[:5]))
    assert bad == [], "move the statements into backends/queries/:\n" + "\n".join(bad)


def test_the_list_of_modules_still_building_sql_only_shrinks():
    stale = sorted(
        w for w in STILL_BUILDING_SQL if not (PKG / w).exists() or not builds_sql(PKG / w)
    )
    assert stale == [], f"these no longer build SQL: drop them from STILL_BUILDING_SQL: {stale}"


def test_the_check_sees_what_it_refuses(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""SELECT in a docstring is prose."""\n'
        "import sqlalchemy as sa\n"
        "from sqlalchemy import select\n"
        "def f(conn, t):\n"
        "    conn.exec_driver_sql('PRAGMA x')\n"
        "    return sa.select(t.c.a), select(t), 'SELECT 1', sa.Connection\n",
        encoding="utf-8",
    )
    found = builds_sql(sample)
    assert found == sorted(found, key=lambda s: int(s.split(":")[0])) or found
    kinds = sorted(s.split(": ", 1)[1] for s in found)
    assert kinds == [".exec_driver_sql", "SQL text", "SQL text", "sa.select", "select"]
