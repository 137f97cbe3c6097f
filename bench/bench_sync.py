"""Replica sync throughput over loopback HTTP (issue #5, S-9): ours vs the reference, one run.

    python bench/bench_sync.py [--quick | --smoke] [--events 100000] [--artifacts 1000] [--no-ref]

A source log of N events in task threads of 50 (a request, a claim, then progress moves; every
N/A-th event a patch referencing its own artifact, A artifacts) is written once through our
store's public API and served by our hub (`http.create_app` under uvicorn, its own process).
The reference (`mempalace==3.11.0` in its own venv) first pulls it from our hub with its own
`mempalace logstream sync --peer` client; that palace is then served by `mempalace
serve` (full install). Every pull below starts from an empty database, is one CLI process
(startup included, both sides), and is timed end to end:

  ours <- ours   `logstream sync --peer <our hub>`           (batched artifacts, 500-event pages)
  ref  <- ref    `mempalace logstream sync --peer <ref hub>` (the reference's sync as shipped)
  ref  <- ours   the reference client against our hub
  ours <- ref    our client against the reference hub (one request per artifact)

The headline ratio is ours<-ours / ref<-ref in events per second (target >= 5). Exit 1 when
a pull that ran is incomplete. Never a test; figures go to docs/bench/sync.md.

Bytecode is cached on both sides, as in an installed package: our hub and client, and the
reference's client, read it from a scratch PYTHONPYCACHEPREFIX (even under
PYTHONDONTWRITEBYTECODE), filled before the timed pulls by `compileall` (untimed): our
package, and the site-packages of the reference's client venv. Without it a pull compiled
every module it imports first (ours ~1 s where the checkout has no __pycache__).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common  # noqa: E402

if TYPE_CHECKING:
    from mempalace_logstream.store.writes import Transaction

BENCH = "sync"
TOKEN = "bench-sync-token"

_HUB = textwrap.dedent(
    """
    import sys, uvicorn
    from mempalace_logstream import LogStore, http
    store = LogStore.open(sys.argv[1])
    port = int(sys.argv[2])
    app = http.create_app(store, http.HubSettings(port=port, token=sys.argv[3]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    """
)


PYCACHE: dict[str, str] = {}  # our children's bytecode cache, set by main()


def our_env() -> dict[str, str]:
    """The environment of our hub and client: this checkout first, the scratch bytecode."""
    env = {**os.environ, "PYTHONPATH": str(common.REPO), **PYCACHE}
    if PYCACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def ref_env() -> dict[str, str]:
    """What the reference's client is run with besides its own clean environment."""
    return {**PYCACHE, "PYTHONDONTWRITEBYTECODE": ""} if PYCACHE else {}


def warm_bytecode(refpkg: Any) -> None:
    """Compile our package and the reference client's site-packages into the scratch cache
    (untimed), as an install would."""
    ours = [sys.executable, "-m", "compileall", "-q", str(common.REPO / "mempalace_logstream")]
    subprocess.run(ours, env=our_env(), check=True, stdout=subprocess.DEVNULL, timeout=600)
    if refpkg is None:
        return
    py = refpkg.ref_python()
    out = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")  # (ours: not theirs)
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **ref_env()}
    cmd = [str(py), "-m", "compileall", "-q", out.stdout.strip()]
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, timeout=600)  # (a file may fail)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_sync.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="5,000 events + 50 artifacts")
    common.add_smoke(p)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--artifacts", type=int, default=1_000)
    p.add_argument("--no-ref", action="store_true", help="skip the reference measurements")
    return p.parse_args(argv)


THREAD = 50  # events per task: a request, a claim, then progress moves and patches


def source_event(i: int, n_events: int, artifact_ids: list[str]) -> dict[str, object]:
    """Event `i` of the source log: task `i // THREAD` as the lifecycle (RFC 0007) has it, a
    request, the addressee's claim, then its progress (1-48 %, rising) or a patch."""
    task, step = divmod(i, THREAD)
    requester, assignee = f"agent-{task % 7}", f"agent-{(task + 1) % 7}"
    kind = "task.request" if step == 0 else "task.claim" if step == 1 else "task.progress"
    metadata: dict[str, object] = {"step": i, "of": n_events}
    if artifact_ids and step > 1:
        kind = "patch.ready"
    elif kind == "task.progress":
        metadata["progress"] = step - 1
    return {
        "type": kind,
        "stream": f"project/p{task % 20:02d}",
        "room": "delegation",
        "from_agent": requester if step == 0 else assignee,
        "to_agent": assignee if step == 0 else requester,
        "correlation_id": f"task_{task}",
        "body": BODY,
        "metadata": metadata,
        "artifact_ids": artifact_ids,
    }


BODY = ("Progress: tests pass on the auth module; next the refresh path. café ✓ " * 3)[:200]


