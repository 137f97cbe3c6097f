"""Hub benchmark (SPEC §9): SSE fan-out latency, hub RSS and HTTP append throughput, ours next
to the reference hub, in one run.

    python bench/bench_hub.py [--quick] [--subscribers 200] [--events 50] [--appends 2000]
                              [--small 8] [--small-events 30] [--no-ref]
    python bench/bench_hub.py --appends-only [--appends N] [--clients N] [--no-ref]
                              [--client light|raw|httpx] [--no-httpx]
                              [--durability full|normal|off]

Target (SPEC §9): "200 subscribers on one hub all receive an event with p95 <= 100 ms; hub
RSS <= 200 MB". Everything goes to 127.0.0.1; each hub is its own process on a fresh database.

1. Fan-out: our hub (`logstream serve --db <fresh file> --sse-max-clients <subscribers>`);
   `--subscribers` SSE clients on `GET /v1/stream` (no cursor = tail from now), all in this
   process (asyncio + httpx, frames parsed by hand). After two warm-up events, `--events`
   events are appended one at a time with `POST /v1/event_append`, each after every
   subscriber got the previous one plus a random 20-50 ms pause. Delivery latency = the
   perf_counter when a subscriber has parsed the frame's JSON minus the perf_counter just
   before the append request was sent (one process, one clock). Every subscriber must get
   every event exactly once, in append order. One extra subscriber past the cap shows the
   refusal.
2. RSS: VmRSS of the hub process (/proc/<pid>/status) idle, with the subscribers connected,
   after the events, and its peak (VmHWM).
3. Append throughput: 16 concurrent keep-alive clients each posting appends to
   `/v1/event_append`, then 1 client; events/s, request latency, the hub's CPU per append
   (user + system CPU of the hub process from /proc/<pid>/stat over the run, divided by the
   appends) and the clients' CPU per append. The client (`--client`, bench/hub_load.py) is by
   default "light": one blocking-socket client per process, each sending pre-built request
   bytes (tens of microseconds of CPU per append, so the figures show the hubs, not the
   client); "raw" runs the same clients as asyncio tasks of this process; "httpx" is tasks on
   one `httpx.AsyncClient` (1-2 ms of CPU per request: on two cores it bounds both hubs).
   The httpx runs are also made beside the light ones unless `--no-httpx`. The shipped
   listener is IPPROTO_TCP, so accepted connections get TCP_NODELAY (the run prints what it
   saw on one of them). `--appends-only` runs just this, on a fresh hub of ours and then the
   reference's (unless `--no-ref`); `--durability` sets our hub's there (FULL, as shipped,
   fsyncs every commit).
4. Reference (`mempalace==3.11.0 serve`, full install in its own venv via tests/refpkg.py):
   its SSE cap is 8 clients, so 8 subscribers on `/logstream/stream` against ours with 8 too
   (another fresh hub of ours), the 9th subscriber on each, and the same append throughput
   runs. The reference hub has no REST append: its one HTTP append route is the MCP JSON-RPC
   `tools/call mempalace_event_append` on `POST /mcp`, which is what its numbers use (the same
   event, request bytes built the same way; that server answers every request with
   `Connection: close`, so its clients connect again for each append: the `connects` column).
Never a test; figures go to docs/bench/hub.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, hub_load  # noqa: E402

BENCH = "hub"
TOKEN = "bench-hub-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WARMUP_EVENTS = 2
DELIVERY_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 90.0
clock = time.perf_counter

HUBS = {"ours": "ours, `logstream serve`", "ref": "reference"}
CLIENT_NAMES = {
    "light": "light (a process each)",
    "raw": "minimal asyncio",
    "httpx": "httpx.AsyncClient",
}
Append = Callable[[Any, int], Awaitable[str]]  # (httpx.AsyncClient, worker) -> event id


# ----------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthz(
    url: str, proc: subprocess.Popen[bytes], log: IO[bytes], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            tail = log.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"hub exited {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:
                # Measured once the hub has started: its /mcp endpoint is built in the
                # background after /healthz first answers (`"mcp": "starting"`).
                if json.load(resp).get("mcp", "ready") != "starting":
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


def accepted_nodelay(url: str) -> str:
    """Whether the hub's accepted connections have TCP_NODELAY, seen from the client (the
    kernel does not report a peer's option): 20 keep-alive GETs; a Nagle stall costs ~40 ms
    each, so a median under 20 ms means the option is on."""
    import httpx

    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        client.get("/healthz")
        samples = []
        for _ in range(20):
            t0 = clock()
            client.get("/v1/stats")
            samples.append(clock() - t0)
    p50 = common.percentile(samples, 0.5) * 1000
    return f"{'on' if p50 < 20 else 'OFF (Nagle stalls)'} (keep-alive GET p50 {p50:.1f} ms)"


@dataclass
class Hub:
    url: str
    pid: int
    log: IO[bytes]

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")


@contextlib.contextmanager
def our_hub(tmp: Path, name: str, sse_max_clients: int, durability: str = "full") -> Iterator[Hub]:
    """`logstream serve --db <tmp>/<name>.sqlite3` on a free loopback port, background sync
    off, its palace an empty dir of its own (never ~/.mempalace). Killed on exit."""
    port = free_port()
    palace = tmp / f"{name}-palace"
    palace.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(common.REPO),
        "LOGSTREAM_TOKEN": TOKEN,
        "MEMPALACE_LOGSTREAM_SYNC_INTERVAL": "0",
        "MEMPALACE_SYNC_INTERVAL": "0",
        "MEMPALACE_LOGSTREAM_DURABILITY": durability,
    }
    cmd = [
        sys.executable,
        "-m",
        "mempalace_logstream",
        "serve",
        "--db",
        str(tmp / f"{name}.sqlite3"),
        "--palace",
        str(palace),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--sse-max-clients",
        str(sse_max_clients),
    ]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            cmd, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthz(url, proc, log)
            yield Hub(url, proc.pid, log)
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ref_hub_pid(port: int) -> int | None:
    """The pid of the reference hub: our child process listening on `port` (`mempalace serve`
    execs `python -m mempalace.mcp_server --transport http ... --port <port>`)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"--port" in argv and str(port).encode() in argv:
            return int(entry.name)
    return None


