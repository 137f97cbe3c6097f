"""The hop from the event loop to a worker thread and back, alone (issue 25).

    python bench/profile_hop.py [--hops 5000] [--rounds 3] [--loop uvloop|asyncio]

One task awaits `--hops` empty calls in a row, each through one way of running a sync call
in a thread, on the loop `logstream serve` runs (uvloop); prints, per hop, the process's CPU
(user + system of every thread: the loop's and the worker's, wake-ups included) and the wall
time, for each way in turn, `--rounds` times (alternating, so load drifts hit all alike):

* `inline`: the call on the loop itself (no hop: the floor of the loop's own await);
* `workers`: `workers.run_sync` from a task in no anyio scope (a hub request's);
* `workers scoped`: the same inside an anyio cancel scope (the check and the shielded wait);
* `anyio`: `anyio.to_thread.run_sync` (what the servers used before workers.py);
* `executor`: `loop.run_in_executor` on a `ThreadPoolExecutor`.

Also the context switches of the whole process per hop (`/proc/self/status`, voluntary +
involuntary, every thread): 2 a hop is one wake-up each way. Never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402
import anyio.to_thread  # noqa: E402

from mempalace_logstream import workers  # noqa: E402


def noop() -> None:
    return None


def switches() -> int:
    """Context switches of every thread of this process so far."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if "ctxt_switches:" in line:
                    total += int(line.split()[-1])
    return total


async def run_way(way: str, hops: int, pool: concurrent.futures.Executor) -> tuple[float, ...]:
    loop = asyncio.get_running_loop()
    call: Callable[[], Awaitable[None]]
    if way == "inline":

        async def call() -> None:
            noop()

    elif way in ("workers", "workers scoped"):

        def call() -> Awaitable[None]:
            return workers.run_sync(noop)

    elif way == "anyio":

        def call() -> Awaitable[None]:
            return anyio.to_thread.run_sync(noop)

    else:

        def call() -> Awaitable[None]:
            return loop.run_in_executor(pool, noop)

    for _ in range(200):  # warm: threads started, caches filled
        await call()
    before_sw, cpu, wall = switches(), time.process_time(), time.perf_counter()
    if way == "workers scoped":
        with anyio.CancelScope():
            for _ in range(hops):
                await call()
    else:
        for _ in range(hops):
            await call()
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    sw = switches() - before_sw
    return cpu / hops * 1e6, wall / hops * 1e6, sw / hops


WAYS = ("inline", "workers", "workers scoped", "anyio", "executor")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hops", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = ap.parse_args(argv)
    if args.loop == "uvloop":
        import uvloop

        runner: Callable[..., tuple[float, float, float]] = uvloop.run
    else:
        runner = asyncio.run
    print(f"load avg {' '.join(f'{x:.2f}' for x in os.getloadavg())}, loop {args.loop}")
    print(f"{'way':16} {'CPU µs/hop':>11} {'wall µs/hop':>12} {'switches/hop':>13}")
    pool = concurrent.futures.ThreadPoolExecutor(4)
    for _ in range(args.rounds):
        for way in WAYS:
            cpu, wall, sw = runner(run_way(way, args.hops, pool))
            print(f"{way:16} {cpu:11.1f} {wall:12.1f} {sw:13.2f}")
    pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
