"""The task lifecycle as a hypothesis state machine (issue 11): random moves by random agents,
illegal ones included, against the store and against a plain in-memory model written apart
from `tasks/`: the same accept/refuse decision for every move, the same derived state after
it, and the projection equal to the fold of the log. On a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mempalace_logstream import LogStore, errors, tasks, workflows
from tests.conftest import ManualClock, new_pg_log
from tests.logfiles import new_log

AGENTS = ("lead", "codex", "gemini")
ACTIONS = (
    "claim",
    "decline",
    "progress",
    "block",
    "unblock",
    "complete",
    "fail",
    "cancel",
    "accept",
    "reject",
    "reopen",
)
LEASE_MS = 5_000
REQUESTER_MOVES = {"cancel", "accept", "reject", "unblock", "reopen"}
ENDS = {"completed", "declined", "failed", "cancelled"}
HELD = {"claimed", "working", "blocked", "ready"}
FROM = {
    "claim": {"open"},
    "decline": {"open"},
    "progress": {"claimed", "working"},
    "block": {"claimed", "working"},
    "unblock": {"blocked"},
    "complete": {"claimed", "working"},
    "fail": {"claimed", "working", "blocked"},
    "cancel": {"open", "claimed", "working", "blocked", "ready"},
    "accept": {"ready"},
    "reject": {"ready"},
    "reopen": {"failed", "declined"},
}
TO = {
    "claim": "claimed",
    "decline": "declined",
    "progress": "working",
    "block": "blocked",
    "unblock": "working",
    "complete": "ready",
    "fail": "failed",
    "cancel": "cancelled",
    "accept": "completed",
    "reject": "claimed",
    "reopen": "open",
}


@dataclass
class Model:
    """One task, by the rules of RFC 0007 read plainly."""

    requester: str
    to: str
    state: str = "open"
    assignee: str | None = None
    attempt: int = 0
    progress: float | None = None
    lease_until: int | None = None
    lost: list[str] = field(default_factory=list)

    def expire(self, now: int) -> None:
        if self.state in ("claimed", "working") and self.lease_until is not None:
            if now >= self.lease_until:
                self.state, self.assignee, self.lease_until = "open", None, None

    def allows(self, action: str, agent: str, progress: float) -> bool:
        if self.state in ENDS and action != "reopen":
            return False
        if action == "claim" and self.state in HELD:
            return False
        if action in ("cancel", "accept", "reject", "unblock", "reopen"):
            if agent != self.requester:
                return False
        if action in ("claim", "decline"):
            if self.to == "*" and action == "decline":
                return False
            if self.to != "*" and agent != self.to:
                return False
        if action in ("progress", "block", "complete", "fail") and agent != self.assignee:
            return False
        if self.state not in FROM[action]:
            return False
        return not (
            action == "progress" and self.progress is not None and progress <= self.progress
        )

    def apply(self, action: str, agent: str, progress: float, now: int) -> None:
        self.state = TO[action]
        if action == "claim":
            self.assignee, self.attempt, self.progress = agent, self.attempt + 1, None
            self.lease_until = now + LEASE_MS
        elif action == "progress":
            self.progress, self.lease_until = progress, now + LEASE_MS
        elif action in ("unblock", "reject"):
            self.lease_until = now + LEASE_MS
        elif action == "reopen":
            self.assignee, self.lease_until = None, None
        else:
            self.lease_until = None

    def state_at(self, now: int) -> str:
        if self.state in ("claimed", "working") and self.lease_until is not None:
            if now >= self.lease_until:
                return "open"
        return self.state


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.store: LogStore | None = None
        self.models: dict[str, Model] = {}
        self.moves = 0
        self.reached: set[str] = set()

    def open_store(self) -> LogStore:
        self.tmp = tempfile.TemporaryDirectory()
        return LogStore.open(new_log(Path(self.tmp.name) / "log.sqlite3"), clock=self.clock)

    @initialize(requester=st.sampled_from(AGENTS), to=st.sampled_from(["codex", "*"]))
    def start(self, requester: str, to: str) -> None:
        self.store = self.open_store()
        self.create(requester, to)

    @rule(requester=st.sampled_from(AGENTS), to=st.sampled_from(["codex", "*"]))
    def create(self, requester: str, to: str) -> None:
        assert self.store is not None
        out = workflows.task_create(
            self.store,
            project="p",
            from_agent=requester,
            to_agent=to,
            goal="g",
            branch="main",
            base_commit="abcdef1",
            done="d",
            lease_ms=LEASE_MS,
        )
        self.models[str(out["task"].correlation_id)] = Model(requester=requester, to=to)

    MOVE = {
        "data": st.data(),
        "action": st.sampled_from(ACTIONS),
        "role": st.sampled_from(["requester", "worker", "worker", "anyone"]),
        "progress": st.integers(0, 5),
    }

    @rule(**MOVE)
    def act(self, data: st.DataObject, action: str, role: str, progress: int) -> None:
        self._act(data, action, role, progress)

    @rule(**MOVE)  # twice: moves are what the machine is about (rules are drawn evenly)
    def act_again(self, data: st.DataObject, action: str, role: str, progress: int) -> None:
        self._act(data, action, role, progress)

    def _act(self, data: st.DataObject, action: str, role: str, progress: int) -> None:
        if not self.models or self.store is None:
            return
        # By creation order: task ids are random, their sorted order is not reproducible.
        tid = data.draw(st.sampled_from(list(self.models)), label="task")
        model = self.models[tid]
        if data.draw(st.booleans(), label="fits the state"):  # so long legal paths happen
            now_state = model.state_at(self.clock.now_ms())
            fitting = [a for a in ACTIONS if now_state in FROM[a] and a != "cancel"]
            action = data.draw(st.sampled_from(fitting or list(ACTIONS)), label="action")
            role = "requester" if action in REQUESTER_MOVES else "worker"
        # Mostly the agents the rules are about, so that long legal paths happen too.
        worker = model.assignee or (model.to if model.to != "*" else "gemini")
        agent = {"requester": model.requester, "worker": worker}.get(role)
        if agent is None:
            agent = data.draw(st.sampled_from(AGENTS), label="agent")
        now = self.clock.now_ms()
        model.expire(now)
        expected = model.allows(action, agent, progress)
        kwargs: dict[str, Any] = {"body": "because"}
        if action == "progress":
            kwargs["progress"] = progress
        if action == "complete":
            kwargs["result"] = {"disposition": "partial"}
        try:
            workflows.task_update(
                self.store, task_id=tid, action=action, from_agent=agent, **kwargs
            )
            accepted = True
        except (errors.ConflictError, errors.ForbiddenError, errors.ValidationError) as exc:
            accepted, reason = False, exc.message
        assert accepted == expected, (action, agent, model, None if accepted else reason)
        if accepted:
            model.apply(action, agent, progress, now)
            self.moves += 1
            self.reached.add(model.state)

    @rule()
    def rebuild(self) -> None:
        """The projection recomputed from the log alone: nothing a reader sees may change."""
        assert self.store is not None
        self.store.rebuild_tasks()

    @rule(ms=st.sampled_from([1, 700, 2_500, 6_000]))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @invariant()
    def store_and_model_agree(self) -> None:
        if self.store is None:
            return
        now = self.clock.now_ms()
        for tid, model in self.models.items():
            got = self.store.task_status(tid)["task"]
            assert got["state"] == model.state_at(now), (tid, got, model)
            assert got["attempt"] == model.attempt

    @invariant()
    def projection_is_the_fold_of_the_log(self) -> None:
        if self.store is None or not self.models:
            return
        import sqlalchemy as sa

        from mempalace_logstream.schema import tasks as table
        from mempalace_logstream.store.tasks import from_doc

        with self.store.engine.connect() as conn:
            rows = dict(conn.execute(sa.select(table.c.task_id, table.c.doc_json)).all())
        for tid in self.models:
            thread = self.store.event_list(correlation_id=tid, order="asc", limit=500).events
            assert from_doc(rows[tid]) == tasks.fold(thread, self.store.task_settings)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        if hasattr(self, "tmp"):
            self.tmp.cleanup()


LifecycleMachine.TestCase.settings = settings(settings(), stateful_step_count=30, deadline=None)
TestTaskLifecycle = LifecycleMachine.TestCase


class PgLifecycleMachine(LifecycleMachine):
    database = ""
    template: tuple[str, str] | None = None

    def open_store(self) -> LogStore:
        url = new_pg_log(self.database, self.template)  # the worker's template, replayed
        return LogStore.open(url, clock=self.clock)


@pytest.mark.pg
def test_the_lifecycle_machine_on_postgresql(
    pg_database: str, pg_template: tuple[str, str] | None
) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    PgLifecycleMachine.database, PgLifecycleMachine.template = pg_database, pg_template
    run_state_machine_as_test(
        PgLifecycleMachine,
        settings=settings(settings(), max_examples=8, stateful_step_count=25, deadline=None),
    )
