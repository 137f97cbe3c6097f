"""PostgreSQL next to SQLite, in one run: append throughput (one writer; 8 threads, group
commit) and cross-process wake latency (append in process A -> `event_wait` returns in B).

    python bench/bench_pg.py [--quick] [--pg-url postgresql+psycopg://postgres@127.0.0.1/test]

Baselines measured in the same run: raw sqlite3 and raw psycopg, one `INSERT; COMMIT` per row
into a copy of our own `events` table (same columns, indexes, triggers) at the same durability
(the issue 25 target is against this one). Raw psycopg's writers give each row a seq from a
counter in the client: nothing orders them, so 8 of them commit in parallel and PostgreSQL
flushes their commits' WAL together. A log cannot: seq order must be commit order (S-2.4) and
a commit must wake the waiters. So beside it, "raw serialized": raw psycopg doing only that
much more, in our transaction's shape (2 round trips): `BEGIN`, an advisory lock and
`max(seq)` in one message, then the INSERT (seq = max + 1), a `pg_notify` and `COMMIT` in
another; no validation, identity, projections or loop guards.
PostgreSQL runs in a schema made for this run (dropped afterwards); `--pg-url` or
LOGSTREAM_BENCH_PG picks the server. The reference package has no PostgreSQL backend.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

ROW = {
    "type": "bench.append",
    "stream": "project/bench",
    "room": "r",
    "from_agent": "bench",
    "to_agent": "agent-b",
    "body": "x" * 200,
}


@dataclass(frozen=True)
class Sizes:
    appends: int
    thread_appends: int
    pings: int
    reps: int


QUICK = Sizes(appends=150, thread_appends=400, pings=15, reps=1)
DEFAULT = Sizes(appends=500, thread_appends=1500, pings=100, reps=2)
SMOKE = Sizes(appends=10, thread_appends=16, pings=2, reps=1)


# ----------------------------------------------------------------- databases


def pg_schema(admin_url: str) -> AbstractContextManager[str]:
    """A fresh schema for one measurement, as a URL whose search_path points at it."""
    return common.pg_schema(admin_url, "bench_pg")


@contextmanager
def database(backend: str, admin_url: str, tmp: Path) -> Iterator[str]:
    if backend == "postgresql":
        with pg_schema(admin_url) as url:
            yield url
    else:
        path = tmp / f"bench-{secrets.token_hex(4)}.sqlite3"
        try:
            yield f"sqlite:///{path}"
        finally:
            common.remove_sqlite(path)


# ----------------------------------------------------------------- appenders


def timed(fn: Callable[[], Any], n: int, threads: int) -> float:
    """Seconds for `n` calls of `fn` spread over `threads` threads started together."""
    per = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    gate = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def work(k: int) -> None:
        gate.wait()
        try:
            for _ in range(k):
                fn()
        except BaseException as exc:  # reported after the run
            failures.append(exc)

    pool = [threading.Thread(target=work, args=(k,)) for k in per]
    for t in pool:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    if failures:
        raise failures[0]
    return elapsed


class Ours:
    def __init__(self, url: str, durability: str) -> None:
        from mempalace_logstream.store import LogStore

        self.store = LogStore.open(url, durability=durability)
        for _ in range(3):
            self.store.event_append(**ROW)
        self.costs = ""  # what the last run cost the database, per append

    def run(self, n: int, threads: int) -> float:
        store = self.store
        trips0 = getattr(store.backend, "round_trips", None)
        commits0 = store.pipeline.commits
        secs = timed(lambda: store.event_append(**ROW), n, threads)
        commits = max(store.pipeline.commits - commits0, 1)
        self.costs = f"{n / commits:.1f} appends per commit"
        if trips0 is not None:
            trips = getattr(store.backend, "round_trips", 0) - trips0
            self.costs += f", {trips / n:.2f} round trips per append"
        return secs

    def close(self) -> None:
        self.store.close()


class Raw:
    """One driver connection per thread, one `INSERT; COMMIT` per row (the backend's limit for
    durable single-row commits of this row shape, with our indexes). The row is ours, value for
    value in length (until 2026-12-06 it was shorter made-up ids, `rep_raw`, `evt_raw_<seq>`)."""

    def __init__(self, url: str, durability: str) -> None:
        from mempalace_logstream.store import LogStore

        LogStore.open(url).close()  # the exact schema
        self.url, self.durability = url, durability
        self.pg = url.startswith("postgresql")
        self.counter = itertools.count(1_000_000)
        self.replica = common.raw_replica()
        self.local = threading.local()
        self.conns: list[Any] = []
        self.lock = threading.Lock()
        names = [
            "seq",
            "id",
            "origin_replica",
            "origin_seq",
            "hlc",
            *ROW,
            "created_at",
            "metadata_json",
        ]
        marks = ", ".join(["%s" if self.pg else "?"] * len(names))
        self.sql = f"INSERT INTO events ({', '.join(names)}) VALUES ({marks})"
        for _ in range(3):
            self.insert()

    def row(self, seq: int) -> tuple[Any, ...]:
        """Our row, value for value in length (`common.raw_ids`), at `seq`."""
        event_id, hlc = common.raw_ids(self.replica, seq)
        return (
            seq,
            event_id,
            self.replica,
            seq,
            hlc,
            *ROW.values(),
            "2026-01-01T00:00:00.000Z",
            "{}",
        )

    def _conn(self) -> Any:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.connect()
            self.local.conn = conn
            with self.lock:
                self.conns.append(conn)
        return conn

    def connect(self) -> Any:
        if self.pg:
            import psycopg
            import sqlalchemy as sa

            url = sa.make_url(self.url)
            options = url.query.get("options")  # a tuple when the URL repeats it
            pg = psycopg.connect(
                host=url.host,
                port=url.port,
                user=url.username,
                password=url.password,
                dbname=url.database,
                options=" ".join(options) if isinstance(options, tuple) else options,
            )
            sync = "on" if self.durability == "full" else "off"
            pg.execute(f"SET synchronous_commit = {sync}")
            pg.commit()
            return pg
        path = self.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.durability.upper()}")
        return conn

    def insert(self) -> None:
        seq = next(self.counter)
        row = self.row(seq)
        conn = self._conn()
        if self.pg:
            conn.execute(self.sql, row)
            conn.commit()
        else:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(self.sql, row)
            conn.execute("COMMIT")

    def run(self, n: int, threads: int) -> float:
        return timed(self.insert, n, threads)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


class RawSerialized(Raw):
    """Raw psycopg as a log must append (see the module's docstring): seq = max(seq) + 1 read
    under an advisory lock held to the commit, a NOTIFY with the commit; 2 round trips."""

    LOCK = 0x62656E63  # "benc": not the store's key (nothing of ours runs in this schema)

    def connect(self) -> Any:
        conn = super().connect()
        conn.autocommit = True
        return conn

    def insert(self) -> None:
        import psycopg

        conn = self._conn()
        try:
            self._append(conn, psycopg.ClientCursor(conn))
        except BaseException:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")  # else the schema's DROP waits on its locks forever
            raise

    def _append(self, conn: Any, mogrify: Any) -> None:
        cur = conn.execute(f"BEGIN; SELECT pg_advisory_xact_lock({self.LOCK}); {_MAX_SEQ}")
        cur.nextset()  # the lock's row
        cur.nextset()
        seq = (cur.fetchone() or (0,))[0] + 1
        row = self.row(seq)
        text = mogrify.mogrify(self.sql, row)
        conn.execute(f"{text}; SELECT pg_notify('bench_raw', ''); COMMIT")


_MAX_SEQ = "SELECT coalesce(max(seq), 0) FROM events"
WRITERS: dict[str, type[Ours] | type[Raw]] = {"ours": Ours, "raw": Raw, "serial": RawSerialized}


def bench_append(
    admin_url: str, tmp: Path, sizes: Sizes, backends: Sequence[str] = ("sqlite", "postgresql")
) -> dict[str, float]:
    """Events/s per (backend, writer, durability, threads); interleaved repetitions. The
    process CPU per append is printed beside each rate (every thread's, the driver's
    included; the server's own work is not in it)."""
    cases = [
        (backend, kind, durability, threads, n)
        for backend in backends
        for durability in ("full", "normal")
        for threads, n in ((1, sizes.appends), (8, sizes.thread_appends))
        for kind in ("ours", "raw", "serial")
        if not (durability == "normal" and threads == 8)
        and (kind != "serial" or backend == "postgresql")
    ]
    rates: dict[tuple[str, ...], list[float]] = {}
    cpus: dict[tuple[str, ...], list[float]] = {}
    costs: dict[str, str] = {}
    for _ in range(sizes.reps):
        for backend, kind, durability, threads, n in cases:
            with database(backend, admin_url, tmp) as url:
                writer = WRITERS[kind](url, durability)
                try:
                    cpu0 = time.process_time()
                    secs = writer.run(n, threads)
                    cpu = time.process_time() - cpu0
                finally:
                    writer.close()
            if isinstance(writer, Ours):
                costs[f"{backend} {durability.upper()} {threads} thread(s)"] = writer.costs
            key = (backend, kind, durability, str(threads))
            rates.setdefault(key, []).append(n / secs)
            cpus.setdefault(key, []).append(cpu / n * 1e6)
    best = {k: max(v) for k, v in rates.items()}
    rows = []
    for b, d, t in sorted({(k[0], k[2], k[3]) for k in best}):
        ours, raw = best[(b, "ours", d, t)], best[(b, "raw", d, t)]
        label = f"{b} {d.upper()} {t} thread{'s' if t != '1' else ''}"
        serial = best.get((b, "serial", d, t))
        cpu_text = f"{min(cpus[(b, 'ours', d, t)]):.0f} / {min(cpus[(b, 'raw', d, t)]):.0f}"
        rows.append(
            [
                label,
                common.fmt_num(ours),
                common.fmt_num(raw),
                common.fmt_num(ours / raw, 2),
                common.fmt_num(serial) if serial else "-",
                common.fmt_num(ours / serial, 2) if serial else "-",
                cpu_text,
            ]
        )
    common.print_table(
        "append throughput (events/s, best of reps; CPU µs per append, least of reps)",
        ["case", "ours", "raw", "ours/raw", "raw serialized", "ours/serialized", "CPU ours/raw"],
        rows,
    )
    for case, cost in sorted(costs.items()):
        print(f"ours, {case}: {cost} (last repetition)")
    out: dict[str, float] = {}
    for (b, kind, d, t), value in best.items():
        out[f"{b}/{kind}/{d}/{t}"] = value
    return out


# ----------------------------------------------------------------- wake latency

WAITER = """
import sys, time
from mempalace_logstream.store import LogStore
url, n = sys.argv[1], int(sys.argv[2])
store = LogStore.open(url)
newest = store.event_list(limit=1).events
cursor = newest[0].id if newest else None
print("ready", flush=True)
got = 0
while got < n:
    page = store.event_wait(since_event_id=cursor, timeout_ms=10000, type="bench.wake")
    now = time.monotonic_ns()
    for e in page.events:
        print(now, flush=True)
        got += 1
    cursor = page.cursor or cursor
store.close()
"""


def wake_latency(url: str, pings: int) -> tuple[list[float], list[float]]:
    """Seconds from the `event_append` call in this process to `event_wait` returning in
    another one, and from the append's return (its commit is visible) to that wake-up.

    CLOCK_MONOTONIC is system-wide on Linux, so stamps are comparable across processes. One
    ping at a time, after a random pause, so the waiter is really waiting."""
    from mempalace_logstream.store import LogStore

    store = LogStore.open(url)
    env = {**os.environ, "PYTHONPATH": str(common.REPO)}
    warm = 3
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, url, str(pings + warm)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    samples: list[float] = []
    after_commit: list[float] = []
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the waiter process failed to start (its error is above)")
        time.sleep(0.2)  # let the waiter reach its first wait (and open LISTEN) before timing
        for i in range(pings + warm):
            time.sleep(random.uniform(0.01, 0.03))
            sent = time.monotonic_ns()
            store.event_append(
                type="bench.wake", stream="s", room="r", from_agent="a", body=str(sent)
            )
            committed = time.monotonic_ns()
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the waiter process exited early")
            if i >= warm:
                samples.append((int(line) - sent) / 1e9)
                after_commit.append(max(0, int(line) - committed) / 1e9)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        store.close()
    return samples, after_commit


def bench_wake(admin_url: str, tmp: Path, sizes: Sizes) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for backend in ("sqlite", "postgresql"):
        with database(backend, admin_url, tmp) as url:
            total, after = wake_latency(url, sizes.pings)
        out[backend] = common.summarize(total)
        out[backend + " after commit"] = common.summarize(after)
    rows = [
        [b, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"]), int(s["n"])]
        for b, s in out.items()
    ]
    common.print_table(
        "cross-process wake latency (ms): append call in A -> event_wait returns in B "
        "('after commit': from the append's return)",
        ["backend", "p50", "p95", "max", "n"],
        rows,
    )
    return out


# ----------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_pg", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes")
    common.add_smoke(p)
    p.add_argument(
        "--pg-url",
        default=common.pg_admin_url(),
        help="PostgreSQL server (a schema is created and dropped there)",
    )
    p.add_argument("--sections", nargs="+", choices=("append", "wake"), default=["append", "wake"])
    p.add_argument(
        "--backends",
        nargs="+",
        choices=("sqlite", "postgresql"),
        default=["sqlite", "postgresql"],
        help="the append section's backends (PostgreSQL alone: half the time)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = {"smoke": SMOKE, "quick": QUICK, "full": DEFAULT}[size]
    print(f"bench_pg ({size} sizes) against {args.pg_url}")
    print(common.machine_line())
    print("reference: n/a (mempalace 3.11 has no PostgreSQL backend)")
    started = time.perf_counter()
    with common.temp_dir("logstream-bench-pg-") as tmp:
        if "append" in args.sections:
            r = bench_append(args.pg_url, tmp, sizes, args.backends)
            for d, t in (("full", "1"), ("normal", "1"), ("full", "8")):
                if "postgresql" not in args.backends:
                    break
                label = f"{d.upper()} {t} writer{'s' if t != '1' else ''}"
                common.ratio_line(
                    "pg",
                    f"append {label} pg ours/raw psycopg",
                    r[f"postgresql/ours/{d}/{t}"] / r[f"postgresql/raw/{d}/{t}"],
                )
                common.ratio_line(
                    "pg",
                    f"append {label} pg ours/raw psycopg serialized",
                    r[f"postgresql/ours/{d}/{t}"] / r[f"postgresql/serial/{d}/{t}"],
                )
                if "sqlite" in args.backends:
                    common.ratio_line(
                        "pg",
                        f"append {label} pg/sqlite (ours)",
                        r[f"postgresql/ours/{d}/{t}"] / r[f"sqlite/ours/{d}/{t}"],
                    )
        if "wake" in args.sections:
            w = bench_wake(args.pg_url, tmp, sizes)
            for backend, s in w.items():
                if backend.endswith("after commit"):
                    continue
                common.target_line("pg", f"wake {backend} p50", s["p50"] * 1000, "ms", "<=", 5)
                common.target_line("pg", f"wake {backend} p95", s["p95"] * 1000, "ms", "<=", 20)
    print(f"\nbench_pg done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
