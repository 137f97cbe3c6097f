"""The dashboard (issue 14) measured in headless Chromium against a real `logstream serve`.

1. Page load with a large log (default 1,000,000 synthetic events, built with the store's
   schema and bulk inserts like bench_store): first paint, first contentful paint, time until
   the event list shows rows, and the bytes transferred (HTML, JS, CSS and the first reads).
2. A burst of `--rate` events per second for `--burst-s` seconds, appended by another process:
   events the page missed (must be 0), animation frames per second while it lasts (60 is a
   page that never stalls), and the time from the last append until the page shows it.
3. Hub CPU and resident memory per open dashboard: 1, then `--pages` pages open, idle for
   `--idle-s` seconds and through a burst, read from /proc of the hub process.

Not a test: it prints figures. Needs Debian's Chromium at /usr/bin/chromium and the
`playwright` package (the `test` extra). Run: `.venv/bin/python bench/bench_dashboard.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
LIVE = "window.dashboard && window.dashboard.es && window.dashboard.es.readyState === 1"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_log(n: int, cache: Path, scratch: Path) -> Path:
    """A copy, in `scratch`, of the store bench's cached `n`-event log: the bursts append to
    it and the hub's palace sits beside it, so the cached file stays as built."""
    from bench import bench_store

    cached = bench_store.ours_log(n, cache, rebuild=False)
    db = scratch / "dashboard.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{cached}{suffix}").exists():
            shutil.copyfile(f"{cached}{suffix}", f"{db}{suffix}")
    return db


def start_hub(db: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO)}
    palace = db.with_name("dashboard-palace")  # no peers: this machine's palace stays out
    palace.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "mempalace_logstream", "serve", "--db", str(db)]
    cmd += ["--palace", str(palace)]
    proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL)
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the hub did not start")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_page(browser: Any, url: str) -> tuple[Any, dict[str, float]]:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    t0 = time.perf_counter()
    page.goto(url + "/#events")
    page.wait_for_function("document.querySelectorAll('.row').length > 0", timeout=60000)
    rows_s = time.perf_counter() - t0
    page.wait_for_function(LIVE, timeout=60000)
    metrics = page.evaluate(
        """() => {
        const paint = Object.fromEntries(performance.getEntriesByType('paint')
            .map(e => [e.name, e.startTime]));
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        const bytes = nav.transferSize + res.reduce((a, r) => a + (r.transferSize || 0), 0);
        return {fp: paint['first-paint'], fcp: paint['first-contentful-paint'], bytes,
                requests: res.length + 1, dom_rows: document.querySelectorAll('.row').length};
    }"""
    )
    metrics["rows_s"] = rows_s
    return page, metrics


BURST = r"""
import sys, time
from mempalace_logstream import LogStore
db, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
store = LogStore.open(db)
step = 0.05; per = max(1, int(rate * step)); n = int(rate * seconds)
t0 = time.perf_counter(); sent = 0; last = None
while sent < n:  # one transaction per 50 ms tick: the rate holds on a busy machine
    drafts = [store.draft_event(type="note", stream="bench", room="burst", from_agent="burst",
                                body=f"burst {sent + i}") for i in range(min(per, n - sent))]
    last = store.transaction(lambda tx: [tx.insert_event(d) for d in drafts])[-1].id
    sent += len(drafts)
    pause = t0 + (sent / rate) - time.perf_counter()
    if pause > 0:
        time.sleep(pause)
print(last, time.time(), time.perf_counter() - t0, flush=True)
"""


def burst(db: Path, rate: int, seconds: float) -> tuple[str, float, float]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO)}
    out = subprocess.run(
        [sys.executable, "-c", BURST, str(db), str(rate), str(seconds)],
        env=env,
        capture_output=True,
        check=True,
        timeout=600,
    ).stdout.split()
    return out[0].decode(), float(out[1]), float(out[2])


