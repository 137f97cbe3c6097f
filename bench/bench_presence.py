"""Presence on the SSE feed (issue 14): how fast a change reaches a `presence=1` subscriber, how
late an expiry is told, and what a subscriber that stops reading costs the hub.

    python bench/bench_presence.py [--quick | --smoke] [--samples N] [--churn N] [--pg]

The hub is `logstream serve` in a subprocess; the subscriber reads `/v1/stream?presence=1` in
this process with httpx. Announce latency: `POST /v1/presence_announce` sent -> its frame
read (CLOCK_MONOTONIC, one process). Expiry lateness: an entry's `expires_at` -> its `gone`
frame read (wall clock, same machine), agents with ttl_s=1 announced 50 ms apart, nobody
listing. Stalled subscriber: a raw socket that never reads, with `--churn` agents announced
(with a 500-character note) and left; the hub's VmRSS before and after, and after the
subscriber disconnects. With `--pg`, also presence shared by two hubs on one PostgreSQL log
(issue 23; a fresh schema on `$LOGSTREAM_BENCH_PG`, else the local server): announce through
hub A -> its frame read from hub A and from hub B, and the announce request itself. Never a
test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "presence"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_presence.py", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few samples, small churn")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="latency samples (default 200)")
    p.add_argument("--churn", type=int, default=None, help="agents churned (default 8000)")
    p.add_argument("--pg", action="store_true", help="also two hubs on one PostgreSQL log")
    return p.parse_args(argv)


class Hub:
    def __init__(self, tmp: Path, db: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTREAM_")}
        tmp.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mempalace_logstream", "serve", "--port", "0"]
            + ["--db", db or str(tmp / "hub.sqlite3"), "--sync-interval", "0"]
            + ["--palace", str(tmp / "palace")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**env, "PYTHONPATH": str(common.REPO)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        self.url = line.split("listening on ")[1].split()[0]

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return -1

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Reader:
    """Reads presence frames in a thread; `arrivals[(agent, state)]` = monotonic, wall."""

    def __init__(self, url: str) -> None:
        import httpx

        self.arrivals: dict[tuple[str, str], tuple[float, float]] = {}
        self.cond = threading.Condition()
        self._client = httpx.Client(base_url=url, timeout=None)
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(30)

    def _run(self) -> None:
        try:
            self._read()
        except Exception:  # the hub stopped at the end of the run
            self._ready.set()

    def _read(self) -> None:
        with self._client.stream("GET", "/v1/stream", params={"presence": "1"}) as resp:
            self._ready.set()
            event = ""
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "presence":
                    data = json.loads(line[5:])
                    with self.cond:
                        key = (data["agent"], data["state"])
                        self.arrivals[key] = (time.monotonic(), time.time())
                        self.cond.notify_all()

    def wait(self, key: tuple[str, str], timeout: float = 30) -> tuple[float, float]:
        with self.cond:
            assert self.cond.wait_for(lambda: key in self.arrivals, timeout), key
            return self.arrivals[key]


def announce_samples(http: Any, reader: Reader, n: int) -> list[float]:
    out = []
    for i in range(n):
        agent = f"lat-{i}"
        sent = time.monotonic()  # before the POST: the frame may be read before it returns
        http.post("/v1/presence_announce", json={"agent": agent, "state": "working"})
        got, _ = reader.wait((agent, "working"))
        out.append(got - sent)
        http.post("/v1/presence_leave", json={"agent": agent})
    return out


def shared_samples(n: int) -> dict[str, list[float]]:
    """Two hubs on one PostgreSQL log: announce through A; the request, and the frame read
    from A and from B (seconds, from the request sent)."""
    import httpx

    from bench.bench_hubs import pg_schema
    from mempalace_logstream import LogStore

    out: dict[str, list[float]] = {"its answer": [], "frame on hub A": [], "frame on hub B": []}
    with pg_schema() as db, common.temp_dir() as tmp:
        LogStore.open(db).close()
        hubs = [Hub(tmp / "a", db), Hub(tmp / "b", db)]
        try:
            readers = [Reader(h.url) for h in hubs]
            with httpx.Client(base_url=hubs[0].url, timeout=30) as http:
                for i in range(n):
                    agent = f"shared-{i}"
                    sent = time.monotonic()
                    http.post("/v1/presence_announce", json={"agent": agent, "state": "working"})
                    out["its answer"].append(time.monotonic() - sent)
                    for key, reader in zip(
                        ("frame on hub A", "frame on hub B"), readers, strict=True
                    ):
                        out[key].append(reader.wait((agent, "working"))[0] - sent)
                    http.post("/v1/presence_leave", json={"agent": agent})
        finally:
            for hub in hubs:
                hub.close()
    return out


def expiry_samples(http: Any, reader: Reader, n: int) -> list[float]:
    due: dict[str, float] = {}
    for i in range(n):
        agent = f"exp-{i}"
        resp = http.post(
            "/v1/presence_announce", json={"agent": agent, "state": "idle", "ttl_s": 1}
        )
        stamp = resp.json()["presence"]["expires_at"].replace("Z", "+00:00")
        due[agent] = datetime.fromisoformat(stamp).timestamp()
        time.sleep(0.05)  # spread the expiries (a pacing choice of the bench, not a settle)
    return [reader.wait((a, "gone"))[1] - t for a, t in due.items()]


def stalled(hub: Hub, http: Any, churn: int) -> tuple[int, int, int]:
    host, port = hub.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(f"GET /v1/stream?presence=1 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    before = hub.rss_kib()
    note = "x" * 500
    for i in range(churn):
        agent = f"churn-{i}"
        http.post("/v1/presence_announce", json={"agent": agent, "state": "working", "note": note})
        http.post("/v1/presence_leave", json={"agent": agent})
    during = hub.rss_kib()
    sock.close()
    http.get("/healthz")
    return before, during, hub.rss_kib()


def main(argv: list[str] | None = None) -> int:
    import httpx

    args = parse_args(argv)
    n = args.samples or (3 if args.smoke else 20 if args.quick else 200)
    churn = args.churn or (30 if args.smoke else 1_000 if args.quick else 8_000)
    print(common.machine_line())
    with common.temp_dir() as tmp:
        hub = Hub(tmp)
        try:
            with httpx.Client(base_url=hub.url, timeout=30) as http:
                reader = Reader(hub.url)
                lat = announce_samples(http, reader, n)
                late = expiry_samples(http, reader, min(n, 40))
                before, during, after = stalled(hub, http, churn)
        finally:
            hub.close()
    rows = []
    for label, values in (
        ("announce sent -> presence frame read", lat),
        ("expires_at -> gone frame read (nobody listing)", late),
    ):
        s = common.summarize(values)
        rows.append(
            [
                label,
                common.fmt_ms(s["p50"]),
                common.fmt_ms(s["p95"]),
                common.fmt_ms(s["max"]),
                len(values),
            ]
        )
    common.print_table("presence on SSE (ms)", ["path", "p50", "p95", "max", "n"], rows)
    common.print_table(
        f"hub VmRSS with a subscriber that never reads, {churn:,} agents announced and left (KiB)",
        ["before", "during", "after it left"],
        [[before, during, after]],
    )
    if args.pg:
        shared = shared_samples(n)
        rows = []
        for label, values in shared.items():
            s = common.summarize(values)
            row = [common.fmt_ms(s[k]) for k in ("p50", "p95", "max")]
            rows.append([label, *row, len(values)])
        common.print_table(
            "presence on two hubs of one PostgreSQL log: announce through hub A (ms)",
            ["from the request sent to", "p50", "p95", "max", "n"],
            rows,
        )
    common.target_line(BENCH, "expiry told late, max", max(late) * 1e3, "ms", "<=", 1_500)
    return 0


if __name__ == "__main__":
    sys.exit(main())
