"""Task lifecycle benchmark (RFC 0007, issue 11): what the projection costs a reader and a writer.

Sections (all by default; `--sections` picks some), on a SQLite file and, with a server at
`--pg-url`, on PostgreSQL in a fresh schema:
  status   `task_status` on a task whose thread holds 1,000 events (a request, a claim, 998
           progress moves), next to one on a task of a single event.
  list     `task_list` over 100,000 tasks spread over seven states: `state=open`,
           `state=working`, `to_agent=X, state=open`, any state with no filter, a stream's
           tasks with and without a state, and a parent's children (P: a child every 49
           tasks, in every state), with no state, a state or an agent, and a parent with none
           (wall and CPU time per call). The log is built by tasks_data.py. The SQLite log is built
           through the store once and cached; PostgreSQL's is built each run.
  move     a move's row write alone on the list log: the projection's UPDATE the store runs
           for a move (every column set; a new `updated_seq`, the state kept or changed), 500
           rows a transaction, rolled back: what the task table's indexes cost a move.
  append   the cost the lifecycle adds to an append, interleaved repetitions on a fresh store:
           (a) a plain `event_append`, (b) one with a correlation id that is not a task,
           (c) `task_update(action="progress")` on a claimed task, (d) a raw `task.progress`
           `event_append` on a claimed task; plus the SQL statements each one runs.

Never a test: nothing here asserts a time. Must not be imported by the package.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mempalace_logstream import workflows

if __package__ in (None, ""):  # run as `python bench/bench_tasks.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402
from bench.tasks_data import (  # noqa: E402
    LIST_AGENT,
    LIST_PARENT,
    LIST_STREAM,
    LONG_TASK,
    append_all,
    build_settings,
    move_fields,
    pg_schema,
    populate,
    request_fields,
    sqlite_log,
)

BENCH = "tasks"
SECTIONS = ("status", "list", "move", "append")
TARGET_MS = 2.0


@dataclass(frozen=True)
class Sizes:
    thread_events: int  # events in the long task's thread
    tasks: int  # tasks in the list log
    samples: int  # max samples per read
    budget_s: float  # max seconds per read
    append_n: int  # appends per kind per repetition
    append_reps: int


QUICK = Sizes(100, 600, 30, 0.3, 10, 2)
DEFAULT = Sizes(1_000, 100_000, 400, 5.0, 40, 8)
SMOKE = Sizes(20, 60, 3, 0.05, 3, 1)


# ----------------------------------------------------------------- reads


def sample(
    fn: Callable[[], Any], sizes: Sizes, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Per-call times (s) by `clock` (wall by default; `time.process_time`: this process's
    CPU): up to `sizes.samples` calls within `sizes.budget_s` of wall time."""
    for _ in range(3):
        fn()
    out: list[float] = []
    deadline = time.perf_counter() + sizes.budget_s
    while len(out) < sizes.samples and (len(out) < 5 or time.perf_counter() < deadline):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def _row(what: str, samples: list[float], extra: str = "") -> list[str]:
    s = common.summarize(samples)
    return [what, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), str(len(samples)), extra]


def bench_status(store: Any, label: str, sizes: Sizes) -> None:
    events = len(store.task_status(LONG_TASK)["task"]["events"])
    short = "task_bench_0000000"
    long_s = sample(lambda: store.task_status(LONG_TASK), sizes)
    short_s = sample(lambda: store.task_status(short), sizes)
    common.print_table(
        f"task_status latency, {label} (ms)",
        ["task", "p50", "p95", "n"],
        [_row(f"thread of {events:,} events", long_s)[:4], _row("thread of 1 event", short_s)[:4]],
    )
    for q in ("p50", "p95"):
        value = common.summarize(long_s)[q] * 1000
        what = f"{label} task_status {q}, thread of {events:,} events"
        if q == "p50":
            common.target_line(BENCH, what, value, "ms", "<=", TARGET_MS)
        else:
            print(f"{common.TARGET_TAG} {BENCH}: {what} = {value:.3f} ms  (reported)")


@contextlib.contextmanager
def recording(store: Any) -> Iterator[list[tuple[str, Any]]]:
    """The (SQL, DBAPI parameters) of the statements the store runs meanwhile (its backend's
    statement hooks; BEGIN and COMMIT are not among them)."""
    seen: list[tuple[str, Any]] = []

    def grab(statement: str, params: Any) -> None:
        seen.append((statement, params))

    store.backend.statement_hooks.append(grab)
    try:
        yield seen
    finally:
        store.backend.statement_hooks.remove(grab)


