"""Several hubs on one PostgreSQL log (issue 23): HTTP append throughput and SSE delivery
latency with 1, 2 and 3 hubs behind one round-robin proxy, on this machine.

    python bench/bench_hubs.py [--quick | --smoke] [--hubs 1 2 3] [--appends 2000]
                               [--clients 16] [--subscribers 60] [--events 30]

For each count of hubs: a fresh schema on the PostgreSQL server (`$LOGSTREAM_BENCH_PG`, else
the local one), that many `logstream serve --db postgresql+psycopg://…` processes, and the
test suite's round-robin TCP proxy in front of them (tests/proxykit.py; each connection goes
to the next hub). Then, through the proxy:
1. `--clients` concurrent keep-alive clients post `--appends` appends in all; events/s, the
   request latency and the hubs' CPU per append (all hub processes together).
2. `--subscribers` SSE clients on `/v1/stream` (spread over the hubs by the proxy), then
   `--events` appends one at a time; the delivery latency from the append request to each
   subscriber's frame (bench_hub.py's fan-out: every subscriber gets every event once).
Every process shares this machine's two cores, so more hubs cannot add throughput here: the
point is that adding hubs does not make anything worse, and where it saturates. The
reference has no several-hub mode; there is nothing of it to compare. Never a test; figures
go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_hub, common  # noqa: E402

BENCH = "hubs"


def pg_schema() -> contextlib.AbstractContextManager[str]:
    """A fresh schema on the bench's PostgreSQL server, as a URL; dropped afterwards."""
    return common.pg_schema(common.pg_admin_url(), "bench_hubs")


@contextlib.contextmanager
def hubs_on(
    db: str, n: int, tmp: Path, sse_max_clients: int
) -> Iterator[tuple[list[int], list[int]]]:
    """`n` hubs serving `db`, each on a free loopback port: (their pids, their ports)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(common.REPO),
        "LOGSTREAM_TOKEN": bench_hub.TOKEN,
        "MEMPALACE_LOGSTREAM_SYNC_INTERVAL": "0",
    }
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for i in range(n):
            port = bench_hub.free_port()
            palace = tmp / f"palace-{n}-{i}"
            palace.mkdir()
            cmd = [
                *(sys.executable, "-m", "mempalace_logstream", "serve", "--db", db),
                *("--palace", str(palace), "--port", str(port)),
                *("--sse-max-clients", str(sse_max_clients), "--remind-interval", "0"),
            ]
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                cmd, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
            procs.append(proc)
            bench_hub.wait_healthz(f"http://127.0.0.1:{port}", proc, log)
            ports.append(port)
        yield [p.pid for p in procs], ports
    finally:
        for proc in procs:
            bench_hub.stop_group(proc)


def hubs_cpu(pids: Sequence[int]) -> float:
    return sum(bench_hub.proc_cpu(pid) for pid in pids)


def measure(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from mempalace_logstream import LogStore
    from tests.proxykit import RoundRobinProxy

    with pg_schema() as db:
        LogStore.open(db).close()  # migrated once, before any hub starts
        with hubs_on(db, n, tmp, args.subscribers + 8) as (pids, ports):
            proxy = RoundRobinProxy(ports)
            url = proxy.url
            try:
                append = bench_hub.ours_append(url)
                per_client = max(1, args.appends // args.clients)
                cpu0 = hubs_cpu(pids)
                tp = asyncio.run(bench_hub.throughput(append, args.clients, per_client, None))
                tp["cpu_ms"] = (hubs_cpu(pids) - cpu0) * 1000 / max(1, tp["n"])
                fan = asyncio.run(
                    bench_hub.fanout(
                        url + "/v1/stream", append, args.subscribers, args.events, None
                    )
                )
                spread = dict(proxy.served)
            finally:
                proxy.close()
    return {"tp": tp, "fan": fan, "spread": spread}


def report(results: dict[int, dict[str, Any]]) -> None:
    rows = []
    for n, res in results.items():
        tp, fan = res["tp"], res["fan"]
        lat = common.summarize(tp["lat"])
        sse = common.summarize(fan["lat"]) if fan["lat"] else {"p50": None, "p95": None}
        res["sse_p95"] = sse["p95"]
        expected = fan["subs"] * fan["events"]
        rows.append(
            [
                f"{n} hub{'s' if n > 1 else ''}",
                common.fmt_num(tp["rate"]),
                common.fmt_ms(lat["p50"]),
                common.fmt_ms(lat["p95"]),
                f"{tp['cpu_ms']:.2f}",
                common.fmt_ms(sse["p50"]),
                common.fmt_ms(sse["p95"]),
                str(expected - len(fan["lat"])),
                " ".join(str(c) for c in sorted(res["spread"].values())),
            ]
        )
    common.print_table(
        "hubs on one PostgreSQL log, through a round-robin proxy",
        [
            "hubs",
            "appends/s",
            "append p50 (ms)",
            "append p95 (ms)",
            "hub CPU ms/append",
            "SSE p50 (ms)",
            "SSE p95 (ms)",
            "frames missing",
            "connections per hub",
        ],
        rows,
    )
    one = results.get(1)
    for n, res in results.items():
        if one is None or n == 1:
            continue
        common.ratio_line(
            BENCH, f"appends/s {n} hubs / 1 hub", res["tp"]["rate"] / one["tp"]["rate"]
        )
        if res.get("sse_p95") and one.get("sse_p95"):
            common.ratio_line(BENCH, f"SSE p95 1 hub / {n} hubs", one["sse_p95"] / res["sse_p95"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_hubs.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="400 appends, 20 subscribers x 10")
    common.add_smoke(p)
    p.add_argument("--hubs", type=int, nargs="+", default=None, help="hub counts (1 2 3)")
    p.add_argument("--appends", type=int, default=None, help="appends in all (2000)")
    p.add_argument("--clients", type=int, default=16, help="concurrent append clients")
    p.add_argument("--subscribers", type=int, default=None, help="SSE subscribers (60)")
    p.add_argument("--events", type=int, default=None, help="fan-out events (30)")
    args = p.parse_args(argv)
    if args.smoke:
        args.hubs = args.hubs or [1, 2]
        args.appends, args.clients = args.appends or 8, 4
        args.subscribers, args.events = args.subscribers or 2, args.events or 2
    args.hubs = args.hubs or [1, 2, 3]
    args.appends = args.appends or (400 if args.quick else 2000)
    args.subscribers = args.subscribers or (20 if args.quick else 60)
    args.events = args.events or (10 if args.quick else 30)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    print(common.machine_line())
    print(
        f"hubs bench: {args.clients} clients x {args.appends // args.clients} appends, "
        f"{args.subscribers} SSE subscribers x {args.events} events, hubs {args.hubs}"
    )
    with common.temp_dir() as tmp:
        results = {n: measure(n, args, tmp) for n in args.hubs}
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
