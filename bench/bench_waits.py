"""The wait herd (issue 18, item 8): what open and abandoned `event_wait`s cost every append.

    python bench/bench_waits.py [--quick | --smoke] [--waits N] [--appends N] [--settle-s S]

The hub is `logstream serve` (real uvicorn) in a subprocess on a fresh SQLite file. One
keep-alive httpx client appends events addressed to nobody, one after the other, and times
each `POST /v1/event_append` (sent -> answer read). Three phases, in this order:

1. none: no wait open.
2. open: N waits open, each from its own httpx client, each to a distinct agent
   (`to_agent=agent-<i>`, `since_event_id=tip`, `timeout_ms` 120 s); no append matches them.
3. abandoned: the same N clients cancel their calls and close their connections (the agent
   process went away); appends are timed at once, while every wait's own timeout is still
   ~2 minutes off.

The waits are given `--settle-s` seconds to reach the hub before phase 2 is timed (a hub
without a counter of open waits cannot say when they all arrived). Prints one table and the
`[ratio]` lines of append p50 with the waits over without. Never a test; the figures go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "waits"
WAIT_TIMEOUT_MS = 120_000


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_waits.py", description=__doc__)
    p.add_argument("--quick", action="store_true", help="50 waits, 30 appends per phase")
    common.add_smoke(p)
    p.add_argument("--waits", type=int, default=None, help="open waits (default 200)")
    p.add_argument("--appends", type=int, default=None, help="appends timed per phase (100)")
    p.add_argument("--settle-s", type=float, default=None, help="time for the waits to arrive (2)")
    return p.parse_args(argv)


class Hub:
    """`logstream serve` on a free loopback port, background sync off, its own palace."""

    def __init__(self, tmp: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPA"))}
        palace = tmp / "palace"
        palace.mkdir()
        cmd = [sys.executable, "-m", "mempalace_logstream", "serve", "--port", "0"]
        cmd += ["--db", str(tmp / "hub.sqlite3"), "--palace", str(palace)]
        self.proc = subprocess.Popen(
            [*cmd, "--sync-interval", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**env, "PYTHONPATH": str(common.REPO)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        self.url = line.split("listening on ")[1].split()[0]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Waiters:
    """N event_waits, each on its own httpx.AsyncClient, in an event loop of their own."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n
        self.answered = 0  # waits that got an answer (none should, before the cancel)
        self.loop = asyncio.new_event_loop()
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[Any] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self.loop).result(60)

    async def _open(self) -> None:
        import httpx

        for i in range(self.n):
            client = httpx.AsyncClient(base_url=self.url, timeout=None)
            self._clients.append(client)
            self._tasks.append(asyncio.ensure_future(self._wait(client, f"agent-{i:03d}")))

    async def _wait(self, client: Any, agent: str) -> None:
        body = {"to_agent": agent, "since_event_id": "tip", "timeout_ms": WAIT_TIMEOUT_MS}
        await client.post("/v1/event_wait", json=body)
        self.answered += 1

    def abandon(self) -> None:
        """Cancel every call and close every connection: the clients are gone."""

        async def gone() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            for client in self._clients:
                await client.aclose()

        asyncio.run_coroutine_threadsafe(gone(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def time_appends(http: Any, n: int, tag: str) -> list[float]:
    out = []
    body = {"type": "note", "stream": "bench", "room": "r", "from_agent": "writer"}
    for i in range(n):
        t0 = time.perf_counter()
        resp = http.post(
            "/v1/event_append", json={**body, "to_agent": "nobody", "body": f"{tag}{i}"}
        )
        out.append(time.perf_counter() - t0)
        assert resp.status_code == 200, resp.text
    return out


def row(label: str, samples: list[float]) -> list[str]:
    s = common.summarize(samples)
    return [label, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"])]


def main(argv: list[str] | None = None) -> int:
    import httpx

    args = parse_args(argv)
    n_waits = args.waits or (5 if args.smoke else 50 if args.quick else 200)
    n_appends = args.appends or (5 if args.smoke else 30 if args.quick else 100)
    settle_s = args.settle_s if args.settle_s is not None else 0.3 if args.smoke else 2.0
    print(common.machine_line())
    with common.temp_dir() as tmp:
        hub = Hub(tmp)
        try:
            with httpx.Client(base_url=hub.url, timeout=120) as http:
                time_appends(http, 5, "warm")
                none = time_appends(http, n_appends, "none")
                waiters = Waiters(hub.url, n_waits)
                time.sleep(settle_s)  # a pacing choice of the bench, see the docstring
                opened = time_appends(http, n_appends, "open")
                answered = waiters.answered
                waiters.abandon()
                abandoned = time_appends(http, n_appends, "gone")
        finally:
            hub.close()
    common.print_table(
        f"append latency, {n_appends} sequential appends per phase (ms)",
        ["phase", "p50", "p95", "max"],
        [
            row("no wait open", none),
            row(f"{n_waits} waits open", opened),
            row(f"{n_waits} waits abandoned", abandoned),
        ],
    )
    if answered:
        print(f"note: {answered} of {n_waits} waits were answered before the cancel")
    base = common.percentile(none, 0.5)
    for label, samples in (("open", opened), ("abandoned", abandoned)):
        ratio = common.percentile(samples, 0.5) / base
        common.ratio_line(BENCH, f"append p50 {n_waits} {label} waits / none", ratio, "<=", 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
