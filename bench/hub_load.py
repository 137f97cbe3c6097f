"""A light HTTP append load for the hub bench (issue 25): N blocking-socket clients, each in a
process of its own, each posting one pre-built request over and over.

Why: `httpx.AsyncClient` spends 1.0-1.8 ms of CPU per request, more than either hub, so a
bench driving the hubs with it on the same two cores measures the client. Here each request is
bytes built once (`our_request`, `ref_request`: the same event fields as the httpx runs) and a
`sendall` + `recv` on a blocking socket with TCP_NODELAY: tens of microseconds of client CPU.
Every client is a forked process (no GIL shared between clients); each reports its own CPU
time (`time.process_time` over its timed loop), its latencies and its start and end on the
system-wide monotonic clock, so the run's wall time is last end minus first start.

Keep-alive: one connection per client, kept while the server keeps it. Our hub (uvicorn)
keeps it. The reference's MCP endpoint (`http.server`, `POST /mcp`) answers every request
with `Connection: close`, so against it a client connects again before each request; those
connects are counted and are part of what the reference costs a client (and its CPU is in
the client's figure). Enough HTTP for the two hubs' answers: a status line, headers and a
`Content-Length` body; a 200 must also carry the hub's success marker (`ok`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import socket
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

clock = time.perf_counter
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Target:
    """One hub's append: where, the request's bytes, and a marker its 200 body must hold."""

    host: str
    port: int
    request: bytes
    ok: bytes


def append_fields(worker: int) -> dict[str, Any]:
    """The bench's event (every client kind, both hubs): a 100-byte broadcast from `w<worker>`."""
    return {
        "type": "bench.hub",
        "stream": "bench",
        "room": "r",
        "from_agent": f"w{worker:02d}",
        "to_agent": "*",
        "body": "x" * 100,
    }


def _post(host: str, port: int, path: str, token: str, payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return host, int(port)


def our_request(url: str, token: str, fields: dict[str, Any]) -> Target:
    """`POST /v1/event_append` on our hub; the answer is `{"event": {...}}`."""
    host, port = _host_port(url)
    return Target(host, port, _post(host, port, "/v1/event_append", token, fields), b'"event"')


def ref_request(url: str, token: str, fields: dict[str, Any]) -> Target:
    """The reference's HTTP append: MCP JSON-RPC `tools/call mempalace_event_append` on
    `POST /mcp`; its result is a text content holding `{"success": true, "event": ...}`."""
    host, port = _host_port(url)
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "mempalace_event_append", "arguments": fields},
    }
    return Target(host, port, _post(host, port, "/mcp", token, rpc), b'\\"success\\": true')


