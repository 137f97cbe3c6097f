"""What a file lease acquire and check cost against many active leases (issue 22, RFC 0010).

    python bench/bench_lease_acquire.py [--leases N] [--samples N] [--quick | --smoke]

The log holds N active leases (two globs each: `pkgI/**` and `docs/pkgI/*.md`) of 20 agents in
one project. Rows, in one run:
  store acquire   `lease_acquire` of two free globs (committed, SQLite, in process): the rows
                  read under the write lock, the overlap rule, the insert
  store check     `lease_check` of a path inside one of the leases
  rule indexed    `rules.blockers` on the N leases (the literal-prefix index of leases/globs.py:
                  only candidates whose prefixes allow an overlap are compared)
  rule pairwise   the same answer by comparing every pair of globs (what the rule did before)
The indexed/pairwise ratio is measured side by side on the same leases. Never a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "lease_acquire"
# An acquire at 500 active leases measured 19.7 ms p50 before the index (RFC 0010, pairwise).
TARGET_MS = 19.7


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_lease_acquire.py", description=__doc__)
    p.add_argument("--leases", type=int, default=None, help="active leases (default 500)")
    p.add_argument("--samples", type=int, default=None, help="calls per row (default 100)")
    p.add_argument("--quick", action="store_true", help="30 calls per row")
    common.add_smoke(p)
    args = p.parse_args(argv)
    args.leases = args.leases or (20 if args.smoke else 500)
    args.samples = args.samples or (3 if args.smoke else 30 if args.quick else 100)
    return args


def _pairwise(held: list[Any], move: Any) -> list[Any]:
    """rules.blockers' answer by comparing every pair of globs (no index)."""
    from mempalace_logstream.leases import globs

    out = []
    for lease in held:
        if lease.agent == move.agent or not (lease.exclusive or move.exclusive):
            continue
        pairs = [(a, b) for a in move.paths for b in lease.paths if globs.overlaps(a, b)]
        if pairs:
            out.append((lease, pairs))
    return out


def _lease(rules: Any, i: int) -> Any:
    """The i-th lease of the log, as the rule reads it."""
    return rules.Lease(
        lease_id=f"evt_{i:06d}",
        project="project/proj",
        agent=f"agent{i % 20}",
        paths=(f"pkg{i}/**", f"docs/pkg{i}/*.md"),
        exclusive=True,
        reason="",
        task_id=None,
        fence=i + 1,
        acquired_hlc=f"{1_000_000 + i:013d}-000000-r",
        ttl_ms=3_600_000,
        expires_ms=10**13,
    )


def run(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    common.ensure_repo_on_path()
    from mempalace_logstream.leases import rules
    from mempalace_logstream.store import LogStore, lease_ops

    results: dict[str, dict[str, float]] = {}
    with LogStore.open(f"sqlite:///{tmp / 'log.sqlite3'}", durability="normal") as store:
        for i in range(args.leases):
            paths = [f"pkg{i}/**", f"docs/pkg{i}/*.md"]
            lease_ops.lease_acquire(store, agent=f"agent{i % 20}", paths=paths, project="proj")
        n = iter(range(10**9))

        def acquire() -> None:
            k = next(n)
            paths = [f"new{k}/**", f"docs/new{k}.md"]
            lease_ops.lease_acquire(store, agent="bench", paths=paths, project="proj", ttl_s=60)

        def check() -> None:
            path = f"pkg{next(n) % args.leases}/a.py"
            lease_ops.lease_check(store, agent="bench", path=path, project="proj")

        held = [_lease(rules, i) for i in range(args.leases)]
        move = rules.Move(
            kind="acquire",
            event_id="evt_bench",
            agent="bench",
            project="project/proj",
            stamp="9999999999999-000000-r",
            wall_ms=2_000_000,
            target="evt_bench",
            paths=("new/**", "docs/pkg7/x.md"),
            ttl_ms=60_000,
        )
        assert rules.blockers(held, move, lambda _t: None) == _pairwise(held, move)
        rows = {
            "store acquire": acquire,
            "store check": check,
            "rule indexed": lambda: rules.blockers(held, move, lambda _t: None),
            "rule pairwise": lambda: _pairwise(held, move),
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.samples):  # in turn: a change of load touches every row alike
            for name, fn in rows.items():
                times[name] += common.time_calls(fn, 1, warmup=0)
        for name, walls in times.items():
            results[name] = common.summarize(walls)
    return results


def report(results: dict[str, dict[str, float]], leases: int) -> None:
    table = [
        [name, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"])]
        for name, s in results.items()
    ]
    common.print_table(f"{leases} active leases, ms per call", ["row", "p50", "p95", "max"], table)
    acquire = results["store acquire"]["p50"] * 1000
    common.target_line(BENCH, f"acquire p50 at {leases} leases", acquire, "ms", "<=", TARGET_MS)
    ratio = results["rule pairwise"]["p50"] / results["rule indexed"]["p50"]
    common.ratio_line(BENCH, f"overlap rule p50 pairwise / indexed ({leases} leases)", ratio)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-lease-acquire-") as tmp:
        report(run(args, tmp), args.leases)
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
