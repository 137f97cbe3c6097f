"""Shared helpers for the benchmarks: timing, percentiles, tables, target/ratio lines, temp and
cache dirs, the reference venv (through tests/refpkg.py) and a deterministic synthetic event log.

Stdlib only at import time: the reference venv imports this module too (to build its 1M-event
file with exactly the same rows as ours). `tests.refpkg` and our package are imported lazily.
Every bench takes `--smoke` (`add_smoke`): tiny sizes, the reference skipped with the
`REF_SKIPPED` line (`reference_unless`); `bench/run.py --smoke` runs them all in CI.
Output conventions read by `bench/run.py`'s summary:
    [ratio]  <bench>: <what> = <value>  (target >= <goal>: MET|NOT MET)   ratio lines
    [target] <bench>: <what> = <value>  (target <= <goal>: MET|NOT MET)   absolute targets
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RATIO_TAG = "[ratio]"
TARGET_TAG = "[target]"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SMOKE_HELP = "tiny sizes and no reference package: a check that the bench runs (CI)"
REF_SKIPPED = "reference skipped: a smoke run (--smoke) does not measure the reference package"


def add_smoke(parser: argparse.ArgumentParser) -> None:
    """The `--smoke` flag every bench takes: tiny sizes, no reference package, a check that
    the bench still runs end to end (`bench/run.py --smoke`, in CI), not a measurement."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def pg_admin_url(default: str = DEFAULT_PG) -> str:
    """The PostgreSQL server the benches use: $LOGSTREAM_BENCH_PG, else `default`."""
    return os.environ.get("LOGSTREAM_BENCH_PG", default)


@contextlib.contextmanager
def pg_schema(admin_url: str, prefix: str) -> Iterator[str]:
    """A fresh schema `<prefix>_<8 hex>` on the server at `admin_url` for one measurement,
    dropped afterwards; yields a URL whose search_path is it."""
    import sqlalchemy as sa

    name = f"{prefix}_{secrets.token_hex(4)}"
    eng = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {name}"))
    sep = "&" if "?" in admin_url else "?"
    try:
        yield f"{admin_url}{sep}options=-csearch_path%3D{name}"
    finally:
        with eng.connect() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {name} CASCADE"))
        eng.dispose()


def ensure_repo_on_path() -> None:
    """Make `mempalace_logstream` and `tests.refpkg` importable when run as a script."""
    root = str(REPO)
    if root not in sys.path:
        sys.path.insert(0, root)