def proc_mem(pid: int | None) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of `pid` in MB; NaN when unreadable."""
    out = {"rss": float("nan"), "hwm": float("nan")}
    if pid is None:
        return out
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def proc_cpu(pid: int | None) -> float:
    """User + system CPU seconds of `pid` so far (NaN when unreadable)."""
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------- HTTP clients


def make_client(connections: int) -> Any:
    import httpx

    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(10.0, read=60.0, pool=CONNECT_TIMEOUT_S),
        trust_env=False,  # never a proxy: loopback only
    )


def ours_append(url: str) -> Append:
    async def append(client: Any, worker: int) -> str:
        resp = await client.post(
            url + "/v1/event_append", json=hub_load.append_fields(worker), headers=AUTH
        )
        if resp.status_code != 200:
            raise RuntimeError(f"our append answered {resp.status_code}: {resp.text[:300]}")
        return str(resp.json()["event"]["id"])

    return append


def ref_append(url: str) -> Append:
    """The reference hub's HTTP append: MCP JSON-RPC `tools/call mempalace_event_append`."""

    async def append(client: Any, worker: int) -> str:
        rpc = {
            "jsonrpc": "2.0",
            "id": worker,
            "method": "tools/call",
            "params": {
                "name": "mempalace_event_append",
                "arguments": hub_load.append_fields(worker),
            },
        }
        resp = await client.post(url + "/mcp", json=rpc, headers=AUTH)
        if resp.status_code != 200:
            raise RuntimeError(f"reference append answered {resp.status_code}: {resp.text[:300]}")
        result = json.loads(resp.json()["result"]["content"][0]["text"])
        if not result.get("success"):
            raise RuntimeError(f"reference append failed: {result}")
        return str(result["event"]["id"])

    return append


