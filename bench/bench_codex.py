"""Codex queue bridge latency (issue 19): an append in one process -> the `codex queue` that
`logstream deliver --agent NAME --codex` runs for it in another, next to a bare spawn of the
same executable from Python in the same run.

    python bench/bench_codex.py [--quick] [--samples N]

The deliverer is a real `logstream deliver` subprocess on a SQLite log; the appender is a
second process; `codex` is a fake: a bash script that appends `$EPOCHREALTIME` (bash's own
clock, no fork) and its `--message` to a file, then exits 0. Stamps are CLOCK_REALTIME: after
the appender's `event_append` returned -> when the fake started to run. Samples are spaced
120-160 ms apart, so each event is queued alone: this measures the push path, not coalescing.
The spawn row is the floor of any `codex queue` delivery: `subprocess.run` of the fake from
this process -> its stamp. Never a test; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.bench_wake import Worker, our_env

BENCH = "codex"
WARMUP = 5
AGENT = "codex-desktop"
THREAD = "019a7247-ac9d-71f3-89e2-a823dbd8fd14"
FAKE = """#!/bin/bash
printf '%s %s\\n' "$EPOCHREALTIME" "$5" >> {log}
echo "Queued message m for thread $3."
"""
_APPENDER = r"""
import json, sys, time
from mempalace_logstream import LogStore
store = LogStore.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    e = store.event_append(type="note", stream="s", room="r", from_agent="claude",
                           to_agent="codex-desktop", body="ping")
    t1 = time.time_ns()
    print(json.dumps({"t1": t1, "id": e.id}), flush=True)
store.close()
"""
ID_RE = re.compile(r'"(evt_[A-Za-z0-9_]+)"')


def fake_codex(tmp: Path) -> tuple[Path, Path]:
    """(the fake executable, the file it stamps)."""
    log = tmp / "codex-stamps.txt"
    log.touch()
    exe = tmp / "codex"
    exe.write_text(FAKE.format(log=str(log)))
    exe.chmod(0o755)
    return exe, log


def stamps(log: Path) -> dict[str, int]:
    """event id -> the fake's start, in ns (the first message that names it)."""
    out: dict[str, int] = {}
    for line in log.read_text().splitlines():
        stamp, _, message = line.partition(" ")
        for eid in ID_RE.findall(message):
            out.setdefault(eid, int(float(stamp) * 1e9))
    return out


def stamped(log: Path, event_id: str) -> Callable[[], bool]:
    """Whether the fake codex has stamped `event_id` into `log` yet."""
    return lambda: event_id in stamps(log)


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.001)


def codex_samples(tmp: Path, n: int) -> list[float]:
    db = tmp / "codex.sqlite3"
    cursor = tmp / "deliver-cursor.json"
    exe, log = fake_codex(tmp)
    from mempalace_logstream import LogStore

    LogStore.open(str(db)).close()  # the deliverer is a reader: the log must exist
    deliverer = subprocess.Popen(
        [
            *(sys.executable, "-m", "mempalace_logstream", "deliver", "--agent", AGENT),
            *("--codex", "--db", str(db), "--state-file", str(cursor)),
            *("--thread-id", THREAD, "--codex-bin", str(exe)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=our_env(),
    )
    appender = Worker(sys.executable, _APPENDER, f"sqlite:///{db}", our_env())
    samples: list[float] = []
    try:
        wait_until(cursor.exists)  # the deliverer's first checkpoint: it is started
        for i in range(n + WARMUP):
            time.sleep(random.uniform(0.12, 0.16))
            appender.send("go")
            sent = json.loads(appender.read())
            wait_until(stamped(log, sent["id"]))
            if i >= WARMUP:
                samples.append(max(0, stamps(log)[sent["id"]] - sent["t1"]) / 1e9)
    finally:
        appender.close()
        deliverer.terminate()
        deliverer.wait(30)
    return samples


def spawn_samples(tmp: Path, n: int) -> list[float]:
    """`subprocess.run` of the fake from this process -> its own stamp (the floor)."""
    exe, log = fake_codex(tmp / "spawn")
    out: list[float] = []
    for i in range(n + WARMUP):
        eid = f"evt_spawn_{i}"
        t0 = time.time_ns()
        argv = [str(exe), "queue", "--thread", THREAD, "--message", f'"{eid}"']
        subprocess.run(argv, capture_output=True, check=True)
        if i >= WARMUP:
            out.append(max(0, stamps(log)[eid] - t0) / 1e9)
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_codex.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20 samples")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="samples per path (default 200)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.samples or (2 if args.smoke else 20 if args.quick else 200)
    print(common.machine_line())
    with common.temp_dir() as tmp:
        (tmp / "spawn").mkdir()
        push = codex_samples(tmp, n)
        spawn = spawn_samples(tmp, n)
    rows = []
    for label, values in (
        ("codex: append returned -> `codex queue` started by the deliverer", push),
        ("floor: subprocess.run of the same executable -> it started", spawn),
    ):
        s = common.summarize(values)
        rows.append(
            [label, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"]), n]
        )
    common.print_table(
        "Codex queue bridge latency, SQLite (ms)", ["path", "p50", "p95", "max", "n"], rows
    )
    s = common.summarize(push)
    common.target_line(
        BENCH, "codex queue invocation p50 after commit", s["p50"] * 1e3, "ms", "<=", 100
    )
    common.ratio_line(
        BENCH, "codex p50 / bare spawn p50", s["p50"] / common.summarize(spawn)["p50"]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
