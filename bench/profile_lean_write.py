"""One local `append` as a fresh process: the lean writer against today's CLI and the
reference's (issue 25).

    python bench/profile_lean_write.py [--rounds 9] [--no-ref]

Each round runs, one after the other, a process that imports `store.lean_write` and makes one
`event_append` (to_agent set) on a small SQLite log, our `logstream append` console script
(typer and the store), and the reference's `mempalace logstream append` (its own virtualenv,
`common.reference`). Printed: the medians of wall time and CPU (user + sys of that process,
from `wait4`), and the lean writer's share of the reference's. Bytecode is cached (the
children may write it). Never a test; the figures are in docs/benchmarks.md ("Writes without
SQLAlchemy: the lean local writer").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

APPEND = ["--type", "note", "--stream", "bench", "--room", "r", "--from-agent", "alice"]
APPEND += ["--to-agent", "bob", "--body", "hello"]
LEAN = """
import sys
from mempalace_logstream.store.lean_write import open_lean_writer
writer = open_lean_writer(sys.argv[1])
assert writer is not None, "the lean writer refused this log"
fields = dict(type="note", stream="bench", room="r", from_agent="alice", to_agent="bob")
writer.call("event_append", body="hello", **fields)
writer.close()
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one process from spawn to exit; raises when it fails."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status:
        err = child.stderr.read().decode("utf-8", "replace") if child.stderr else ""
        raise RuntimeError(f"{cmd[:3]} failed: {err}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--no-ref", action="store_true", help="skip the reference CLI")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lean-write-"))
    db = tmp / "log.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ours = [str(Path(sys.executable).with_name("logstream")), "append", "--db", str(db), *APPEND]
    subprocess.run(ours, check=True, capture_output=True, env=env)  # makes the log
    runs: dict[str, list[str]] = {
        "lean writer": [sys.executable, "-c", LEAN, f"sqlite:///{db}"],
        "logstream append": ours,
    }
    refpkg, reason = common.reference_unless(args.no_ref)
    ref_env = dict(env)
    if refpkg is not None:
        python = Path(str(refpkg.ref_python()))
        runs["reference"] = [
            str(python.parent / "mempalace"),
            *("--palace", str(tmp / "ref-palace"), "logstream", "append", *APPEND),
        ]
        ref_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        ref_env["PYTHONNOUSERSITE"] = "1"
    else:
        print(f"reference not measured: {reason}")
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for round_no in range(args.rounds + 1):  # an untimed warm-up round first
        for name, cmd in runs.items():
            sample = timed(cmd, ref_env if name == "reference" else env)
            if round_no:
                samples[name].append(sample)
    medians = {
        name: (statistics.median(w for w, _ in got), statistics.median(c for _, c in got))
        for name, got in samples.items()
    }
    for name, (wall, cpu) in medians.items():
        print(f"{name:17} wall p50 {1000 * wall:6.1f} ms   cpu p50 {1000 * cpu:6.1f} ms")
    if "reference" in medians:
        (lw, lc), (rw, rc) = medians["lean writer"], medians["reference"]
        print(f"lean writer / reference: wall {lw / rw:.2f}, cpu {lc / rc:.2f}")


if __name__ == "__main__":
    main()