# ----------------------------------------------------------------- SSE fan-out


@dataclass
class Sub:
    got: list[tuple[str, float]] = field(default_factory=list)
    status: int | None = None
    retry_after: str | None = None
    error: str | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)


async def subscribe(client: Any, url: str, sub: Sub, on_frame: Callable[[str], None]) -> None:
    """One SSE client: records (event id, perf_counter after parsing) for every data frame."""
    try:
        async with client.stream("GET", url, headers=AUTH) as resp:
            sub.status = resp.status_code
            sub.retry_after = resp.headers.get("retry-after")
            if resp.status_code != 200:
                await resp.aread()
                return
            sub.ready.set()
            data: str | None = None
            async for line in resp.aiter_lines():
                if line == "":
                    if data is not None:
                        event_id = json.loads(data)["id"]
                        sub.got.append((event_id, clock()))
                        on_frame(event_id)
                    data = None
                elif line.startswith("data:"):
                    chunk = line[6:] if line.startswith("data: ") else line[5:]
                    data = chunk if data is None else data + "\n" + chunk
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        sub.error = f"{type(exc).__name__}: {exc}"
    finally:
        sub.ready.set()


async def probe_extra(client: Any, url: str) -> dict[str, Any]:
    """One more subscriber while the others are connected: its status (then disconnect)."""
    sub = Sub()
    task = asyncio.ensure_future(subscribe(client, url, sub, lambda _id: None))
    try:
        await asyncio.wait_for(sub.ready.wait(), 15)
    except TimeoutError:
        sub.error = "no answer within 15 s"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"status": sub.status, "retry_after": sub.retry_after, "error": sub.error}


async def fanout(
    stream_url: str,
    append: Append,
    n_subs: int,
    n_events: int,
    pid: int | None,
    on_stage: Callable[[str], None] = lambda _s: None,
) -> dict[str, Any]:
    """`n_subs` subscribers, then warm-up + `n_events` appends one at a time (see module doc).

    Also the CPU time the hub process and this (client) process spent per measured event.
    """
    counts: dict[str, int] = {}
    changed = asyncio.Event()

    def on_frame(event_id: str) -> None:
        counts[event_id] = counts.get(event_id, 0) + 1
        changed.set()

    subs = [Sub() for _ in range(n_subs)]
    sent: dict[str, float] = {}
    answered: list[float] = []
    expected: list[str] = []
    timeouts = 0
    async with make_client(n_subs + 8) as sse_client, make_client(4) as post_client:
        tasks = [
            asyncio.ensure_future(subscribe(sse_client, stream_url, s, on_frame)) for s in subs
        ]
        try:
            t0 = clock()
            await asyncio.wait_for(
                asyncio.gather(*(s.ready.wait() for s in subs)), CONNECT_TIMEOUT_S
            )
            connect_s = clock() - t0
            bad = [s for s in subs if s.status != 200]
            if bad:
                raise RuntimeError(
                    f"{len(bad)}/{n_subs} subscribers not connected: "
                    f"status {bad[0].status}, {bad[0].error}"
                )
            on_stage("connected")
            extra = await probe_extra(sse_client, stream_url)
            cpu0 = hub0 = float("nan")
            for i in range(WARMUP_EVENTS + n_events):
                if i == WARMUP_EVENTS:
                    cpu0, hub0 = time.process_time(), proc_cpu(pid)
                await asyncio.sleep(random.uniform(0.02, 0.05))
                t_sent = clock()
                event_id = await append(post_client, 0)
                answered.append(clock() - t_sent)
                expected.append(event_id)
                if i >= WARMUP_EVENTS:
                    sent[event_id] = t_sent
                deadline = time.monotonic() + DELIVERY_TIMEOUT_S
                while counts.get(event_id, 0) < n_subs:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        timeouts += 1
                        break
                    changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), left)
            cpu = {
                "client": (time.process_time() - cpu0) * 1000 / max(1, n_events),
                "hub": (proc_cpu(pid) - hub0) * 1000 / max(1, n_events),
            }
            await asyncio.sleep(0.2)  # a late duplicate would show up here
            on_stage("after the events")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    latencies: list[float] = []
    first: list[float] = []
    last: list[float] = []
    per_event: dict[str, list[float]] = {}
    complete = 0
    for s in subs:
        ids = [event_id for event_id, _t in s.got]
        complete += ids == expected
        for event_id, t in s.got:
            if event_id in sent:
                per_event.setdefault(event_id, []).append(t - sent[event_id])
    for values in per_event.values():
        latencies += values
        first.append(min(values))
        last.append(max(values))
    return {
        "subs": n_subs,
        "events": n_events,
        "lat": latencies,
        "first": first,
        "last": last,
        "complete": complete,
        "deliveries": len(latencies),
        "timeouts": timeouts,
        "connect_s": connect_s,
        "extra": extra,
        "append_rtt": answered[WARMUP_EVENTS:],
        "errors": [s.error for s in subs if s.error],
        "cpu": cpu,
    }


