"""`workers.run_sync`, the servers' hop to a worker thread: anyio's rules at less cost."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import anyio
import pytest

from mempalace_logstream import workers

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
WAIT_S = 10.0


def test_runs_in_another_thread_with_the_callers_context() -> None:
    async def main() -> tuple[str, int]:
        WHO.set("agent-a")
        return await workers.run_sync(lambda: (WHO.get(), threading.get_ident()))

    who, ident = anyio.run(main)
    assert who == "agent-a"
    assert ident != threading.get_ident()


def test_an_error_is_raised_to_the_caller() -> None:
    def fail() -> None:
        raise ValueError("event_id is not a valid id")

    with pytest.raises(ValueError, match="event_id is not a valid id"):
        anyio.run(workers.run_sync, fail)


def test_a_cancelled_scope_waits_for_the_started_call_as_anyio_does() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow() -> str:
        started.set()
        assert release.wait(WAIT_S)
        finished.append("done")
        return "done"

    async def main() -> list[str]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(workers.run_sync, slow)
            await anyio.to_thread.run_sync(started.wait, WAIT_S)
            tg.cancel_scope.cancel()
            release.set()
        return list(finished)  # the group ended only once the call had

    assert anyio.run(main) == ["done"]


def test_a_call_in_a_cancelled_scope_does_not_start() -> None:
    ran: list[int] = []

    async def main() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await workers.run_sync(lambda: ran.append(1))

    anyio.run(main)
    assert ran == []


def test_at_most_cap_threads_and_idle_ones_end() -> None:
    pool = workers.Workers(cap=2, idle_s=0.05)
    inside = threading.Semaphore(0)
    gate = threading.Event()
    peak: list[int] = []

    def work() -> int:
        inside.release()
        assert gate.wait(WAIT_S)
        peak.append(pool.threads)
        return 1

    async def main() -> list[int]:
        results: list[int] = []

        async def one() -> None:
            results.append(await workers.run_sync(work, pool))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
            for _ in range(2):  # two calls run; the other three wait for a thread
                assert await anyio.to_thread.run_sync(inside.acquire, True, WAIT_S)
            assert pool.threads == 2
            gate.set()
        return results

    assert anyio.run(main) == [1] * 5
    assert max(peak) == 2
    ended = threading.Event()

    def threads_gone() -> bool:
        with pool.lock:
            return pool.threads == 0

    for _ in range(int(WAIT_S / 0.01)):
        if threads_gone():
            break
        ended.wait(0.01)
    assert threads_gone()


def test_a_reset_pool_starts_its_threads_again() -> None:
    """What a forked child does (`os.register_at_fork`): the parent's threads are gone."""
    pool = workers.Workers(cap=2)
    assert anyio.run(workers.run_sync, lambda: 1, pool) == 1
    pool.reset()
    assert (pool.threads, pool.idle) == (0, 0)
    assert anyio.run(workers.run_sync, lambda: 2, pool) == 2
    assert pool.threads == 1


def test_a_task_in_no_anyio_scope_skips_the_shield() -> None:
    """A hub request's task (uvicorn's, through the guard) is in no anyio cancel scope: the
    call is neither checked nor shielded by one (anyio would record the task entering it),
    and its result and context are the same (issue 25)."""
    from anyio._backends._asyncio import _task_states

    async def main() -> tuple[str, bool]:
        WHO.set("agent-b")
        who = await workers.run_sync(WHO.get)
        return who, asyncio.current_task() in _task_states

    assert asyncio.run(main()) == ("agent-b", False)


def test_an_asyncio_cancel_of_a_task_in_no_scope_returns_at_once() -> None:
    """As under the shielded scope: `Task.cancel()` (asyncio's own, not an anyio scope's)
    lands while the call still runs; the call's result is dropped."""
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        assert release.wait(WAIT_S)
        return "done"

    async def main() -> bool:
        task = asyncio.ensure_future(workers.run_sync(slow))
        await asyncio.to_thread(started.wait, WAIT_S)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        finally:
            release.set()
        return False

    assert asyncio.run(main())


def test_a_task_of_an_anyio_group_is_scoped() -> None:
    async def main() -> list[bool]:
        seen: list[bool] = []

        async def one() -> None:
            seen.append(workers._scoped(asyncio.get_running_loop()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
        with anyio.CancelScope():
            seen.append(workers._scoped(asyncio.get_running_loop()))
        return seen

    assert anyio.run(main) == [True, True]


def test_without_anyio_s_record_of_its_scopes_every_call_is_scoped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """anyio has no public way to ask whether a task is in one of its cancel scopes (4.16:
    `get_current_task()` gives no scope, `current_effective_deadline()` is inf in no scope and
    in a scope without a deadline alike), so `_scoped` reads its backend's private record. An
    anyio that keeps it elsewhere makes every call scoped (checked and shielded: anyio's rules,
    at anyio's cost), never unscoped."""
    import anyio._backends._asyncio as backend

    async def scoped() -> bool:
        return workers._scoped(asyncio.get_running_loop())

    assert asyncio.run(scoped()) is False  # a plain asyncio task: in no scope
    monkeypatch.delattr(backend, "_task_states")
    assert asyncio.run(scoped()) is True