# ----------------------------------------------------------------- statistics and timing


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of unsorted samples; NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/max/mean of latency samples, in the samples' unit."""
    return {
        "p50": percentile(samples, 0.50),
        "p95": percentile(samples, 0.95),
        "max": max(samples) if samples else float("nan"),
        "mean": statistics.fmean(samples) if samples else float("nan"),
        "n": float(len(samples)),
    }


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def time_calls(fn: Callable[[], Any], n: int, warmup: int = 3) -> list[float]:
    """Per-call wall times (seconds) of `n` calls of `fn`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out: list[float] = []
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# ----------------------------------------------------------------- printing


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None or value != value:  # None or NaN
        return "n/a"
    return f"{value:,.{digits}f}"


def fmt_ms(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "n/a"
    return f"{seconds * 1000:.3f}"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned text table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(f"\n{title}")
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    sys.stdout.flush()


def _verdict(value: float, op: str, goal: float) -> str:
    if value != value:
        return "NOT MEASURED"
    met = value >= goal if op == ">=" else value <= goal
    return "MET" if met else "NOT MET"


def ratio_line(
    bench: str, what: str, value: float | None, op: str | None = None, goal: float | None = None
) -> str:
    """Print (and return) one `[ratio]` line; with a target, say whether it was met."""
    shown = fmt_num(value, 2) if value is not None else "n/a"
    text = f"{RATIO_TAG} {bench}: {what} = {shown}"
    if op and goal is not None:
        val = value if value is not None else float("nan")
        text += f"  (target {op} {goal:g}: {_verdict(val, op, goal)})"
    print(text, flush=True)
    return text


def target_line(bench: str, what: str, value: float | None, unit: str, op: str, goal: float) -> str:
    """Print (and return) one `[target]` line for an absolute target (e.g. p50 <= 2 ms)."""
    val = value if value is not None else float("nan")
    shown = "n/a" if val != val else f"{val:.3f} {unit}"
    text = f"{TARGET_TAG} {bench}: {what} = {shown}  (target {op} {goal:g} {unit}: "
    text += f"{_verdict(val, op, goal)})"
    print(text, flush=True)
    return text


def machine_line() -> str:
    """Cores, load, Python and SQLite versions: printed at the top of every bench."""
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return (
        f"machine: {os.cpu_count()} cores, load avg {load}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}"
    )


# ----------------------------------------------------------------- directories


@contextlib.contextmanager
def temp_dir(prefix: str = "logstream-bench-") -> Iterator[Path]:
    """A scratch directory removed afterwards (under $LOGSTREAM_BENCH_TMP or the system tmp)."""
    base = os.environ.get("LOGSTREAM_BENCH_TMP")
    with tempfile.TemporaryDirectory(prefix=prefix, dir=base) as tmp:
        yield Path(tmp)


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where big generated logs are kept between runs (keyed by size + schema by callers)."""
    raw = override or os.environ.get("LOGSTREAM_BENCH_CACHE")
    path = Path(raw) if raw else Path.home() / ".cache" / "mempalace-logstream" / "bench"
    path = path.expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock so two runs never build the same cached file at once."""
    import fcntl

    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


# ----------------------------------------------------------------- our hub


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def our_hub(db: Path, env: dict[str, str]) -> Iterator[str]:
    """`logstream serve` on `db` (no sync rounds) on a free port, until the block ends; its URL."""
    import subprocess

    port = free_port()
    cmd = [sys.executable, "-m", "mempalace_logstream", "serve", "--port", str(port)]
    hub = subprocess.Popen(
        [*cmd, "--db", str(db), "--sync-interval", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert hub.stdout is not None
        if b"listening on" not in hub.stdout.readline():
            raise RuntimeError("the hub did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        hub.terminate()
        hub.wait(30)


# ----------------------------------------------------------------- the reference package


def reference() -> tuple[Any, str | None]:
    """(refpkg module, None) when the reference venv is usable, else (None, reason).

    The venv is built on first use by tests/refpkg.py (`pip install --no-deps mempalace==…`
    into its own venv, never into ours).
    """
    ensure_repo_on_path()
    try:
        from tests import refpkg
    except ImportError as exc:  # pragma: no cover - the file is part of the repo
        return None, f"tests/refpkg.py not importable: {exc}"
    try:
        refpkg.ref_python()
    except refpkg.ReferenceUnavailable as exc:
        return None, str(exc)
    return refpkg, None


def reference_unless(no_ref: bool, smoke: bool = False) -> tuple[Any, str | None]:
    """`reference()`, unless this run skips the reference: `--no-ref` (the caller prints its
    reason) or `--smoke`, which says so here on a line of its own, never silently."""
    if smoke:
        print(REF_SKIPPED, flush=True)
        return None, "--smoke"
    if no_ref:
        return None, "--no-ref"
    return reference()


def run_ref_json(code: str, *args: Any, timeout: float = 900) -> Any:
    """Run `code` in the reference venv with bench/ on its sys.path; decode its last line."""
    refpkg, reason = reference()
    if refpkg is None:
        raise RuntimeError(f"reference unavailable: {reason}")
    prelude = f"import sys; sys.path.insert(0, {str(BENCH_DIR)!r})\n"
    return refpkg.run_ref_json(prelude + code, *args, timeout=timeout)


# ----------------------------------------------------------------- synthetic event log

# Row fields shared by both schemas, in this order; seq (= rowid) and origin_seq are i + 1.
EVENT_FIELDS = (
    "id",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "body",
    "created_at",
    "metadata_json",
    "origin_replica",
    "origin_seq",
    "hlc",
)
AGENTS = tuple(f"agent-{i:02d}" for i in range(50))
INBOX_AGENT = "agent-07"
TYPE_WEIGHTS = (
    ("chat.message", 40),
    ("task.progress", 20),
    ("status.update", 15),
    ("event.ack", 10),
    ("task.request", 5),
    ("patch.ready", 4),
    ("task.done", 4),
    ("review.request", 2),
)
FILTER_TYPE = "task.request"
STREAMS = tuple(f"project/p{i:02d}" for i in range(20))
ROOMS = ("delegation", "chat", "presence", "reviews", "ops")
TOPICS = tuple(f"topic-{i}" for i in range(10))
BASE_MS = 1_780_000_000_000
_TEXT = (
    "Goal: make the login flow survive a token refresh.\r\nDefinition of done: tests pass, "
    "no regressions in the auth module, the patch applies on main. Notes: café ✓ — "
) * 40


def raw_replica() -> str:
    """A replica id of our format and length (`rep_<32 hex>`) for a raw writer's rows."""
    return f"rep_{secrets.token_hex(16)}"


