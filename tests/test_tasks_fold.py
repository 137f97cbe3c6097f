"""The task lifecycle's pure rules (RFC 0007): every move, every refusal's text, leases, the
earliest-claim winner after a partition, the reference's threads, and fold = step by step."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import errors
from mempalace_logstream.models import Event
from mempalace_logstream.tasks import (
    A2A_STATES,
    ACTIONS,
    STATES,
    Task,
    TaskSettings,
    advance,
    check,
    classify,
    fold,
)

TID = "task_fix_login_0a1b2c3d"
T0 = 1_800_000_000_000


class Thread:
    """Events of one task's thread, with HLC stamps at given milliseconds."""

    def __init__(self, task_id: str = TID, to_agent: str = "codex") -> None:
        self.task_id, self.to_agent, self.n = task_id, to_agent, 0
        self.events: list[Event] = []

    def ev(
        self,
        type_: str,
        agent: str,
        ms: int,
        *,
        status: str | None = None,
        meta: dict[str, Any] | None = None,
        artifacts: tuple[str, ...] = (),
        to: str | None = None,
        body: str = "",
        replica: str = "rep_aaaaaaaaaaaa",
        signed: bool = False,
    ) -> Event:
        self.n += 1
        event = Event(
            id=f"evt_{self.n:04d}_{replica[-4:]}",
            seq=self.n,
            origin_replica=replica,
            origin_seq=self.n,
            hlc=f"{T0 + ms:013d}-{self.n:06x}-{replica}",
            type=type_,
            stream="project/demo",
            room="delegation",
            topic=None,
            from_agent=agent,
            to_agent=to,
            correlation_id=self.task_id,
            branch=None,
            base_commit=None,
            status=status,
            artifact_ids=artifacts,
            body=body,
            created_at="2027-01-15T08:00:00Z",
            metadata_json=json.dumps(meta or {}),
            # A stored signature was verified before it was stored (RFC 0008): the fold reads
            # a signed event as verified, whatever the signature's bytes.
            sig="c2ln" if signed else None,
            key_id="ed25519:" + "0" * 32 if signed else None,
        )
        self.events.append(event)
        return event

    def request(self, ms: int = 0, signed: bool = False, **meta: Any) -> Event:
        return self.ev(
            "task.request", "claude", ms, status="open", to=self.to_agent, meta=meta, signed=signed
        )


DEFAULTS = TaskSettings()


def step(task: Task | None, event: Event, cfg: TaskSettings = DEFAULTS) -> Task:
    move = classify(event, task)
    assert move is not None, event.type
    return check(task, move, cfg)


def run(thread: Thread) -> Task:
    task: Task | None = None
    for event in thread.events:
        task = step(task, event)
    assert task is not None
    return task


def refused(task: Task | None, event: Event) -> errors.LogstreamError:
    with pytest.raises(errors.LogstreamError) as info:
        step(task, event)
    return info.value


# ----------------------------------------------------------------------------- the happy path


def test_a_task_goes_from_open_to_completed() -> None:
    th = Thread()
    task = step(None, th.request(lease_ms=60_000))
    assert (task.state, task.requester, task.to_agent, task.attempt) == (
        "open",
        "claude",
        "codex",
        0,
    )
    task = step(task, th.ev("task.claim", "codex", 10, status="claimed"))
    assert (task.state, task.assignee, task.attempt) == ("claimed", "codex", 1)
    assert task.lease_expires_ms == T0 + 10 + 60_000
    task = step(task, th.ev("task.progress", "codex", 20, meta={"progress": 10}))
    task = step(task, th.ev("task.progress", "codex", 30, meta={"progress": 55.5}))
    assert (task.state, task.progress, task.lease_expires_ms) == ("working", 55.5, T0 + 60_030)
    result = {"disposition": "completed", "verification": [{"name": "unit", "status": "passed"}]}
    offer = th.ev("task.result", "codex", 40, meta={"result": result}, artifacts=("art_1",))
    task = step(task, offer)
    assert task.state == "ready" and task.lease_expires_ms is None
    assert task.result == {
        "disposition": "completed",
        "artifact_ids": ["art_1"],
        "verification": [{"name": "unit", "status": "passed"}],
    }
    task = step(task, th.ev("task.accept", "claude", 50))
    assert task.state == "completed" and task.terminal
    assert fold(th.events) == task


