"""What an agent pays per shell call (issue 25): whole `logstream` processes, side by side with
the reference's CLI (`mempalace logstream …`), on a small SQLite log, and ours through `--hub`.

    python bench/bench_cli.py [--samples N] [--quick | --smoke] [--no-ref] [--no-hub | --only-hub]

Each round runs every command once as a fresh process, ours then the reference's (paired runs),
and reports the median over the rounds (7 by default; 1 with --smoke) of wall time (spawn to
exit), CPU time (user + system) and max RSS of that one process (`os.wait4`). Commands: append,
list --limit 5, get, ack, wait (an event already there), inbox (a fresh state file, --from-start),
task status|claim|progress|complete (a fresh task each round, made untimed), tail --no-follow.
The reference has append, list, ack, wait and `watch` (its inbox: `watch --agent --from-start`);
ours/ref for the commands it lacks is against its `list --limit 5`, its cheapest call (said so
in the table). Then the same commands of ours with `--hub` to a real `logstream serve`, the time
`logstream serve` takes until /healthz answers, and until `logstream mcp` answers `initialize`
over stdio. "Warm": bytecode cached (a scratch PYTHONPYCACHEPREFIX, filled by an untimed first
run of each command), the log in the page cache. Never a test; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "cli"
RATIO_GOAL = 0.4  # ours/ref wall, at most
HUB_TARGET_MS = 250.0
SERVE_TARGET_S = 1.5
MCP_TARGET_S = 1.0
REF_CHEAPEST = "list"
PYCACHE: dict[str, str] = {}  # the children's bytecode cache, set by main()
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench_cli", "version": "0"},
    },
}


@dataclass(frozen=True)
class Sample:
    wall: float  # seconds
    cpu: float  # seconds, user + system
    rss_mb: float  # max resident set of the process


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_cli.py", description=__doc__)
    p.add_argument("--samples", type=int, default=None, help="rounds (default 7)")
    p.add_argument("--quick", action="store_true", help="5 rounds")
    p.add_argument("--no-ref", action="store_true", help="skip the reference CLI")
    p.add_argument("--no-hub", action="store_true", help="skip the --hub rows and serve")
    p.add_argument(
        "--only-hub", action="store_true", help="only the --hub rows (no local, serve or mcp)"
    )
    common.add_smoke(p)
    args = p.parse_args(argv)
    args.samples = args.samples or (1 if args.smoke else 5 if args.quick else 7)
    return args


def ours_cmd() -> list[str]:
    """The `logstream` console script beside this interpreter (what agents run)."""
    script = Path(sys.executable).parent / "logstream"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from mempalace_logstream.cli import console; console()"]


def our_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(common.REPO), "NO_COLOR": "1", **PYCACHE}
    if PYCACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {k: v for k, v in env.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}


def ref_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env = {k: v for k, v in env.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}
    return {**env, "PYTHONNOUSERSITE": "1", **PYCACHE}


def timed(cmd: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> Sample:
    """One process from spawn to exit: wall, its own CPU and max RSS (wait4); raises when it
    exits with a code not in `ok`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in ok:
            err.seek(0)
            raise RuntimeError(f"{cmd} exited {proc.returncode}: {err.read().decode()[-2000:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def output(cmd: list[str], env: dict[str, str]) -> str:
    """Run an untimed setup command; its stdout."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


class Ours:
    """Our commands against one log: a local SQLite file (`--db`) or a hub (`--hub`)."""

    def __init__(self, where: list[str], tmp: Path) -> None:
        self.base, self.where, self.tmp = ours_cmd(), where, tmp
        self.env = our_env()
        self.event_id = self.append_json("seed")["event"]["id"]
        for i in range(4):
            self.append_json(f"mail {i}")
        self.task_id = ""
        self.rounds = 0

    def argv(self, *args: str) -> list[str]:
        return [*self.base, *args, *self.where]

    def append_json(self, body: str) -> dict[str, dict[str, str]]:
        out = output(self.argv(*APPEND, "--body", body, "--json"), self.env)
        return dict(json.loads(out))

    def new_task(self) -> None:
        create = ["task", "create", "--project", "bench", "--from-agent", "alice"]
        create += ["--to-agent", "bob", "--branch", "main", "--base-commit", "abcdef1"]
        out = output(self.argv(*create, "--goal", "g", "--done", "d", "--json"), self.env)
        self.task_id = json.loads(out)["task_id"]

    def commands(self) -> dict[str, Callable[[], list[str]]]:
        e = self.event_id
        return {
            "append": lambda: self.argv(*APPEND, "--body", "hello"),
            "list": lambda: self.argv("list", "--limit", "5"),
            "get": lambda: self.argv("get", e),
            "ack": lambda: self.argv("ack", e, "--from-agent", "bob"),
            "wait": lambda: self.argv("wait", "--since-event-id", e, "--limit", "5"),
            "inbox": lambda: self.argv("inbox", "--agent", "bob", *self.fresh_state()),
            "task claim": lambda: self.argv("task", "claim", self.task_id, "--from-agent", "bob"),
            "task progress": lambda: self.argv(
                "task", "progress", self.task_id, "50", "--from-agent", "bob"
            ),
            "task complete": lambda: self.argv(
                "task", "complete", self.task_id, "--from-agent", "bob", "--body", "done"
            ),
            "task status": lambda: self.argv("task", "status", self.task_id),
            "tail": lambda: self.argv("tail", "--no-follow", "--from-start"),
        }

    def fresh_state(self) -> list[str]:
        self.rounds += 1
        return ["--from-start", "--state-file", str(self.tmp / f"inbox-{self.rounds}.json")]


APPEND = ["append", "--type", "note", "--stream", "bench", "--room", "r", "--from-agent", "alice"]
APPEND += ["--to-agent", "bob"]


class Reference:
    """The reference's `mempalace --palace P logstream …` in its own venv."""

    def __init__(self, refpkg: Any, tmp: Path) -> None:
        python = Path(str(refpkg.ref_python()))
        self.base = [str(python.parent / "mempalace"), "--palace", str(tmp / "ref-palace")]
        self.env, self.tmp, self.rounds = ref_env(), tmp, 0
        out = output([*self.base, "logstream", *APPEND, "--body", "seed", "--json"], self.env)
        self.event_id = json.loads(out)["id"]
        for i in range(4):
            output([*self.base, "logstream", *APPEND, "--body", f"mail {i}"], self.env)

    def commands(self) -> dict[str, Callable[[], list[str]]]:
        lg, e = [*self.base, "logstream"], self.event_id
        return {
            "append": lambda: [*lg, *APPEND, "--body", "hello"],
            "list": lambda: [*lg, "list", "--limit", "5"],
            "ack": lambda: [*lg, "ack", e, "--from-agent", "bob"],
            "wait": lambda: [*lg, "wait", "--since-event-id", e, "--limit", "5"],
            "inbox": lambda: [*lg, "watch", "--agent", "bob", *self.fresh_state()],
        }

    def fresh_state(self) -> list[str]:
        self.rounds += 1
        return ["--from-start", "--state-file", str(self.tmp / f"ref-watch-{self.rounds}.json")]


def measure(ours: Ours, ref: Reference | None, rounds: int) -> dict[str, dict[str, list[Sample]]]:
    """{command: {"ours": samples, "ref": samples}}; an untimed warm-up round first."""
    mine = ours.commands()
    theirs = ref.commands() if ref else {}
    results: dict[str, dict[str, list[Sample]]] = {n: {"ours": [], "ref": []} for n in mine}
    for round_no in range(rounds + 1):
        ours.new_task()
        for name, build in mine.items():
            sample = timed(build(), ours.env)
            if round_no:
                results[name]["ours"].append(sample)
            if ref is not None:
                their = theirs.get(name) or theirs[REF_CHEAPEST]
                ref_sample = timed(their(), ref.env)
                if round_no:
                    results[name]["ref"].append(ref_sample)
    return results


def med(samples: list[Sample], field: str) -> float:
    return common.median([getattr(s, field) for s in samples])


def report_local(results: dict[str, dict[str, list[Sample]]], has_ref: bool) -> None:
    rows = []
    for name, both in results.items():
        ours, ref = both["ours"], both["ref"]
        row = [name, *(fmt_sample(ours))]
        if has_ref and ref:
            ratio = med(ours, "wall") / med(ref, "wall")
            versus = "" if name in REF_HAS else f" (vs {REF_CHEAPEST})"
            row += [*fmt_sample(ref), f"{ratio:.2f}{versus}"]
        rows.append(row)
    heads = ["command", "wall ms", "cpu ms", "RSS MB"]
    if has_ref:
        heads += ["ref wall", "ref cpu", "ref RSS", "ours/ref"]
    title = "SQLite, one process per call, median (ref: mempalace logstream …)"
    common.print_table(title, heads, rows)
    for name, both in results.items():
        ms = med(both["ours"], "wall") * 1000
        common.target_line(BENCH, f"ours local {name} wall p50", ms, "ms", "<=", 120.0)
        if has_ref and both["ref"]:
            what = name if name in REF_HAS else f"{name} (ref: {REF_CHEAPEST})"
            ratio = med(both["ours"], "wall") / med(both["ref"], "wall")
            common.ratio_line(BENCH, f"ours/ref wall {what}", ratio, "<=", RATIO_GOAL)


REF_HAS = ("append", "list", "ack", "wait", "inbox")


def fmt_sample(samples: list[Sample]) -> list[str]:
    return [
        common.fmt_ms(med(samples, "wall")),
        common.fmt_ms(med(samples, "cpu")),
        f"{med(samples, 'rss_mb'):.1f}",
    ]


def serve(db: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [*ours_cmd(), "serve", "--db", str(db), "--port", str(port)]
    return subprocess.Popen(cmd, env=our_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(
    proc: subprocess.Popen[bytes], port: int, timeout: float = 60.0, mcp: bool = False
) -> float:
    """Seconds from now until /healthz answers 200 (the caller started `proc` just before);
    with `mcp`, until it also says the /mcp endpoint, built once the hub serves, is ready."""
    t0 = time.perf_counter()
    url = f"http://127.0.0.1:{port}/healthz"
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"serve exited {proc.returncode}: {err[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                if resp.status == 200 and not (mcp and json.load(resp).get("mcp") == "starting"):
                    return time.perf_counter() - t0
        except OSError:
            pass  # polling the port: the server is not listening yet
        time.sleep(0.005)
    raise RuntimeError(f"serve did not answer {url} within {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve_ready(tmp: Path, rounds: int) -> tuple[list[float], list[float]]:
    """`logstream serve` until /healthz answers, and until it says /mcp is ready too, a fresh
    process each round (a warm log)."""
    ready, mcp = [], []
    db = tmp / "serve.sqlite3"
    for round_no in range(rounds + 1):
        port = common.free_port()
        t0 = time.perf_counter()
        proc = serve(db, port)
        try:
            wait_ready(proc, port)
            answered = time.perf_counter() - t0
            wait_ready(proc, port, mcp=True)
            if round_no:
                ready.append(answered)
                mcp.append(time.perf_counter() - t0)
        finally:
            stop(proc)
    return ready, mcp


def mcp_ready(tmp: Path, rounds: int) -> list[float]:
    """`logstream mcp` (stdio) until its answer to `initialize` is read."""
    out = []
    cmd = [*ours_cmd(), "mcp", "--db", str(tmp / "mcp.sqlite3")]
    line = (json.dumps(INIT) + "\n").encode()
    for round_no in range(rounds + 1):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            env=our_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
            answer = proc.stdout.readline()
            elapsed = time.perf_counter() - t0
            if b'"result"' not in answer:
                raise RuntimeError(f"mcp answered {answer[:500]!r}")
            if round_no:
                out.append(elapsed)
        finally:
            proc.stdin.close()
            stop(proc)
    return out


def run_hub(tmp: Path, rounds: int) -> dict[str, dict[str, list[Sample]]]:
    port = common.free_port()
    proc = serve(tmp / "hub.sqlite3", port)
    try:
        wait_ready(proc, port, mcp=True)  # started: its /mcp endpoint built, too
        ours = Ours(["--hub", f"http://127.0.0.1:{port}"], tmp)
        return measure(ours, None, rounds)
    finally:
        stop(proc)


def report_hub(results: dict[str, dict[str, list[Sample]]]) -> None:
    rows = [[name, *fmt_sample(both["ours"])] for name, both in results.items()]
    common.print_table("--hub, one process per call, median", ["command", *HEADS], rows)
    for name, both in results.items():
        ms = med(both["ours"], "wall") * 1000
        common.target_line(BENCH, f"ours --hub {name} wall p50", ms, "ms", "<=", HUB_TARGET_MS)


HEADS = ["wall ms", "cpu ms", "RSS MB"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(common.machine_line())
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    if refpkg is None and reason != "--smoke":
        print(f"reference not measured: {reason}")
    with common.temp_dir("logstream-cli-") as tmp:
        if not args.smoke:  # a smoke run's children use the caller's bytecode, not a cold cache
            PYCACHE["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        if args.only_hub:  # the --hub rows alone: a before/after of the hub path in minutes
            report_hub(run_hub(tmp, args.samples))
            return 0
        ours = Ours(["--db", str(tmp / "ours.sqlite3")], tmp)
        ref = Reference(refpkg, tmp) if refpkg is not None else None
        report_local(measure(ours, ref, args.samples), ref is not None)
        if not args.no_hub:
            report_hub(run_hub(tmp, args.samples))
            ready, mcp = serve_ready(tmp, args.samples)
            common.target_line(
                BENCH, "serve until /healthz p50", common.median(ready), "s", "<=", SERVE_TARGET_S
            )
            print(f"serve until /healthz says /mcp is ready too, p50: {common.median(mcp):.3f} s")
        init = mcp_ready(tmp, args.samples)
        common.target_line(
            BENCH, "mcp initialize answered p50", common.median(init), "s", "<=", MCP_TARGET_S
        )
    print(common.machine_line().replace("machine:", "machine after the run:"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
