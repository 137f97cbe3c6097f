"""The hop from an event loop to a worker thread, for the servers' core calls (`aio.run`).

`run_sync(fn)` runs `fn()` in a worker thread and awaits its result, with the rules of
`anyio.to_thread.run_sync` (as the servers used it): the caller's context variables (the
request's actor) are copied into the call; a call started in an already-cancelled anyio scope
raises at once; once started, the caller waits for it even when its anyio scope is cancelled
(the cancellation lands after, as anyio's shielded default does); at most `MAX_WORKERS`
threads run calls (more wait in the queue, as anyio's 40-token limiter makes them wait); a
thread idle for `IDLE_S` seconds ends. What it leaves out is anyio's per-call machinery (an
extra loop iteration, the limiter, the worker's queue with its conditions): 30-45 µs of CPU
per hop instead of 90-110 (issue 25; one hop per append through the hub).

Not `concurrent.futures.ThreadPoolExecutor`: its threads are joined at interpreter exit, so a
core call stuck in a lock would hold a stopping hub (these are daemon threads, as anyio's), and
a hop through it, even settled as here, cost ~20 µs more CPU (94 against 75 µs a hop, a
`/tmp` loop of 5,000 hops at load 6, 2026-12-06).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

T = TypeVar("T")
MAX_WORKERS = 40  # anyio's default thread limiter
IDLE_S = 10.0  # anyio's idle worker time


class Workers:
    """Worker threads started on demand, up to `cap`; each takes jobs from one queue."""

    def __init__(self, cap: int = MAX_WORKERS, idle_s: float = IDLE_S) -> None:
        self.cap = cap
        self.idle_s = idle_s
        self.reset()

    def reset(self) -> None:
        """No thread and no job (as in a forked child: its parent's threads are not in it)."""
        self.jobs: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0  # threads waiting for a job, less the jobs already promised to them
        self.threads = 0

    def submit(self, job: Callable[[], Callable[[], None]]) -> None:
        """Run `job()` in a worker thread, then what it returns (its report) once the thread
        counts itself idle again: it waits for its next job at once, holding no GIL."""
        with self.lock:
            if self.idle:
                self.idle -= 1
            elif self.threads < self.cap:
                self.threads += 1
                threading.Thread(target=self._work, name="logstream-worker", daemon=True).start()
        self.jobs.put(job)

    def _work(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self.lock:
                    if self.idle:  # no job promised to the waiting threads is left unserved
                        self.idle -= 1
                        self.threads -= 1
                        return
                continue
            report = job()
            with self.lock:
                self.idle += 1
            report()


WORKERS = Workers()
os.register_at_fork(after_in_child=WORKERS.reset)


async def run_sync(fn: Callable[[], T], workers: Workers = WORKERS) -> T:
    """`fn()` in a worker thread (see the module for the rules)."""
    loop = asyncio.get_running_loop()
    scoped = _scoped(loop)
    if scoped:
        await anyio.lowlevel.checkpoint_if_cancelled()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def job() -> Callable[[], None]:
        try:
            result = context.run(fn)
        except BaseException as exc:  # handed to the awaiting task, which raises it
            return functools.partial(_report, loop, done, None, exc)
        return functools.partial(_report, loop, done, result, None)

    workers.submit(job)
    if not scoped:  # no anyio scope can cancel this task: nothing to shield it from
        return await done
    with anyio.CancelScope(shield=True):
        result = await done
    return result


def _scoped(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the running task is inside an anyio cancel scope (its own, or its task group's),
    so that anyio may cancel it: then the call is checked before it starts and waited for
    under a shielded scope. A task in no scope (a hub request's: uvicorn's task, Starlette's
    and the guard's layers enter none) can be cancelled by asyncio only, which neither rule is
    about: it skips both (~40,000 instructions and four `getpid` syscalls a call, issue 25).
    Read from anyio's own record of its scopes' tasks (`_task_states`, task -> `TaskState`,
    in its asyncio backend, which every anyio scope on asyncio loads first); a record not
    where this anyio keeps it makes every call scoped. Private, for want of a public answer:
    anyio (4.16) gives a task's id, parent, name and `has_pending_cancellation()`, no scope;
    `current_effective_deadline()` is inf in no scope and in a scope without a deadline
    alike; sniffio names the library only; asyncio's `Task.cancelling()` counts cancel
    requests, not anyio's scopes (tests/test_workers.py holds the fallback)."""
    backend = sys.modules.get(_ANYIO_ASYNCIO)
    if backend is None:
        return False  # no anyio scope was ever entered on asyncio in this process
    states = getattr(backend, "_task_states", None)
    if states is None:
        return True
    state = states.get(asyncio.current_task(loop))  # (the loop given: no `getpid`)
    return state is not None and getattr(state, "cancel_scope", True) is not None


_ANYIO_ASYNCIO = "anyio._backends._asyncio"


def _report(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
        loop.call_soon_threadsafe(_settle, done, result, exc)


def _settle(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if done.done():  # the caller was cancelled by asyncio itself (not an anyio scope)
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)