def build_source(path: Path, n_events: int, n_artifacts: int) -> None:
    """N events authored locally (seq = origin_seq), written through the store's public API
    (`LogStore.transaction`, `Transaction.insert_artifact`/`insert_event`) in 5k-event
    transactions; every N/A-th event past a claim is a patch with its own artifact."""
    common.ensure_repo_on_path()
    from mempalace_logstream import LogStore

    every = max(1, n_events // max(1, n_artifacts))
    with LogStore.open(str(path), durability="normal") as store:
        done = arts = 0
        while done < n_events:
            chunk = min(5_000, n_events - done)

            def write(tx: Transaction, start: int = done, chunk: int = chunk) -> None:
                nonlocal arts
                for i in range(start, start + chunk):
                    ids: list[str] = []
                    if i % every == every - 1 and i % THREAD > 1 and arts < n_artifacts:
                        draft = store.draft_artifact(
                            kind="patch",
                            created_by=f"agent-{(i // THREAD + 1) % 7}",
                            content=f"diff --git a/f{i} b/f{i}\n" + "+line\n" * 40,
                        )
                        ids = [tx.insert_artifact(draft).id]
                        arts += 1
                    tx.insert_event(store.draft_event(**source_event(i, n_events, ids)))

            store.transaction(write)
            done += chunk
        if arts != n_artifacts:
            raise RuntimeError(f"{arts} artifacts written, {n_artifacts} asked")


@contextlib.contextmanager
def our_hub(db: Path) -> Iterator[str]:
    port = free_port()
    env = our_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", _HUB, str(db), str(port), TOKEN],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/healthz", proc)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"hub exited: {err[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def ours_pull(url: str, token: str, dest: Path) -> tuple[float, dict[str, Any]]:
    env = our_env()
    cmd = [
        sys.executable,
        "-m",
        "mempalace_logstream",
        "sync",
        "--db",
        str(dest),
        "--peer",
        url,
        "--token",
        token,
        "--json",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=3600)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"our sync failed: {proc.stdout[-500:]!r} {proc.stderr[-1500:]!r}")
    return secs, json.loads(proc.stdout)[0]


def ref_pull(refpkg: Any, url: str, token: str, palace: Path) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    proc = refpkg.ref_cli(
        *("logstream", "sync", "--peer", url, "--token", token, "--json"),
        palace=palace,
        timeout=7200,
        env=ref_env(),
    )
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"reference sync failed: {proc.stderr.decode()[-1500:]}")
    return secs, json.loads(proc.stdout)[0]


def row(label: str, result: tuple[float, dict[str, Any]] | None, n: int, a: int) -> list[str]:
    """One table row: a pull's (seconds, sync stats), or n/a when it did not run."""
    if result is None:
        return [label, "n/a", "n/a", "n/a", "n/a"]
    secs, stats = result
    ok = stats.get("pulled_events") == n and stats.get("pulled_artifacts") == a
    return [
        label,
        f"{secs:.2f}",
        common.fmt_num(n / secs),
        common.fmt_num(a / secs, 1),
        "yes" if ok else f"NO ({stats.get('pulled_events')}/{stats.get('pulled_artifacts')})",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    n, a = (200, 4) if args.smoke else (5_000, 50) if args.quick else (args.events, args.artifacts)
    print(common.machine_line())
    print(f"sync bench: {n:,} events + {a:,} artifacts over loopback HTTP, fresh destination")
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    results: dict[str, tuple[float, dict[str, Any]] | None] = dict.fromkeys(
        ("ours<-ours", "ref<-ref", "ref<-ours", "ours<-ref")
    )
    with common.temp_dir("logstream-bench-sync-") as tmp:
        if not args.smoke:  # a smoke run's children use the caller's bytecode
            PYCACHE["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            warm_bytecode(refpkg)
        src = tmp / "source.sqlite3"
        t0 = time.perf_counter()
        build_source(src, n, a)
        print(f"source built in {time.perf_counter() - t0:.1f} s")
        with our_hub(src) as url:
            results["ours<-ours"] = ours_pull(url, TOKEN, tmp / "ours-from-ours.sqlite3")
            if refpkg is not None:
                results["ref<-ours"] = ref_pull(refpkg, url, TOKEN, tmp / "ref-from-ours")
        if refpkg is not None:
            try:
                refpkg.ref_full_python()
                with refpkg.ref_hub(tmp / "ref-from-ours", token=TOKEN) as ref_url:
                    results["ref<-ref"] = ref_pull(refpkg, ref_url, TOKEN, tmp / "ref-from-ref")
                    results["ours<-ref"] = ours_pull(ref_url, TOKEN, tmp / "ours-from-ref.sqlite3")
            except refpkg.ReferenceUnavailable as exc:
                reason = f"reference hub unavailable: {exc}"
    rows = [row(k, v, n, a) for k, v in results.items()]
    common.print_table(
        "pull of the whole log, client <- server (one CLI process each)",
        ["client <- server", "seconds", "events/s", "artifacts/s", "complete"],
        rows,
    )
    if reason:
        print(f"reference not measured: {reason}")
    incomplete = [r[0] for r in rows if r[4] not in ("yes", "n/a")]
    if incomplete:
        print(f"incomplete pulls: {', '.join(incomplete)}")

    def ratio(x: str, y: str) -> float | None:
        rx, ry = results[x], results[y]
        return ry[0] / rx[0] if rx and ry else None

    common.ratio_line(
        BENCH, "ours<-ours vs ref<-ref throughput", ratio("ours<-ours", "ref<-ref"), ">=", 5
    )
    common.ratio_line(
        BENCH, "our client vs ref client, both from our hub", ratio("ours<-ours", "ref<-ours")
    )
    common.ratio_line(
        BENCH, "our client vs ref client, both from the ref hub", ratio("ours<-ref", "ref<-ref")
    )
    return 1 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
