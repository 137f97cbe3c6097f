"""A hub that goes away and comes back (issue 19): the outage kit for the reconnect tests.

`HubProcess` runs `logstream serve` as a real subprocess on one fixed loopback port, so that it
can be stopped (SIGTERM by default) and started again on the same address; its stderr (the hub
log) is kept per run. `Appender` keeps appending from a thread of the test process: through
the hub while it answers, and straight into the log (the same SQLite file or PostgreSQL
database) while it does not, with an idempotency key per event so that an append whose answer
was lost is never written twice. `CliProcess` is a CLI client (`watch`, `tail`, `wait`) whose
stdout lines and stderr are read as they come. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nothing listens on now (the hub binds it with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(predicate: Callable[[], bool], timeout: float = 30, every_s: float = 0.02) -> None:
    """Return once `predicate()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(every_s)


def at_wait_cap(url: str) -> bool:
    """True once a hub's cap of open waits (`serve --wait-max-clients N`) is reached: a probe
    wait that would block is refused with 503. How a test knows its N clients are blocked."""
    probe = {"since_event_id": "tip", "timeout_ms": 50, "to_agent": "probe"}
    resp = httpx.post(url + "/v1/event_wait", json=probe, timeout=30)
    return resp.status_code == 503 and "too many open waits" in resp.json()["error"]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: no LOGSTREAM_* of the caller's, its own HOME."""
    ours = ("LOGSTREAM_", "MEMPALACE_")
    env = {k: val for k, val in os.environ.items() if not k.startswith(ours)}
    return {**env, "PYTHONPATH": str(REPO), "HOME": str(home), "PYTHONUNBUFFERED": "1", **extra}


class _Pump:
    """Reads a pipe in a thread: the lines so far, waitable."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.closed = False
        self._thread = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._thread.start()

    def _run(self, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in pipe:
                with self.cond:
                    self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                    self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.lines) or self.closed, timeout) and (
                predicate(self.lines)
            )

    def text(self) -> str:
        with self.cond:
            return "\n".join(self.lines)

    def join(self, timeout: float = 10) -> None:
        self._thread.join(timeout)


class CliProcess:
    """`logstream ARGS` as a subprocess (or `argv` as given: a shell running a command line);
    stdout and stderr read line by line as they come."""

    def __init__(
        self, args: list[str], env: dict[str, str], *, argv: list[str] | None = None
    ) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "mempalace_logstream", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out = _Pump(self.proc.stdout)
        self.err = _Pump(self.proc.stderr)

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout)
        self.out.join()
        self.err.join()
        return code

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(10)


class HubProcess:
    """`logstream serve` on a fixed port, stoppable and restartable; `logs` holds the stderr
    of each run (the hub log), `log` that of the latest."""

    def __init__(self, db: str, home: Path, *extra: str, port: int | None = None) -> None:
        self.db = db
        self.home = home
        self.extra = extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs: list[_Pump] = []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log(self) -> str:
        return self.logs[-1].text() if self.logs else ""

    def start(self, timeout: float = 60) -> None:
        """Start and return once the hub answers /healthz (the port may linger briefly in
        TIME_WAIT after a stop: the bind is retried until the deadline)."""
        deadline = time.monotonic() + timeout
        cmd = [sys.executable, "-m", "mempalace_logstream", "serve", "--port", str(self.port)]
        cmd += ["--db", self.db, "--sync-interval", "0", *self.extra]
        while True:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=cli_env(self.home),
            )
            assert self.proc.stdout is not None and self.proc.stderr is not None
            log = _Pump(self.proc.stderr)
            banner = self.proc.stdout.readline().decode()
            threading.Thread(target=_drain, args=(self.proc.stdout,), daemon=True).start()
            self.logs.append(log)
            if "listening on" in banner:
                break
            self.proc.wait(30)
            log.join()
            if "cannot bind" not in log.text() or time.monotonic() > deadline:
                raise RuntimeError(f"the hub did not start: {banner!r} {log.text()}")
            time.sleep(0.05)  # the port is still held by the last run's sockets
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("the hub did not answer /healthz")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signal the hub and wait for it to exit; returns its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.logs[-1].join()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _drain(pipe: IO[bytes]) -> None:
    with pipe:
        pipe.read()


@contextmanager
def running_hub(db: str, home: Path, *extra: str) -> Iterator[HubProcess]:
    hub = HubProcess(db, home, *extra)
    hub.start()
    try:
        yield hub
    finally:
        hub.kill()


@contextmanager
def hub_fleet(pg_url: str, home: Path, n: int = 3, *extra: str) -> Iterator[list[HubProcess]]:
    """`n` real hubs on the PostgreSQL log at `pg_url` (made if new), each with its own home
    under `home` and SSE pings every second; all killed at the end."""
    from mempalace_logstream import LogStore

    db = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    LogStore.open(db).close()
    hubs = [HubProcess(db, home / f"h{i}", "--ping-interval", "1", *extra) for i in range(n)]
    try:
        for hub in hubs:
            hub.home.mkdir(parents=True)
            hub.start()
        yield hubs
    finally:
        for hub in hubs:
            hub.kill()


class Appender:
    """Appends numbered notes from `writer` to `to_agent`, one every `every_s`, in a thread:
    through the hub while it answers, straight into the log (`db`) while it does not. The
    ids appended, in order, are `ids`; `via` counts where each went."""

    def __init__(
        self,
        hub: HubProcess,
        db: str,
        *,
        writer: str = "alice",
        to_agent: str = "bob",
        every_s: float = 0.02,
    ) -> None:
        self.hub, self.db = hub, db
        self.writer, self.to_agent, self.every_s = writer, to_agent, every_s
        self.ids: list[str] = []
        self.via = {"hub": 0, "file": 0}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._store: Any = None
        self._http = httpx.Client(base_url=hub.url, timeout=10)

    def __enter__(self) -> Appender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self) -> int:
        with self._lock:
            return len(self.ids)

    def wait_for(self, n: int, timeout: float = 60) -> None:
        """Until at least `n` events were appended in all."""
        deadline = time.monotonic() + timeout
        while self.count() < n:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"only {self.count()} of {n} appended"
            time.sleep(self.every_s)

    def wait_for_via(self, where: str, n: int, timeout: float = 60) -> None:
        """Until at least `n` events went `where` ("hub" or "file")."""
        deadline = time.monotonic() + timeout
        while self.via[where] < n:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"only {self.via[where]} of {n} via {where}"
            time.sleep(self.every_s)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(30)
        self._http.close()
        if self._store is not None:
            self._store.close()
        assert not self.errors, self.errors
        return list(self.ids)

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                event_id, where = self._append_one(n)
                with self._lock:
                    self.ids.append(event_id)
                    self.via[where] += 1
                n += 1
                self._stop.wait(self.every_s)
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def _append_one(self, n: int) -> tuple[str, str]:
        fields = {
            "type": "note",
            "stream": "s",
            "room": "r",
            "from_agent": self.writer,
            "to_agent": self.to_agent,
            "body": f"n{n}",
            "idempotency_key": f"outage-{n}",
        }
        if self.hub.running:
            try:
                resp = self._http.post("/v1/event_append", json=fields)
                if resp.status_code == 200:
                    return str(resp.json()["event"]["id"]), "hub"
            except httpx.HTTPError:
                pass  # down or stopping: the same event goes straight into the log
        if self._store is None:
            from mempalace_logstream import LogStore

            self._store = LogStore.open(self.db)
        event = self._store.event_append(**fields)
        return str(event.id), "file"
