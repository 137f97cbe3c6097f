"""The one benchmark command: run every bench module present, in sequence, then summarize.

    python bench/run.py [--quick | --smoke] [--only NAME ...] [--list] [-- EXTRA ARGS]

Each `bench/bench_<name>.py` exposes `main(argv) -> int`; it runs in a subprocess of its own (a
crash, a leaked thread or a blocked port in one bench cannot spoil the next), with its output
streamed live. The summary repeats every `[ratio]` and `[target]` line the benches printed,
with each bench's exit code and duration. Exit code: 0 when every bench that ran exited 0.

`--smoke` runs every bench at tiny sizes without the reference package (each says so on a
line), its logs and caches in a scratch directory removed afterwards: a check that the benches
still run, in about a minute; `tests/test_bench_smoke.py` runs it in CI, a bench at a time.
Must not be imported by the package.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
BENCHES = (
    "store",
    "wake",
    "cli_wait",
    "channel",
    "codex",
    "hub",
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
    "dashboard",
)
TAGS = ("[ratio]", "[target]")
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
    p.add_argument("--list", action="store_true", help="list the benches present and exit")
    p.add_argument("extra", nargs="*", help="after `--`: arguments passed to every bench")
    return p.parse_args(argv)


def present(name: str) -> bool:
    return (BENCH_DIR / f"bench_{name}.py").is_file()


def run_one(name: str, args: list[str], scratch: str | None = None) -> tuple[int, float, list[str]]:
    """Run one bench in a subprocess; stream its output; return (exit code, seconds, tags).
    With `scratch`, the bench's logs and caches go there (a smoke run)."""
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
                sys.stdout.write(line)
                sys.stdout.flush()
                if line.startswith(TAGS):
                    tagged.append(line.rstrip("\n"))
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
    return code, time.perf_counter() - t0, tagged


def run_all(
    names: list[str], bench_args: list[str], scratch: str | None
) -> list[tuple[str, str, float, list[str]]]:
    """Each bench in turn: (name, status, seconds, tagged lines)."""
    results: list[tuple[str, str, float, list[str]]] = []
    for name in names:
        if not present(name):
            results.append((name, "not present", 0.0, []))
            continue
        print(f"\n######## bench {name} {' '.join(bench_args)}".rstrip(), flush=True)
        code, seconds, tagged = run_one(name, bench_args, scratch)
        results.append((name, "ok" if code == 0 else f"FAILED (exit {code})", seconds, tagged))
    return results


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
            results = run_all(names, bench_args, scratch)
    else:
        results = run_all(names, bench_args, None)
    print(f"\n######## summary ({size} sizes, {time.perf_counter() - started:.1f} s)")
    for name, status, seconds, tagged in results:
        print(f"{name:9} {status:18} {seconds:7.1f} s")
        for line in tagged:
            print(f"    {line}")
    failed = [r for r in results if r[1].startswith("FAILED")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
