"""Run the real `logstream` CLI in a forked child process: a separate OS process (its own pid,
connections and signal handling, killable with SIGKILL) that starts in milliseconds because it
inherits this interpreter's imports. Used by the watch tests, which restart watchers often.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

import typer

import mempalace_logstream.cli as cli
import mempalace_logstream.operations  # noqa: F401  (imported before fork, not in each child)
import mempalace_logstream.store  # noqa: F401
import mempalace_logstream.watch  # noqa: F401

# Typer rebuilds its click command tree on every call (~0.2 s here); build it once, before any
# fork, so that a child runs only the command itself. Same parser, same callbacks.
_COMMAND = typer.main.get_command(cli.app)


def _signal_lines(pid: int) -> bytes:
    """The kernel's view of `pid`'s signals (blocked, pending, ignored, caught), from
    /proc/<pid>/status: where a Ctrl-C that never arrived went."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            return b"".join(line for line in fh if line.startswith((b"Sig", b"ShdPnd")))
    except OSError:
        return b""


@dataclass
class Forked:
    pid: int
    _out: bytearray = field(default_factory=bytearray)
    _err: bytearray = field(default_factory=bytearray)
    _readers: list[threading.Thread] = field(default_factory=list)
    returncode: int | None = None
    _err_grew: threading.Condition = field(default_factory=threading.Condition)

    def _pump(self, fd: int, buf: bytearray) -> None:
        with os.fdopen(fd, "rb", buffering=0) as fh:
            while chunk := fh.read(65536):
                with self._err_grew:
                    buf.extend(chunk)
                    self._err_grew.notify_all()
        with self._err_grew:
            self._err_grew.notify_all()

    def wait_for_stderr(self, text: bytes, timeout: float = 30) -> bool:
        with self._err_grew:
            return self._err_grew.wait_for(
                lambda: text in self._err or not self._readers[1].is_alive(), timeout
            ) and (text in self._err)

    def wait_for_stdout(self, text: bytes, timeout: float = 30) -> bool:
        with self._err_grew:
            return self._err_grew.wait_for(
                lambda: text in self._out or not self._readers[0].is_alive(), timeout
            ) and (text in self._out)

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        for t in self._readers:
            t.join(timeout)
            if t.is_alive():
                self._dump_stacks()
                self.send(signal.SIGKILL)
                t.join(10)
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def _dump_stacks(self) -> None:
        """A child past its deadline writes every thread's stack to its stderr (faulthandler,
        `fork_cli`) before it is killed: the failing test's message then shows where it hung."""
        with self._err_grew:
            before = len(self._err)
        self.send(signal.SIGUSR1)
        with self._err_grew:
            self._err_grew.wait_for(lambda: b"most recent call first" in self._err[before:], 5)
            # The dump is many writes (a line is several): take what follows until the output
            # is still for 1 s at the end of a line, for 10 s at most (a loaded machine once
            # held a dump still for a second in the middle of a line: `File ` and no name).
            deadline = time.monotonic() + 10
            size = -1
            while time.monotonic() < deadline:
                if size == len(self._err) and self._err.endswith(b"\n"):
                    break
                size = len(self._err)
                self._err_grew.wait(1)
            self._err.extend(_signal_lines(self.pid))
            # Also in this test's captured stderr, which pytest shows whole (an assertion's
            # message is cut short).
            sys.stderr.write(
                f"forked pid {self.pid} past its deadline:\n{self._err.decode(errors='replace')}\n"
            )

    @property
    def stdout(self) -> bytes:
        return bytes(self._out)

    @property
    def stderr(self) -> bytes:
        return bytes(self._err)


def fork_cli(*args: str, env: dict[str, str] | None = None) -> Forked:
    """Start `logstream ARGS` in a forked child with `env` added to its environment."""
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 70
        try:
            os.dup2(w_out, 1)
            os.dup2(w_err, 2)
            for fd in (r_out, w_out, r_err, w_err):
                os.close(fd)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # A fork keeps the forking thread's signal mask, which a shell-started `logstream`
            # never inherits: a pytest worker can hold SIGINT blocked after an earlier test
            # (an event loop's own fork or signal set-up left it so), and the child then never
            # saw the Ctrl-C (the mask was the one thing its stacks left to explain; CI, three
            # fresh clones in a row).
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
            faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
            os.environ.update(env or {})
            sys.argv = ["logstream", *args]
            cli.root.app = _COMMAND  # type: ignore[assignment]  (this child only: main() runs it)
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # anything else: report it like a crash
            import traceback

            traceback.print_exc()
            code = 70
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(w_out)
    os.close(w_err)
    proc = Forked(pid)
    proc._readers = [
        threading.Thread(target=proc._pump, args=(r_out, proc._out), daemon=True),
        threading.Thread(target=proc._pump, args=(r_err, proc._err), daemon=True),
    ]
    for t in proc._readers:
        t.start()
    return proc


def run_forked(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Forked:
    proc = fork_cli(*args, env=env)
    proc.wait(timeout)
    return proc


def inotify_fds(pid: int | str = "self") -> int:
    """How many inotify instances process `pid` holds (Linux /proc)."""
    count = 0
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return -1
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}") == "anon_inode:inotify":
                count += 1
        except OSError:
            continue
    return count


def wait_until_blocked(proc: Forked, baseline: int, timeout: float = 30) -> bool:
    """True once the forked CLI holds more inotify instances than `baseline` (what it inherited
    at fork): its store's change-signal thread runs only while a wait is blocked. False if the
    process exited first (or /proc is missing)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = inotify_fds(proc.pid)
        if held < 0 or not proc._readers[1].is_alive():
            return False
        if held > baseline:
            return True
        with proc._err_grew:  # wake early on output; else re-check every 10 ms
            proc._err_grew.wait(0.01)
    return False
