"""A reference process that times its own reads on command, so that a bench can interleave
them in time with ours (issue 25).

A bench that measures ours first and then runs the reference in a subprocess of its own
compares two stretches of time. On this shared 2-core machine one stretch can be slow while the
other is not: on 2026-12-06 the same 1M-event correlation read took 36 µs CPU in one run of
`bench_store --sections list` and 62 µs in the next (raw sqlite3 in the same process likewise,
28 and 47 µs), and the reference's 78 to 125 µs. `RefWorker` keeps one reference process
open, and the bench alternates slices: ours, the reference's reads of the same query, ours ...

The worker's code defines `OPS`, a list of functions of no argument (its reads). A command is a
JSON line `[op, max_n, budget_s]`: the worker calls `OPS[op]` three times the first time it
sees `op` (warm-up), then up to `max_n` times, at least once and then while under `budget_s`,
and answers one JSON line `{"samples", "cpu", "count"}`: wall and thread-CPU seconds of each
call, timed inside the worker (the pipe is outside the timing), and `len()` of the last result.

Never imported by the package; imports tests/refpkg.py lazily (through bench/common.py).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import tempfile
import time
from typing import Any

from bench import common

_LOOP = r"""
import json as _json, sys as _sys, time as _time
_warm = set()
for _line in _sys.stdin:
    _op, _max_n, _budget = _json.loads(_line)
    _fn = OPS[_op]
    if _op not in _warm:
        for _ in range(3):
            _fn()
        _warm.add(_op)
    _samples, _cpu, _rows = [], [], None
    _start = _time.perf_counter()
    while len(_samples) < _max_n and (not _samples or _time.perf_counter() - _start < _budget):
        _t0, _c0 = _time.perf_counter(), _time.thread_time()
        _rows = _fn()
        _cpu.append(_time.thread_time() - _c0)
        _samples.append(_time.perf_counter() - _t0)
    print(_json.dumps({"samples": _samples, "cpu": _cpu, "count": len(_rows)}), flush=True)
"""


class RefWorkerError(RuntimeError):
    """The worker died, answered something that is not its JSON line, or missed a deadline."""


class RefWorker:
    """One reference process running `setup` (which defines `OPS`; `args` are its sys.argv[1:])
    and then answering `run()` commands until `close()`."""

    def __init__(self, setup: str, *args: Any) -> None:
        refpkg, reason = common.reference()
        if refpkg is None:
            raise RefWorkerError(f"reference unavailable: {reason}")
        prelude = f"import sys; sys.path.insert(0, {str(common.BENCH_DIR)!r})\n"
        self._stderr = tempfile.TemporaryFile()
        self._proc = refpkg.start_ref(
            prelude + setup + _LOOP,
            *args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        self._sel = selectors.DefaultSelector()
        assert self._proc.stdout is not None
        self._sel.register(self._proc.stdout, selectors.EVENT_READ)

    def run(self, op: int, max_n: int, budget_s: float, timeout: float = 600) -> dict[str, Any]:
        """Time `OPS[op]` in the worker; its answer, or RefWorkerError by `timeout` seconds."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps([op, max_n, budget_s]) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise RefWorkerError(f"the reference worker exited: {self._tail()}") from None
        deadline = time.monotonic() + timeout
        while not self._sel.select(max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                self.close()
                raise RefWorkerError(f"the reference worker did not answer in {timeout:g} s")
        line = self._proc.stdout.readline()
        try:
            out: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            msg = f"the reference worker answered {line[:200]!r}: {self._tail()}"
            raise RefWorkerError(msg) from None
        return out

    def _tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode("utf-8", "replace").strip() or "(no stderr)"

    def close(self) -> None:
        """End the worker (its stdin closes, its loop ends); killed if it lingers."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._sel.close()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> RefWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