# ----------------------------------------------------------------- append throughput


async def throughput(
    append: Append, clients: int, per_client: int, pid: int | None
) -> dict[str, Any]:
    """httpx: `clients` tasks on one `httpx.AsyncClient` x `per_client` appends. A request that
    fails at the transport level (connection reset, timeout) is counted, not retried; events/s
    counts the appends that were answered."""
    import httpx

    lat: list[float] = []
    failed: list[str] = []
    async with make_client(clients + 2) as client:
        warm = (append(client, w) for w in range(min(clients, 8)))
        await asyncio.gather(*warm, return_exceptions=True)  # warm-up; failures show below

        async def worker(w: int) -> None:
            for _ in range(per_client):
                t0 = clock()
                try:
                    await append(client, w)
                except (httpx.TransportError, OSError) as exc:
                    failed.append(f"{type(exc).__name__} after {clock() - t0:.2f} s")
                    continue
                lat.append(clock() - t0)

        cpu0, mine0 = proc_cpu(pid), time.process_time()
        t0 = clock()
        await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(clients))), 600)
        secs = clock() - t0
        cpu, mine = proc_cpu(pid) - cpu0, time.process_time() - mine0
    n = len(lat)
    if failed:
        print(
            f"{len(failed)} of {clients * per_client} appends failed ({clients} clients), "
            f"e.g. {failed[0]}"
        )
    return {
        "client": "httpx",
        "clients": clients,
        "n": n,
        "secs": secs,
        "rate": n / secs,
        "lat": lat,
        "cpu_ms": cpu * 1000 / max(1, n),
        "client_cpu_ms": mine * 1000 / max(1, n),
        "failed": len(failed),
        "connects": None,
    }


def measure(
    kind: str, url: str, ref: bool, clients: int, per_client: int, pid: int | None
) -> dict[str, Any]:
    """One throughput run of `clients` x `per_client` appends with the `kind` client
    ("light": hub_load's blocking clients, a process each; "raw": hub_load's asyncio one;
    "httpx") on our hub (`POST /v1/event_append`) or the reference's (`POST /mcp`)."""
    if kind == "httpx":
        return asyncio.run(
            throughput((ref_append if ref else ours_append)(url), clients, per_client, pid)
        )
    request = hub_load.ref_request if ref else hub_load.our_request
    targets = [request(url, TOKEN, hub_load.append_fields(w)) for w in range(clients)]
    run = hub_load.run if kind == "light" else hub_load.run_async
    return run(targets, per_client, lambda: proc_cpu(pid))


# ----------------------------------------------------------------- report


