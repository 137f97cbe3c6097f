"""The task fold where identity exists (RFC 0007 "Identity", issue 18 item 5): a verified move
is never refused because of unverified moves since the previous verified one (it undoes them),
an end a verified move set is not left by an unverified move, the row says when it cannot
decide, and a fold resumed from a checkpoint (the store's late-event path) equals the whole one.
Threads and strategies are those of test_tasks_fold.py."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream.models import Event
from mempalace_logstream.tasks import (
    Folder,
    FoldState,
    Task,
    advance,
    classify,
    fold,
    needs_thread,
)
from tests.test_tasks_fold import DEFAULTS, TID, Thread, step, threads


def _completed_with_a_backdated_forgery() -> tuple[Thread, Event]:
    """claude (signed) asks anyone; codex (signed) claims, offers a result; claude accepts.
    mallory (unsigned, as a hostile peer would serve it) claims just before codex did."""
    th = Thread(to_agent="*")
    th.request(signed=True)
    th.ev("task.claim", "codex", 10, signed=True)
    th.ev("task.result", "codex", 20, meta={"result": {"disposition": "partial"}}, signed=True)
    th.ev("task.accept", "claude", 30, signed=True)
    forged = th.ev("task.claim", "mallory", 5, replica="rep_mmmmmmmmmmmm")
    return th, forged


def test_an_unverified_backdated_claim_never_beats_the_verified_one() -> None:
    th, forged = _completed_with_a_backdated_forgery()
    folds = []
    for seed in range(12):
        shuffled = list(th.events)
        random.Random(seed).shuffle(shuffled)
        folds.append(fold(shuffled))
    task = folds[0]
    assert task is not None and all(f == task for f in folds)
    assert (task.state, task.assignee, task.attempt) == ("completed", "codex", 1)
    assert task.conflicts == ()
    assert [(a["event_id"], a["action"], a["agent"], a["code"]) for a in task.anomalies] == [
        (forged.id, "claim", "mallory", "overruled")
    ]
    assert "verified claim" in task.anomalies[0]["reason"]
    # Without identity nothing tells the forgery apart: the earliest claim wins, as before.
    plain = Thread(to_agent="*")
    plain.request()
    plain.ev("task.claim", "codex", 10)
    plain.ev("task.claim", "mallory", 5)
    task = fold(plain.events)
    assert task is not None and (task.assignee, task.state) == ("mallory", "claimed")
    assert [c["agent"] for c in task.conflicts] == ["codex"]


def test_a_verified_move_undoes_only_the_unverified_moves_that_made_it_illegal() -> None:
    """A signed requester and an unsigned worker (the reference, an agent without a key): the
    worker's moves stand; only the forged reject the verified accept contradicts is undone."""
    th = Thread()
    th.request(signed=True)
    th.ev("task.claim", "codex", 10)
    th.ev("task.progress", "codex", 15, meta={"progress": 50})
    th.ev("task.result", "codex", 20, meta={"result": {"disposition": "partial"}})
    forged = th.ev("task.reject", "claude", 25, body="forged, unsigned")
    th.ev("task.accept", "claude", 30, signed=True)
    task = fold(th.events)
    assert task is not None and (task.state, task.assignee, task.progress) == (
        "completed",
        "codex",
        50,
    )
    assert [(a["event_id"], a["code"]) for a in task.anomalies] == [(forged.id, "overruled")]


def test_an_end_a_verified_move_set_is_never_reopened_by_an_unverified_one() -> None:
    th = Thread()
    th.request(signed=True)
    th.ev("task.claim", "codex", 10, signed=True)
    th.ev("task.fail", "codex", 20, meta={"retryable": True}, signed=True)
    late = th.ev("task.reopen", "claude", 30)
    th.ev("task.claim", "codex", 40)
    task = fold(th.events)
    assert task is not None and (task.state, task.attempt) == ("failed", 1)
    assert task.anomalies[0]["event_id"] == late.id
    assert task.anomalies[0]["code"] == "verified_end"
    assert task.anomalies[0]["reason"] == (
        f"task {TID} is failed by a verified move; an unverified reopen cannot move it"
    )
    th.ev("task.reopen", "claude", 50, signed=True)  # a verified reopen does
    again = fold(th.events)
    assert again is not None and again.state == "open"
    # A requester without a key reopens as before: its own moves are all unverified.
    unsigned = Thread()
    unsigned.request()
    unsigned.ev("task.claim", "codex", 10, signed=True)
    unsigned.ev("task.fail", "codex", 20, signed=True)
    unsigned.ev("task.reopen", "claude", 30)
    reopened = fold(unsigned.events)
    assert reopened is not None and reopened.state == "open"


def test_a_verified_request_overrules_an_unverified_one_on_the_same_id() -> None:
    th = Thread(to_agent="*")
    forged = th.ev("task.request", "mallory", 0, status="open", to="mallory")
    grab = th.ev("task.claim", "mallory", 2)
    th.request(5, signed=True)
    th.ev("task.claim", "codex", 10, signed=True)
    task = fold(th.events)
    assert task is not None
    assert (task.requester, task.to_agent, task.assignee) == ("claude", "*", "codex")
    assert [(a["event_id"], a["code"]) for a in task.anomalies] == [
        (forged.id, "overruled"),
        (grab.id, "overruled"),
    ]


def test_the_row_alone_cannot_decide_a_refused_verified_move_or_an_unverified_reopen() -> None:
    th, forged = _completed_with_a_backdated_forgery()
    in_hlc_order = sorted(th.events, key=lambda e: (e.hlc, e.id))
    task = step(None, in_hlc_order[0])
    task = advance(task, classify(forged, task))  # type: ignore[arg-type]
    verified_claim = classify(in_hlc_order[2], task)
    assert verified_claim is not None and verified_claim.verified
    assert needs_thread(task, verified_claim)
    assert not needs_thread(task, classify(th.ev("task.claim", "gemini", 40), task))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(threads(signing=True), st.integers(0, 30))
def test_a_fold_resumed_from_a_checkpoint_equals_the_whole_fold(th: Thread, cut: int) -> None:
    """What the store's late-event path relies on: folding a prefix, keeping its state and
    feeding the rest gives the fold of the whole thread."""
    ordered = sorted(th.events, key=lambda e: (e.hlc, e.id))
    first = Folder(DEFAULTS, FoldState(tracked=any(e.sig for e in ordered)))
    for event in ordered[:cut]:
        first.feed(event)
    resumed = Folder(DEFAULTS, first.state())
    for event in ordered[cut:]:
        resumed.feed(event)
    assert resumed.task == fold(th.events)


@settings(max_examples=400, deadline=None)
@given(threads(signing=True))
def test_the_row_with_needs_thread_follows_the_fold(th: Thread) -> None:
    """What the store's in-order path does: advance the row, and fold the thread whenever
    `needs_thread` says the row cannot decide; the result is the fold's after every event."""
    ordered = sorted(th.events, key=lambda e: (e.hlc, e.id))
    task: Task | None = None
    for k, event in enumerate(ordered):
        move = classify(event, task)
        if move is None:
            continue
        if task is None:
            task = fold(ordered[: k + 1])
        elif needs_thread(task, move):
            task = fold(ordered[: k + 1])
        else:
            task = advance(task, move)
        assert task == fold(ordered[: k + 1]), k
