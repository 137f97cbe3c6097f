"""Wake-up benchmarks (issue #3): cross-process wake latency and the per-poll cost of a
selective watch as the backlog grows.

    python bench/bench_wake.py [--quick] [--samples N] [--sizes 10000,100000,1000000]
                               [--pg-url URL] [--no-ref] [--cache-dir DIR]

1. Wake latency: process A appends one event, process B is blocked in `event_wait` after the
   previous tip; we record CLOCK_MONOTONIC (system-wide on Linux, so comparable across
   processes) before A's append call, after it returned (its commit is visible), and when B's
   wait returned. Ours on SQLite and on PostgreSQL, and the reference's `wait_events` on SQLite,
   measured in the same run with the same harness (both A and B are separate processes).
2. Per-poll cost of a selective watch (`--agent` style filters that match nothing new) on logs
   of 10k / 100k / 1M synthetic events: each poll follows 10 fresh non-matching appends. "ours"
   resumes after the cursor the previous poll returned (it passes rejected rows); "rescan"
   is the same call from the last *match* (here: the first event), which is what a cursor that
   only passes returned rows costs. The big logs are bulk-loaded with executemany in 50k-row
   transactions (bench/bench_store.py `ours_log`, cached) and copied before being appended to.
Never a test; figures go to docs/bench/wake.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "wake"
WARMUP = 5
WATCH_AGENT = "agent-07"
WATCH_TYPE = "task.cancel"  # absent from the synthetic log: the watch's last match is old
NOISE = {
    "type": "chat.message",
    "stream": "project/p01",
    "room": "chat",
    "from_agent": "agent-01",
    "to_agent": "agent-02",
    "body": "x",
}

# Both sides speak one line per sample on stdin/stdout; stamps are time.monotonic_ns().
OURS_WAITER = r"""
import json, sys, time
from mempalace_logstream import LogStore
store = LogStore.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    tip = line.strip() or None
    print("armed", flush=True)
    page = store.event_wait(since_event_id=tip, timeout_ms=30000)
    print(json.dumps({"t": time.monotonic_ns(), "n": len(page.events)}), flush=True)
store.close()
"""
OURS_APPENDER = r"""
import json, sys, time
from mempalace_logstream import LogStore
store = LogStore.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    t0 = time.monotonic_ns()
    e = store.event_append(type="bench.wake", stream="s", room="r", from_agent="a", body="x")
    t1 = time.monotonic_ns()
    print(json.dumps({"t0": t0, "t1": t1, "id": e.id}), flush=True)