def lat_row(label: str, res: dict[str, Any] | None) -> list[str]:
    if res is None:
        return [label] + ["n/a"] * 9
    s, lat = common.summarize(res["lat"]), res["lat"]
    ms = common.fmt_ms
    ok = (
        res["complete"] == res["subs"]
        and res["deliveries"] == res["subs"] * res["events"]
        and not res["timeouts"]
    )
    return [
        label,
        str(res["subs"]),
        str(res["deliveries"]),
        ms(s["p50"]),
        ms(common.percentile(lat, 0.95)),
        ms(common.percentile(lat, 0.99)),
        ms(s["max"]),
        ms(common.median(res["first"])),
        ms(common.median(res["last"])),
        "yes" if ok else f"NO ({res['complete']}/{res['subs']})",
    ]


TP_HEADERS = [
    "hub",
    "client",
    "clients",
    "appends",
    "failed",
    "events/s",
    "p50 ms",
    "p95 ms",
    "hub CPU ms/append",
    "client CPU ms/append",
    "connects",
]


def tp_rows(tp: dict[tuple[str, str, str], dict[str, Any] | None]) -> list[list[str]]:
    """One row per run: (hub, clients "N"/"1", client kind) -> its figures; n/a when absent."""
    rows = []
    for (hub, _c, kind), res in tp.items():
        if res is None:
            rows.append([HUBS[hub], CLIENT_NAMES[kind]] + ["n/a"] * (len(TP_HEADERS) - 2))
            continue
        s = common.summarize(res["lat"])
        rows.append(
            [
                HUBS[hub],
                CLIENT_NAMES[kind],
                str(res["clients"]),
                f"{res['n']:,}",
                str(res["failed"]),
                common.fmt_num(res["rate"]),
                common.fmt_ms(s["p50"]),
                common.fmt_ms(s["p95"]),
                common.fmt_num(res["cpu_ms"], 3),
                common.fmt_num(res["client_cpu_ms"], 3),
                "-" if res["connects"] is None else f"{res['connects']:,}",
            ]
        )
    return rows


def client_kinds(args: argparse.Namespace) -> list[str]:
    """The clients of the throughput runs: `--client` (light by default), then httpx for
    comparison unless that is the client already or `--no-httpx`."""
    kinds = [args.client]
    if args.client != "httpx" and not args.no_httpx:
        kinds.append("httpx")
    return kinds


def tp_ratios(args: argparse.Namespace, tp: dict[tuple[str, str, str], Any]) -> None:
    """ours/reference events/s and reference/ours hub CPU per append, per client kind."""
    for kind in client_kinds(args):
        tag = "" if kind == args.client else f", {kind} client"
        for c, what in (("N", f"{args.clients} clients"), ("1", "1 client")):
            mine, ref = tp.get(("ours", c, kind)), tp.get(("ref", c, kind))
            value = mine["rate"] / ref["rate"] if mine and ref else None
            goal = 2.0 if c == "N" and kind == args.client else None
            common.ratio_line(
                BENCH, f"ours/reference HTTP append events/s, {what}{tag}", value, ">=", goal
            )
            value = ref["cpu_ms"] / mine["cpu_ms"] if mine and ref else None
            common.ratio_line(BENCH, f"reference/ours hub CPU per HTTP append, {what}{tag}", value)
    one = tp.get(("ours", "1", args.client))
    common.target_line(
        BENCH,
        f"ours HTTP append events/s, 1 keep-alive client ({args.client})",
        one["rate"] if one else None,
        "events/s",
        ">=",
        1000,
    )


def extra_text(extra: dict[str, Any] | None) -> str:
    if extra is None:
        return "n/a"
    if extra["status"] is None:
        return f"no status ({extra['error']})"
    text = f"HTTP {extra['status']}"
    if extra["retry_after"]:
        text += f", Retry-After: {extra['retry_after']}"
    return text