def measure_burst(page: Any, db: Path, rate: int, seconds: float) -> dict[str, float]:
    page.evaluate(
        """() => { const d = window.dashboard; d.bench = {frames: 0, t0: performance.now(),
        received0: d.stats.received};
        const tick = () => { d.bench.frames++; if (!d.bench.stop) requestAnimationFrame(tick); };
        requestAnimationFrame(tick); }"""
    )
    last_id, ended_wall, took = burst(db, rate, seconds)
    page.wait_for_function(f"window.dashboard.lastId === {last_id!r}", timeout=120000)
    caught = time.time() - ended_wall
    got = page.evaluate(
        """() => { const d = window.dashboard; d.bench.stop = true;
        return {received: d.stats.received - d.bench.received0, frames: d.bench.frames,
                ms: performance.now() - d.bench.t0,
                dom_rows: document.querySelectorAll('.row').length,
                duplicates: d.stats.duplicates}; }"""
    )
    sent = int(rate * seconds)
    return {
        "sent": sent,
        "append_rate": sent / took,
        "missed": sent - got["received"],
        "fps": got["frames"] / (got["ms"] / 1000),
        "catch_up_s": caught,
        "dom_rows": got["dom_rows"],
        "duplicates": got["duplicates"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the log")
    ap.add_argument("--rate", type=int, default=1000, help="burst events per second")
    ap.add_argument("--burst-s", type=float, default=5.0)
    ap.add_argument("--pages", type=int, default=10, help="dashboards open at once")
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--cache", help="where the big log is kept (LOGSTREAM_BENCH_CACHE)")
    ap.add_argument("--quick", action="store_true", help="20,000 events, 3 pages, short idles")
    common.add_smoke(ap)
    args = ap.parse_args(argv)
    if args.smoke:  # a small log, a short burst, two pages, short idles
        args.events, args.rate, args.burst_s, args.pages, args.idle_s = 500, 50, 0.5, 2, 0.3
    elif args.quick:
        args.events, args.burst_s, args.pages, args.idle_s = 20_000, 2.0, 3, 2.0
    args.busy = (50, 0.5) if args.smoke else (200, 3.0)  # events/s, seconds
    with common.temp_dir("logstream-bench-dashboard-") as scratch:
        return measure(args, scratch)


def measure(args: argparse.Namespace, scratch: Path) -> int:
    from playwright.sync_api import sync_playwright

    busy_rate, busy_s = args.busy
    print(common.machine_line())
    t0 = time.perf_counter()
    db = build_log(args.events, common.cache_dir(args.cache), scratch)
    size, took = db.stat().st_size / 1e6, time.perf_counter() - t0
    print(f"log: {args.events:,} events, {size:.0f} MB ({took:.1f} s)")
    port = free_port()
    hub = start_hub(db, port)
    url = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            base_rss = proc_rss_mb(hub.pid)
            page, m = load_page(browser, url)
            common.print_table(
                f"page load, {args.events:,} events in the log",
                ("first paint ms", "first contentful ms", "rows shown ms", "bytes", "requests"),
                [
                    (
                        common.fmt_ms(m["fp"] / 1000),
                        common.fmt_ms(m["fcp"] / 1000),
                        common.fmt_ms(m["rows_s"]),
                        f"{m['bytes']:,}",
                        int(m["requests"]),
                    )
                ],
            )
            b = measure_burst(page, db, args.rate, args.burst_s)
            common.print_table(
                f"burst: {args.rate} events/s for {args.burst_s:g} s from another process",
                ("sent", "append rate", "missed", "frames/s", "catch-up ms", "DOM rows", "dups"),
                [
                    (
                        b["sent"],
                        f"{b['append_rate']:.0f}/s",
                        b["missed"],
                        f"{b['fps']:.0f}",
                        common.fmt_ms(b["catch_up_s"]),
                        b["dom_rows"],
                        b["duplicates"],
                    )
                ],
            )
            rows = []
            pages = [page]
            for count in (1, args.pages):
                while len(pages) < count:
                    pages.append(load_page(browser, url)[0])
                rss = proc_rss_mb(hub.pid)
                c0 = proc_cpu_s(hub.pid)
                time.sleep(args.idle_s)
                idle = (proc_cpu_s(hub.pid) - c0) / args.idle_s
                c0, w0 = proc_cpu_s(hub.pid), time.perf_counter()
                measure_burst(pages[-1], db, busy_rate, busy_s)
                busy = (proc_cpu_s(hub.pid) - c0) / (time.perf_counter() - w0)
                rows.append(
                    (
                        count,
                        f"{rss:.0f} MB",
                        f"{(rss - base_rss) / count:.1f} MB",
                        f"{idle * 100:.2f} %",
                        f"{busy * 100:.0f} %",
                    )
                )
            common.print_table(
                "hub process per open dashboard (RSS before any page: "
                f"{base_rss:.0f} MB; burst = {busy_rate} events/s)",
                ("pages", "hub RSS", "RSS per page", "CPU idle", "CPU in burst"),
                rows,
            )
            browser.close()
    finally:
        hub.terminate()
        hub.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
