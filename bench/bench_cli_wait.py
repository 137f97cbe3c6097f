"""What a user sees (issue 9, item 15): `logstream wait` as a process, woken by an append from
another process, next to the reference's own CLI (`mempalace logstream wait`) in the same run.

    python bench/bench_cli_wait.py [--quick] [--samples N] [--pg-url URL] [--no-pg] [--no-ref]

Each sample starts a fresh waiter process, `logstream wait --since-event-id <tip> --timeout-ms
30000 --json` (ours) or `mempalace --palace P logstream wait --since-event-id <tip> …` (the
reference, in its own venv), and waits until it is armed: it holds the database file open and
has used no CPU for `ARMED_QUIET_S` while sleeping (so it is blocked in its wait, not still
importing). Then a long-lived appender process (ours: `LogStore.event_append`; the reference:
`Logstream.append_event`, the same helpers as bench/bench_wake.py) appends one event after a
random 20-40 ms pause. Stamps are `time.monotonic_ns()` (CLOCK_MONOTONIC is system-wide on
Linux): "append returned" in the appender right after its call, "output line" in this harness
when the waiter's first stdout line arrives through the pipe, "exited" when the waiter's
process has ended. The headline figure is append returned → output line.
Never a test; figures go to docs/bench/wake.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_wake, common

BENCH = "cli_wait"
WARMUP = 2
ARMED_QUIET_S = 0.15
ARMED_TIMEOUT_S = 30.0
HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, utime + stime in clock ticks) from /proc, or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[11]) + int(fields[12])


def _holds_file(pid: int, path: str) -> bool:
    fd_dir = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for name in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                if os.readlink(f"{fd_dir}/{name}") == path:
                    return True
    return False


def wait_armed(proc: subprocess.Popen[bytes], db_path: str) -> None:
    """Block until the waiter holds the database open and has slept, using no CPU, for
    `ARMED_QUIET_S` (it is in its wait, not importing or reading)."""
    deadline = time.monotonic() + ARMED_TIMEOUT_S
    quiet_since: float | None = None
    last_cpu = -1
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"waiter exited {proc.returncode} before the append: {err}")
        stat = _proc_stat(proc.pid)
        now = time.monotonic()
        if stat is None or not _holds_file(proc.pid, db_path):
            quiet_since, last_cpu = None, -1
        elif stat[0] != "S" or stat[1] != last_cpu:
            quiet_since, last_cpu = now, stat[1]
        elif quiet_since is not None and now - quiet_since >= ARMED_QUIET_S:
            return
        time.sleep(0.005)
    raise RuntimeError("the waiter never settled into its wait")


def cli_samples(
    waiter_cmd: list[str], env: dict[str, str], appender: bench_wake.Worker, db_path: str, n: int
) -> dict[str, list[float]]:
    """`n` (+ warm-up) samples: a fresh waiter process per sample, one long-lived appender."""
    appender.send("go")  # one event so that every waiter has a real cursor
    tip = json.loads(appender.read())["id"]
    out: dict[str, list[float]] = {"line": [], "call": [], "exit": []}
    for i in range(n + WARMUP):
        cmd = [part.replace("{tip}", tip) for part in waiter_cmd]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            wait_armed(proc, db_path)
            time.sleep(random.uniform(0.02, 0.04))
            appender.send("go")
            assert proc.stdout is not None and proc.stderr is not None  # both PIPE
            first = proc.stdout.readline()
            t_line = time.monotonic_ns()
            rest = proc.stdout.read()
            proc.wait(timeout=60)
            t_exit = time.monotonic_ns()
            sent = json.loads(appender.read())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode != 0 or sent["id"].encode() not in first + rest:
            raise RuntimeError(
                f"waiter exit {proc.returncode}, did not print {sent['id']}: "
                f"{(first + rest)[:300]!r} {proc.stderr.read()[:500]!r}"
            )
        tip = sent["id"]
        if i >= WARMUP:
            out["line"].append(max(0, t_line - sent["t1"]) / 1e9)
            out["call"].append(max(0, t_line - sent["t0"]) / 1e9)
            out["exit"].append(max(0, t_exit - sent["t1"]) / 1e9)
    return out


def ours_cli() -> list[str]:
    script = Path(sys.executable).with_name("logstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "mempalace_logstream"]


def measure_ours(url: str, db_path: str, n: int) -> dict[str, list[float]]:
    env = bench_wake.our_env()
    appender = bench_wake.Worker(sys.executable, bench_wake.OURS_APPENDER, url, env)
    try:
        cmd = [
            *ours_cli(),
            "wait",
            "--db",
            url,
            "--since-event-id",
            "{tip}",
            "--timeout-ms",
            "30000",
            "--json",
        ]
        return cli_samples(cmd, env, appender, db_path, n)
    finally:
        appender.close()


def measure_reference(refpkg: Any, palace: Path, n: int) -> dict[str, list[float]]:
    python = Path(str(refpkg.ref_python()))
    db = palace / "logstream.sqlite3"
    env = bench_wake.ref_env()
    appender = bench_wake.Worker(str(python), bench_wake.REF_APPENDER, str(db), env)
    try:
        cmd = [
            str(python.with_name("mempalace")),
            "--palace",
            str(palace),
            "logstream",
            "wait",
            "--since-event-id",
            "{tip}",
            "--timeout-ms",
            "30000",
            "--json",
        ]
        return cli_samples(cmd, env, appender, str(db), n)
    finally:
        appender.close()


def run(args: argparse.Namespace, tmp: Path) -> None:
    n = args.samples
    print(
        f"\n== `wait` as a CLI process woken by an append in another process: {n} samples "
        f"each (+{WARMUP} warm-up), a fresh waiter process per sample"
    )
    results: dict[str, dict[str, list[float]]] = {}
    db = tmp / "cli-wait.sqlite3"
    from mempalace_logstream import LogStore

    LogStore.open(str(db)).close()  # the log exists before the first waiter reads it
    results["ours `logstream wait`, SQLite"] = measure_ours(f"sqlite:///{db}", str(db), n)
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    if refpkg is not None:
        palace = tmp / "ref-palace"
        palace.mkdir()
        common.run_ref_json(
            "import json,sys; from mempalace.logstream import Logstream; "
            "Logstream(db_path=sys.argv[1]); print(json.dumps(1))",
            str(palace / "logstream.sqlite3"),
        )
        results["reference `mempalace logstream wait`, SQLite"] = measure_reference(
            refpkg, palace, n
        )
    report(results, reason)


def report(results: dict[str, dict[str, list[float]]], reason: str | None) -> None:
    rows = []
    titles = (
        ("line", "append returned -> output line"),
        ("call", "append called -> output line"),
        ("exit", "append returned -> waiter exited"),
    )
    for label, res in results.items():
        for kind, title in titles:
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
    common.print_table(
        "CLI wait latency (ms)", ["system", "measured", "p50", "p95", "max", "n"], rows
    )
    ours = results["ours `logstream wait`, SQLite"]
    s = common.summarize(ours["line"])
    common.target_line(
        BENCH, "ours CLI wait p50, append returned -> output line", s["p50"] * 1e3, "ms", "<=", 5
    )
    common.target_line(
        BENCH, "ours CLI wait p95, append returned -> output line", s["p95"] * 1e3, "ms", "<=", 20
    )
    ref = results.get("reference `mempalace logstream wait`, SQLite")
    if ref is None:
        print(f"reference not measured: {reason}")
        return
    for q, key in ((0.5, "p50"), (0.95, "p95")):
        r = common.percentile(ref["line"], q) / common.percentile(ours["line"], q)
        common.ratio_line(BENCH, f"reference/ours CLI wait {key} (append returned -> line)", r)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_cli_wait.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few samples")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="samples per system (100)")
    p.add_argument("--no-ref", action="store_true", help="skip the reference package")
    args, _unknown = p.parse_known_args(argv)  # bench/run.py passes its extras to every bench
    args.samples = args.samples or (2 if args.smoke else 8 if args.quick else 100)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    with common.temp_dir("logstream-cli-wait-") as tmp:
        run(args, tmp)
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