def mb(value: float | None) -> str:
    return common.fmt_num(value, 1)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_hub.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20 subscribers, 5 events, 200 appends")
    common.add_smoke(p)
    p.add_argument("--subscribers", type=int, default=None, help="fan-out subscribers (200)")
    p.add_argument("--events", type=int, default=None, help="events in the fan-out (50)")
    p.add_argument(
        "--appends",
        type=int,
        default=None,
        help="appends of the 16-client throughput run (2000; 1 client: a fifth)",
    )
    p.add_argument("--clients", type=int, default=16, help="concurrent append clients")
    p.add_argument(
        "--small",
        type=int,
        default=8,
        help="subscribers of the like-for-like run (the reference caps SSE at 8)",
    )
    p.add_argument("--small-events", type=int, default=None, help="events of that run (30)")
    p.add_argument("--no-ref", action="store_true", help="skip the reference hub")
    p.add_argument(
        "--appends-only",
        action="store_true",
        help="only the append throughput runs: our hub, then the reference's (unless --no-ref)",
    )
    p.add_argument(
        "--client",
        default="light",
        choices=("light", "raw", "httpx"),
        help="the append runs' client: light (blocking sockets, a process per client, pre-built "
        "requests; default), raw (the same in asyncio tasks of this process) or httpx",
    )
    p.add_argument(
        "--raw-client", action="store_true", help="the same as --client raw (kept for old commands)"
    )
    p.add_argument(
        "--no-httpx",
        action="store_true",
        help="no httpx.AsyncClient runs beside the --client ones (they show the client's cost)",
    )
    p.add_argument(
        "--durability",
        default="full",
        choices=("full", "normal", "off"),
        help="with --appends-only: our hub's --durability (default full, as shipped)",
    )
    args = p.parse_args(argv)
    if args.raw_client:
        args.client = "raw"
    if args.smoke:  # 3 subscribers x 2 events, 4 clients x 2 appends, 2 x 2 like for like
        args.subscribers, args.events = args.subscribers or 3, args.events or 2
        args.appends, args.clients = args.appends or 8, 4
        args.small, args.small_events = 2, args.small_events or 2
    quick = args.quick
    args.subscribers = args.subscribers or (20 if quick else 200)
    args.events = args.events or (5 if quick else 50)
    args.appends = args.appends or (200 if quick else 2000)
    args.small_events = args.small_events or (5 if quick else 30)
    return args


@contextlib.contextmanager
def reference_hub(refpkg: Any, tmp: Path) -> Iterator[tuple[str, int | None]]:
    """`mempalace serve` from the full reference venv on a fresh palace: (url, hub pid)."""
    if not (refpkg.ref_full_venv_dir() / ".refpkg-complete").exists():
        print(
            "building the full reference venv (pip install mempalace==3.11.0 with "
            "chromadb, ~525 MB, about 1-2 min the first time)",
            flush=True,
        )
    refpkg.ref_full_python()
    palace = tmp / "ref-palace"
    palace.mkdir()
    with refpkg.ref_hub(palace, token=TOKEN) as ref_url:
        yield ref_url, ref_hub_pid(int(ref_url.rsplit(":", 1)[1]))