store.close()
"""
REF_WAITER = r"""
import json, sys, time
from mempalace.logstream import Logstream
ls = Logstream(db_path=sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    tip = line.strip() or None
    print("armed", flush=True)
    out = ls.wait_events(timeout_ms=30000, since_event_id=tip)
    print(json.dumps({"t": time.monotonic_ns(), "n": len(out["events"])}), flush=True)
"""
REF_APPENDER = r"""
import json, sys, time
from mempalace.logstream import Logstream
ls = Logstream(db_path=sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    t0 = time.monotonic_ns()
    e = ls.append_event(type="bench.wake", stream="s", room="r", from_agent="a", body="x")
    t1 = time.monotonic_ns()
    print(json.dumps({"t0": t0, "t1": t1, "id": e["id"]}), flush=True)
"""


# ----------------------------------------------------------------- processes


class Worker:
    """One long-lived helper process driven line by line."""

    def __init__(self, python: str, code: str, target: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [python, "-c", code, target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.expect("ready")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"helper process exited ({self.proc.wait()})")
        return line.strip()

    def expect(self, word: str) -> None:
        got = self.read()
        if got != word:
            raise RuntimeError(f"expected {word!r} from a helper, got {got!r}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wake_samples(
    python: str, waiter: str, appender: str, target: str, env: dict[str, str], n: int
) -> dict[str, list[float]]:
    """`n` pings: B arms a wait after the tip, A appends after a random pause, B wakes."""
    b = Worker(python, waiter, target, env)
    a = Worker(python, appender, target, env)
    call: list[float] = []
    commit: list[float] = []
    tip = ""
    try:
        a.send("go")  # one event so that every wait has a real cursor
        tip = json.loads(a.read())["id"]
        for i in range(n + WARMUP):
            b.send(tip)
            b.expect("armed")
            time.sleep(random.uniform(0.02, 0.04))  # let B block in its wait
            a.send("go")
            sent = json.loads(a.read())
            woke = json.loads(b.read())
            if woke["n"] != 1:
                raise RuntimeError(f"waiter returned {woke['n']} events, expected 1")
            tip = sent["id"]
            if i >= WARMUP:
                call.append((woke["t"] - sent["t0"]) / 1e9)
                commit.append(max(0, woke["t"] - sent["t1"]) / 1e9)
    finally:
        b.close()
        a.close()
    return {"call": call, "commit": commit}


def our_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(common.REPO)}


def ref_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("MEMPALACE_")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def pg_schema(admin_url: str) -> contextlib.AbstractContextManager[str]:
    return common.pg_schema(admin_url, "bench_wake")


def bench_latency(args: argparse.Namespace, tmp: Path) -> None:
    n = args.samples
    print(f"\n== cross-process wake latency: {n} samples each (+{WARMUP} warm-up), one at a time")
    results: dict[str, dict[str, list[float]]] = {}
    ours_sqlite = f"sqlite:///{tmp / 'wake.sqlite3'}"
    results["ours, SQLite"] = wake_samples(
        sys.executable, OURS_WAITER, OURS_APPENDER, ours_sqlite, our_env(), n
    )
    try:
        with pg_schema(args.pg_url) as url:
            results["ours, PostgreSQL"] = wake_samples(
                sys.executable, OURS_WAITER, OURS_APPENDER, url, our_env(), n
            )
    except Exception as exc:  # no server: say so, keep the rest
        print(f"PostgreSQL not measured: {type(exc).__name__}: {exc}")
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    if refpkg is not None:
        palace = tmp / "ref-palace"
        palace.mkdir()
        results["reference wait_events, SQLite"] = wake_samples(
            str(refpkg.ref_python()),
            REF_WAITER,
            REF_APPENDER,
            str(palace / "logstream.sqlite3"),
            ref_env(),
            n,
        )
    rows = []
    for label, res in results.items():
        for kind, title in (
            ("commit", "append returned -> wait returned"),
            ("call", "append called -> wait returned"),
        ):
            s = common.summarize(res[kind])
            rows.append(
                [
                    label,
                    title,
                    common.fmt_ms(s["p50"]),
                    common.fmt_ms(s["p95"]),
                    common.fmt_ms(s["max"]),
                    int(s["n"]),
                ]
            )
    common.print_table("wake latency (ms)", ["system", "measured", "p50", "p95", "max", "n"], rows)
    for label, res in results.items():
        if label.startswith("ours"):
            s = common.summarize(res["commit"])
            common.target_line(
                BENCH, f"{label} wake p50 after commit", s["p50"] * 1e3, "ms", "<=", 5
            )
            common.target_line(
                BENCH, f"{label} wake p95 after commit", s["p95"] * 1e3, "ms", "<=", 20
            )
    ref = results.get("reference wait_events, SQLite")
    if ref is None:
        print(f"reference not measured: {reason}")
        return
    for label in ("ours, SQLite", "ours, PostgreSQL"):
        if label in results:
            for q, key in ((0.5, "p50"), (0.95, "p95")):
                for kind in ("commit", "call"):
                    r = common.percentile(ref[kind], q) / common.percentile(results[label][kind], q)
                    common.ratio_line(BENCH, f"reference/{label} wake {key} ({kind})", r)


# ----------------------------------------------------------------- per-poll cost


def _copy_log(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    for suffix in ("-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")


def poll_costs(path: Path, polls: int, per_poll_appends: int) -> dict[str, Any]:
    from mempalace_logstream.store import LogStore

    store = LogStore.open(str(path), durability="normal")  # appends are not what we time
    filters = {"to_agent": WATCH_AGENT, "exclude_writer": WATCH_AGENT, "type": WATCH_TYPE}
    first_id = store.event_list(order="asc", limit=1).events[0].id
    t0 = time.perf_counter()
    page = store.event_wait(since_event_id=first_id, timeout_ms=0, **filters)
    first_poll = time.perf_counter() - t0
    cursor = page.cursor
    ours: list[float] = []
    rescan: list[float] = []
    try:
        for i in range(polls):
            for _ in range(per_poll_appends):
                store.event_append(**NOISE)
            t0 = time.perf_counter()
            page = store.event_wait(since_event_id=cursor, timeout_ms=0, **filters)
            ours.append(time.perf_counter() - t0)
            if page.events:
                raise RuntimeError("the selective watch matched; pick another filter")
            cursor = page.cursor
            if i % 4 == 0:  # the rescan is slow on big logs: sample it less often
                t0 = time.perf_counter()
                store.event_wait(since_event_id=first_id, timeout_ms=0, **filters)
                rescan.append(time.perf_counter() - t0)
    finally:
        store.close()
    return {"first": first_poll, "ours": ours, "rescan": rescan}


def bench_polls(args: argparse.Namespace, tmp: Path) -> None:
    from bench import bench_store

    sizes = [int(x) for x in args.sizes.split(",")]
    print(
        f"\n== per-poll cost of a selective watch (to_agent={WATCH_AGENT}, "
        f"exclude_writer={WATCH_AGENT}, type={WATCH_TYPE}); {args.polls} polls, "
        f"{args.per_poll} new non-matching events before each"
    )
    rows = []
    p50s: list[float] = []
    for n in sizes:
        cached = bench_store.ours_log(n, common.cache_dir(args.cache_dir), False)
        work = tmp / f"poll-{n}.sqlite3"
        _copy_log(cached, work)
        res = poll_costs(work, args.polls, args.per_poll)
        common.remove_sqlite(work)
        s, r = common.summarize(res["ours"]), common.summarize(res["rescan"])
        p50s.append(s["p50"])
        rows.append(
            [
                f"{n:,}",
                common.fmt_ms(s["p50"]),
                common.fmt_ms(s["p95"]),
                common.fmt_ms(r["p50"]),
                common.fmt_ms(res["first"]),
            ]
        )
    common.print_table(
        "selective watch, per poll (ms)",
        ["backlog", "ours p50", "ours p95", "rescan-from-last-match p50", "first poll (one scan)"],
        rows,
    )
    if len(p50s) > 1:
        common.ratio_line(
            BENCH,
            f"per-poll p50 {sizes[-1]:,} / {sizes[0]:,} events (flat = 1)",
            p50s[-1] / p50s[0],
            "<=",
            1.5,
        )


# ----------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_wake.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="wake samples per system (200)")
    p.add_argument("--sizes", default=None, help="backlog sizes (10000,100000,1000000)")
    p.add_argument("--polls", type=int, default=None, help="polls per backlog size (100)")
    p.add_argument("--per-poll", type=int, default=10, help="new events before each poll")
    p.add_argument("--pg-url", default=common.pg_admin_url())
    p.add_argument("--no-ref", action="store_true", help="skip the reference package")
    p.add_argument("--cache-dir", default=None, help="where big synthetic logs are cached")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-polls", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.samples, args.sizes = args.samples or 2, args.sizes or "500,1000"
        args.polls, args.per_poll = args.polls or 3, 2
    args.samples = args.samples or (20 if args.quick else 200)
    args.sizes = args.sizes or ("10000,100000" if args.quick else "10000,100000,1000000")
    args.polls = args.polls or (20 if args.quick else 100)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-wake-") as tmp:
        if not args.skip_latency:
            bench_latency(args, tmp)
        if not args.skip_polls:
            bench_polls(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
