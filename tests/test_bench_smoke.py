"""The benchmarks in CI (issue 21): every bench runs end to end at smoke sizes, through the one
bench command (`bench/run.py --smoke --only NAME`, a test per bench so that a failure names it),
and prints its headline figures with a number in them; no bench reaches for a private name of
the package. The store bench at quick sizes also runs its reference side (the one that does:
`LOGSTREAM_REQUIRE_REF` in CI).

Not a performance assertion: a smoke run checks that the benches still run. Logs and caches go
to a scratch directory (run.py's own in smoke mode, `tmp_path` here), never to ~/.cache.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import common
from bench import run as bench_run

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "bench"
NUMBER = r"-?\d[\d,]*\.\d+"
MS = rf"{NUMBER} ms"
# Benches that reach PostgreSQL: their smoke run gets the test session's database.
PG_BENCHES = {"pg", "wake", "tasks", "task_late", "hubs"}


def _target(bench: str, what: str, unit: str = "ms") -> str:
    return rf"^\[target\] {bench}: {re.escape(what)} = {NUMBER} {unit}  \(target "


def _ratio(bench: str, what: str) -> str:
    return rf"^\[ratio\] {bench}: {re.escape(what)} = {NUMBER}\b"


def _tasks_lines(backend: str) -> list[str]:
    lines = [
        _target("tasks", f"{backend} task_status p50, thread of 20 events"),
        *(
            _target("tasks", f"{backend} task_list p50 {what}")
            for what in ("state=open", "state=working", "to_agent=agent-07, state=open")
        ),
    ]
    for tag in ("(c)/(a)", "(d)/(a)", "(b)/(a)"):
        lines.append(rf"^\[ratio\] tasks: {backend} append p50 {re.escape(tag)} .* = {NUMBER}$")
    return lines


# bench -> lines its smoke run must print (regular expressions, multiline): its headline figures.
EXPECTED: dict[str, list[str]] = {
    "store": [
        _ratio("store", "append 1 writer FULL ours/raw"),
        _ratio("store", "append 8 threads FULL ours/raw"),
        _target("store", "list p50 inbox to_agent=agent-07 (newest 50) (500 events)"),
    ],
    "wake": [
        _target("wake", "ours, SQLite wake p50 after commit"),
        _ratio("wake", "per-poll p50 1,000 / 500 events (flat = 1)"),
    ],
    "cli_wait": [
        _target("cli_wait", f"ours CLI wait {q}, append returned -> output line")
        for q in ("p50", "p95")
    ],
    "cli": [
        *(_target("cli", f"ours local {cmd} wall p50") for cmd in ("list", "append", "tail")),
        *(_target("cli", f"ours --hub {cmd} wall p50") for cmd in ("list", "get", "inbox")),
        _target("cli", "serve until /healthz p50", "s"),
        _target("cli", "mcp initialize answered p50", "s"),
    ],
    "channel": [_target("channel", "channel notification p50 after commit")],
    "hubs": [_ratio("hubs", "appends/s 2 hubs / 1 hub"), _ratio("hubs", "SSE p95 1 hub / 2 hubs")],
    "codex": [_target("codex", "codex queue invocation p50 after commit")],
    "nats": [
        _ratio("nats", "events/s bridge / HTTP sync round"),
        *(_target("nats", f"bridge append -> readable {q}") for q in ("p50", "p95")),
    ],
    "hub": [
        _target("hub", "SSE delivery p95, 3 subscribers"),
        _target("hub", "hub peak RSS with 3 subscribers", "MB"),
        _target("hub", "ours HTTP append events/s, 1 keep-alive client (light)", "events/s"),
    ],
    "pg": [
        _ratio("pg", "append FULL 1 writer pg ours/raw psycopg"),
        _ratio("pg", "append FULL 8 writers pg ours/raw psycopg serialized"),
        _ratio("pg", "append FULL 8 writers pg/sqlite (ours)"),
        _target("pg", "wake postgresql p50"),
    ],
    "sync": [rf"^ours<-ours\s+{NUMBER}\s+[\d,]+\s+{NUMBER}\s+yes$"],
    "tasks": [*_tasks_lines("SQLite"), r"\(a\) pays nothing for the lifecycle"],
    "task_late": [_ratio("task_late", "late/in order, 100 events, batch 20, SQLite")],
    "presence": [_target("presence", "expiry told late, max")],
    "ledger": [
        _ratio("ledger", f"read p50 with / without recording ({w}, 50 events)")
        for w in ("fresh pages", "re-reads")
    ],
    "waits": [_ratio("waits", f"append p50 5 {w} waits / none") for w in ("open", "abandoned")],
    "monitor": [
        _target("monitor", f"Monitor line p50 after commit ({where})")
        for where in ("local", "--hub")
    ],
    "identity": [
        *(
            rf"^\[measure\] identity: {re.escape(what)}.* p50 = {NUMBER} µs$"
            for what in ("Ed25519 sign alone", "sign (encode + Ed25519)", "verdict")
        ),
        *(
            rf"^\[measure\] identity: {re.escape(what)}: {NUMBER} -> {NUMBER}"
            for what in (
                "append (unsigned vs signed)",
                "sync apply (unsigned log vs signed, verified)",
            )
        ),
    ],
    "doctor": [r"^doctor on 1,000 events", r"peak RSS", r"^seconds per check: \{"],
    "hook": [_target("hook", f"lean, {row} p50") for row in ("empty inbox", "one new message")],
    "lease_acquire": [
        _target("lease_acquire", "acquire p50 at 20 leases"),
        _ratio("lease_acquire", "overlap rule p50 pairwise / indexed (20 leases)"),
    ],
    "lease_hook": [
        _target("lease_hook", f"{where}, {what} p50")
        for where in ("local", "hub")
        for what in ("denied", "allowed")
    ],
    "mcp_tools": [
        _target("mcp_tools", f"tools/list bytes, logstream mcp{hub} (default)", "bytes")
        for hub in ("", " --hub")
    ]
    + [_target("mcp_tools", "logstream mcp initialize p50", "s")],
    "dashboard": [
        r"^page load, 500 events in the log$",
        r"^burst: 50 events/s for 0\.5 s from another process$",
        r"^pages\s+hub RSS",
    ],
}
PG_EXPECTED: dict[str, list[str]] = {
    "wake": [_target("wake", "ours, PostgreSQL wake p50 after commit")],
    "tasks": _tasks_lines("PostgreSQL"),
    "task_late": [_ratio("task_late", "late/in order, 100 events, batch 20, PostgreSQL")],
}


def _uses_reference(name: str) -> bool:
    return "reference_unless(" in (BENCH_DIR / f"bench_{name}.py").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- what runs


def test_run_py_runs_every_bench_module_and_each_has_expected_lines():
    files = sorted(p.stem.removeprefix("bench_") for p in BENCH_DIR.glob("bench_*.py"))
    assert sorted(bench_run.BENCHES) == files, "add the new bench to bench/run.py's BENCHES"
    assert sorted(EXPECTED) == files, "say what the new bench's smoke run prints in EXPECTED"


def test_only_a_smoke_run_runs_benches_side_by_side(capsys: pytest.CaptureFixture[str]):
    assert bench_run.parse_args(["--smoke"]).jobs == bench_run.SMOKE_JOBS > 1
    assert bench_run.parse_args([]).jobs == bench_run.parse_args(["--quick"]).jobs == 1
    for argv in (["--jobs", "2"], ["--quick", "--jobs", "2"], ["--smoke", "--jobs", "0"]):
        with pytest.raises(SystemExit):
            bench_run.parse_args(argv)
    assert "figures need the machine to themselves" in capsys.readouterr().err


def test_every_bench_takes_smoke_and_meets_the_reference_only_through_reference_unless():
    """`--smoke` is how CI runs a bench (and run.py passes `--quick` to all of them);
    `common.reference_unless` is what skips the reference there, with its line. A direct
    `common.reference()` would try to build the reference in CI."""
    for path in sorted(BENCH_DIR.glob("bench_*.py")):
        text = path.read_text(encoding="utf-8")
        assert "common.add_smoke(" in text, f"{path.name} takes no --smoke"
        assert '"--quick"' in text, f"{path.name} takes no --quick (bench/run.py --quick)"
        assert "common.reference()" not in text, f"{path.name}: use common.reference_unless"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.pg) if n in PG_BENCHES else n for n in bench_run.BENCHES],
)
def test_every_bench_runs_at_smoke_sizes(name: str, request: pytest.FixtureRequest) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LOGSTREAM_BENCH_PG",)}
    if name in PG_BENCHES:
        env["LOGSTREAM_BENCH_PG"] = request.getfixturevalue("pg_database")
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--smoke", "--only", name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout
    tail = out[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = out.split("######## summary (smoke sizes")[1]
    assert re.search(rf"^{name}\s+ok\s", summary, re.M), summary
    expected = EXPECTED[name] + (PG_EXPECTED.get(name, []) if name in PG_BENCHES else [])
    for line in expected:
        assert re.search(line, out, re.M), f"{name}: no line matching {line!r} in:\n{tail}"
    if _uses_reference(name):  # skipped on a line of its own, never silently
        assert common.REF_SKIPPED in out, tail
    assert "PostgreSQL not measured" not in out, tail


# --------------------------------------------------------------------------- public names only


def _private_uses(tree: ast.AST) -> list[str]:
    """`from m import _x`, an import of a private module, `obj._x` (read, written or deleted;
    `self`/`cls` aside) and `getattr/setattr(obj, "_x")` in one parsed file."""
    found: list[str] = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"from {node.module} import {a.name}" for a in node.names if private(a.name)]
            if any(private(part) for part in (node.module or "").split(".")):
                found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Import):
            found += [
                f"import {a.name}" for a in node.names if any(map(private, a.name.split(".")))
            ]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id in ("getattr", "setattr", "delattr", "hasattr") and len(args) > 1:
                if isinstance(args[1], ast.Constant) and private(str(args[1].value)):
                    found.append(ast.unparse(node))
    return found


def _code_strings(tree: ast.AST) -> list[ast.AST]:
    """The Python source held in string constants that use our package (the scripts a bench
    runs in a child process), parsed."""
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "mempalace_logstream" in node.value and "import" in node.value:
                try:
                    out.append(ast.parse(textwrap.dedent(node.value)))
                except SyntaxError:
                    continue
    return out


def test_the_benches_use_only_public_names_of_the_package():
    """A bench measures what a user can call: no `store._x`, no `from m import _y`, no private
    module attribute patched, in the bench files or in the scripts they run in a child."""
    bad: list[str] = []
    for path in sorted(BENCH_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for sub in [tree, *_code_strings(tree)]:
            bad += [f"{path.name}: {use}" for use in _private_uses(sub)]
    assert bad == [], "\n".join(bad)


def test_the_private_name_walk_sees_what_it_refuses():
    code = textwrap.dedent(
        '''
        from mempalace_logstream.store import reads, _hidden
        import mempalace_logstream._x
        HUB = """
        from mempalace_logstream import LogStore
        LogStore.open(":memory:")._submit(None)
        """
        store._insert_event(1)
        reads._SPLIT_TO_AGENT_MAX = 0
        setattr(reads, "_cache", None)
        self._ok = cls._ok = x.__dict__
        '''
    )
    tree = ast.parse(code)
    found = _private_uses(tree) + [u for sub in _code_strings(tree) for u in _private_uses(sub)]
    assert sorted(found) == sorted(
        [
            "from mempalace_logstream.store import _hidden",
            "import mempalace_logstream._x",
            "store._insert_event",
            "reads._SPLIT_TO_AGENT_MAX",
            "setattr(reads, '_cache', None)",
            "LogStore.open(':memory:')._submit",
        ]
    )


# --------------------------------------------------------------------------- the reference side


@pytest.mark.slow
def test_quick_store_bench_prints_ratios_side_by_side(tmp_path: Path) -> None:
    """`bench/run.py --quick --only store`: ours vs raw sqlite3 vs the reference, one run."""
    env = {
        **os.environ,
        "LOGSTREAM_BENCH_CACHE": str(tmp_path / "cache"),
        "LOGSTREAM_BENCH_TMP": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--only", "store"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    ref_missing = "reference unavailable:" in out
    if os.environ.get("LOGSTREAM_REQUIRE_REF"):
        assert not ref_missing, out[-2000:]

    def value_of(what: str) -> str:
        match = re.search(rf"^\[(?:ratio|target)\] store: {re.escape(what)} = (\S+)", out, re.M)
        assert match, f"no line for {what!r} in:\n{out[-3000:]}"
        return match.group(1)

    for what in (
        "append 1 writer FULL ours/raw",
        "append 1 writer NORMAL ours/raw",
        "append 8 threads FULL ours/raw",
    ):
        assert re.fullmatch(NUMBER, value_of(what)), what
    for what in ("append 1 writer FULL ours/reference", "append 8 threads FULL ours/reference"):
        value = value_of(what)
        assert re.fullmatch(NUMBER, value) or (ref_missing and value == "n/a"), (what, value)
    assert re.search(r"\(target >= 0\.85: (MET|NOT MET)\)", out)
    assert re.search(r"\(target >= 1: (MET|NOT MET|NOT MEASURED)\)", out)
    inbox = re.search(rf"^\[target\] store: list p50 inbox .* = ({NUMBER}) ms", out, re.M)
    assert inbox, out[-3000:]
    # The store's inbox plan is printed and has no sort step.
    plans = out.split("EXPLAIN QUERY PLAN of the page query:")[1]
    plan = plans.split("ours event_list:")[1].split("raw sqlite3")[0]
    assert "MERGE (UNION ALL)" in plan and "TEMP B-TREE" not in plan, plan
    summary = out.split("######## summary")[1]
    assert re.search(r"^store\s+ok\s", summary, re.M), summary
    assert "[ratio] store: append 1 writer FULL ours/raw" in summary
