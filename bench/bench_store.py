"""Store benchmark (SPEC §9): append throughput and inbox/list latency, side by side in one run
with raw `sqlite3` and the reference (`mempalace` 3.11.0 `Logstream`, run in its own venv).

Sections (all by default; `--sections` picks some):
  append   one writer, default durability (WAL + synchronous=FULL): ours `LogStore.event_append`
           vs raw sqlite3 single-row commits into the same `events` table vs the reference's
           `append_event`; then the same at `--durability normal` (ours vs raw).
  threads  8 threads in one process: ours (group commit) vs raw sqlite3 (8 connections, one
           row per transaction) vs the reference (8 threads on one `Logstream`).
  list     inbox/list latency on a 1,000,000-event log (cached between runs): ours
           `event_list`, the raw sqlite3 query, and the reference's `list_events` on a
           reference file holding the same rows (bench/store_list.py).

Repetitions are interleaved (ours, raw, reference, rotating; the list section's reference reads
in a process kept open, in turns with ours) and the median is reported, because the machine is
shared. Never a test: nothing here asserts a time.
Must not be imported by the package; imports our package and tests/refpkg.py lazily.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import secrets
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/bench_store.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, store_list  # noqa: E402

BENCH = "store"
SECTIONS = ("append", "threads", "list")
THREADS = 8
SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
APPEND_ROW = {
    "type": "bench.append",
    "stream": "bench",
    "room": "r",
    "from_agent": "w",
    "to_agent": "*",
    "body": "x" * 100,
}
LIST_LIMIT = 50


@dataclass(frozen=True)
class Sizes:
    append_n: int  # appends per repetition, one writer, FULL
    append_reps: int
    normal_n: int  # appends per repetition at synchronous=NORMAL
    normal_reps: int
    thread_per: int  # appends per thread per repetition
    thread_reps: int
    log_events: int  # size of the list-latency log
    list_samples: int  # max samples per query and system
    list_budget_s: float  # max seconds per query and system


QUICK = Sizes(20, 2, 50, 2, 5, 1, 2_000, 20, 0.3)
SMOKE = Sizes(5, 1, 10, 1, 2, 1, 500, 3, 0.05)
DEFAULT = Sizes(400, 5, 2_000, 5, 60, 3, 1_000_000, 400, 12.0)


# ----------------------------------------------------------------- appenders


class OursWriter:
    """`LogStore.event_append` on a file of its own, kept open across repetitions."""

    name = "ours (LogStore.event_append)"

    def __init__(self, path: Path, durability: str) -> None:
        from mempalace_logstream.store import LogStore

        self.store = LogStore.open(str(path), durability=durability)
        for _ in range(3):
            self.store.event_append(**APPEND_ROW)

    def run(self, n: int, threads: int = 1) -> tuple[float, float]:
        return _timed_threads(lambda: self.store.event_append(**APPEND_ROW), n, threads)

    def close(self) -> None:
        self.store.close()


class RawWriter:
    """Plain sqlite3 into a copy of our own `events` table (same columns and indexes): one
    `BEGIN IMMEDIATE; INSERT; COMMIT` per row, one connection per thread.

    Its row is the one ours writes, value for value in length: an event id, a replica id and an
    HLC of our formats (`evt_<UTC second>_<20 hex>`, `rep_<32 hex>`, `<ms>-<counter>-<replica>`),
    made by f-strings, not our code. `short_ids` writes the shorter made-up values this bench
    used until 2026-12-06 (`rep_raw`, `evt_raw_<20 hex>`): about 5 % fewer bytes in the WAL per
    commit, and index keys a third shorter, for the figures measured before."""

    name = "raw sqlite3 (1 row/txn)"
    SQL = (
        "INSERT INTO events (id, origin_replica, origin_seq, hlc, type, stream, room, from_agent,"
        " to_agent, body, created_at, metadata_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
    )

    def __init__(self, path: Path, synchronous: str, short_ids: bool = False) -> None:
        from mempalace_logstream.store import LogStore

        LogStore.open(str(path)).close()  # the exact schema (tables, indexes, triggers)
        self.path, self.synchronous = str(path), synchronous
        self.short_ids = short_ids
        self.replica = "rep_raw" if short_ids else common.raw_replica()
        self.counter = itertools.count(1)
        self.local = threading.local()
        self.conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        for _ in range(3):
            self._insert()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self.local.conn = conn
            with self._lock:
                self.conns.append(conn)
        return conn

    def _insert(self) -> None:
        conn = self._conn()
        n = next(self.counter)
        if self.short_ids:
            event_id = f"evt_raw_{secrets.token_hex(10)}"
            hlc = f"{int(time.time() * 1000):013d}-{n:06x}-{self.replica}"
        else:
            event_id, hlc = common.raw_ids(self.replica, n)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            self.SQL,
            (
                event_id,
                self.replica,
                n,
                hlc,
                APPEND_ROW["type"],
                APPEND_ROW["stream"],
                APPEND_ROW["room"],
                APPEND_ROW["from_agent"],
                APPEND_ROW["to_agent"],
                APPEND_ROW["body"],
                "2026-11-29T00:00:00.000Z",
                "{}",
            ),
        )
        conn.execute("COMMIT")

    def run(self, n: int, threads: int = 1) -> tuple[float, float]:
        return _timed_threads(self._insert, n, threads)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


_REF_APPEND = r"""
import json, sqlite3, sys, threading, time
from mempalace.logstream import Logstream
palace, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ls = Logstream(db_path=palace + "/logstream.sqlite3")
conn = ls._conn()
sync = conn.execute("PRAGMA synchronous").fetchone()[0]
mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
row = json.loads(sys.argv[4])
for _ in range(3):
    ls.append_event(**row)