def test_every_state_has_an_a2a_name_and_every_action_a_type() -> None:
    assert set(A2A_STATES) == set(STATES)
    assert {t for t, _, _ in ACTIONS.values()} == {
        f"task.{a}" for a in ACTIONS if a != "complete"
    } | {"task.result"}


def test_block_unblock_reject_fail_reopen() -> None:
    th = Thread()
    task = step(None, th.request())
    task = step(task, th.ev("task.claim", "codex", 1))
    task = step(task, th.ev("task.block", "codex", 2, body="which database?"))
    assert task.state == "blocked" and task.lease_expires_ms is None
    task = step(task, th.ev("task.unblock", "claude", 3, body="PostgreSQL"))
    assert task.state == "working"
    task = step(task, th.ev("task.result", "codex", 4, meta={"result": {"disposition": "partial"}}))
    task = step(task, th.ev("task.reject", "claude", 5, body="tests missing"))
    assert (task.state, task.attempt, task.result) == ("claimed", 1, None)
    task = step(task, th.ev("task.fail", "codex", 6, meta={"retryable": True}))
    assert (task.state, task.retryable) == ("failed", True)
    task = step(task, th.ev("task.reopen", "claude", 7))
    assert (task.state, task.assignee) == ("open", None)
    task = step(task, th.ev("task.claim", "codex", 8))
    assert task.attempt == 2 and task.progress is None


def test_a_broadcast_task_is_claimed_by_anyone_but_declined_by_nobody() -> None:
    th = Thread(to_agent="*")
    task = step(None, th.request())
    exc = refused(task, th.ev("task.decline", "gemini", 1))
    assert isinstance(exc, errors.ForbiddenError)
    assert (
        str(exc)
        == f"task {TID} is addressed to everyone; nobody can decline it (cancel is the requester's)"
    )
    assert step(task, th.ev("task.claim", "gemini", 2)).assignee == "gemini"


# ----------------------------------------------------------------------------- refusals


@pytest.fixture
def claimed() -> tuple[Thread, Task]:
    th = Thread()
    task = step(None, th.request())
    return th, step(task, th.ev("task.claim", "codex", 10))


def test_a_cancelled_task_refuses_a_claim_naming_its_state() -> None:
    th = Thread()
    task = step(step(None, th.request()), th.ev("task.cancel", "claude", 1))
    exc = refused(task, th.ev("task.claim", "codex", 2))
    assert isinstance(exc, errors.ConflictError)
    assert str(exc) == f"task {TID} is cancelled; claim refused"


@pytest.mark.parametrize(
    ("type_", "agent", "kind", "text"),
    [
        (
            "task.cancel",
            "codex",
            errors.ForbiddenError,
            f"only the requester (claude) may cancel task {TID}",
        ),
        (
            "task.claim",
            "gemini",
            errors.ConflictError,
            f"task {TID} is already claimed by codex (attempt 1); claim refused",
        ),
        (
            "task.progress",
            "gemini",
            errors.ForbiddenError,
            f"task {TID} is held by codex; only the assignee may progress",
        ),
        ("task.accept", "claude", errors.ConflictError, f"task {TID} is claimed; accept refused"),
        ("task.unblock", "claude", errors.ConflictError, f"task {TID} is claimed; unblock refused"),
        ("task.decline", "codex", errors.ConflictError, f"task {TID} is claimed; decline refused"),
    ],
)
def test_refusals_name_the_task_the_state_and_who_may_act(
    claimed, type_, agent, kind, text
) -> None:
    th, task = claimed
    exc = refused(task, th.ev(type_, agent, 20, meta={"progress": 1}))
    assert type(exc) is kind and str(exc) == text


def test_only_the_addressee_claims(tmp_path) -> None:
    th = Thread()
    exc = refused(step(None, th.request()), th.ev("task.claim", "gemini", 1))
    assert isinstance(exc, errors.ForbiddenError) and exc.field == "from_agent"
    assert str(exc) == f"task {TID} is addressed to codex; only codex may claim it"


