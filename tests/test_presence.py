"""Presence (S-8.4) in memory: announce, refresh, expire by TTL, leave, listeners, bounds and
refusals. The clock is injected (a user never touches it)."""

from __future__ import annotations

import contextlib
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
        ({"agent": "*", "state": "idle"}, "agent", "agent is '*', the broadcast address"),
    ],
)
def test_refusals_name_the_field_and_change_nothing(
    reg: Registry, fields: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(errors.ValidationError) as info:
        reg.announce(**{"agent": "a", "state": "idle", **fields})
    assert info.value.field == field and text in str(info.value)
    assert reg.present() == []


def test_the_broadcast_address_never_leaves(reg: Registry) -> None:
    """`*` is no agent's name: leaving as it is refused as announcing is (one rule)."""
    reg.announce(agent="a", state="idle")
    with pytest.raises(errors.ValidationError) as info:
        reg.leave("*")
    assert info.value.field == "agent" and "the broadcast address" in str(info.value)
    assert [e.agent for e in reg.present()] == ["a"]


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


def test_gone_frames_carry_the_entry_with_state_gone(reg: Registry, clock: Clock) -> None:
    frames: list[dict[str, Any]] = []
    reg.subscribe(frames.append)
    made = reg.announce(agent="a", state="working", task_id="task_a_1", ttl_s=5).to_dict()
    reg.announce(agent="b", state="idle", ttl_s=60)
    clock.ms += 1_000
    reg.leave("b")
    clock.ms += 10_000
    assert reg.sweep() == 1
    left, expired = frames[2], frames[3]
    assert left["event"] == "leave" and left["state"] == "gone"
    assert left["expires_at"] == "2027-01-15T08:00:01.000Z"  # when it went
    # an expiry says when the entry lapsed (its TTL), not when a sweep noticed
    assert expired == {**made, "event": "expire", "state": "gone"}


def test_a_snapshot_subscription_misses_nothing_and_repeats_nothing(
    reg: Registry, clock: Clock
) -> None:
    reg.announce(agent="b", state="idle", ttl_s=5)
    reg.announce(agent="a", state="watching", ttl_s=60)
    clock.ms += 5_000  # b has lapsed: the snapshot tells its expiry to the others, not b
    frames: list[dict[str, Any]] = []
    reg.subscribe(frames.append, snapshot=True)
    assert [(f["event"], f["agent"], f["state"]) for f in frames] == [("announce", "a", "watching")]
    reg.leave("a")
    assert [f["state"] for f in frames] == ["watching", "gone"]


def test_listeners_hear_changes_in_the_order_they_happened() -> None:
    """Many threads announcing and leaving: each listener's last frame per agent matches the
    table (a listener told out of order would end on a stale state)."""
    import threading

    reg = Registry()
    last: dict[str, str] = {}
    reg.subscribe(lambda f: last.__setitem__(f["agent"], f["state"]))

    def churn(n: int) -> None:
        for i in range(300):
            agent = f"a{(n + i) % 7}"
            if i % 3 == 2:
                reg.leave(agent)
            else:
                reg.announce(agent=agent, state=("idle", "working")[i % 2], ttl_s=60)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = {e.agent: e.state for e in reg.present()}
    assert {a: s for a, s in last.items() if s != "gone"} == table


def test_the_sweeper_tells_expiries_on_its_own(clock: Clock) -> None:
    """The hub's sweeper (aio.sweep_presence) with an injected clock: an expiry is told
    without anyone listing, and an announcement wakes it to recompute its next wake-up."""
    import asyncio

    from mempalace_logstream import aio

    reg = Registry(clock=clock)
    frames: list[dict[str, Any]] = []
    reg.subscribe(frames.append)

    async def until(predicate: Any) -> None:
        async with asyncio.timeout(10):
            while not predicate():
                await asyncio.sleep(0.005)

    async def scenario() -> None:
        sweeper = asyncio.ensure_future(aio.sweep_presence(reg, max_sleep_s=0.02))
        reg.announce(agent="a", state="idle", ttl_s=30)
        clock.ms += 30_000  # nobody lists: only the sweeper can notice
        await until(lambda: any(f["event"] == "expire" for f in frames))
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        reg.announce(agent="b", state="idle", ttl_s=1)
        clock.ms += 1_000
        await asyncio.sleep(0)  # the cancelled sweeper holds no listener any more

    asyncio.run(scenario())
    assert [(f["event"], f["agent"]) for f in frames] == [
        ("announce", "a"),
        ("expire", "a"),
        ("announce", "b"),
    ]
    assert len(reg._listeners) == 1  # only ours: the sweeper unsubscribed when it stopped


def test_a_subscriber_queue_coalesces_per_agent_and_is_bounded() -> None:
    import asyncio

    from mempalace_logstream import aio

    reg = Registry()
    reg.announce(agent="first", state="idle")

    async def scenario() -> aio.PresenceQueue:
        queue = aio.PresenceQueue(reg, limit=3)
        for i in range(10):
            reg.announce(agent=f"a{i}", state="working")
            reg.announce(agent=f"a{i}", state="idle")  # coalesced into the one before
        reg.announce(agent="a8", state="watching")  # moves a8 to the end
        await asyncio.wait_for(queue.wait(), 5)
        got = queue.take()
        assert [(d["agent"], d["state"]) for d in got] == [
            ("a7", "idle"),
            ("a9", "idle"),
            ("a8", "watching"),
        ]
        assert all("event" not in d for d in got)
        assert queue.take() == []
        queue.close()
        return queue

    queue = asyncio.run(scenario())
    assert queue.high_water == 3 and queue.dropped == 8  # "first" (snapshot) and a0..a6
    assert reg._listeners == []


def _entry(agent: str, at_ms: int, note: str | None = None, ttl_ms: int = 60_000) -> Any:
    from mempalace_logstream.presence import Presence

    return Presence(
        agent=agent,
        state="idle",
        task_id=None,
        note=note,
        announced_ms=at_ms,
        expires_ms=at_ms + ttl_ms,
    )


def test_a_shared_cache_applies_changes_in_change_order_and_ignores_stale_ones(
    reg: Registry, clock: Clock
) -> None:
    """Issue 23: a hub's cache of the shared table hears a change once, newest wins."""
    frames: list[tuple[str, str, str]] = []
    reg.subscribe(lambda f: frames.append((f["event"], f["agent"], f["state"])))
    now = clock.ms
    reg.apply(2, _entry("x", now, "two"), {"watch": (now, now + 60_000)})
    reg.apply(1, _entry("x", now - 5, "one"), {})  # older: ignored
    reg.apply(2, _entry("x", now, "two"), {})  # the same change again (its own NOTIFY)
    assert [e.note for e in reg.present()] == ["two"] and "watch" in reg.paths("x")
    reg.apply_leave(3, "x")
    reg.apply(2, _entry("x", now, "two"), {})  # a late announce after the leave: ignored
    assert reg.present() == [] and not reg.announced("x")
    assert frames == [("announce", "x", "idle"), ("leave", "x", "gone")]
    # A change heard after its entry lapsed announces nothing.
    reg.apply(4, _entry("late", now - 120_000), {})
    assert reg.present() == [] and frames[-1] == ("leave", "x", "gone")


def test_a_resync_tells_what_differs_and_makes_older_changes_stale(
    reg: Registry, clock: Clock
) -> None:
    frames: list[tuple[str, str, str | None]] = []
    now = clock.ms
    reg.apply(1, _entry("kept", now), {})
    reg.apply(2, _entry("dropped", now), {})
    reg.apply(3, _entry("moved", now, "old"), {})
    reg.subscribe(lambda f: frames.append((f["event"], f["agent"], f["note"])))
    rows = [(1, _entry("kept", now), {}), (9, _entry("moved", now, "new"), {})]
    rows.append((8, _entry("fresh", now), {}))
    reg.resync(10, rows)
    assert sorted(frames) == [
        ("announce", "fresh", None),
        ("announce", "moved", "new"),
        ("leave", "dropped", None),
    ]
    reg.apply(10, _entry("other", now), {})  # not newer than the table read: stale
    assert len(frames) == 3 and "other" not in [e.agent for e in reg.present()]
    reg.apply(11, _entry("other", now), {})
    assert [e.agent for e in reg.present()] == ["fresh", "kept", "moved", "other"]
