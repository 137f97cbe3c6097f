"""What the lease hook costs (issue 22): wall time of one `logstream hook pretooluse` process,
as Claude Code runs it before every edit (a PreToolUse JSON on stdin), on a local SQLite log
and through a hub.

    python bench/bench_lease_hook.py [--samples N] [--leases N] [--quick | --smoke]

Rows, each a fresh process per sample: a denied edit (another agent's lease names the path)
and an allowed one (a free path), on the local log (the lean path: stdlib sqlite3, no typer
nor SQLAlchemy) and through `--hub` (a `logstream serve` on loopback, http.client). The log
holds N active leases of 20 agents. Targets (issue 22): 50 ms p50 local, 100 ms via --hub.
Never a test; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
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
    return {**env, "PYTHONPATH": str(common.REPO), "NO_COLOR": "1"}


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


def _time(cmd: list[str], stdin: str, denied: bool) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=_env())
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0 or ('"deny"' in proc.stdout) != denied or proc.stderr:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}, {proc.stdout!r} {proc.stderr!r}")
    return elapsed


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
    common.ensure_repo_on_path()
    db = tmp / "log.sqlite3"
    _fill(db, args.leases)
    hook = [sys.executable, "-m", "mempalace_logstream", "hook", "pretooluse", "--agent", "bob"]
    hub, url = _serve(db)
    try:
        rows = {
            "local, denied": ([*hook, "--db", str(db)], "src/auth.py", True),
            "local, allowed": ([*hook, "--db", str(db)], "docs/free.md", False),
            "hub, denied": ([*hook, "--hub", url], "src/auth.py", True),
            "hub, allowed": ([*hook, "--hub", url], "docs/free.md", False),
        }
        results: dict[str, dict[str, float]] = {}
        for name, (cmd, path, denied) in rows.items():
            _time(cmd, _edit(path), denied)  # warm-up
            walls = [_time(cmd, _edit(path), denied) for _ in range(args.samples)]
            results[name] = common.summarize(walls)
    finally:
        hub.terminate()
        hub.wait(timeout=30)
    return results


def report(results: dict[str, dict[str, float]]) -> None:
    table = [
        [name, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"])]
        for name, s in results.items()
    ]
    title = "hook pretooluse --client claude (an Edit), ms per process (wall)"
    common.print_table(title, ["row", "p50", "p95", "max"], table)
    for name, s in results.items():
        goal = TARGETS_MS[name.split(",")[0]]
        for q in ("p50", "p95"):
            common.target_line(BENCH, f"{name} {q}", s[q] * 1000, "ms", "<=", goal)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-lease-hook-") as tmp:
        report(run(args, tmp))
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