def test_progress_must_strictly_increase(claimed) -> None:
    th, task = claimed
    task = step(task, th.ev("task.progress", "codex", 11, meta={"progress": 55}))
    exc = refused(task, th.ev("task.progress", "codex", 12, meta={"progress": 40}))
    assert isinstance(exc, errors.ValidationError) and exc.field == "progress"
    assert str(exc) == "progress 40 must be greater than the last reported progress 55"
    assert "needs a number" in str(refused(task, th.ev("task.progress", "codex", 13)))
    bad = refused(task, th.ev("task.progress", "codex", 14, meta={"progress": True}))
    assert str(bad) == "progress must be a finite number, not True"


def test_a_move_on_a_task_that_does_not_exist_is_not_found() -> None:
    th = Thread()
    exc = refused(None, th.ev("task.claim", "codex", 1))
    assert isinstance(exc, errors.NotFoundError)
    assert str(exc) == f"task {TID} not found; claim refused"


def test_a_second_request_by_the_requester_is_part_of_the_thread_not_a_move() -> None:
    th = Thread()
    task = step(None, th.request())
    again = th.request(5)
    assert classify(again, task) is None  # old logs and the reference hold such threads
    assert fold(th.events) == task


def test_a_second_request_on_someone_elses_task_is_refused_or_an_anomaly() -> None:
    th = Thread()
    task = step(None, th.request())
    other = th.ev("task.request", "mallory", 5, status="open", to="mallory")
    exc = refused(task, other)
    assert isinstance(exc, errors.ConflictError) and exc.field == "correlation_id"
    assert str(exc) == (
        f"task {TID} already exists (requested by claude); a second task.request on it is "
        "refused (its requester is claude)"
    )
    folded = fold(th.events)
    assert folded is not None
    assert (folded.requester, folded.to_agent, folded.state) == ("claude", "codex", "open")
    assert [(a["event_id"], a["action"], a["agent"], a["code"]) for a in folded.anomalies] == [
        (other.id, "create", "mallory", "second_request")
    ]


@pytest.mark.parametrize(
    ("result", "artifacts", "body", "field", "text"),
    [
        (
            {"disposition": "completed"},
            (),
            "",
            "artifact_ids",
            "a completed result needs at least one artifact",
        ),
        (
            {"disposition": "no_artifact"},
            ("art_1",),
            "",
            "artifact_ids",
            "a no_artifact result must not carry artifacts",
        ),
        (
            {"disposition": "blocked"},
            (),
            " ",
            "body",
            "a blocked result needs a body saying what blocks it",
        ),
        (
            {"disposition": "done"},
            (),
            "",
            "disposition",
            "disposition 'done' is not one of completed, partial, blocked, failed, no_artifact",
        ),
        (
            {"verification": [{"name": "x", "status": "skipped"}]},
            (),
            "",
            "verification[0].status",
            "verification[0].status 'skipped' is not one of passed, failed, not_run",
        ),
        (
            {"verification": "all good"},
            (),
            "",
            "verification",
            "verification must be a list of {name, status}",
        ),
        (
            {"disposition": "partial", "score": 3},
            (),
            "",
            "result",
            "score is not a field of result",
        ),
    ],
)
def test_result_cross_field_rules(claimed, result, artifacts, body, field, text) -> None:
    th, task = claimed
    offer = th.ev(
        "task.result", "codex", 20, meta={"result": result}, artifacts=artifacts, body=body
    )
    exc = refused(task, offer)
    assert isinstance(exc, errors.ValidationError) and (exc.field, str(exc)) == (field, text)


@pytest.mark.parametrize("value", [140, 100.5, -1, 4000])
def test_progress_is_a_percentage_from_0_to_100(claimed, value) -> None:
    th, task = claimed
    exc = refused(task, th.ev("task.progress", "codex", 20, meta={"progress": value}))
    assert isinstance(exc, errors.ValidationError) and exc.field == "progress"
    assert str(exc) == f"progress {value:g} is out of range; it must be between 0 and 100 (percent)"
    assert step(task, th.ev("task.progress", "codex", 21, meta={"progress": 100})).progress == 100


