"""Smoke tests of the benchmark harness: `bench/run.py --quick --only store` runs end to end,
and so does `bench/bench_cli_wait.py` on three samples.

Not a performance assertion: it checks that the one bench command exits 0, prints each ratio
and target line with a number in it (ours vs raw sqlite3 vs the reference), and repeats them
in its summary. Big logs go to a temporary cache dir, never to ~/.cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NUMBER = r"-?\d[\d,]*\.\d+"

pytestmark = pytest.mark.slow


def _run_quick_store(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOGSTREAM_BENCH_CACHE": str(tmp_path / "cache"),
        "LOGSTREAM_BENCH_TMP": str(tmp_path),
    }
    return subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--only", "store"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_quick_store_bench_prints_ratios_side_by_side(tmp_path: Path) -> None:
    proc = _run_quick_store(tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    ref_missing = "reference unavailable:" in out
    if os.environ.get("LOGSTREAM_REQUIRE_REF"):
        assert not ref_missing, out[-2000:]

    def value_of(what: str) -> str:
        match = re.search(rf"^\[(?:ratio|target)\] store: {re.escape(what)} = (\S+)", out, re.M)
        assert match, f"no line for {what!r} in:\n{out[-3000:]}"
        return match.group(1)

    for what in (
        "append 1 writer FULL ours/raw",
        "append 1 writer NORMAL ours/raw",
        "append 8 threads FULL ours/raw",
    ):
        assert re.fullmatch(NUMBER, value_of(what)), what
    for what in ("append 1 writer FULL ours/reference", "append 8 threads FULL ours/reference"):
        value = value_of(what)
        assert re.fullmatch(NUMBER, value) or (ref_missing and value == "n/a"), (what, value)
    assert re.search(r"\(target >= 0\.85: (MET|NOT MET)\)", out)
    assert re.search(r"\(target >= 1\.5: (MET|NOT MET|NOT MEASURED)\)", out)
    inbox = re.search(rf"^\[target\] store: list p50 inbox .* = ({NUMBER}) ms", out, re.M)
    assert inbox, out[-3000:]
    # The store's inbox plan is printed and has no sort step.
    plan = out.split("EXPLAIN QUERY PLAN of the page query:")[1].split("IN-list shape")[0]
    assert "MERGE (UNION ALL)" in plan and "TEMP B-TREE" not in plan, plan
    summary = out.split("######## summary")[1]
    assert re.search(r"^store\s+ok\s", summary, re.M), summary
    assert "[ratio] store: append 1 writer FULL ours/raw" in summary


def test_the_cli_wait_bench_runs_and_prints_its_targets(tmp_path: Path) -> None:
    """bench/bench_cli_wait.py (issue 9, item 15) end to end on a few samples, ours only."""
    env = {**os.environ, "LOGSTREAM_BENCH_TMP": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "bench/bench_cli_wait.py", "--samples", "3", "--no-ref"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for what in ("p50", "p95"):
        line = rf"^\[target\] cli_wait: ours CLI wait {what}, append returned -> output line = "
        assert re.search(line + rf"{NUMBER} ms", proc.stdout, re.M), proc.stdout[-3000:]


def test_the_channel_bench_runs_and_prints_its_target(tmp_path: Path) -> None:
    """bench/bench_channel.py (issue 13) end to end on a few samples."""
    env = {**os.environ, "LOGSTREAM_BENCH_TMP": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "bench/bench_channel.py", "--samples", "3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = r"^\[target\] channel: channel notification p50 after commit = "
    assert re.search(line + rf"{NUMBER} ms", proc.stdout, re.M), proc.stdout[-3000:]


def test_the_codex_bench_runs_and_prints_its_target(tmp_path: Path) -> None:
    """bench/bench_codex.py (issue 19) end to end on a few samples."""
    env = {**os.environ, "LOGSTREAM_BENCH_TMP": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "bench/bench_codex.py", "--samples", "3"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = r"^\[target\] codex: codex queue invocation p50 after commit = "
    assert re.search(line + rf"{NUMBER} ms", proc.stdout, re.M), proc.stdout[-3000:]


def test_the_tasks_bench_runs_and_prints_its_targets(tmp_path: Path) -> None:
    """bench/bench_tasks.py (issue 11) through `bench/run.py --quick --only tasks`, SQLite and
    PostgreSQL: the task_status and task_list targets and the append ratios print a number."""
    env = {
        **os.environ,
        "LOGSTREAM_BENCH_CACHE": str(tmp_path / "cache"),
        "LOGSTREAM_BENCH_TMP": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--only", "tasks"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    backends = ["SQLite"]
    if os.environ.get("LOGSTREAM_REQUIRE_PG"):
        assert "PostgreSQL not measured" not in out, out[-3000:]
        backends.append("PostgreSQL")
    for backend in backends:
        targets = (
            rf"{backend} task_status p50, thread of 100 events",
            rf"{backend} task_list p50 state=open",
            rf"{backend} task_list p50 state=working",
            rf"{backend} task_list p50 to_agent=agent-07, state=open",
        )
        for what in targets:
            line = rf"^\[target\] tasks: {re.escape(what)} = {NUMBER} ms  \(target <= 2 ms: "
            assert re.search(line + r"(MET|NOT MET)\)", out, re.M), (what, out[-3000:])
        for tag in ("(c)/(a)", "(d)/(a)", "(b)/(a)"):
            line = rf"^\[ratio\] tasks: {backend} append p50 {re.escape(tag)} .* = {NUMBER}$"
            assert re.search(line, out, re.M), (tag, out[-3000:])
    assert "(a) pays nothing for the lifecycle" in out
    summary = out.split("######## summary")[1]
    assert re.search(r"^tasks\s+ok\s", summary, re.M), summary


def test_the_identity_bench_runs_and_prints_its_ratios(tmp_path: Path) -> None:
    """bench/bench_identity.py (issue 12) on a few samples: the pure CPU figures, then append
    with signing and sync apply with verification beside without, each with a ratio."""
    env = {**os.environ, "LOGSTREAM_BENCH_TMP": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "bench/bench_identity.py", "--samples", "30", "--events", "60"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for what in ("append (unsigned vs signed)", "sync apply (unsigned log vs signed, verified)"):
        assert re.search(rf"\[measure\] identity: {re.escape(what)}: {NUMBER} -> {NUMBER}", out)
    assert list(tmp_path.iterdir()) == []  # the scratch logs are removed


def test_the_doctor_bench_runs_and_prints_wall_time_and_peak_rss(tmp_path: Path) -> None:
    """bench/bench_doctor.py (issue 12) end to end on a small synthetic log."""
    proc = subprocess.run(
        [sys.executable, "bench/bench_doctor.py", "--events", "3000", "--cache", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LOGSTREAM_BENCH_TMP": str(tmp_path)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "doctor on 3,000 events" in proc.stdout and "peak RSS" in proc.stdout
    assert "seconds per check" in proc.stdout
