"""kill -9 in the middle of a burst of appends: every append that returned is in the log.

The writer prints each returned event id (flushed) only after `event_append` returned, so every
printed id is an acknowledged append; after SIGKILL the file must hold all of them and pass
`PRAGMA integrity_check`.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from conftest import REPO

from mempalace_logstream import LogStore

pytestmark = pytest.mark.slow

WRITER = r"""
import sys, threading
from mempalace_logstream import LogStore
url, threads = sys.argv[1], int(sys.argv[2])
store = LogStore.open(url)
lock = threading.Lock()

def burst(w):
    i = 0
    while True:
        e = store.event_append(type="crash.test", stream="crash", room="r", from_agent=f"w{w}",
                               body=f"{w}:{i}" + "x" * 500)
        with lock:
            sys.stdout.write(e.id + "\n")
            sys.stdout.flush()
        i += 1

ts = [threading.Thread(target=burst, args=(w,), daemon=True) for w in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
"""


def _kill_mid_burst(url: str, threads: int, after: int) -> list[str]:
    """Start the writer, SIGKILL it once `after` ids were printed, return every printed id."""
    with subprocess.Popen(  # its exit closes the pipes
        [sys.executable, "-c", WRITER, url, str(threads)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ) as proc:
        printed: list[str] = []
        try:
            while len(printed) < after:
                line = proc.stdout.readline()
                assert line, proc.stderr.read().decode()
                printed.append(line.decode().strip())
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            # The rest through the same buffered reader: `communicate()` reads the pipe's
            # file descriptor itself, past what `readline` had already buffered, so its
            # first line began mid-id (a torn "82d5e37" counted as an acknowledged append
            # lost).
            rest = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # Lines printed before the kill are acknowledged appends too; a torn last line is not.
    printed += [x for x in rest.decode().split("\n")[:-1] if x]
    return printed


def _check(path, printed: list[str]) -> None:
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {r[0] for r in conn.execute("SELECT id FROM events")}
    missing = [i for i in printed if i not in stored]
    assert missing == [], f"{len(missing)} acknowledged appends lost"
    with LogStore.open(str(path)) as store:  # the file reopens and keeps appending in order
        tip_seq = store.tip()[0]
        after = store.event_append(type="after.crash", stream="crash", room="r", from_agent="x")
        assert after.seq > tip_seq
        assert len({e.id for e in store.event_list(limit=500).events}) >= 1


@pytest.mark.parametrize("threads", [1, 4], ids=["one-writer", "group-commit"])
def test_sigkill_mid_burst_loses_no_acknowledged_append(tmp_path, threads):
    path = tmp_path / "logstream.sqlite3"
    printed = _kill_mid_burst(f"sqlite:///{path}", threads, after=150)
    assert len(printed) >= 150 and len(set(printed)) == len(printed)
    _check(path, printed)
