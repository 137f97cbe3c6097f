"""What a context hook costs (issue 13): wall time of one `logstream inbox --agent A --hook
claude` process on a warm log, as Claude Code runs it on every prompt (hook JSON on stdin).

    python bench/bench_hook.py [--samples N] [--events N] [--quick | --smoke]

Rows, all in the same run, each a fresh process per sample:
  lean       `python -m mempalace_logstream inbox ...`: the fast path, dispatched before typer,
             reading the SQLite log with the lean reader (store/lean.py: stdlib sqlite3)
  store      the same fast path reading through LogStore (`run_inbox(lean=False)`): what the
             lean path cost before the lean reader (SQLAlchemy and the store imported)
  typer      the same command through the typer app (`cli.main`), which reads through the store
  empty/new  "empty" = no unseen mail (the common case: exit 0, nothing printed); "new" = one
             message appended (untimed) before each sample, so it is printed and checkpointed
  floors     `python -c pass` (the interpreter), `import mempalace_logstream` (the package:
             errors and models; LogStore loads on first use) and `import
             mempalace_logstream.store.core` (the store with SQLAlchemy)
"Warm": the log is in the page cache and the package's bytecode is cached, as in an installed
package (the children write it to a scratch PYTHONPYCACHEPREFIX even under
PYTHONDONTWRITEBYTECODE; the untimed warm-up run of each row fills it).
Never a test; figures go to the final report and the README.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "hook"
TARGET_MS = 100.0
STDIN = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "next step", "cwd": "/"})
TYPER = (
    "import sys; from mempalace_logstream.cli.root import main; sys.argv[0] = 'logstream'; main()"
)
STORE = (
    "import sys; from mempalace_logstream import hook; "
    "sys.exit(hook.run_inbox(**hook.parse_argv(sys.argv[1:]), lean=False))"
)
PYCACHE: dict[str, str] = {}  # the children's bytecode cache, set by main()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_hook.py", description=__doc__)
    p.add_argument("--samples", type=int, default=None, help="processes per row (default 30)")
    p.add_argument("--events", type=int, default=None, help="events in the log (default 2000)")
    p.add_argument("--quick", action="store_true", help="10 processes per row")
    common.add_smoke(p)
    args = p.parse_args(argv)
    args.samples = args.samples or (1 if args.smoke else 10 if args.quick else 30)
    args.events = args.events or (50 if args.smoke else 2000)
    return args


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO), "NO_COLOR": "1", **PYCACHE}
    if PYCACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time(cmd: list[str], stdin: str = "") -> tuple[float, float]:
    """(wall seconds from spawn to exit, CPU seconds user + system) of one process; raises
    when it fails. CPU time says what the call costs when other work shares the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=_env())
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu


def _fill(db: Path, n: int) -> None:
    import dataclasses

    from mempalace_logstream.store import LogStore
    from mempalace_logstream.tasks import guards

    store = LogStore.open(f"sqlite:///{db}", durability="normal")
    # A synthetic backlog of agents writing to each other: the loop guards (issue 20) would
    # stop it at the pair budget, as `serve --pair-budget` lifts it on a hub.
    most = guards.MAX_BUDGET
    store.task_settings = dataclasses.replace(
        store.task_settings, pair_budget=most, thread_budget=most
    )
    try:
        for i in range(n):
            store.event_append(
                type="note",
                stream="bench",
                room="r",
                from_agent=f"agent{i % 7}",
                to_agent="bob" if i % 10 == 0 else f"agent{i % 5}",
                body=f"message {i}",
            )
    finally:
        store.close()


def _append_for_bob(db: Path) -> None:

    from mempalace_logstream.store import LogStore

    store = LogStore.open(f"sqlite:///{db}", durability="normal")
    try:
        mail = {"from_agent": "alice", "to_agent": "bob", "body": "please review"}
        store.event_append(type="note", stream="bench", room="r", **mail)
    finally:
        store.close()


def run(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    common.ensure_repo_on_path()
    db = tmp / "log.sqlite3"
    _fill(db, args.events)
    inbox = ["inbox", "--agent", "bob", "--hook", "claude", "--db", str(db)]
    lean = [sys.executable, "-m", "mempalace_logstream", *inbox]
    typer = [sys.executable, "-c", TYPER, *inbox]
    store = [sys.executable, "-c", STORE, *inbox]
    rows = {
        "interpreter floor (python -c pass)": ([sys.executable, "-c", "pass"], False),
        "package import floor (errors, models)": (
            [sys.executable, "-c", "import mempalace_logstream"],
            False,
        ),
        "store import floor (store, SQLAlchemy)": (
            [sys.executable, "-c", "import mempalace_logstream.store.core"],
            False,
        ),
        "lean, empty inbox": ([*lean, "--state-file", str(tmp / "lean.json")], False),
        "store, empty inbox": ([*store, "--state-file", str(tmp / "store.json")], False),
        "typer, empty inbox": ([*typer, "--state-file", str(tmp / "typer.json")], False),
        "lean, one new message": ([*lean, "--state-file", str(tmp / "lean-new.json")], True),
        "store, one new message": ([*store, "--state-file", str(tmp / "store-new.json")], True),
        "typer, one new message": ([*typer, "--state-file", str(tmp / "typer-new.json")], True),
    }
    if args.smoke:  # the floors are bare interpreters: a smoke run times the inbox rows only
        rows = {name: row for name, row in rows.items() if "floor" not in name}
    results: dict[str, dict[str, float]] = {}
    for name, (cmd, new_mail) in rows.items():
        _time(cmd, STDIN)  # warm-up; for inbox rows also the first run (cursor at the tip)
        walls, cpus = [], []
        for _ in range(args.samples):
            if new_mail:
                _append_for_bob(db)
            wall, cpu = _time(cmd, STDIN)
            walls.append(wall)
            cpus.append(cpu)
        results[name] = {
            **common.summarize(walls),
            "cpu_p50": common.percentile(cpus, 0.50),
        }
    return results


def report(results: dict[str, dict[str, float]]) -> None:
    table = [
        [
            name,
            common.fmt_ms(s["p50"]),
            common.fmt_ms(s["p95"]),
            common.fmt_ms(s["max"]),
            common.fmt_ms(s["cpu_p50"]),
        ]
        for name, s in results.items()
    ]
    title = "inbox --hook claude, ms per process (wall; cpu = user + sys)"
    common.print_table(title, ["row", "p50", "p95", "max", "cpu p50"], table)
    for row in ("lean, empty inbox", "lean, one new message"):
        for q in ("p50", "p95"):
            ms = results[row][q] * 1000
            common.target_line(BENCH, f"{row} {q}", ms, "ms", "<=", TARGET_MS)
    lean, typer = results["lean, empty inbox"]["p50"], results["typer, empty inbox"]["p50"]
    store = results["store, empty inbox"]["p50"]
    common.ratio_line(BENCH, "store p50 / lean p50 (empty inbox)", store / lean)
    common.ratio_line(BENCH, "typer p50 / lean p50 (empty inbox)", typer / lean)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-hook-") as tmp:
        if not args.smoke:  # a smoke run's children use the caller's bytecode, not a cold cache
            PYCACHE["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        report(run(args, tmp))
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
