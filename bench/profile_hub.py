"""Where one keep-alive client's `POST /v1/event_append` spends the hub's time (issue 10).

    python bench/profile_hub.py [--appends 3000] [--durability full|normal|off]
                                [--clients N] [--stub-store] [--profile [--top 40]]

The hub runs in this process (`HubServer` on `http.create_app`, uvicorn as `logstream serve`
runs it, a fresh SQLite file, a token); one client in a child process (`httpx.Client`,
keep-alive, the bench's 100-byte event) posts `--appends` appends one after the other after 50
warm-up ones. With `--clients N`, N light clients instead (bench/hub_load.py: a process each,
blocking sockets, pre-built requests), `--appends` in all, after 5 warm-up appends each.
Printed per append: this process's user and system CPU (the hub: event loop and worker
threads), the CPU of the worker thread inside the store's `event_append` (SQL, commit, fsync
system time), and the client's rate. `--stub-store` answers every append with one stored
result without calling the store, so what is left is the HTTP layer alone (uvicorn, the
guard, routing, JSON). `--profile` runs cProfile on the event loop thread (worker threads are
not profiled) and prints the top functions by own time. Never a test; figures go to
docs/bench/hub.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN = "bench-hub-token"
CLIENT = r"""
import sys, time, httpx
port, n, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = {"type": "bench.hub", "stream": "bench", "room": "r", "from_agent": "w00",
        "to_agent": "*", "body": "x" * 100}
headers = {"Authorization": "Bearer " + token}
with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, trust_env=False) as c:
    for _ in range(50):
        assert c.post("/v1/event_append", json=body).status_code == 200
    print("GO", flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        resp = c.post("/v1/event_append", json=body)
        assert resp.status_code == 200, resp.text
    secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"{n / secs:.0f} {cpu * 1000 / n:.3f}", flush=True)
"""


class StoreTimer:
    """Wraps the `event_append` operation: worker-thread CPU inside it, summed."""

    def __init__(self, operations: Any) -> None:
        op = operations.OPERATIONS["event_append"]
        self.real = op.handler
        self.cpu = 0.0
        self.calls = 0
        operations.OPERATIONS["event_append"] = dataclasses.replace(op, handler=self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self.real(*args, **kwargs)
        finally:
            self.cpu += time.thread_time() - t0
            self.calls += 1


async def run(args: argparse.Namespace, tmp: str) -> None:
    import uvicorn

    from mempalace_logstream import LogStore, aio, http, operations
    from mempalace_logstream.http.server import HubServer

    store = LogStore.open(os.path.join(tmp, "hub.sqlite3"), durability=args.durability)
    timer = StoreTimer(operations)
    if args.stub_store:
        stored = operations.call(
            store, "event_append", {"type": "t", "stream": "s", "room": "r", "from_agent": "a"}
        )

        # a stand-in for aio.call, with its parameter names (unused here) so that mypy takes it
        async def answer(store: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
            return stored

        aio.call = answer
    app = http.create_app(store, http.HubSettings(token=TOKEN))
    sock = http.listen_socket("127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = HubServer(config, app)  # what `logstream serve` runs (its HTTP protocol too)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    port = str(sock.getsockname()[1])
    cmd = [sys.executable, "-c", CLIENT, port, str(args.appends), TOKEN]
    if args.clients:
        per_client = str(max(1, args.appends // args.clients))
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "bench.hub_load", url, TOKEN, str(args.clients), per_client]
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parents[1])
    )
    assert child.stdout is not None
    line = await asyncio.to_thread(child.stdout.readline)
    assert line.strip() == "GO", line
    prof = cProfile.Profile() if args.profile else None
    t0, calls0, store0 = os.times(), timer.calls, timer.cpu
    if prof:
        prof.enable()
    line = await asyncio.to_thread(child.stdout.readline)
    if prof:
        prof.disable()
    t1 = os.times()
    child.wait()
    server.should_exit = True
    await task
    store.close()
    if args.clients:
        n = max(1, args.appends // args.clients) * args.clients
        got = json.loads(line)
        rate, client_cpu = f"{got['rate']:.0f}", f"{got['client_cpu_ms']:.3f}"
        who = f"{args.clients} light keep-alive clients"
    else:
        n = args.appends
        rate, client_cpu = line.split()
        who = "one keep-alive httpx client"
    print(
        f"durability {args.durability}{', store stubbed' if args.stub_store else ''}: "
        f"{rate} appends/s from {who} ({client_cpu} ms client CPU)"
    )
    print(
        f"hub CPU per append: user {(t1.user - t0.user) * 1000 / n:.3f} ms, "
        f"system {(t1.system - t0.system) * 1000 / n:.3f} ms"
    )
    if timer.calls > calls0:
        print(
            f"  of which inside the store's event_append (worker thread): "
            f"{(timer.cpu - store0) * 1000 / (timer.calls - calls0):.3f} ms"
        )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/profile_hub.py", description=__doc__.split("\n")[0])
    p.add_argument("--appends", type=int, default=3000)
    p.add_argument("--durability", default="full", choices=("full", "normal", "off"))
    p.add_argument(
        "--clients", type=int, default=0, help="N light clients (bench/hub_load.py), not httpx"
    )
    p.add_argument("--stub-store", action="store_true", help="the HTTP layer alone")
    p.add_argument("--profile", action="store_true", help="cProfile the event loop thread")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="logstream-profile-hub-") as tmp:
        try:  # what `logstream serve` runs on (uvicorn picks uvloop when installed)
            import uvloop
        except ImportError:
            asyncio.run(run(args, tmp))
        else:
            uvloop.run(run(args, tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
