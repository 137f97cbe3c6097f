"""Monitor mode latency (issue 19): an append in one process -> the line `logstream tail --agent
codex --monitor` prints for it, read from the monitor's stdout as Claude Code's Monitor tool
reads it; local (SQLite) and through a hub (`logstream serve`), beside the channel's push in the
same run.

    python bench/bench_monitor.py [--quick] [--samples N] [--no-channel]

The monitor is a real `logstream tail` subprocess; the appender is another process (a
LogStore for the local log, an HTTP client of the hub for `--hub`); this process reads the
monitor's stdout. Stamps are CLOCK_MONOTONIC (system-wide on Linux): after the appender's
append returned -> when this process read the line. Samples are spaced 0.55-0.65 s apart, past
the monitor's coalescing window (0.5 s), so each event is its own line: this measures the push
path, not the burst rule. Never a test; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.bench_wake import Worker, our_env

BENCH = "monitor"
WARMUP = 5
AGENT = "codex"
_LOCAL_APPENDER = r"""
import json, sys, time
from mempalace_logstream import LogStore
store = LogStore.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    e = store.event_append(type="note", stream="s", room="r", from_agent="claude",
                           to_agent="codex", body="ping")
    t1 = time.monotonic_ns()
    print(json.dumps({"t1": t1, "id": e.id}), flush=True)
store.close()
"""
_HUB_APPENDER = r"""
import json, sys, time
import httpx
http = httpx.Client(base_url=sys.argv[1], timeout=30)
body = {"type": "note", "stream": "s", "room": "r", "from_agent": "claude",
        "to_agent": "codex", "body": "ping"}
http.post("/v1/event_list", json={"limit": 1})  # a warm connection, as an agent's would be
print("ready", flush=True)
for line in sys.stdin:
    e = http.post("/v1/event_append", json=body).json()["event"]
    t1 = time.monotonic_ns()
    print(json.dumps({"t1": t1, "id": e["id"]}), flush=True)
"""


class Lines:
    """A monitor subprocess's stdout, each line stamped when read."""

    def __init__(self, args: list[str]) -> None:
        cmd = [sys.executable, "-m", "mempalace_logstream", "tail", "--agent", AGENT, "--monitor"]
        self.proc = subprocess.Popen(
            [*cmd, *args, "--max-runtime", "1h"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=our_env(),
        )
        self.arrivals: dict[str, int] = {}
        self.ready = threading.Event()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._ready, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            at = time.monotonic_ns()
            event_id = raw.decode().rstrip().split("logstream get ", 1)[-1].split(" ")[0]
            with self._cond:
                self.arrivals[event_id] = at
                self._cond.notify_all()

    def _ready(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            if b"monitoring the inbox" in raw:
                self.ready.set()

    def wait_for(self, event_id: str, timeout: float = 30) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: event_id in self.arrivals, timeout):
                raise RuntimeError(f"no monitor line for {event_id}")
            return self.arrivals[event_id]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def monitor_samples(
    monitor_args: list[str], appender: Worker, n: int, warmup: int = WARMUP
) -> list[float]:
    lines = Lines(monitor_args)
    try:
        if not lines.ready.wait(60):
            raise RuntimeError("the monitor did not start")
        samples: list[float] = []
        for i in range(n + warmup):
            time.sleep(random.uniform(0.55, 0.65))  # past the coalescing window: one line each
            appender.send("go")
            sent = json.loads(appender.read())
            arrived = lines.wait_for(sent["id"])
            if i >= warmup:
                samples.append(max(0, arrived - sent["t1"]) / 1e9)
        return samples
    finally:
        lines.close()
        appender.close()


def hub_samples(tmp: Path, n: int, warmup: int) -> list[float]:
    with common.our_hub(tmp / "hub.sqlite3", our_env()) as url:
        appender = Worker(sys.executable, _HUB_APPENDER, url, our_env())
        args = ["--hub", url, "--state-file", str(tmp / "hub-monitor.json")]
        return monitor_samples(args, appender, n, warmup)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_monitor.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="15 samples")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="samples per path (default 100)")
    p.add_argument("--no-channel", action="store_true", help="skip the channel's figure")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.samples or (1 if args.smoke else 15 if args.quick else 100)
    warmup = 0 if args.smoke else WARMUP
    print(common.machine_line())
    if args.smoke and not args.no_channel:
        args.no_channel = True
        print("channel figure skipped in a smoke run (bench/bench_channel.py measures it)")
    with common.temp_dir() as tmp:
        db = f"sqlite:///{tmp / 'monitor.sqlite3'}"
        local_args = ["--db", db, "--state-file", str(tmp / "monitor.json")]
        local = monitor_samples(
            local_args, Worker(sys.executable, _LOCAL_APPENDER, db, our_env()), n, warmup
        )
        hub = hub_samples(tmp, n, warmup)
        paths = [
            ("Monitor line, local SQLite: append returned -> line read", local),
            ("Monitor line, --hub: HTTP append returned -> line read", hub),
        ]
        if not args.no_channel:
            from bench.bench_channel import channel_samples

            channel = channel_samples(tmp / "channel.sqlite3", n)
            paths.append(("channel: append returned -> SDK client got the notification", channel))
    rows = []
    for label, values in paths:
        s = common.summarize(values)
        rows.append(
            [label, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"]), n]
        )
    common.print_table("push latency (ms)", ["path", "p50", "p95", "max", "n"], rows)
    for name, values in (("local", local), ("--hub", hub)):
        s = common.summarize(values)
        common.target_line(
            BENCH, f"Monitor line p50 after commit ({name})", s["p50"] * 1e3, "ms", "<=", 50
        )
        common.target_line(
            BENCH, f"Monitor line p95 after commit ({name})", s["p95"] * 1e3, "ms", "<=", 100
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