def page_statement(store: Any, kwargs: dict[str, Any]) -> tuple[str, Any]:
    """The SQL (and DBAPI parameters) `task_list(**kwargs)` sends for its page: the statement
    that reads the tasks table (the one after it reads the page's request bodies)."""
    with recording(store) as seen:
        store.task_list(**kwargs)
    return next(s for s in seen if "FROM tasks" in s[0])


def sql_samples(store: Any, statement: tuple[str, Any], sizes: Sizes) -> list[float]:
    """The page query alone, on one connection (no decoding of the task documents)."""
    with store.engine.connect() as conn:
        return sample(lambda: conn.exec_driver_sql(*statement).all(), sizes)


def print_plan(store: Any, statement: tuple[str, Any], what: str) -> None:
    """A page query's plan (SQLite: EXPLAIN QUERY PLAN, PostgreSQL: EXPLAIN)."""
    sqlite = store.engine.dialect.name == "sqlite"
    prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql(prefix + statement[0], statement[1]).all()
    print(f"{prefix.strip()} of the {what} page query:")
    for row in plan:
        print(f"    {row[-1] if sqlite else row[0]}")


def bench_list(store: Any, label: str, sizes: Sizes) -> None:
    queries: dict[str, dict[str, Any]] = {
        "state=open": {"state": "open"},
        "state=working": {"state": "working"},
        f"to_agent={LIST_AGENT}, state=open": {"to_agent": LIST_AGENT, "state": "open"},
        "any state": {},
        f"stream={LIST_STREAM}": {"stream": LIST_STREAM},
        f"stream={LIST_STREAM}, state=working": {"stream": LIST_STREAM, "state": "working"},
        "parent=P": {"parent_task_id": LIST_PARENT},
        "parent=P, state=working": {"parent_task_id": LIST_PARENT, "state": "working"},
        f"parent=P, to_agent={LIST_AGENT}": {"parent_task_id": LIST_PARENT, "to_agent": LIST_AGENT},
        "parent with no child": {"parent_task_id": LONG_TASK},
    }
    rows, stats = [], {}
    for what, kwargs in queries.items():
        got = store.task_list(**kwargs)["count"]
        call = functools.partial(store.task_list, **kwargs)
        samples = sample(call, sizes)
        cpu = common.summarize(sample(call, sizes, time.process_time))["p50"]
        statement = page_statement(store, kwargs)
        sql = common.summarize(sql_samples(store, statement, sizes))["p50"]
        row = _row(what, samples, common.fmt_ms(cpu))
        rows.append(row + [common.fmt_ms(sql), str(got)])
        stats[what] = common.summarize(samples)
    common.print_table(
        f"task_list latency over {sizes.tasks:,} tasks, {label} (ms)",
        ["filter", "p50", "p95", "n", "CPU p50", "SQL alone p50", "page"],
        rows,
    )
    for what in ("state=open", "any state", f"stream={LIST_STREAM}", "parent=P"):
        print_plan(store, page_statement(store, queries[what]), what)
    for what, s in stats.items():
        p50, p95 = s["p50"] * 1000, s["p95"] * 1000
        common.target_line(BENCH, f"{label} task_list p50 {what}", p50, "ms", "<=", TARGET_MS)
        print(f"{common.TARGET_TAG} {BENCH}: {label} task_list p95 {what} = {p95:.3f} ms")


# ----------------------------------------------------------------- a move's row write