def raw_ids(replica: str, n: int) -> tuple[str, str]:
    """The event id and HLC of a raw writer's `n`th row, of our formats and lengths
    (`evt_<UTC second>_<20 hex>`, `<ms>-<counter>-<replica>`), made by f-strings, not our code:
    a raw baseline writes the bytes ours writes, value for value in length."""
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"evt_{stamp}_{secrets.token_hex(10)}", f"{int(now * 1000):013d}-{n:06x}-{replica}"


def _table(weights: Sequence[tuple[Any, int]]) -> list[Any]:
    out: list[Any] = []
    for value, weight in weights:
        out += [value] * weight
    return out


def synthetic_events(n: int, replica_id: str, seed: int = 20261129) -> Iterator[tuple[Any, ...]]:
    """`n` deterministic event rows (EVENT_FIELDS order), in append order.

    Shape: 50 agents; to_agent is '*' for 10 %, null for 30 %, else one agent (so an inbox
    holds ~12 k direct + ~100 k broadcast events per million); 8 types (task.request 5 %);
    ~60 % carry a correlation id shared by ~12 events; bodies 60-315 bytes of mixed text.
    """
    rnd = random.Random(seed)
    bits = rnd.getrandbits
    types = _table(TYPE_WEIGHTS)
    n_corr = max(1, n // 20)
    last_sec, stamp, iso = -1, "", ""
    for i in range(n):
        seq = i + 1
        ms = BASE_MS + seq * 37
        sec = ms // 1000
        if sec != last_sec:
            tm = time.gmtime(sec)
            stamp = time.strftime("%Y%m%dT%H%M%S", tm)
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", tm)
            last_sec = sec
        pick = bits(7) % 100
        to_agent = "*" if pick < 10 else None if pick < 40 else AGENTS[bits(16) % 50]
        kind = types[bits(7) % 100]
        corr = f"task_{bits(32) % n_corr:07d}" if bits(7) % 100 < 60 else None
        offset, length = bits(10), 60 + bits(8)
        yield (
            f"evt_{stamp}_{bits(80):020x}",
            kind,
            STREAMS[bits(8) % 20],
            ROOMS[bits(8) % 5],
            TOPICS[bits(8) % 10] if bits(4) < 5 else None,
            AGENTS[bits(16) % 50],
            to_agent,
            corr,
            "main" if kind == "task.request" else None,
            "a1b2c3d4" if kind == "task.request" else None,
            "open" if kind == "task.request" else None,
            _TEXT[offset : offset + length],
            f"{iso}.{ms % 1000:03d}Z",
            f'{{"n": {seq}}}' if bits(3) == 0 else "{}",
            replica_id,
            seq,
            f"{ms:013d}-000000-{replica_id}",
        )