def appends_only(args: argparse.Namespace) -> int:
    """The append throughput runs alone (`--appends-only`): on a fresh hub of ours, then on
    the reference's unless `--no-ref`; N clients, then 1 client, with each client kind."""
    per_client = max(1, args.appends // args.clients)
    single = max(1, args.appends // 10)
    tp: dict[tuple[str, str, str], dict[str, Any] | None] = {}
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    print(
        f"clients: {', '.join(client_kinds(args))}; {args.clients} x {per_client} and "
        f"1 x {single} appends; our hub's durability {args.durability}"
    )
    with common.temp_dir("logstream-bench-hub-") as tmp:
        with our_hub(tmp, "hub", 256, args.durability) as hub:
            run_appends(args, tp, "ours", hub.url, hub.pid)
        if refpkg is not None:
            try:
                with reference_hub(refpkg, tmp) as (ref_url, rpid):
                    run_appends(args, tp, "ref", ref_url, rpid)
            except Exception as exc:  # the reference failed: keep our figures
                reason, refpkg = f"reference run failed: {type(exc).__name__}: {exc}", None
    common.print_table(
        "HTTP append throughput (ours: POST /v1/event_append; reference: POST /mcp tools/call)",
        TP_HEADERS,
        tp_rows(tp),
    )
    if refpkg is None:
        print(f"reference not measured: {reason}")
    tp_ratios(args, tp)
    return 0


def run_appends(
    args: argparse.Namespace,
    tp: dict[tuple[str, str, str], dict[str, Any] | None],
    hub: str,
    url: str,
    pid: int | None,
) -> None:
    """Every client kind's N-client and 1-client runs on one hub, into `tp`."""
    per_client = max(1, args.appends // args.clients)
    single = max(1, args.appends // 10)
    t0 = clock()
    for kind in client_kinds(args):
        tp[(hub, "N", kind)] = measure(kind, url, hub == "ref", args.clients, per_client, pid)
        tp[(hub, "1", kind)] = measure(kind, url, hub == "ref", 1, single, pid)
    print(f"{hub} append throughput: {clock() - t0:.1f} s", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.appends_only:
        print(common.machine_line())
        return appends_only(args)
    print(common.machine_line())
    per_client = max(1, args.appends // args.clients)
    single = max(1, args.appends // 10)
    print(
        f"hub bench: {args.subscribers} SSE subscribers x {args.events} events; "
        f"{args.clients} x {per_client} and 1 x {single} HTTP appends; "
        f"{args.small} subscribers x {args.small_events} events vs the reference"
    )
    n = args.subscribers
    mem: dict[str, dict[str, float]] = {}
    fan: dict[str, dict[str, Any] | None] = dict.fromkeys(("big", "ours8", "ref8"))
    tp: dict[tuple[str, str, str], dict[str, Any] | None] = {}
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)

    with common.temp_dir("logstream-bench-hub-") as tmp:
        # 1-3: a fresh hub of ours, capped at the fan-out size (so the next one is refused)
        with our_hub(tmp, "hub", n) as hub:
            time.sleep(0.5)
            mem["ours idle"] = proc_mem(hub.pid)

            def stage(name: str, pid: int = hub.pid) -> None:
                mem[f"ours, {n} subscribers {name}"] = proc_mem(pid)

            t0 = clock()
            fan["big"] = big = asyncio.run(
                fanout(hub.url + "/v1/stream", ours_append(hub.url), n, args.events, hub.pid, stage)
            )
            print(
                f"fan-out, {n} subscribers: {clock() - t0:.1f} s (connect {big['connect_s']:.2f} s)"
            )
            nodelay_note = accepted_nodelay(hub.url)
            run_appends(args, tp, "ours", hub.url, hub.pid)
            mem["ours after the appends"] = proc_mem(hub.pid)
        # 4: like for like at the reference's SSE cap, another fresh hub of ours
        with our_hub(tmp, "hub8", 256) as hub:
            fan["ours8"] = asyncio.run(
                fanout(
                    hub.url + "/v1/stream",
                    ours_append(hub.url),
                    args.small,
                    args.small_events,
                    hub.pid,
                )
            )
            mem[f"ours, {args.small} subscribers (peak)"] = proc_mem(hub.pid)
        if refpkg is not None:
            try:
                with reference_hub(refpkg, tmp) as (ref_url, rpid):
                    mem["reference idle"] = proc_mem(rpid)
                    t0 = clock()
                    fan["ref8"] = asyncio.run(
                        fanout(
                            ref_url + "/logstream/stream",
                            ref_append(ref_url),
                            args.small,
                            args.small_events,
                            rpid,
                        )
                    )
                    print(f"reference fan-out: {clock() - t0:.1f} s")
                    mem[f"reference, {args.small} subscribers (peak)"] = proc_mem(rpid)
                    run_appends(args, tp, "ref", ref_url, rpid)
                    mem["reference after the appends"] = proc_mem(rpid)
            except refpkg.ReferenceUnavailable as exc:
                reason = f"reference hub unavailable: {exc}"
                refpkg = None
            except Exception as exc:  # the reference failed mid-run: keep our figures
                reason = f"reference run failed: {type(exc).__name__}: {exc}"
                refpkg = None
    print(f"TCP_NODELAY on a connection accepted by `logstream serve`: {nodelay_note}")
    report(args, fan, tp, mem, reason if refpkg is None else None)
    return 0


def report(
    args: argparse.Namespace,
    fan: dict[str, dict[str, Any] | None],
    tp: dict[tuple[str, str, str], dict[str, Any] | None],
    mem: dict[str, dict[str, float]],
    reason: str | None,
) -> None:
    n, k = args.subscribers, args.small
    common.print_table(
        "SSE delivery latency, append request sent -> frame parsed by the subscriber (ms)",
        [
            "hub",
            "subs",
            "deliveries",
            "p50",
            "p95",
            "p99",
            "max",
            "first/event p50",
            "last/event p50",
            "all exactly once, in order",
        ],
        [
            lat_row(f"ours, {n} subscribers", fan["big"]),
            lat_row(f"ours, {k} subscribers", fan["ours8"]),
            lat_row(f"reference, {k} subscribers", fan["ref8"]),
        ],
    )
    rows = []
    for label, key in (
        (f"ours, {n} subscribers (cap {n})", "big"),
        (f"ours, {k} subscribers (cap 256)", "ours8"),
        (f"reference, {k} subscribers (cap 8)", "ref8"),
    ):
        res = fan[key]
        if res is not None:
            rtt = common.summarize(res["append_rtt"])
            rows.append(
                [
                    label,
                    extra_text(res["extra"]),
                    f"{res['connect_s']:.2f}",
                    common.fmt_ms(rtt["p50"]),
                    common.fmt_num(res["cpu"]["hub"], 2),
                    common.fmt_num(res["cpu"]["client"], 2),
                    str(res["timeouts"]),
                    str(len(res["errors"])),
                ]
            )
    common.print_table(
        "subscribers: the one past those connected, connect time, append RTT, "
        "CPU per measured event (hub process; this client process)",
        [
            "hub",
            "next subscriber",
            "connect all (s)",
            "append RTT p50 (ms)",
            "hub CPU ms/event",
            "client CPU ms/event",
            "delivery timeouts",
            "client errors",
        ],
        rows,
    )
    common.print_table(
        "hub process memory (MB, /proc/<pid>/status)",
        ["state", "VmRSS", "VmHWM"],
        [[label, mb(m["rss"]), mb(m["hwm"])] for label, m in mem.items()],
    )
    common.print_table(
        "HTTP append throughput (ours: POST /v1/event_append; reference: POST /mcp tools/call)",
        TP_HEADERS,
        tp_rows(tp),
    )
    if reason:
        print(f"reference not measured: {reason}")
    big = fan["big"]
    p95 = common.percentile(big["lat"], 0.95) * 1000 if big else None
    common.target_line(BENCH, f"SSE delivery p95, {n} subscribers", p95, "ms", "<=", 100)
    peak = mem.get(f"ours, {n} subscribers after the events", {}).get("hwm")
    common.target_line(BENCH, f"hub peak RSS with {n} subscribers", peak, "MB", "<=", 200)
    if big and (big["complete"] != n or big["timeouts"]):
        print(
            f"WARNING: only {big['complete']}/{n} subscribers got every event exactly once "
            f"in order; {big['timeouts']} delivery timeouts"
        )
    ours8, ref8 = fan["ours8"], fan["ref8"]
    for q, name in ((0.5, "p50"), (0.95, "p95")):
        value = None
        if ours8 and ref8:
            value = common.percentile(ref8["lat"], q) / common.percentile(ours8["lat"], q)
        common.ratio_line(BENCH, f"reference/ours SSE delivery {name} at {k} subscribers", value)
    tp_ratios(args, tp)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