def bench_move(store: Any, label: str, sizes: Sizes) -> None:
    """The tasks UPDATE of a move (queries/tasks.py `update_statement`, compiled for the store's
    dialect) on `n` task rows of the list log in one transaction, rolled back; CPU and wall
    per row, interleaved: a progress (the state kept) and a claim (open -> claimed)."""
    from mempalace_logstream.backends.queries import tasks as q

    dialect = store.engine.dialect
    sqlite = dialect.name == "sqlite"
    if sqlite:  # named parameters, as the store's own executor sends them
        dialect = type(dialect)(paramstyle="named")
    sql = str(q.update_statement().compile(dialect=dialect))
    n = min(500, max(1, sizes.tasks // 20))
    cols = q.columns()
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT {', '.join(cols)} FROM tasks WHERE state = 'open' ORDER BY task_id LIMIT {n}"
        ).all()
        (top,) = conn.exec_driver_sql("SELECT max(updated_seq) FROM tasks").one()
        conn.rollback()
        rows = [dict(zip(cols, r, strict=True)) for r in rows]
        dbapi = conn.connection.dbapi_connection

        def moves(state: str) -> tuple[float, float]:
            params = [
                {"id": r["task_id"]}
                | {f"new_{k}": v for k, v in r.items() if k != "task_id"}
                | {"new_state": state, "new_updated_seq": top + 1 + i}
                for i, r in enumerate(rows)
            ]
            cur = dbapi.cursor()  # the driver's own: no SQLAlchemy in what is timed
            if sqlite:  # (its connection commits each statement unless told)
                cur.execute("BEGIN")
            cpu, wall = time.process_time(), time.perf_counter()
            for p in params:
                cur.execute(sql, p)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            dbapi.rollback()
            cur.close()
            return cpu / len(rows), wall / len(rows)

        moves("open")  # warm
        got: dict[str, list[tuple[float, float]]] = {"progress (state kept)": [], "claim": []}
        for _ in range(max(2, sizes.append_reps)):
            got["progress (state kept)"].append(moves("open"))
            got["claim"].append(moves("claimed"))
    table = []
    for what, pairs in got.items():
        cpu = common.median([c for c, _w in pairs])
        wall = common.median([w for _c, w in pairs])
        table.append([what, f"{cpu * 1e6:.1f}", f"{wall * 1e6:.1f}", str(len(pairs) * n)])
    common.print_table(
        f"a move's tasks UPDATE on the list log, {label}, {n} rows a transaction (us per row)",
        ["move", "CPU median", "wall median", "rows"],
        table,
    )
    for what, pairs in got.items():
        value = common.median([c for c, _w in pairs]) * 1e6
        print(f"{common.TARGET_TAG} {BENCH}: {label} tasks UPDATE CPU per {what} = {value:.1f} us")


# ----------------------------------------------------------------- appends


CHAT = {"type": "chat.message", "stream": "bench", "room": "r", "from_agent": "w"}
CHAT |= {"to_agent": "*", "body": "x" * 100}


class Appends:
    """The four appends of section 3 on one store; each claimed task serves one repetition."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.n = itertools.count(1)
        self.task_c = self.task_d = ""
        self.progress = 0.0

    def new_tasks(self) -> None:
        self.progress = 0.0
        self.task_c, self.task_d = self._claimed(), self._claimed()

    def _claimed(self) -> str:
        i = next(self.n)
        task_id = f"task_bench_app_{i:06d}"
        append_all(self.store, [request_fields(task_id, 7)])
        append_all(self.store, [move_fields(task_id, 7, "claim")])
        return task_id

    def plain(self) -> None:
        self.store.event_append(**CHAT)

    def correlated(self) -> None:
        # A new thread every 50 appends: the thread loop guard refuses the 61st agent-written
        # event of one thread (its default budget), which is not what this row measures.
        i = next(self.n)
        self.store.event_append(correlation_id=f"conv_bench_{i // 50}", **CHAT)

    def task_update(self) -> None:
        self.progress = round(self.progress + 0.01, 2)  # stays within 0-100 at any size
        workflows.task_update(
            self.store,
            task_id=self.task_c,
            action="progress",
            from_agent=common.AGENTS[7],
            body="x" * 100,
            progress=self.progress,
        )

    def raw_progress(self) -> None:
        self.progress = round(self.progress + 0.01, 2)  # stays within 0-100 at any size
        self.store.event_append(correlation_id=self.task_d, **self._progress_fields())

    def progress_shape(self) -> None:
        """(d)'s fields without the correlation id: the event's own cost, no lifecycle."""
        self.progress = round(self.progress + 0.01, 2)  # stays within 0-100 at any size
        self.store.event_append(**self._progress_fields())

    def _progress_fields(self) -> dict[str, Any]:
        return {
            "type": "task.progress",
            "stream": common.STREAMS[7],
            "room": "delegation",
            "from_agent": common.AGENTS[7],
            "to_agent": "lead-2",
            "status": "working",
            "body": "x" * 100,
            "metadata": {"progress": self.progress},
        }


KINDS = (
    ("(a) event_append, no correlation id", "plain"),
    ("(b) event_append, correlation id not a task", "correlated"),
    ("(c) task_update(action=progress)", "task_update"),
    ("(d) event_append task.progress", "raw_progress"),
    ("(e) (d)'s fields, no correlation id", "progress_shape"),
)


def bench_append(store: Any, label: str, sizes: Sizes) -> None:
    app = Appends(store)
    app.new_tasks()
    for _, method in KINDS:  # warm the statement caches
        getattr(app, method)()
    statements = {}
    for what, method in KINDS:
        with recording(store) as seen:
            getattr(app, method)()
        statements[what] = len(seen)
    samples: dict[str, list[float]] = {what: [] for what, _ in KINDS}
    for rep in range(sizes.append_reps):
        app.new_tasks()
        order = KINDS[rep % len(KINDS) :] + KINDS[: rep % len(KINDS)]
        for what, method in order:
            samples[what] += common.time_calls(getattr(app, method), sizes.append_n, warmup=0)
    p50 = {what: common.summarize(s)["p50"] for what, s in samples.items()}
    common.print_table(
        f"append cost of the lifecycle, {label}, {sizes.append_reps} interleaved repetitions "
        f"x {sizes.append_n} appends (ms)",
        ["append", "p50", "p95", "n", "SQL statements"],
        [_row(what, s, str(statements[what])) for what, s in samples.items()],
    )
    a = p50[KINDS[0][0]]
    for tag, what in (("(c)/(a)", KINDS[2][0]), ("(d)/(a)", KINDS[3][0]), ("(b)/(a)", KINDS[1][0])):
        common.ratio_line(BENCH, f"{label} append p50 {tag} {what[4:]} / plain", p50[what] / a)
    e = p50[KINDS[4][0]]
    common.ratio_line(
        BENCH, f"{label} append p50 (d)/(e) the lifecycle alone", p50[KINDS[3][0]] / e
    )
    print(
        f"(a) pays nothing for the lifecycle: an event without a correlation id leaves "
        f"on_local_event before any query ({statements[KINDS[0][0]]} statements per append, "
        f"(b) runs {statements[KINDS[1][0]] - statements[KINDS[0][0]]} more: the task lookup)."
    )


# ----------------------------------------------------------------- main


def run_sections(store: Any, label: str, sizes: Sizes, sections: Sequence[str]) -> None:
    if "status" in sections:
        bench_status(store, label, sizes)
    if "list" in sections:
        bench_list(store, label, sizes)
    if "move" in sections:
        bench_move(store, label, sizes)


def run_sqlite(args: argparse.Namespace, sizes: Sizes) -> None:
    from mempalace_logstream.store import LogStore

    if {"status", "list", "move"} & set(args.sections):
        cache = common.cache_dir(args.cache_dir)
        path = sqlite_log(sizes.tasks, sizes.thread_events, cache, args.rebuild)
        store = LogStore.open(str(path))
        try:
            run_sections(store, "SQLite", sizes, args.sections)
        finally:
            store.close()
    if "append" in args.sections:
        with common.temp_dir("logstream-bench-tasks-") as tmp:
            store = LogStore.open(str(tmp / "append.sqlite3"))
            try:
                bench_append(store, "SQLite", sizes)
            finally:
                store.close()


def run_pg(args: argparse.Namespace, sizes: Sizes) -> None:
    from mempalace_logstream.store import LogStore

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(pg_schema(args.pg_url))
        except Exception as exc:  # no server: say so, keep the rest
            print(f"\nPostgreSQL not measured: {type(exc).__name__}: {exc}")
            return
        store = LogStore.open(url, task_settings=build_settings())
        stack.callback(store.close)
        if {"status", "list", "move"} & set(args.sections):
            populate(store, sizes.tasks, sizes.thread_events)
            run_sections(store, "PostgreSQL", sizes, args.sections)
            if "list" in args.sections:  # the plans change with fresh statistics
                with store.engine.connect() as conn:
                    conn.exec_driver_sql("ANALYZE tasks")
                    conn.commit()
                bench_list(store, "PostgreSQL after ANALYZE", sizes)
        if "append" in args.sections:
            bench_append(store, "PostgreSQL", sizes)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_tasks", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes")
    common.add_smoke(p)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    p.add_argument("--tasks", type=int, help="tasks in the list log (default 100,000)")
    p.add_argument("--pg-url", default=common.pg_admin_url(), help="PostgreSQL server (admin URL)")
    p.add_argument("--no-pg", action="store_true", help="SQLite only")
    p.add_argument("--cache-dir", help="where the SQLite task log is kept (default ~/.cache/...)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached task log")
    p.add_argument("--no-ref", action="store_true", help="accepted for bench/run.py; unused")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    base = {"smoke": SMOKE, "quick": QUICK, "full": DEFAULT}[size]
    sizes = Sizes(**{**base.__dict__, "tasks": args.tasks or base.tasks})
    print(f"bench_tasks ({size} sizes)")
    print(common.machine_line())
    started = time.perf_counter()
    run_sqlite(args, sizes)
    if not args.no_pg:
        run_pg(args, sizes)
    print(f"\nbench_tasks done in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