def test_a_peers_progress_out_of_range_is_an_anomaly(claimed) -> None:
    th, _task = claimed
    th.ev("task.progress", "codex", 20, meta={"progress": 4000})
    folded = fold(th.events)
    assert folded is not None and (folded.state, folded.progress) == ("claimed", None)
    assert "between 0 and 100" in folded.anomalies[0]["reason"]


def test_block_and_reject_need_a_body(claimed) -> None:
    th, task = claimed
    assert (
        str(refused(task, th.ev("task.block", "codex", 20)))
        == "a block needs a body saying the question"
    )


# ----------------------------------------------------------------------------- leases


def test_an_expired_lease_reads_as_open_and_another_agent_may_claim(claimed) -> None:
    th = Thread(to_agent="*")
    task = step(None, th.request(lease_ms=1_000))
    task = step(task, th.ev("task.claim", "codex", 10))
    assert task.state_at(T0 + 1_009) == "claimed" and task.state_at(T0 + 1_010) == "open"
    exc = refused(task, th.ev("task.claim", "gemini", 500))
    assert "already claimed by codex" in str(exc)
    task = step(task, th.ev("task.claim", "gemini", 1_500))
    assert (task.assignee, task.attempt, task.state) == ("gemini", 2, "claimed")
    assert task.lost == (
        {"attempt": 1, "assignee": "codex", "expired_at": "2027-01-15T08:00:01.010Z"},
    )
    late = refused(task, th.ev("task.progress", "codex", 1_600, meta={"progress": 1}))
    assert "held by gemini" in str(late)


def test_the_former_assignee_is_told_its_lease_expired() -> None:
    th = Thread()
    task = step(None, th.request(lease_ms=1_000))
    task = step(task, th.ev("task.claim", "codex", 0))
    exc = refused(task, th.ev("task.progress", "codex", 2_000, meta={"progress": 1}))
    assert str(exc) == (
        f"task {TID}: the lease of attempt 1 (codex) expired at 2027-01-15T08:00:01.000Z; "
        "progress refused; claim it again"
    )
    assert step(task, th.ev("task.claim", "codex", 2_001)).attempt == 2


def test_progress_renews_the_lease_and_blocked_pauses_it() -> None:
    th = Thread()
    task = step(None, th.request(lease_ms=1_000))
    task = step(task, th.ev("task.claim", "codex", 0))
    task = step(task, th.ev("task.progress", "codex", 900, meta={"progress": 1}))
    task = step(task, th.ev("task.progress", "codex", 1_800, meta={"progress": 2}))
    task = step(task, th.ev("task.block", "codex", 2_700, body="?"))
    assert task.state_at(T0 + 10**9) == "blocked"
    task = step(task, th.ev("task.unblock", "claude", 50_000, body="!"))
    assert task.lease_expires_ms == T0 + 51_000


# ----------------------------------------------------------------------------- partitions


def _partitioned() -> Thread:
    th = Thread(to_agent="*")
    th.request()
    th.ev("task.claim", "gemini", 100, replica="rep_bbbbbbbbbbbb")
    th.ev("task.claim", "codex", 120, replica="rep_cccccccccccc")
    th.ev("task.progress", "codex", 130, meta={"progress": 5}, replica="rep_cccccccccccc")
    return th


def test_the_earliest_claim_wins_whatever_order_the_events_arrive_in() -> None:
    th = _partitioned()
    folds = []
    for seed in range(20):
        shuffled = list(th.events)
        random.Random(seed).shuffle(shuffled)
        folds.append(fold(shuffled))
    task = folds[0]
    assert task is not None and all(f == task for f in folds)
    assert (task.assignee, task.attempt) == ("gemini", 1)
    assert [c["agent"] for c in task.conflicts] == ["codex"]
    assert task.conflicts[0]["lost_to"] == "gemini"
    assert [(a["agent"], a["action"]) for a in task.anomalies] == [("codex", "progress")]
    exc = refused(task, th.ev("task.progress", "codex", 200, meta={"progress": 6}))
    assert str(exc) == (
        f"task {TID} was claimed first by gemini (attempt 1); your claim lost; progress refused"
    )


def test_moves_before_the_request_are_anomalies_of_the_task() -> None:
    th = Thread()
    th.ev("task.claim", "codex", 0)
    th.request(5)
    task = fold(th.events)
    assert task is not None and task.state == "open"
    assert task.anomalies[0]["reason"] == "it came before the task's request"