def work(k):
    for _ in range(k):
        ls.append_event(**row)
t0, c0 = time.perf_counter(), time.process_time()
if threads == 1:
    work(n)
else:
    ts = [threading.Thread(target=work, args=(n,)) for _ in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
ls.close()
print(json.dumps({"seconds": dt, "cpu": cpu, "synchronous": sync, "journal_mode": mode}))
"""


class RefWriter:
    """The reference's `Logstream.append_event` in its own venv, one subprocess per repetition
    (the timing excludes interpreter start-up)."""

    name = "reference (Logstream.append_event)"

    def __init__(self, palace: Path) -> None:
        self.palace = palace
        palace.mkdir(parents=True, exist_ok=True)
        self.synchronous: int | None = None
        self.journal_mode: str | None = None

    def run(self, n: int, threads: int = 1) -> tuple[float, float]:
        out = common.run_ref_json(
            _REF_APPEND, self.palace, n, threads, json.dumps(APPEND_ROW), timeout=900
        )
        self.synchronous, self.journal_mode = out["synchronous"], out["journal_mode"]
        return float(out["seconds"]), float(out["cpu"])

    def close(self) -> None:
        pass


def _timed_threads(fn: Callable[[], Any], n: int, threads: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) for `threads` threads to call `fn` `n` times each."""
    if threads == 1:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0, time.process_time() - c0
    errors: list[BaseException] = []
    gate = threading.Barrier(threads + 1)

    def work() -> None:
        gate.wait()
        try:
            for _ in range(n):
                fn()
        except BaseException as exc:  # surfaced below: a benchmark must not hide failures
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    c0 = time.process_time()
    gate.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if errors:
        raise errors[0]
    return elapsed, cpu


Series = dict[str, list[float]]


def _interleaved(writers: dict[str, Any], n: int, reps: int, threads: int) -> tuple[Series, Series]:
    """Per repetition, for each writer: events/s and CPU ms per event. The order rotates
    every repetition so that no system always runs first (or last) on a busy machine."""
    names = list(writers)
    rates: Series = {k: [] for k in names}
    cpu: Series = {k: [] for k in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for key in order:
            seconds, cpu_s = writers[key].run(n, threads)
            rates[key].append(common.rate(n * threads, seconds))
            cpu[key].append(cpu_s * 1000 / (n * threads))
    return rates, cpu


def _rate_rows(
    writers: dict[str, Any], rates: Series, cpu: Series, sync: dict[str, str]
) -> list[list[str]]:
    rows = []
    for key, values in rates.items():
        rows.append(
            [
                writers[key].name,
                sync[key],
                common.fmt_num(common.median(values)),
                common.fmt_num(min(values)),
                common.fmt_num(max(values)),
                common.fmt_num(common.median(cpu[key]), 3),
                " ".join(common.fmt_num(x) for x in values),
            ]
        )
    return rows


HEAD = [
    "system",
    "synchronous",
    "events/s (median)",
    "min",
    "max",
    "CPU ms/event",
    "per repetition",
]


def _per_append(rates: Series, cpu: Series) -> None:
    """The cost of one append in µs (wall from the median rate; CPU median) per system."""
    parts = [
        f"{key} {1e6 / common.median(values):.0f} µs wall, "
        f"{common.median(cpu[key]) * 1000:.0f} µs CPU"
        for key, values in rates.items()
    ]
    print("per append: " + "; ".join(parts))


def _ratio(rates: dict[str, list[float]], a: str, b: str) -> float | None:
    if a not in rates or b not in rates:
        return None
    return common.median(rates[a]) / common.median(rates[b])


def bench_append(tmp: Path, sizes: Sizes, use_ref: bool, ref_reason: str | None) -> None:
    print(
        f"\n== append, one writer, default durability (WAL, synchronous=FULL): "
        f"{sizes.append_reps} x {sizes.append_n} appends, 100-byte bodies"
    )
    writers: dict[str, Any] = {
        "ours": OursWriter(tmp / "ours-full.sqlite3", "full"),
        "raw": RawWriter(tmp / "raw-full.sqlite3", "FULL"),
        "raw_short": RawWriter(tmp / "raw-short-full.sqlite3", "FULL", short_ids=True),
    }
    writers["raw_short"].name = "raw sqlite3, short made-up ids"
    if use_ref:
        writers["ref"] = RefWriter(tmp / "ref-full")
    try:
        rates, cpu = _interleaved(writers, sizes.append_n, sizes.append_reps, 1)
    finally:
        for w in writers.values():
            w.close()
    sync = {"ours": "FULL", "raw": "FULL", "raw_short": "FULL"}
    if use_ref:
        ref = writers["ref"]
        level = SYNC_NAMES.get(ref.synchronous, str(ref.synchronous))
        sync["ref"] = f"{level} (default)"
        print(
            f"reference connection: PRAGMA synchronous={ref.synchronous} ({level}), "
            f"journal_mode={ref.journal_mode}; it sets no synchronous PRAGMA, so this is SQLite's "
            "compiled default, the same level as ours: the raw row above is also raw sqlite3 "
            "at the reference's level"
        )
    common.print_table("append throughput, 1 writer", HEAD, _rate_rows(writers, rates, cpu, sync))
    common.ratio_line(
        BENCH, "append 1 writer FULL ours/raw", _ratio(rates, "ours", "raw"), ">=", 0.85
    )
    common.ratio_line(  # the raw row this bench wrote before 2026-12-06, shorter than ours
        BENCH,
        "append 1 writer FULL ours/raw with short made-up ids",
        _ratio(rates, "ours", "raw_short"),
    )
    if use_ref:
        common.ratio_line(
            BENCH, "append 1 writer FULL ours/reference", _ratio(rates, "ours", "ref"), ">=", 1.0
        )
        common.ratio_line(BENCH, "append 1 writer FULL raw/reference", _ratio(rates, "raw", "ref"))
    else:
        print(f"reference not measured: {ref_reason}")
        common.ratio_line(BENCH, "append 1 writer FULL ours/reference", None, ">=", 1.0)
    _per_append(rates, cpu)

    print(
        f"\n== append, one writer, --durability normal (WAL, synchronous=NORMAL): "
        f"{sizes.normal_reps} x {sizes.normal_n} appends"
    )
    writers = {
        "ours": OursWriter(tmp / "ours-normal.sqlite3", "normal"),
        "raw": RawWriter(tmp / "raw-normal.sqlite3", "NORMAL"),
    }
    try:
        rates, cpu = _interleaved(writers, sizes.normal_n, sizes.normal_reps, 1)
    finally:
        for w in writers.values():
            w.close()
    common.print_table(
        "append throughput, 1 writer, NORMAL (the reference has no such setting)",
        HEAD,
        _rate_rows(writers, rates, cpu, {"ours": "NORMAL", "raw": "NORMAL"}),
    )
    common.ratio_line(BENCH, "append 1 writer NORMAL ours/raw", _ratio(rates, "ours", "raw"))
    _per_append(rates, cpu)


def bench_threads(tmp: Path, sizes: Sizes, use_ref: bool, ref_reason: str | None) -> None:
    print(
        f"\n== append, {THREADS} threads in one process, synchronous=FULL: "
        f"{sizes.thread_reps} x {THREADS} x {sizes.thread_per} appends"
    )
    writers: dict[str, Any] = {
        "ours": OursWriter(tmp / "ours-threads.sqlite3", "full"),
        "raw": RawWriter(tmp / "raw-threads.sqlite3", "FULL"),
    }
    writers["ours"].name = "ours (group commit, 1 store)"
    writers["raw"].name = f"raw sqlite3 ({THREADS} conns, 1 row/txn)"
    if use_ref:
        writers["ref"] = RefWriter(tmp / "ref-threads")
        writers["ref"].name = "reference (1 Logstream)"
    try:
        rates, cpu = _interleaved(writers, sizes.thread_per, sizes.thread_reps, THREADS)
    finally:
        for w in writers.values():
            w.close()
    sync = {"ours": "FULL", "raw": "FULL", "ref": "FULL (default)"}
    common.print_table(
        f"append throughput, {THREADS} threads", HEAD, _rate_rows(writers, rates, cpu, sync)
    )
    common.ratio_line(
        BENCH, f"append {THREADS} threads FULL ours/raw", _ratio(rates, "ours", "raw")
    )
    if use_ref:
        common.ratio_line(
            BENCH,
            f"append {THREADS} threads FULL ours/reference",
            _ratio(rates, "ours", "ref"),
            ">=",
            2.0,
        )
    else:
        print(f"reference not measured: {ref_reason}")
        common.ratio_line(BENCH, f"append {THREADS} threads FULL ours/reference", None, ">=", 2.0)


# ----------------------------------------------------------------- the big logs


def schema_fingerprint() -> str:
    """A short hash of our freshly created schema: the cache key changes with the schema."""
    from mempalace_logstream.schema import SCHEMA_HEAD
    from mempalace_logstream.store import LogStore

    with common.temp_dir("logstream-schema-") as tmp:
        path = tmp / "f.sqlite3"
        LogStore.open(str(path)).close()
        conn = sqlite3.connect(path)
        try:
            ddl = sorted(
                r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")
            )
        finally:
            conn.close()
    digest = hashlib.sha256("\n".join(ddl).encode()).hexdigest()[:10]
    return f"{SCHEMA_HEAD}-{digest}"


def _bulk_load(conn: sqlite3.Connection, sql: str, rows: Any, chunk: int = 50_000) -> None:
    """executemany in big transactions, with the secondary indexes of `events` dropped first
    and recreated from their own DDL afterwards (2x faster than maintaining them per row)."""
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
        " AND sql IS NOT NULL"
    ).fetchall()
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    _insert_batches(conn, sql, rows, chunk)
    for _, ddl in indexes:
        conn.execute(ddl)


def _insert_batches(conn: sqlite3.Connection, sql: str, rows: Any, chunk: int) -> None:
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= chunk:
            conn.execute("BEGIN")
            conn.executemany(sql, batch)
            conn.execute("COMMIT")
            batch = []
    if batch:
        conn.execute("BEGIN")
        conn.executemany(sql, batch)
        conn.execute("COMMIT")


def ours_log(n: int, cache: Path, rebuild: bool) -> Path:
    """Our store file with `n` synthetic events, built once per (n, schema) and cached.

    Built fast: the store creates the schema and replica id, then rows go straight into its
    `events` table with executemany, 50k rows per transaction, synchronous=OFF, rollback
    journal; WAL is switched back on at the end (the store's own mode).
    """
    path = cache / f"ours-{n}-{schema_fingerprint()}.sqlite3"
    with common.file_lock(cache / (path.name + ".lock")):
        if path.exists() and not rebuild:
            return path
        from mempalace_logstream.store import LogStore

        building = path.with_name(path.name + ".building")
        common.remove_sqlite(building)
        t0 = time.perf_counter()
        store = LogStore.open(str(building))
        replica = store.replica_id
        store.close()
        conn = sqlite3.connect(building, isolation_level=None)
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        cols = ", ".join(("seq", *common.EVENT_FIELDS))
        marks = ", ".join("?" * (1 + len(common.EVENT_FIELDS)))
        sql = f"INSERT INTO events ({cols}) VALUES ({marks})"
        rows = ((r[15], *r) for r in common.synthetic_events(n, replica))
        _bulk_load(conn, sql, rows)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
        common.remove_sqlite(path)
        os.replace(building, path)
        print(f"built {path} ({n:,} events) in {time.perf_counter() - t0:.1f} s")
        for stale in cache.glob(f"ours-{n}-*.sqlite3"):  # older schemas: ~0.9 GB each at 1M
            if stale != path:
                common.remove_sqlite(stale)
                print(f"removed {stale.name} (built for an older schema)")
        return path


_REF_BUILD = r"""
import json, os, sqlite3, sys, time
import common
from mempalace.logstream import Logstream
palace, n = sys.argv[1], int(sys.argv[2])
db = palace + "/logstream.sqlite3"
ls = Logstream(db_path=db)  # the reference creates its own schema and replica.json
replica = ls.replica_id
ls.close()
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA synchronous=OFF")
conn.execute("PRAGMA cache_size=-262144")
cols = ", ".join(common.EVENT_FIELDS)
sql = f"INSERT INTO events ({cols}) VALUES ({', '.join('?' * len(common.EVENT_FIELDS))})"
rows = common.synthetic_events(n, replica)
indexes = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                       " AND tbl_name = 'events' AND sql IS NOT NULL").fetchall()
for name, _ in indexes:
    conn.execute(f'DROP INDEX "{name}"')
batch = []
for row in rows:
    batch.append(row)
    if len(batch) >= 50000:
        conn.execute("BEGIN"); conn.executemany(sql, batch); conn.execute("COMMIT"); batch = []
if batch:
    conn.execute("BEGIN"); conn.executemany(sql, batch); conn.execute("COMMIT")
for _, ddl in indexes:
    conn.execute(ddl)
conn.execute("PRAGMA journal_mode=WAL")
conn.close()
print(json.dumps({"replica": replica}))
"""


def ref_log(n: int, cache: Path, rebuild: bool) -> Path:
    """A reference palace whose `logstream.sqlite3` holds the same `n` rows (cached)."""
    from tests import refpkg

    palace = cache / f"ref-{n}-{refpkg.REF_VERSION}"
    with common.file_lock(cache / (palace.name + ".lock")):
        if (palace / "logstream.sqlite3").exists() and not rebuild:
            return palace
        building = palace.with_name(palace.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        t0 = time.perf_counter()
        common.run_ref_json(_REF_BUILD, building, n, timeout=3600)
        shutil.rmtree(palace, ignore_errors=True)
        os.replace(building, palace)
        print(
            f"built {palace} ({n:,} events, reference layout) in {time.perf_counter() - t0:.1f} s"
        )
        return palace


# ----------------------------------------------------------------- entry point


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_store", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes")
    common.add_smoke(p)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument("--events", type=int, help="size of the list log (default 1,000,000)")
    p.add_argument("--no-ref", action="store_true", help="skip the reference package")
    p.add_argument("--cache-dir", help="where the big logs are kept (default ~/.cache/...)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached logs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = {"smoke": SMOKE, "quick": QUICK, "full": DEFAULT}[size]
    n = args.events or sizes.log_events
    print(f"bench_store ({size} sizes)")
    print(common.machine_line())
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    use_ref = refpkg is not None
    if use_ref:
        print(f"reference: mempalace {refpkg.REF_VERSION} in {refpkg.ref_venv_dir()}")
    elif not args.smoke:
        print(f"reference unavailable: {reason}")
    started = time.perf_counter()
    with common.temp_dir("logstream-bench-store-") as tmp:
        if "append" in args.sections:
            bench_append(tmp, sizes, use_ref, reason)
        if "threads" in args.sections:
            bench_threads(tmp, sizes, use_ref, reason)
    if "list" in args.sections:
        cache = common.cache_dir(args.cache_dir)
        path = ours_log(n, cache, args.rebuild)
        palace = ref_log(n, cache, args.rebuild) if use_ref else None
        store_list.bench_list(sizes, n, path, palace, reason)
    print(f"\nbench_store done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