def _answer(head_bytes: bytes, ok: bytes) -> tuple[int, bool, Callable[[bytes], None]]:
    """(Content-Length, whether the server closes, a check of the body) from a response's
    head (status line and headers, without the blank line)."""
    head = head_bytes.split(b"\r\n")
    length, close = 0, False
    for line in head[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    status = head[0].split(b" ", 2)[1]

    def check(body: bytes) -> None:
        if status != b"200" or ok not in body:
            raise RuntimeError(f"answered {status.decode()}: {body[:300]!r}")

    return length, close, check


class Conn:
    """One client's blocking connection: `post()` sends the target's bytes and reads one
    answer; it connects (again) when the server closed the last one."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.sock: socket.socket | None = None
        self.connects = 0

    def post(self) -> None:
        """One request and its answer; raises on a transport error or an answer that is not a
        200 holding the success marker."""
        sock = self.sock
        if sock is None:
            sock = socket.create_connection((self.target.host, self.target.port), timeout=60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connects += 1
        self.sock = None
        sock.sendall(self.target.request)
        buf = b""
        while (end := buf.find(b"\r\n\r\n")) < 0:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection before answering")
            buf += chunk
        length, close, check = _answer(buf[:end], self.target.ok)
        body = buf[end + 4 :]
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection mid-answer")
            body += chunk
        if close:
            sock.close()
        else:
            self.sock = sock
        check(body)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class AsyncConn:
    """The same client on one asyncio stream (`--client raw`: every client a task of this
    process, as the bench's `--raw-client` always did)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.connects = 0

    async def post(self) -> None:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.target.host, self.target.port)
            self.connects += 1
        reader, writer = self.streams
        writer.write(self.target.request)
        head = await reader.readuntil(b"\r\n\r\n")
        length, close, check = _answer(head[:-4], self.target.ok)
        body = await reader.readexactly(length)
        if close:
            self.close()
        check(body)

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


def _client(target: Target, n: int, warm: int, conn: Any, start: Any) -> None:
    """One client process: `warm` requests, "ready", wait for the start, `n` timed requests,
    then (latencies, failures, CPU s, first start, last end, connects) over the pipe."""
    client = Conn(target)
    try:
        for _ in range(warm):
            client.post()
        client.connects = 0
        conn.send("ready")
        start.wait()
        lat = array("d")
        failures: list[str] = []
        cpu0, t0 = time.process_time(), clock()
        for _ in range(n):
            t = clock()
            try:
                client.post()
            except (OSError, RuntimeError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}"[:300])
                client.close()
                continue
            lat.append(clock() - t)
        t1, cpu = clock(), time.process_time() - cpu0
        conn.send((lat.tobytes(), failures, cpu, t0, t1, client.connects))
    except BaseException as exc:  # the parent reports it; never a hung run
        with contextlib.suppress(OSError):
            conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        client.close()
        conn.close()


def _result(
    kind: str, results: list[tuple[list[float], list[str], float, float, float, int]], hub: float
) -> dict[str, Any]:
    """Per-client (latencies, failures, CPU s, start, end, connects) -> the run's figures."""
    lat = [x for r in results for x in r[0]]
    failed = [f for r in results for f in r[1]]
    n = len(lat)
    if failed:
        print(f"{len(failed)} of {n + len(failed)} appends failed, e.g. {failed[0]}")
    secs = max(r[4] for r in results) - min(r[3] for r in results)
    return {
        "client": kind,
        "clients": len(results),
        "n": n,
        "secs": secs,
        "rate": n / secs,
        "lat": lat,
        "cpu_ms": hub * 1000 / max(1, n),
        "client_cpu_ms": sum(r[2] for r in results) * 1000 / max(1, n),
        "failed": len(failed),
        "connects": sum(r[5] for r in results),
    }


def run(targets: list[Target], per_client: int, hub_cpu: Callable[[], float]) -> dict[str, Any]:
    """One forked client process per target, `per_client` appends each, all started together
    once each made its warm-up appends (5). Returns the rate, the latencies, the hub's CPU per
    append (`hub_cpu()` before and after), the clients' CPU per append (the sum of the
    processes'), the failures and the connects the clients made while timed."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    pipes, procs = [], []
    for target in targets:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client, args=(target, per_client, 5, child, start))
        proc.start()
        child.close()
        pipes.append(parent)
        procs.append(proc)
    try:
        for parent in pipes:
            if not parent.poll(READY_TIMEOUT_S):
                raise RuntimeError("a client was not ready in time")
            msg = parent.recv()
            if msg != "ready":
                raise RuntimeError(f"a client failed its warm-up: {msg}")
        cpu0 = hub_cpu()
        start.set()
        results = []
        for parent in pipes:
            if not parent.poll(RUN_TIMEOUT_S):
                raise RuntimeError("a client did not finish in time")
            msg = parent.recv()
            if isinstance(msg, str):
                raise RuntimeError(f"a client failed: {msg}")
            raw, failures, cpu, t0, t1, connects = msg
            results.append((array("d", raw).tolist(), failures, cpu, t0, t1, connects))
        hub = hub_cpu() - cpu0
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return _result("light", results, hub)


def run_async(
    targets: list[Target], per_client: int, hub_cpu: Callable[[], float]
) -> dict[str, Any]:
    """The same run with every client an asyncio task of this process (`AsyncConn`); the
    clients' CPU is this process's, shared by all of them."""

    async def main() -> dict[str, Any]:
        conns = [AsyncConn(t) for t in targets]
        try:
            for conn in conns:
                for _ in range(5):
                    await conn.post()
                conn.connects = 0

            async def one(conn: AsyncConn) -> tuple[list[float], list[str], int]:
                lat: list[float] = []
                failures: list[str] = []
                for _ in range(per_client):
                    t = clock()
                    try:
                        await conn.post()
                    except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:
                        failures.append(f"{type(exc).__name__}: {exc}"[:300])
                        conn.close()
                        continue
                    lat.append(clock() - t)
                return lat, failures, conn.connects

            cpu0, mine0, t0 = hub_cpu(), time.process_time(), clock()
            done = await asyncio.gather(*(one(c) for c in conns))
            t1, mine, hub = clock(), time.process_time() - mine0, hub_cpu() - cpu0
        finally:
            for conn in conns:
                conn.close()
        share = mine / len(conns)
        return _result("raw", [(lat, f, share, t0, t1, c) for lat, f, c in done], hub)

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.hub_load URL TOKEN CLIENTS PER_CLIENT`: a light run on our hub from a
    process of its own (`bench/profile_hub.py`); prints "GO" when every client made its
    warm-up appends, then one JSON line: events/s and the clients' CPU ms per append."""
    import sys

    url, token, clients, per_client = (argv if argv is not None else sys.argv[1:])[:4]
    targets = [our_request(url, token, append_fields(w)) for w in range(int(clients))]

    said: list[bool] = []

    def ready() -> float:  # called as the run starts and as it ends
        if not said:
            said.append(True)
            print("GO", flush=True)
        return 0.0

    res = run(targets, int(per_client), ready)
    print(json.dumps({"rate": res["rate"], "client_cpu_ms": res["client_cpu_ms"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
