"""`python bench/bench_identity.py` runs standalone and prints its per-event figures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_identity_bench_runs_standalone_and_prints_each_figure(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_identity.py"), "--samples", "30"],
        cwd=tmp_path,  # not the repo: the script finds the package itself
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for what in ("Ed25519 sign alone", "sign (encode + Ed25519)", "verdict"):
        pattern = rf"^\[measure\] identity: {re.escape(what)}.* p50 = \d+\.\d µs$"
        assert re.search(pattern, proc.stdout, re.M), what
