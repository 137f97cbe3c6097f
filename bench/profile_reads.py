"""Instructions and CPU per `event_list` of the store bench's list shapes (issue 25).

    python bench/profile_reads.py [--events 2000] [--shapes inbox cursor type corr]
                                  [--mode callgrind|cpu] [--reads 1000] [--cache-dir DIR]

Reads the cached log `bench/bench_store.py --sections list --events N` built (it must exist:
run that first) with the bench's four reads: the inbox of its agent (newest 50), the same
inbox after a cursor `min(2000, N // 10)` events back (ascending), `type` (newest 50) and a
recent `correlation_id`. `callgrind` (the default) runs two `valgrind --tool=callgrind
--instr-atstart=no` children per shape: each opens the store, reads 300 times, turns the
instrumentation on (`callgrind_control -i on <its pid>`), reads `--reads` times more (the
other: none) and closes the store; printed is the difference of their instruction totals over
`--reads` (deterministic: the figure to compare on a busy machine). `cpu` prints the thread
CPU per read in µs, min of 5 × `--reads`.

Run a tree's own copy with its own venv to measure that tree. Never a test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/profile_reads.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, store_list  # noqa: E402

SHAPES = ("inbox", "cursor", "type", "corr")


def log_path(n: int, override: str | None) -> Path:
    found = sorted(common.cache_dir(override).glob(f"ours-{n}-*.sqlite3"))
    if not found:
        raise SystemExit(f"no cached {n}-event log: run bench/bench_store.py --events {n} first")
    return found[-1]


def read_args(path: Path, n: int) -> dict[str, dict[str, Any]]:
    """The bench's four `event_list` arguments (store_list._queries)."""
    since, corr, _back = store_list.cursor_and_correlation(path, n)
    return {
        "inbox": {"to_agent": common.INBOX_AGENT},
        "cursor": {"to_agent": common.INBOX_AGENT, "since_event_id": since},
        "type": {"type": common.FILTER_TYPE},
        "corr": {"correlation_id": corr},
    }


def child(path: Path, args: dict[str, Any], warm: int, reads: int) -> None:
    """The measured process: warm reads, instrumentation on, `reads` reads."""
    from mempalace_logstream.store import LogStore

    store = LogStore.open(str(path), migrate_schema=False)
    for _ in range(warm):
        store.event_list(**args)
    subprocess.run(
        ["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True
    )
    for _ in range(reads):
        store.event_list(**args)
    store.close()


def callgrind(path: Path, shape: str, n: int, reads: int) -> float:
    """Instructions per read: a child that reads `reads` times minus one that reads none
    (the close and the interpreter's exit after the reads are in both)."""
    return (_instructions(path, shape, n, reads) - _instructions(path, shape, n, 0)) / reads


def _instructions(path: Path, shape: str, n: int, reads: int) -> int:
    with tempfile.TemporaryDirectory(prefix="profile-reads-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--events",
            str(n),
            "--child",
            shape,
            "--reads",
            str(reads),
            "--db",
            str(path),
        ]
        subprocess.run(cmd, check=True, capture_output=True)
        text = out.read_text()
    found = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
    if found is None:
        raise SystemExit("no totals in the callgrind output")
    return int(found.group(1))


def cpu(path: Path, args: dict[str, Any], reads: int) -> float:
    from mempalace_logstream.store import LogStore

    store = LogStore.open(str(path), migrate_schema=False)
    try:
        for _ in range(300):
            store.event_list(**args)
        best = float("inf")
        for _ in range(5):
            t0 = time.thread_time()
            for _ in range(reads):
                store.event_list(**args)
            best = min(best, (time.thread_time() - t0) / reads)
    finally:
        store.close()
    return best * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="profile_reads", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    p.add_argument("--mode", choices=("callgrind", "cpu"), default="callgrind")
    p.add_argument("--reads", type=int, default=1000)
    p.add_argument("--cache-dir")
    p.add_argument("--child", choices=SHAPES, help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    path = Path(a.db) if a.db else log_path(a.events, a.cache_dir)
    shapes = read_args(path, a.events)
    if a.child:
        child(path, shapes[a.child], 300, a.reads)
        return 0
    for shape in a.shapes:
        if a.mode == "callgrind":
            instructions = callgrind(path, shape, a.events, a.reads)
            print(f"{a.events} {shape}: {instructions:,.0f} instructions/read")
        else:
            print(f"{a.events} {shape}: {cpu(path, shapes[shape], a.reads):.1f} µs CPU/read")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
