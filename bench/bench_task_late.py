"""Late task events benchmark (issue 18, item 15): what it costs to apply a peer's task moves
that sort before what the projection has already seen (a partition healing, a lagging replica),
against the same moves arriving in order.

A task is claimed on replica A; replica B (a copy) writes `--events` `task.progress` moves.
They are applied to A as a peer's history, `--batch` events per transaction (one sync page or
push each): once when A saw nothing newer ("in order"), once after A's holder wrote a later
progress ("late": every batch sorts before it, so each one re-folds the task). On a SQLite file,
and with `--pg-url` on PostgreSQL too.

    python bench/bench_task_late.py [--events 10000] [--batch 100] [--pg-url URL] [--quick]
                                    [--smoke]

Prints the seconds of each run, the events the fold fed (`FoldCache.folded`, when the store
has one) and `[ratio] task_late: late/in order` lines. Never a test: nothing here asserts a time.
Must not be imported by the package.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mempalace_logstream import workflows

if __package__ in (None, ""):  # run as `python bench/bench_task_late.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402

BENCH = "task_late"
LEASE_MS = 7 * 24 * 3600 * 1000


class StepClock:
    """A wall clock moved by hand (the two replicas' events get the stamps we choose)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms


def open_store(url: str, clock: StepClock) -> Any:
    from mempalace_logstream import LogStore

    return LogStore.open(url, clock=clock, durability="normal")


def pg_schema_url(base: str, made: list[str]) -> str:
    """A fresh schema at `base`, as a URL whose search_path points at it (named in `made`)."""
    import sqlalchemy as sa

    schema = f"bench_late_{secrets.token_hex(4)}"
    eng = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    made.append(schema)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def drop_schemas(base: str, made: list[str]) -> None:
    import sqlalchemy as sa

    eng = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        for schema in made:
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    eng.dispose()


def progress_wire(url_b: str, n: int) -> tuple[str, list[dict[str, Any]], str]:
    """A replica B with a claimed task and `n` progress moves: (task id, wire events of the
    moves, B's database url)."""
    from mempalace_logstream import LogStore

    clock = StepClock(common.BASE_MS)
    with LogStore.open(url_b, clock=clock, durability="normal") as b:
        tid = workflows.task_create(
            b,
            project="bench",
            from_agent="lead",
            to_agent="worker",
            goal="late moves",
            branch="main",
            base_commit="abcdef1",
            done="applied",
            lease_ms=LEASE_MS,
        )["task"].correlation_id
        workflows.task_update(b, task_id=tid, action="claim", from_agent="worker")
        head = [e.to_dict() for e in b.event_list(correlation_id=tid, order="asc").events]
        for i in range(n):
            clock.ms += 1
            b.event_append(
                type="task.progress",
                stream="project/bench",
                room="delegation",
                from_agent="worker",
                correlation_id=tid,
                metadata={"progress": round((i + 1) * 90 / n, 6)},
            )
        wire: list[dict[str, Any]] = []
        cursor = head[-1]["id"]
        while True:
            page = b.event_list(correlation_id=tid, order="asc", limit=500, since_event_id=cursor)
            if not page.events:
                break
            wire += [e.to_dict() for e in page.events]
            cursor = page.events[-1].id
    return tid, head + wire, url_b


def one_run(
    url_a: str, wire: list[dict[str, Any]], tid: str, batch: int, late: bool
) -> dict[str, Any]:
    from mempalace_logstream import replication

    clock = StepClock(common.BASE_MS)
    with open_store(url_a, clock) as a:
        replication.apply_remote_events(a, wire[:2], "b")  # the request and the claim
        if late:  # the holder reports from A, later than everything B wrote
            clock.ms = common.BASE_MS + 10 * len(wire) + 3_600_000
            workflows.task_update(
                a, task_id=tid, action="progress", from_agent="worker", progress=99
            )
        cache = getattr(a, "task_folds", None)
        folded0 = getattr(cache, "folded", 0)
        moves = wire[2:]
        t0 = time.perf_counter()
        for i in range(0, len(moves), batch):
            replication.apply_remote_events(a, moves[i : i + batch], "b")
        seconds = time.perf_counter() - t0
        status = a.task_status(tid)["task"]
        folded = getattr(cache, "folded", None)
    return {
        "seconds": seconds,
        "progress": status["progress"],
        "anomalies": len(status["anomalies"]),
        "folded": None if folded is None else folded - folded0,
    }


def bench(label: str, make_url: Any, events: int, batch: int) -> None:
    with common.temp_dir() as tmp:
        tid, wire, _ = progress_wire(make_url(tmp, "b"), events)
        rows = []
        results = {}
        for late in (False, True):
            res = one_run(make_url(tmp, "late-a" if late else "a"), wire, tid, batch, late)
            results[late] = res
            rows.append(
                [
                    "late" if late else "in order",
                    f"{res['seconds']:.2f}",
                    "n/a" if res["folded"] is None else f"{res['folded']:,}",
                    res["progress"],
                    res["anomalies"],
                ]
            )
        common.print_table(
            f"{events:,} task.progress from a peer, {batch} per transaction, {label}",
            ["arrival", "seconds", "events folded", "progress after", "anomalies"],
            rows,
        )
        common.ratio_line(
            BENCH,
            f"late/in order, {events} events, batch {batch}, {label}",
            results[True]["seconds"] / results[False]["seconds"],
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_task_late.py", description=__doc__)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument(
        "--pg-url",
        default=os.environ.get("LOGSTREAM_BENCH_PG"),
        help="also on PostgreSQL (a fresh schema); default $LOGSTREAM_BENCH_PG, else SQLite only",
    )
    p.add_argument("--quick", action="store_true", help="1,000 events")
    common.add_smoke(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    events = 100 if args.smoke else 1_000 if args.quick else args.events
    batch = 20 if args.smoke else args.batch
    print(common.machine_line(), flush=True)

    def sqlite_url(tmp: Path, name: str) -> str:
        return f"sqlite:///{tmp / (name + '.sqlite3')}"

    bench("SQLite", sqlite_url, events, batch)
    if args.pg_url:
        made: list[str] = []
        try:
            bench("PostgreSQL", lambda _tmp, _name: pg_schema_url(args.pg_url, made), events, batch)
        finally:
            drop_schemas(args.pg_url, made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
