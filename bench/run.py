"""The one benchmark command: run every bench module present, in sequence, then summarize.

    python bench/run.py [--quick | --smoke] [--only NAME ...] [--list] [-- EXTRA ARGS]

Each `bench/bench_<name>.py` exposes `main(argv) -> int`; it runs in a subprocess of its own (a
crash, a leaked thread or a blocked port in one bench cannot spoil the next), with its output
streamed live. The summary repeats every `[ratio]` and `[target]` line the benches printed,
with each bench's exit code and duration. Exit code: 0 when every bench that ran exited 0.

`--smoke` runs every bench at tiny sizes without the reference package (each says so on a
line), its logs and caches in a scratch directory removed afterwards, two benches at a time
(`--jobs`; each one's output printed whole when it ends): a check that the benches still run,
in well under a minute; `tests/test_bench_smoke.py` runs it in CI, a bench at a time. Real
measurements run one bench at a time.
Must not be imported by the package.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
BENCHES = (
    "store",
    "wake",
    "cli_wait",
    "cli",
    "channel",
    "codex",
    "hub",
    "hubs",
    "pg",
    "sync",
    "tasks",
    "task_late",
    "presence",
    "waits",
    "monitor",
    "identity",
    "doctor",
    "hook",
    "lease_hook",
    "lease_acquire",
    "dashboard",
    "ledger",
    "mcp_tools",
    "nats",
)
TAGS = ("[ratio]", "[target]")
SMOKE_JOBS = 2
_PRINTING = threading.Lock()
_LAUNCH = "import sys; from bench import bench_{name} as m; sys.exit(m.main(sys.argv[1:]) or 0)"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/run.py", description="Run the benchmarks and print a summary of ratios."
    )
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="small sizes")
    sizes.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, no reference package, scratch caches: does every bench still run",
    )
    p.add_argument(
        "--only",
        nargs="+",
        choices=BENCHES,
        metavar="NAME",
        help=f"run only these ({', '.join(BENCHES)})",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"benches at once, smoke runs only (default {SMOKE_JOBS} with --smoke, else 1)",
    )
    p.add_argument("--list", action="store_true", help="list the benches present and exit")
    p.add_argument("extra", nargs="*", help="after `--`: arguments passed to every bench")
    args = p.parse_args(argv)
    if args.jobs is not None and (args.jobs < 1 or (args.jobs > 1 and not args.smoke)):
        p.error("--jobs must be 1, or more with --smoke (figures need the machine to themselves)")
    args.jobs = args.jobs or (SMOKE_JOBS if args.smoke else 1)
    return args


def present(name: str) -> bool:
    return (BENCH_DIR / f"bench_{name}.py").is_file()


def run_one(
    name: str, args: list[str], scratch: str | None = None, out: TextIO | None = None
) -> tuple[int, float, list[str]]:
    """Run one bench in a subprocess; stream its output (to stdout, or to `out`); return (exit
    code, seconds, tags). With `scratch`, the bench's logs and caches go there (a smoke run)."""
    sink = out if out is not None else sys.stdout
    env = dict(os.environ)
    if scratch is not None:
        env["LOGSTREAM_BENCH_CACHE"] = os.path.join(scratch, "cache")
        env["LOGSTREAM_BENCH_TMP"] = scratch
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, "-c", _LAUNCH.format(name=name), *args]
    tagged: list[str] = []
    t0 = time.perf_counter()
    with subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                if line.startswith(TAGS):
                    tagged.append(line.rstrip("\n"))
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
    return code, time.perf_counter() - t0, tagged


def run_all(
    names: list[str], bench_args: list[str], scratch: str | None, jobs: int = 1
) -> list[tuple[str, str, float, list[str]]]:
    """Every bench, `jobs` at a time: (name, status, seconds, tagged lines), in `names` order.
    One at a time, a bench's output streams live; else it is printed whole when it ends."""

    def one(name: str) -> tuple[str, str, float, list[str]]:
        if not present(name):
            return (name, "not present", 0.0, [])
        header = f"\n######## bench {name} {' '.join(bench_args)}".rstrip()
        if jobs == 1:
            print(header, flush=True)
            code, seconds, tagged = run_one(name, bench_args, scratch)
        else:
            buffer = io.StringIO()
            code, seconds, tagged = run_one(name, bench_args, scratch, buffer)
            with _PRINTING:
                print(header + "\n" + buffer.getvalue(), end="", flush=True)
        return (name, "ok" if code == 0 else f"FAILED (exit {code})", seconds, tagged)

    if jobs == 1:
        return [one(name) for name in names]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, names))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = list(args.only or BENCHES)
    if args.list:
        for name in BENCHES:
            print(f"{name:9} {'present' if present(name) else 'missing'}  bench/bench_{name}.py")
        return 0
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    bench_args = ({"smoke": ["--smoke"], "quick": ["--quick"]}.get(size, [])) + list(args.extra)
    started = time.perf_counter()
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="logstream-bench-smoke-") as scratch:
            results = run_all(names, bench_args, scratch, args.jobs)
    else:
        results = run_all(names, bench_args, None)
    jobs = f", {args.jobs} at a time" if args.jobs > 1 else ""
    print(f"\n######## summary ({size} sizes{jobs}, {time.perf_counter() - started:.1f} s)")
    for name, status, seconds, tagged in results:
        print(f"{name:9} {status:18} {seconds:7.1f} s")
        for line in tagged:
            print(f"    {line}")
    failed = [r for r in results if r[1].startswith("FAILED")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
