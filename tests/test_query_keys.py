"""Issue 21 item 2: each statement shape of `backends/queries/` has one cache key, named
after its module (`"tasks.doc"`, `("guards.pair", n, k)`), so no two modules compile under
the same key and the same statement is not compiled under two keys from two homes."""

from __future__ import annotations

import ast
from pathlib import Path

QUERIES = Path(__file__).resolve().parents[1] / "mempalace_logstream" / "backends" / "queries"
RUNS = {"rows", "run", "insert"}


def _keys(path: Path) -> list[str]:
    """The string keys (or the string heads of tuple keys) passed to `ex.rows/run/insert`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in RUNS or not node.args:
            continue
        key = node.args[0]
        if isinstance(key, ast.Tuple) and key.elts:
            key = key.elts[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            out.append(key.value)
    return out


def _modules() -> list[Path]:
    return [p for p in sorted(QUERIES.glob("*.py")) if p.name != "__init__.py"]


def test_every_key_is_prefixed_with_its_module():
    bad = [f"{p.name}: {k}" for p in _modules() for k in _keys(p) if not k.startswith(f"{p.stem}.")]
    assert bad == []


def test_no_key_is_used_by_two_modules():
    seen: dict[str, str] = {}
    shared = []
    for path in _modules():
        for key in set(_keys(path)):
            if key in seen:
                shared.append(f"{key}: {seen[key]} and {path.name}")
            seen[key] = path.name
    assert shared == []
    assert len(seen) >= 30  # the check reads the modules it guards


def test_the_check_sees_keys(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(ex, n):\n"
        "    ex.rows('sample.a', b, {})\n"
        "    ex.run(('sample.b', n), b, {})\n"
        "    ex.insert('other.c', t, [])\n",
        encoding="utf-8",
    )
    assert _keys(sample) == ["sample.a", "sample.b", "other.c"]