def test_a_thread_without_a_request_is_no_task() -> None:
    th = Thread()
    th.ev("task.claim", "codex", 0)
    th.ev("note", "codex", 1, status="claimed")
    assert fold(th.events) is None


# ----------------------------------------------------------------------------- the reference


def test_a_reference_thread_folds_into_the_expected_states() -> None:
    th = Thread()
    th.request()
    claim = th.ev("task.reply", "codex", 1, status="claimed", body="on it")
    patch = th.ev("patch.ready", "codex", 2, status="ready", artifacts=("art_9",))
    th.ev("event.ack", "claude", 3, status="applied", meta={"ack_of": patch.id})
    states = []
    task: Task | None = None
    for event in th.events:
        task = step(task, event)
        states.append(task.state)
    assert states == ["open", "claimed", "ready", "completed"]
    assert task is not None and task.result == {
        "disposition": "completed",
        "artifact_ids": ["art_9"],
        "verification": [],
    }
    assert classify(claim, None) is None  # off a task's thread, a status is just a status
    assert fold(th.events) == task


def test_an_ack_of_something_else_or_a_note_moves_nothing() -> None:
    th = Thread()
    task = step(None, th.request())
    assert (
        classify(th.ev("event.ack", "claude", 1, status="applied", meta={"ack_of": "x"}), task)
        is None
    )
    assert classify(th.ev("note", "claude", 2, body="hi"), task) is None


# ----------------------------------------------------------------------------- properties

AGENTS = ("claude", "codex", "gemini")
KINDS = (*(t for t, _, _ in ACTIONS.values()), "patch.ready", "note")


@st.composite
def threads(draw: st.DrawFn, signing: bool = False) -> Thread:
    th = Thread(to_agent=draw(st.sampled_from(["codex", "*"])))
    signs = st.booleans() if signing else st.just(False)
    th.request(lease_ms=draw(st.sampled_from([1_000, 60_000])), signed=draw(signs))
    ms = 0
    for _ in range(draw(st.integers(0, 25))):
        ms += draw(st.integers(1, 800))
        kind = draw(st.sampled_from(KINDS))
        meta: dict[str, Any] = {"progress": draw(st.integers(0, 5))}
        if kind == "task.result":
            meta["result"] = {"disposition": draw(st.sampled_from(["partial", "no_artifact"]))}
        th.ev(
            kind,
            draw(st.sampled_from(AGENTS)),
            ms,
            meta=meta,
            body=draw(st.sampled_from(["", "why"])),
            artifacts=("art_1",) if kind == "patch.ready" else (),
            replica=draw(st.sampled_from(["rep_aaaaaaaaaaaa", "rep_bbbbbbbbbbbb"])),
            signed=draw(signs),
        )
    return th


@settings(max_examples=300, deadline=None)
@given(threads(signing=True), st.randoms(use_true_random=False))
def test_fold_is_the_same_in_any_arrival_order(th: Thread, rnd: random.Random) -> None:
    shuffled = list(th.events)
    rnd.shuffle(shuffled)
    assert fold(shuffled) == fold(th.events)


@settings(max_examples=300, deadline=None)
@given(threads())
def test_a_local_move_is_refused_exactly_when_a_replayed_one_is_recorded(th: Thread) -> None:
    """`check` (local) and `advance` (peer) agree: a move check accepts gives the same task as
    advance; a move check refuses changes nothing but the anomaly/conflict lists."""
    task: Task | None = None
    for event in th.events:
        move = classify(event, task)
        if move is None:
            continue
        after = advance(task, move)
        try:
            accepted = check(task, move)
        except errors.LogstreamError:
            assert task is not None
            strip = dict(anomalies=(), conflicts=(), last_hlc="", last_event_id="")
            expired_before = dataclasses.replace(after, **strip)
            assert expired_before.state == ("open" if task.lease_passed(move.at_ms) else task.state)
            assert len(after.anomalies) + len(after.conflicts) == (
                len(task.anomalies) + len(task.conflicts) + 1
            )
        else:
            assert accepted == after
        task = after
    assert task == fold(th.events)
