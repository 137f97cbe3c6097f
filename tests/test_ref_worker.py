"""bench/ref_worker.py: the reference process a bench keeps open to interleave the reference's
reads with ours in time (issue 25). It answers each command with its own timings, and a worker
that dies or hangs ends the bench with a clear error by a deadline instead of blocking it."""

from __future__ import annotations

import time

import pytest

from bench.ref_worker import RefWorker, RefWorkerError
from tests import refpkg

SETUP = r"""
import sys, time
calls = []
def grow():
    calls.append(1)
    return calls
OPS = [grow, lambda: time.sleep(float(sys.argv[1])) or [], lambda: 1 / 0]
"""


@pytest.fixture(autouse=True)
def _reference() -> None:
    refpkg.require_ref_or_skip()


def test_a_worker_times_each_call_in_itself_and_warms_an_op_once() -> None:
    with RefWorker(SETUP, 0) as worker:
        first = worker.run(0, max_n=4, budget_s=60)
        again = worker.run(0, max_n=2, budget_s=60)
    assert len(first["samples"]) == len(first["cpu"]) == 4
    assert all(s >= 0 for s in first["samples"] + first["cpu"])
    # three warm-up calls the first time only: 3 + 4, then 2 more
    assert (first["count"], again["count"]) == (7, 9)


def test_the_budget_stops_a_slice_after_one_call_at_least() -> None:
    with RefWorker(SETUP, 0.05) as worker:
        out = worker.run(1, max_n=1000, budget_s=0.0)
    assert len(out["samples"]) == 1
    assert out["samples"][0] >= 0.05


def test_a_worker_that_fails_names_its_error() -> None:
    with RefWorker(SETUP, 0) as worker, pytest.raises(RefWorkerError, match="ZeroDivisionError"):
        worker.run(2, max_n=1, budget_s=1)


def test_a_worker_that_never_answers_meets_the_deadline() -> None:
    worker = RefWorker(SETUP, 3600)
    started = time.monotonic()
    with pytest.raises(RefWorkerError, match="did not answer in 1 s"):
        worker.run(1, max_n=1, budget_s=1, timeout=1)
    assert time.monotonic() - started < 30  # the hung worker is killed, not waited for
    worker.close()  # a second close is harmless
