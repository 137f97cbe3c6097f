"""The store bench's list section (bench/bench_store.py `--sections list`): inbox/list latency
on a 1,000,000-event log (cached between runs), ours `event_list` next to the raw sqlite3 query
and the reference's `list_events` on a reference file holding the same rows.

Each query is measured in `SLICES` time slices. In each, ours and raw sqlite3 alternate call by
call, and the reference (one process kept open, bench/ref_worker.py) reads the same query
before or after them, alternately, so that a slow stretch of the shared machine hits all three
alike. Until 2026-12-06 the reference read every query in one process after ours had finished.

Never a test: nothing here asserts a time.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import common
from bench.ref_worker import RefWorker

if TYPE_CHECKING:
    from bench.bench_store import Sizes

BENCH = "store"
LIST_LIMIT = 50
SLICES = 5  # time slices per query; ours and the reference take turns in each


@dataclass(frozen=True)
class Query:
    label: str
    ours: dict[str, Any]  # event_list kwargs
    ref: dict[str, Any]  # list_events kwargs (the reference defaults to asc: say desc)
    raw: tuple[tuple[str, str, dict[str, Any]], ...]  # (label, SQL, named params): raw sqlite3


_COLS = ", ".join(["seq", *common.EVENT_FIELDS])
RAW_BEST = "raw sqlite3, same SQL shape"
RAW_IN = "raw sqlite3, one IN list"


def _inbox_sql(cond: str | None, order: str) -> tuple[str, str]:
    """The raw equivalents of an inbox page: one IN list, and one leg per value (UNION ALL)."""
    lim = LIST_LIMIT + 1
    sel = f"SELECT {_COLS} FROM events WHERE " + (f"{cond} AND " if cond else "")
    return (
        f"{sel}to_agent IN (:agent, '*') ORDER BY seq {order} LIMIT {lim}",
        f"{sel}to_agent = :agent UNION ALL {sel}to_agent = '*' ORDER BY seq {order} LIMIT {lim}",
    )


def cursor_and_correlation(path: Path, n: int) -> tuple[str, str, int]:
    """(a cursor's event id, a recent correlation id, how far back the cursor is) from the
    `n`-event log at `path` itself: what the bench's after-cursor and correlation reads ask."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        back = max(1, min(2000, n // 10))
        since_id = conn.execute("SELECT id FROM events WHERE seq = ?", (n - back,)).fetchone()[0]
        corr = conn.execute(
            "SELECT correlation_id FROM events WHERE correlation_id IS NOT NULL AND seq <= ?"
            " ORDER BY seq DESC LIMIT 1",
            (n - 100,),
        ).fetchone()[0]
    finally:
        conn.close()
    return since_id, corr, back


def _queries(path: Path, n: int) -> list[Query]:
    """The four reads, with a recent cursor and a recent correlation id from the log itself."""
    since_id, corr, back = cursor_and_correlation(path, n)
    agent, kind = common.INBOX_AGENT, common.FILTER_TYPE
    lim = LIST_LIMIT + 1
    sel = f"SELECT {_COLS} FROM events WHERE"
    inbox_in, inbox_union = _inbox_sql(None, "DESC")
    since_in, since_union = _inbox_sql("seq > (SELECT seq FROM events WHERE id = :since)", "ASC")
    p_agent, p_since = {"agent": agent}, {"agent": agent, "since": since_id}
    return [
        Query(
            f"inbox to_agent={agent} (newest {LIST_LIMIT})",
            {"to_agent": agent},
            {"to_agent": agent, "order": "desc", "limit": LIST_LIMIT},
            ((RAW_BEST, inbox_union, p_agent), (RAW_IN, inbox_in, p_agent)),
        ),
        Query(
            f"to_agent={agent} since_event_id=<{back} back>",
            {"to_agent": agent, "since_event_id": since_id},
            {"to_agent": agent, "since_event_id": since_id, "limit": LIST_LIMIT},
            ((RAW_BEST, since_union, p_since), (RAW_IN, since_in, p_since)),
        ),
        Query(
            f"type={kind} (newest {LIST_LIMIT})",
            {"type": kind},
            {"type": kind, "order": "desc", "limit": LIST_LIMIT},
            ((RAW_BEST, f"{sel} type = :v ORDER BY seq DESC LIMIT {lim}", {"v": kind}),),
        ),
        Query(
            "correlation_id=<recent> (newest)",
            {"correlation_id": corr},
            {"correlation_id": corr, "order": "desc", "limit": LIST_LIMIT},
            ((RAW_BEST, f"{sel} correlation_id = :v ORDER BY seq DESC LIMIT {lim}", {"v": corr}),),
        ),
    ]


_REF_LIST = r"""
import json, sys
from mempalace.logstream import Logstream
_ls = Logstream(db_path=sys.argv[1] + "/logstream.sqlite3")
OPS = [lambda kw=kw: _ls.list_events(**kw) for kw in json.loads(sys.argv[2])]
"""
REF_LABEL = "reference list_events"

Samples = dict[str, list[float]]  # system -> seconds per call


def _rounds(
    fns: dict[str, Callable[[], Any]], rounds: int, budget_s: float, min_rounds: int
) -> tuple[Samples, Samples]:
    """Wall and thread-CPU seconds of each function, called round-robin (one call of each per
    round) so that a load burst hits every system alike: up to `rounds` rounds or `budget_s`
    seconds per function, at least `min_rounds`."""
    wall: Samples = {k: [] for k in fns}
    cpu: Samples = {k: [] for k in fns}
    start, limit = time.perf_counter(), budget_s * len(fns)
    done = 0
    while done < rounds and (done < min_rounds or time.perf_counter() - start < limit):
        for key, fn in fns.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            cpu[key].append(time.thread_time() - c0)
            wall[key].append(time.perf_counter() - t0)
        done += 1
    return wall, cpu


def _sample(
    fns: dict[str, Callable[[], Any]],
    max_n: int,
    budget_s: float,
    ref: Callable[[int, float], dict[str, Any]] | None = None,
) -> tuple[dict[str, dict[str, float]], int | None]:
    """Latency of each function and of the reference's read (`ref(max_n, budget_s)` runs it
    in the worker), in `SLICES` slices: ours and raw round-robin for a share of the rounds and
    budget, and the reference's share before or after them, alternately. In all up to `max_n`
    calls or `budget_s` seconds per system, at least 20 rounds of ours and one reference read
    per slice (5 in all: one reference inbox read on 1M events takes half a second).

    Wall p50/p95/max, plus the median CPU time of the calling thread, which a busy machine
    inflates far less than wall time (it shows what a quiet machine would approach). Also the
    reference's row count (None without it).
    """
    for fn in fns.values():
        for _ in range(3):
            fn()
    wall: Samples = {k: [] for k in fns}
    cpu: Samples = {k: [] for k in fns}
    per_n, per_s = math.ceil(max_n / SLICES), budget_s / SLICES
    ref_count = None
    for i in range(SLICES):
        for side in ("ours", "ref") if i % 2 == 0 else ("ref", "ours"):
            if side == "ours":
                w, c = _rounds(fns, per_n, per_s, math.ceil(20 / SLICES))
                for key in fns:
                    wall[key] += w[key]
                    cpu[key] += c[key]
            elif ref is not None:
                out = ref(per_n, per_s)
                wall.setdefault(REF_LABEL, []).extend(out["samples"])
                cpu.setdefault(REF_LABEL, []).extend(out["cpu"])
                ref_count = out["count"]
    return {k: _latency(wall[k], cpu[k]) for k in wall}, ref_count


def _latency(wall: list[float], cpu: list[float]) -> dict[str, float]:
    out = common.summarize(wall)
    out["cpu_p50"] = common.percentile(cpu, 0.5)
    return out


def capture_plans(store: Any, kwargs: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """EXPLAIN QUERY PLAN of every SELECT that one `event_list(**kwargs)` issues (seen by
    the backend's statement hooks)."""
    seen: list[tuple[str, Any]] = []

    def grab(statement: str, params: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, params))

    store.backend.statement_hooks.append(grab)
    try:
        store.event_list(**kwargs)
    finally:
        store.backend.statement_hooks.remove(grab)
    raw = sqlite3.connect(f"file:{store.engine.url.database}?mode=ro", uri=True)
    try:
        return [(" ".join(s.split()), _plan(raw, s, p)) for s, p in seen]
    finally:
        raw.close()


def _plan(conn: sqlite3.Connection, sql: str, params: Any) -> list[str]:
    return [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def _page_plan(plans: list[tuple[str, list[str]]]) -> list[str]:
    """The page query's plan: the first captured statement that reads the body column (the
    reads after it, the keyring's marks probe, read no body)."""
    for statement, plan in plans:
        if "events.body" in statement:
            return plan
    return plans[-1][1]


Latencies = dict[str, dict[str, dict[str, float]]]  # query -> system -> _latency() figures
Counts = dict[str, dict[str, int]]  # query -> system -> rows read
Plans = dict[str, dict[str, list[str]]]  # query -> system -> EXPLAIN QUERY PLAN steps


def _ours_read(store: Any, q: Query) -> Callable[[], Any]:
    """Our `event_list` of one query, as a function of no argument."""
    return lambda: store.event_list(**q.ours)


def _raw_read(conn: sqlite3.Connection, sql: str, params: dict[str, Any]) -> Callable[[], Any]:
    """One raw sqlite3 read of every row, as a function of no argument."""
    return lambda: conn.execute(sql, params).fetchall()


def _measure(
    path: Path, palace: Path | None, queries: list[Query], sizes: Sizes
) -> tuple[Latencies, Counts, Plans]:
    from mempalace_logstream.store import LogStore

    results: Latencies = {}
    counts: Counts = {}
    plans: Plans = {}
    store = LogStore.open(str(path), migrate_schema=False)
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    worker = None
    if palace is not None:
        worker = RefWorker(_REF_LIST, palace, json.dumps([q.ref for q in queries]))
    try:
        for op, q in enumerate(queries):
            cnt = counts.setdefault(q.label, {})
            fns: dict[str, Callable[[], Any]] = {}
            plans[q.label] = {"ours event_list": _page_plan(capture_plans(store, q.ours))}
            cnt["ours event_list"] = len(store.event_list(**q.ours).events)
            fns["ours event_list"] = _ours_read(store, q)
            for label, sql, params in q.raw:
                if label == RAW_IN:
                    plans[q.label][label] = _plan(raw, sql, params)
                cnt[label] = min(LIST_LIMIT, len(raw.execute(sql, params).fetchall()))
                fns[label] = _raw_read(raw, sql, params)
            ref = None
            if worker is not None:
                ref = functools.partial(worker.run, op)
            results[q.label], ref_count = _sample(fns, sizes.list_samples, sizes.list_budget_s, ref)
            if ref_count is not None:
                cnt[REF_LABEL] = ref_count
    finally:
        if worker is not None:
            worker.close()
        raw.close()
        store.close()
    return results, counts, plans


def bench_list(
    sizes: Sizes, n: int, path: Path, palace: Path | None, ref_reason: str | None
) -> None:
    """The section: `path` is our cached `n`-event log, `palace` the reference's (None: the
    reference is not measured, for `ref_reason`)."""
    print(f"\n== inbox/list latency on a {n:,}-event log (limit {LIST_LIMIT}, warm cache)")
    queries = _queries(path, n)
    results, counts, plans = _measure(path, palace, queries, sizes)
    rows = []
    for q in queries:
        for i, (label, s) in enumerate(results[q.label].items()):
            rows.append(
                [
                    q.label if i == 0 else "",
                    label,
                    common.fmt_ms(s["p50"]),
                    common.fmt_ms(s["p95"]),
                    common.fmt_ms(s["max"]),
                    common.fmt_ms(s["cpu_p50"]),
                    int(s["n"]),
                    counts[q.label][label],
                ]
            )
    common.print_table(
        f"list latency, {n:,} events (ms; 'same SQL shape' = what the store runs, minus "
        "SQLAlchemy, validation, the tip lookup and hydration)",
        ["query", "system", "p50", "p95", "max", "CPU p50", "samples", "rows"],
        rows,
    )
    print("\nEXPLAIN QUERY PLAN of the page query:")
    for q in queries:
        print(f"  {q.label}:")
        for label, plan in plans[q.label].items():
            print(f"    {label}:")
            for step in plan:
                print(f"        {step}")
    for q in queries:
        ours_p50 = results[q.label]["ours event_list"]["p50"] * 1000
        common.target_line(BENCH, f"list p50 {q.label} ({n:,} events)", ours_p50, "ms", "<=", 2.0)
    for q in queries:
        res = results[q.label]
        ours = res["ours event_list"]["p50"]
        common.ratio_line(
            BENCH, f"list p50 {q.label}: raw-sqlite3/ours", res[RAW_BEST]["p50"] / ours
        )
        if REF_LABEL in res:
            common.ratio_line(
                BENCH,
                f"list p50 {q.label}: reference/ours (speed-up)",
                res[REF_LABEL]["p50"] / ours,
            )
            cpu_ratio = res[REF_LABEL]["cpu_p50"] / res["ours event_list"]["cpu_p50"]
            common.ratio_line(BENCH, f"list CPU p50 {q.label}: reference/ours", cpu_ratio)
        if RAW_IN in res:  # the shape question on raw sqlite3 (the store splits an inbox)
            common.ratio_line(
                BENCH,
                f"list p50 {q.label}: IN-list shape/UNION ALL shape (raw sqlite3)",
                res[RAW_IN]["p50"] / res[RAW_BEST]["p50"],
            )
    if palace is None:
        print(f"reference not measured: {ref_reason}")
