"""`logstream doctor` on a large log (issue 12): wall time and peak RSS of one full run.

The log is the store benchmark's synthetic file (`bench_store.ours_log`: `--events` events
bulk-loaded straight into our schema, cached between runs). Doctor runs in a child process,
so its peak RSS is doctor's own (plus the interpreter and the package), not the builder's.
Never a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/bench_doctor.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_store, common  # noqa: E402

BENCH = "doctor"


def _peak_rss_kib() -> int:
    """This process's peak RSS (VmHWM: reset by exec, unlike ru_maxrss, which a child
    inherits from the benchmark process that built the log)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(path: str) -> None:
    """Open the log, run every check once, print {seconds, rss} as JSON."""
    from mempalace_logstream import doctor
    from mempalace_logstream.store import LogStore

    before = _peak_rss_kib()
    store = LogStore.open(path, create=False)
    try:
        t0 = time.perf_counter()
        report = doctor.run(store)
        wall = time.perf_counter() - t0
    finally:
        store.close()
    peak = _peak_rss_kib()
    out = {
        "seconds": wall,
        "peak_rss_kib": peak,
        "rss_before_kib": before,
        "healthy": report.healthy,
        "events": report.checks["signatures"]["events"],
        "findings": [f.message for f in report.findings],
        "per_check": report.checks["seconds"],
    }
    print(json.dumps(out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--cache", default=None, help="where the built log is kept")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="20,000 events")
    common.add_smoke(parser)
    args = parser.parse_args(argv)
    args.events = args.events or (1_000 if args.smoke else 20_000 if args.quick else 1_000_000)
    if args.child:
        child(args.child)
        return 0
    common.ensure_repo_on_path()
    path = bench_store.ours_log(args.events, common.cache_dir(args.cache), args.rebuild)
    # The file is bulk-loaded past the store: derive its task projection once (as a migration
    # of an older log does), so doctor compares a real projection, not an empty one.
    from mempalace_logstream.store import LogStore

    with LogStore.open(str(path)) as store:
        t0 = time.perf_counter()
        tasks = store.rebuild_tasks()
        print(f"task projection rebuilt: {tasks:,} tasks in {time.perf_counter() - t0:.1f} s")
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    runs = []
    for _ in range(args.reps):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    rows = [
        [
            f"{best['events']:,}",
            f"{size / 1e9:.2f} GB",
            f"{best['seconds']:.1f} s",
            f"{best['peak_rss_kib'] / 1024:.0f} MiB",
            f"{best['rss_before_kib'] / 1024:.0f} MiB",
            "yes" if best["healthy"] else "no",
        ]
    ]
    common.print_table(
        f"doctor on {args.events:,} events (best of {args.reps})",
        ["events", "file", "wall", "peak RSS", "RSS after imports", "healthy"],
        rows,
    )
    print("seconds per check:", json.dumps(best["per_check"]))
    if best["findings"]:
        print("findings:", "; ".join(best["findings"]))
    print(common.machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
