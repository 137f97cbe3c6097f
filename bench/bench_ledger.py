"""The delivery ledger's cost on the read path (issue 20 item 3): a read never slows by more
than 5 % for recording it.

    python bench/bench_ledger.py [--quick | --smoke] [--reads N] [--rounds N]

One SQLite log of events addressed to ten agents; `agent-07` reads its inbox through the
operation table (`operations.call("event_list", to_agent=..., from_agent=..., limit=50)`, what
every surface runs), timed per call, in two workloads:

- fresh pages: each read pages on with its cursor, so every event it returns is a first read
  for the round's ledger (a mark to queue and write): the worst case;
- re-reads: the newest 50 again and again (marks already recorded: nothing to write).

Each round times both modes back to back, in alternating order: without recording and with
it (`deliveries.enable`: a new ledger, its marks queued, the flusher thread writing them every
0.25 s meanwhile). A round is long enough (2,500 reads, about a second) for the flusher to
write several times while the reads are timed, so the figure includes the flushes competing
with the reads (the GIL, the CPU, the database). Every round pages from the start of the log
again; a new ledger knows nothing of the rows the previous one wrote, so its flushes do the
same work (held rows take the upsert's update branch). The table shows the median over rounds
of each round's p50; the `[ratio]` lines, the median of the rounds' with / without ratios. The
figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "ledger"
AGENTS = 10
PAGE = 50


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_ledger.py", description=__doc__)
    p.add_argument("--quick", action="store_true", help="800 reads per round, 5 rounds")
    common.add_smoke(p)
    p.add_argument("--reads", type=int, default=None, help="reads timed per round (2,500)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (9)")
    return p.parse_args(argv)


def _fill(store: Any, n: int) -> None:
    """`n` events to agent-07 and one to another agent for every two of them, interleaved
    (500 per write transaction)."""
    targets = [f"agent-{i % AGENTS:02d}" for i in range(n + n // 2) if i % 3 != 2]
    targets = [t if i % 3 else "agent-07" for i, t in enumerate(targets)]
    targets += ["agent-07"] * (n - targets.count("agent-07"))
    for lo in range(0, len(targets), 500):
        drafts = [
            store.draft_event(
                type="note", stream="s", room="r", from_agent="lead", to_agent=to, body=f"e{i}"
            )
            for i, to in enumerate(targets[lo : lo + 500], lo)
        ]
        store.transaction(lambda tx, d=drafts: [tx.insert_event(x) for x in d])


def _time_round(store: Any, reads: int, fresh: bool) -> float:
    """p50 seconds of `reads` inbox reads (fresh pages: from the start of the log on)."""
    from mempalace_logstream import operations

    samples = []
    cursor = None
    args: dict[str, Any] = {"to_agent": "agent-07", "from_agent": "agent-07", "limit": PAGE}
    for _ in range(reads):
        if fresh:
            args["since_event_id"] = cursor
            args["order"] = "asc"
        t0 = time.perf_counter()
        out = operations.call(store, "event_list", args)
        samples.append(time.perf_counter() - t0)
        cursor = out.get("cursor") or cursor
    return common.percentile(samples, 0.5)


def measure(store: Any, reads: int, rounds: int, fresh: bool) -> dict[str, float]:
    """{off, on, ratio}: the median over rounds of each round's p50 read without and with the
    ledger recording, and the median of the rounds' with/without ratios. Each round times both
    modes back to back, in alternating order (off-on, on-off, ...), so drift and the load of
    the machine hit both alike."""
    from mempalace_logstream import deliveries

    p50s: dict[str, list[float]] = {"off": [], "on": []}
    flushes = 0  # written while the reads were timed
    for i in range(rounds):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            ledger = deliveries.enable(store) if mode == "on" else None
            p50s[mode].append(_time_round(store, reads, fresh))
            if ledger is not None:
                flushes += ledger.flushes
                deliveries.disable(store)  # its queued marks written
    ratios = [on / off for on, off in zip(p50s["on"], p50s["off"], strict=True)]
    out = {mode: common.median(values) for mode, values in p50s.items()}
    return {**out, "ratio": common.median(ratios), "flushes": flushes}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.ensure_repo_on_path()
    from mempalace_logstream import LogStore

    reads, rounds = (2_500, 9) if not (args.quick or args.smoke) else (800, 5)
    if args.smoke:
        reads, rounds = 10, 2
    reads, rounds = args.reads or reads, args.rounds or rounds
    print(common.machine_line())
    # Fresh pages need an event to agent-07 for every read of a round (each round starts over).
    per_agent = reads * PAGE + PAGE
    with common.temp_dir() as tmp:
        store = LogStore.open(str(tmp / "ledger.sqlite3"))
        try:
            _fill(store, per_agent)
            rows = []
            for name, fresh in (("fresh pages", True), ("re-reads", False)):
                got = measure(store, reads, rounds, fresh)
                flushed = str(int(got["flushes"]))
                rows.append((name, common.fmt_ms(got["off"]), common.fmt_ms(got["on"]), flushed))
                ratio = got["ratio"]
                what = f"read p50 with / without recording ({name}, {PAGE} events)"
                common.ratio_line(BENCH, what, ratio, "<=", 1.05)
            common.print_table(
                f"event_list inbox of {PAGE}, {reads} reads per mode x {rounds} rounds",
                ("workload", "without", "with", "flushes while timed"),
                rows,
            )
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
