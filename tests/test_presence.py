"""Presence (S-8.4) in memory: announce, refresh, expire by TTL, leave, listeners, bounds and
refusals. The clock is injected (a user never touches it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import errors
from mempalace_logstream.presence import Registry


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reg(clock: Clock) -> Registry:
    return Registry(clock=clock)


def test_an_entry_lives_for_its_ttl_and_a_refresh_extends_it(reg: Registry, clock: Clock) -> None:
    entry = reg.announce(agent="codex", state="working", task_id="task_a_1", ttl_s=30)
    assert entry.to_dict() == {
        "agent": "codex",
        "state": "working",
        "task_id": "task_a_1",
        "note": None,
        "announced_at": "2027-01-15T08:00:00.000Z",
        "expires_at": "2027-01-15T08:00:30.000Z",
    }
    clock.ms += 29_999
    assert [e.agent for e in reg.present()] == ["codex"]
    reg.announce(agent="codex", state="idle", ttl_s=30)  # refreshed at 29.999 s
    clock.ms += 29_000
    assert [(e.agent, e.state) for e in reg.present()] == [("codex", "idle")]
    clock.ms += 1_000
    assert reg.present() == []


def test_leave_removes_at_once_and_listeners_see_every_change(reg: Registry, clock: Clock) -> None:
    frames: list[dict[str, Any]] = []
    stop = reg.subscribe(frames.append)
    reg.announce(agent="a", state="watching", ttl_s=5)
    reg.announce(agent="b", state="working", ttl_s=60, note="on task x")
    assert reg.leave("b") is True and reg.leave("b") is False
    clock.ms += 5_000
    assert reg.sweep() == 1
    assert [(f["event"], f["agent"]) for f in frames] == [
        ("announce", "a"),
        ("announce", "b"),
        ("leave", "b"),
        ("expire", "a"),
    ]
    stop()
    reg.announce(agent="c", state="idle")
    assert len(frames) == 4


def test_next_expiry_ignores_refreshed_entries(reg: Registry, clock: Clock) -> None:
    assert reg.next_expiry_ms() is None
    reg.announce(agent="a", state="idle", ttl_s=5)
    reg.announce(agent="a", state="idle", ttl_s=50)
    assert reg.next_expiry_ms() == clock.ms + 50_000


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"agent": "", "state": "idle"}, "agent", "agent must be a non-empty string"),
        (
            {"agent": "a", "state": "away"},
            "state",
            "state 'away' is not one of watching, working, idle",
        ),
        (
            {"agent": "a", "state": "idle", "ttl_s": 0},
            "ttl_s",
            "ttl_s is 0; it must be between 1 and 3600",
        ),
        (
            {"agent": "a", "state": "idle", "ttl_s": 3601},
            "ttl_s",
            "ttl_s is 3601; it must be between 1 and 3600",
        ),
        ({"agent": "a", "state": "idle", "ttl_s": True}, "ttl_s", "ttl_s"),
        (
            {"agent": "a", "state": "idle", "note": "x" * 501},
            "note",
            "note is 501 characters; the limit is 500",
        ),
        ({"agent": "a\u202eb", "state": "idle"}, "agent", "agent"),
    ],
)
def test_refusals_name_the_field_and_change_nothing(
    reg: Registry, fields: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(errors.ValidationError) as info:
        reg.announce(**{"agent": "a", "state": "idle", **fields})
    assert info.value.field == field and text in str(info.value)
    assert reg.present() == []


def test_the_table_is_bounded(clock: Clock) -> None:
    reg = Registry(clock=clock, max_agents=2)
    reg.announce(agent="a", state="idle")
    reg.announce(agent="b", state="idle")
    with pytest.raises(errors.ValidationError, match="at most 2 agents"):
        reg.announce(agent="c", state="idle")
    reg.announce(agent="a", state="working")  # a refresh is not a new agent
    clock.ms += 60_000
    reg.announce(agent="c", state="idle")  # expired entries make room
    assert [e.agent for e in reg.present()] == ["c"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["announce", "leave", "tick"]),
            st.sampled_from(["a", "b", "c"]),
            st.integers(1, 20),
        ),
        max_size=40,
    )
)
def test_list_is_exactly_the_unexpired_latest_announcements(steps) -> None:
    clock = Clock()
    reg = Registry(clock=clock)
    model: dict[str, int] = {}  # agent -> expires_ms
    for op, agent, n in steps:
        if op == "announce":
            reg.announce(agent=agent, state="idle", ttl_s=n)
            model[agent] = clock.ms + n * 1000
        elif op == "leave":
            reg.leave(agent)
            model.pop(agent, None)
        else:
            clock.ms += n * 700
        live = sorted(a for a, t in model.items() if t > clock.ms)
        assert [e.agent for e in reg.present()] == live
