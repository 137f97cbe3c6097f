"""Where one `LogStore.event_append` spends its time, layer by layer (issue 25).

    python bench/profile_append.py [--db URL] [--durability full|normal|off] [--appends 3000]
                                   [--pause-us 0] [--threads 8] [--to-agent b] [--reps 1]

A plain append (the store bench's 100-byte broadcast, no correlation id; `--to-agent NAME`
addresses it to one agent, which its pair loop guard then counts) on a fresh log: a
fresh SQLite file by default, or `--db` (a PostgreSQL URL: give a schema of its own in its
search_path). Printed: the statements told to `backend.statement_hooks` and, on PostgreSQL,
the round trips (`backend.round_trips`) of one append; the Python function calls per append
(cProfile's count: independent of the machine's load); then the thread CPU per append of each
layer, measured by wrapping the layer's function. The wrappers cost: the same appends timed
before any was wrapped are printed last (~15-18 µs less CPU per append at `--durability off`,
most of it the wrappers' own, which "rest" holds):

  validation       `Writes.draft_of` (every field's rule, the idempotency key)
  id+HLC           `Transaction._new_event` (the event id, the HLC tick, the time stamp)
  identity         `Local.admit` (names against the keyring, the signer, the verdict)
  guards           `store.guards.check_local` (inside the task projection)
  proj:*           each registered projection's `apply` (tasks includes the guards); one
                   whose `local_types` leave the row's type out is not called (no line)
  SQL: begin       entering `backend.transaction`: BEGIN (+ SQLite's `PRAGMA data_version`;
                   PostgreSQL: the lock and the state query)
  SQL: insert      the executor's `insert_events` (PostgreSQL queues the row for the COMMIT)
  commit           leaving it: COMMIT (SQLite: the WAL write, + fsync at FULL; PostgreSQL:
                   the queued writes, the NOTIFY and the COMMIT in one message)
  wake signal      `Notifier.bump` (waiters in this process)
  rest             the pipeline (group commit, the transaction's state), the write path's glue

`--pause-us N` sleeps N µs after each timed append (not counted: thread CPU): a FULL commit's
fsync puts the thread to sleep the same way, and the next append runs on cold caches, which
costs more the more code an append runs; without the disk's noise. `--threads N` then prints
the process CPU per append and the appends per commit of N threads appending at once on one
store (the group commit).

Never a test; the figures are in docs/benchmarks.md ("Write path: where the time goes").
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_store import APPEND_ROW as ROW  # noqa: E402  (the store bench's row)


def _time_transactions(backend: Any, acc: collections.Counter[str]) -> None:
    """Time the entry (BEGIN, the lock, the state) and the exit (COMMIT) of the backend's
    write transactions."""
    inner = backend.transaction

    @contextlib.contextmanager
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        cm = inner(*args, **kwargs)
        t0 = time.thread_time_ns()
        tx = cm.__enter__()
        acc["SQL: begin"] += time.thread_time_ns() - t0
        try:
            yield tx
        except BaseException as exc:
            if not cm.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            t0 = time.thread_time_ns()
            cm.__exit__(None, None, None)
            acc["commit"] += time.thread_time_ns() - t0

    backend.transaction = timed


def _wrap(owner: Any, name: str, label: str, acc: collections.Counter[str]) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return inner(*args, **kwargs)
        finally:
            acc[label] += time.thread_time_ns() - t0

    setattr(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="profile_append", description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=None, help="a database URL (default: a fresh SQLite file)")
    p.add_argument("--durability", default="full", choices=("full", "normal", "off"))
    p.add_argument("--appends", type=int, default=3000)
    p.add_argument("--pause-us", type=int, default=0, help="sleep after each timed append")
    p.add_argument(
        "--reps", type=int, default=1, help="time the unwrapped appends N times (min, median)"
    )
    p.add_argument("--threads", type=int, default=0, help="also time N threads appending")
    p.add_argument(
        "--to-agent", default=None, help="address the row to this agent (its pair loop guard)"
    )
    args = p.parse_args(argv)
    row = ROW if args.to_agent is None else {**ROW, "to_agent": args.to_agent}

    from mempalace_logstream.store import (
        LogStore,
        guards,
        lease_projection,
        redaction,
        tasks,
        writes,
    )
    from mempalace_logstream.store import append as append_mod

    url = args.db or os.path.join(tempfile.mkdtemp(), "profile.sqlite3")
    store = LogStore.open(url, durability=args.durability)
    n = args.appends
    try:
        for _ in range(100):
            store.event_append(**row)
        backend = store.backend
        seen: list[str] = []
        backend.statement_hooks.append(lambda sql, _p: seen.append(" ".join(sql.split())[:72]))
        trips = getattr(backend, "round_trips", None)
        store.event_append(**row)
        backend.statement_hooks.clear()
        print(f"{backend.name}, durability {args.durability}: one plain append runs")
        for sql in seen:
            print(f"  statement: {sql}")
        if trips is not None:
            print(f"  round trips: {getattr(backend, 'round_trips', 0) - trips}")

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(1000):
            store.event_append(**row)
        prof.disable()
        stats = pstats.Stats(prof, stream=io.StringIO()).stats  # type: ignore[attr-defined]
        py = sum(v[1] for k, v in stats.items() if not k[0].startswith("~"))
        c = sum(v[1] for k, v in stats.items() if k[0].startswith("~"))
        print(f"  function calls per append: {py / 1000:.0f} Python, {c / 1000:.0f} built-in")

        pause = args.pause_us / 1e6
        # Before any wrapper: the append's own cost (the min of --reps runs on a shared machine).
        plain = sorted(_timed_appends(store, row, n, pause)[0] for _ in range(args.reps))

        acc: collections.Counter[str] = collections.Counter()
        _wrap(writes.Writes, "draft_of", "validation", acc)
        _wrap(writes.Transaction, "_new_event", "id+HLC", acc)
        _wrap(append_mod.Local, "admit", "identity", acc)
        _wrap(guards, "check_local", "guards", acc)
        _wrap(tasks.TaskProjection, "apply", "proj:tasks (with guards)", acc)
        _wrap(redaction.RedactionProjection, "apply", "proj:redactions", acc)
        _wrap(lease_projection.LeaseProjection, "apply", "proj:leases", acc)
        _wrap(store.notifier, "bump", "wake signal", acc)
        _time_transactions(backend, acc)
        executor = type(backend.executor(None, store.pipeline.sql))
        _wrap(executor, "insert_events", "SQL: insert", acc)
        for _ in range(100):
            store.event_append(**row)
        acc.clear()
        wrapped = _timed_appends(store, row, n, pause)
        total, wall = wrapped
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        after = f", {args.pause_us} µs pause after each" if pause else ""
        print(
            f"  {n} appends{after}: {total:.1f} µs CPU, {wall:.1f} µs wall per append (load {load})"
        )
        nested = {"guards"}  # inside proj:tasks
        for label, ns in sorted(acc.items()):
            print(f"    {label:26s} {ns / n / 1000:7.1f} µs")
        rest = total - sum(ns for label, ns in acc.items() if label not in nested) / n / 1000
        print(f"    {'rest (pipeline, glue)':26s} {rest:7.1f} µs")
        reps = (
            f" (min of {len(plain)}, median {plain[len(plain) // 2]:.1f})" if len(plain) > 1 else ""
        )
        print(f"  the same appends before the layers were wrapped: {plain[0]:.1f} µs CPU{reps}")
        if args.threads:
            _threads(store, row, args.threads, n)
    finally:
        store.close()
    return 0


def _timed_appends(store: Any, row: dict[str, Any], n: int, pause: float) -> tuple[float, float]:
    """(thread CPU µs, wall µs without the pauses) per append of `n` appends."""
    c0, t0 = time.thread_time_ns(), time.perf_counter()
    for _ in range(n):
        store.event_append(**row)
        if pause:
            time.sleep(pause)
    cpu = (time.thread_time_ns() - c0) / n / 1000
    return cpu, ((time.perf_counter() - t0) / n - pause) * 1e6


def _threads(store: Any, row: dict[str, Any], threads: int, n: int) -> None:
    """Process CPU per append and appends per commit of `threads` threads appending at once."""
    import threading

    per = max(1, n // threads)
    gate = threading.Barrier(threads + 1)

    def work() -> None:
        gate.wait()
        for _ in range(per):
            store.event_append(**row)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    commits, c0 = store.commits, time.process_time()
    gate.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    total = per * threads
    print(
        f"  {threads} threads x {per} appends: {total / wall:,.0f} appends/s, "
        f"{cpu / total * 1e6:.1f} µs process CPU per append, "
        f"{total / (store.commits - commits):.1f} appends per commit"
    )


if __name__ == "__main__":
    raise SystemExit(main())
