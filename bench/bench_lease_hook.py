"""What the lease hook costs (issue 22): wall time of one `logstream hook pretooluse` process,
as Claude Code runs it before every edit (a PreToolUse JSON on stdin), on a local SQLite log
and through a hub.

    python bench/bench_lease_hook.py [--samples N] [--leases N] [--quick | --smoke]

Rows, each a fresh process per sample: a denied edit (another agent's lease names the path)
and an allowed one (a free path), on the local log (the lean path: stdlib sqlite3, no typer
nor SQLAlchemy) and through `--hub` (a `logstream serve` on loopback, http.client). The log
holds N active leases of 20 agents. Targets (issue 22): 50 ms p50 local, 100 ms via --hub.
The floor row is `python -c pass` (the interpreter alone). The package's bytecode is cached,
as in an installed package (the children write it to a scratch PYTHONPYCACHEPREFIX even under
PYTHONDONTWRITEBYTECODE; the untimed warm-up run of each row fills it): without that, every
process compiles the package's sources again. CPU is user + system time of the process, what
it costs whatever else shares the cores. Never a test; figures go to docs/benchmarks.md.
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

BENCH = "lease_hook"
TARGETS_MS = {"local": 50.0, "hub": 100.0}
ROOT = "/work/proj"
PYCACHE: dict[str, str] = {}  # the children's bytecode cache, set by main()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_lease_hook.py", description=__doc__)
    p.add_argument("--samples", type=int, default=None, help="processes per row (default 30)")
    p.add_argument("--leases", type=int, default=None, help="active leases (default 200)")
    p.add_argument("--quick", action="store_true", help="10 processes per row")
    common.add_smoke(p)
    args = p.parse_args(argv)
    args.samples = args.samples or (2 if args.smoke else 10 if args.quick else 30)
    args.leases = args.leases or (5 if args.smoke else 200)
    return args


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTREAM_")}
    if PYCACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**env, "PYTHONPATH": str(common.REPO), "NO_COLOR": "1", **PYCACHE}


def _fill(db: Path, n: int) -> None:
    from mempalace_logstream.store import LogStore, lease_ops

    with LogStore.open(f"sqlite:///{db}", durability="normal") as store:
        lease_ops.lease_acquire(store, agent="alice", paths=["src/**"], project="proj")
        for i in range(n - 1):
            path = f"pkg{i}/**"
            lease_ops.lease_acquire(store, agent=f"agent{i % 20}", paths=[path], project="proj")


def _edit(path: str) -> str:
    tool_input = {"file_path": f"{ROOT}/{path}", "old_string": "a", "new_string": "b"}
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "cwd": ROOT,
            "tool_name": "Edit",
            "tool_input": tool_input,
        }
    )


def _time(cmd: list[str], stdin: str, denied: bool | None) -> tuple[float, float]:
    """(wall seconds from spawn to exit, CPU seconds user + system) of one process; raises when
    it fails or decides otherwise than `denied` (None: a floor, no decision)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=_env())
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    decided = denied is None or ('"deny"' in proc.stdout) == denied
    if proc.returncode != 0 or not decided or proc.stderr:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}, {proc.stdout!r} {proc.stderr!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def _serve(db: Path) -> tuple[subprocess.Popen[str], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["serve", "--db", str(db), "--port", str(port), "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mempalace_logstream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until it listens (or exits: an empty line)
    if "listening" not in line:
        proc.kill()
        raise RuntimeError(f"the hub did not start: {line!r}")
    return proc, f"http://127.0.0.1:{port}"


def run(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    """{row: wall summary plus `cpu_p50`}; the rows are sampled in turn (one process of each
    per round), so that a change in the machine's load touches every row alike."""
    common.ensure_repo_on_path()
    db = tmp / "log.sqlite3"
    _fill(db, args.leases)
    hook = [sys.executable, "-m", "mempalace_logstream", "hook", "pretooluse", "--agent", "bob"]
    hub, url = _serve(db)
    try:
        rows: dict[str, tuple[list[str], str, bool | None]] = {
            "local, denied": ([*hook, "--db", str(db)], _edit("src/auth.py"), True),
            "local, allowed": ([*hook, "--db", str(db)], _edit("docs/free.md"), False),
            "hub, denied": ([*hook, "--hub", url], _edit("src/auth.py"), True),
            "hub, allowed": ([*hook, "--hub", url], _edit("docs/free.md"), False),
            "floor: python -c pass": ([sys.executable, "-c", "pass"], "", None),
        }
        for cmd, stdin, denied in rows.values():
            _time(cmd, stdin, denied)  # warm-up: fills the bytecode cache
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
        for _ in range(args.samples):
            for name, (cmd, stdin, denied) in rows.items():
                times[name].append(_time(cmd, stdin, denied))
        results: dict[str, dict[str, float]] = {}
        for name, pairs in times.items():
            results[name] = common.summarize([wall for wall, _ in pairs])
            results[name]["cpu_p50"] = common.summarize([cpu for _, cpu in pairs])["p50"]
    finally:
        hub.terminate()
        hub.wait(timeout=30)
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
    title = "hook pretooluse --client claude (an Edit), ms per process"
    common.print_table(title, ["row", "p50", "p95", "max", "CPU p50"], table)
    for name, s in results.items():
        if name.startswith("floor"):
            continue
        goal = TARGETS_MS[name.split(",")[0]]
        for q in ("p50", "p95"):
            common.target_line(BENCH, f"{name} {q}", s[q] * 1000, "ms", "<=", goal)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-lease-hook-") as tmp:
        if not args.smoke:  # a smoke run's children use the caller's bytecode, not a cold cache
            PYCACHE["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        report(run(args, tmp))
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
