"""The hybrid logical clock: format, tick, observe/receive, seeding, and the store's use of it."""

from __future__ import annotations

import threading

import pytest

from mempalace_logstream import LogStore, hlc

R = "rep_" + "a" * 32


class Wall:
    def __init__(self, ms: int = 1_780_000_000_000) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms


def test_stamps_are_fixed_width_and_parse_back():
    clock = hlc.HybridClock(R, Wall(1_783_038_849_123))
    stamp = clock.now()
    assert stamp == f"1783038849123-000000-{R}"
    parsed = hlc.parse(stamp)
    assert (parsed.wall_ms, parsed.counter, parsed.replica_id) == (1_783_038_849_123, 0, R)
    assert parsed.render() == stamp
    assert hlc.is_valid(stamp) and hlc.is_valid(f"0000000001000-00000a-rep_{'b' * 12}")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x",
        "178303884912-000000-rep_x",
        "1783038849123-00000-rep_x",
        "1783038849123-00000G-rep_x",
        "1783038849123-000000-",
        "1783038849123-0000000-rep_x",
        None,
        7,
    ],
)
def test_malformed_stamps_do_not_parse(bad):
    assert hlc.parse(bad) is None


def test_ticks_within_one_millisecond_use_the_counter():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    stamps = [clock.now() for _ in range(5)]
    assert [hlc.parse(s).counter for s in stamps] == [0, 1, 2, 3, 4]
    assert stamps == sorted(stamps)


def test_a_wall_clock_that_jumps_back_never_moves_the_hlc_back():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    before = clock.now()
    wall.ms -= 3_600_000
    after = clock.now()
    assert after > before and hlc.parse(after).wall_ms == wall.ms + 3_600_000


def test_a_full_counter_rolls_over_into_the_next_millisecond():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    clock.observe(hlc.Stamp(wall.ms, hlc.MAX_COUNTER, R).render())
    nxt = hlc.parse(clock.now())
    assert (nxt.wall_ms, nxt.counter) == (wall.ms + 1, 0)


def test_observe_adopts_a_remote_stamp_so_the_next_tick_is_after_it():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    remote = hlc.Stamp(wall.ms + 30_000, 7, "rep_" + "c" * 32).render()
    assert clock.observe(remote) is True
    nxt = hlc.parse(clock.now())
    assert (nxt.wall_ms, nxt.counter) == (wall.ms + 30_000, 8)


def test_observe_ignores_malformed_and_far_future_stamps():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    assert clock.observe("garbage") is False
    far = hlc.Stamp(wall.ms + hlc.MAX_FUTURE_DRIFT_MS + 1, 0, "rep_x").render()
    assert clock.is_far_future(far)
    assert clock.observe(far) is False
    assert hlc.parse(clock.now()).wall_ms == wall.ms
    edge = hlc.Stamp(wall.ms + hlc.MAX_FUTURE_DRIFT_MS, 0, "rep_x").render()
    assert clock.observe(edge) is True and not clock.is_far_future(edge)


def test_seed_adopts_our_own_stamp_however_far_ahead():
    wall = Wall()
    clock = hlc.HybridClock(R, wall)
    own = hlc.Stamp(wall.ms + 10 * hlc.MAX_FUTURE_DRIFT_MS, 3, R).render()
    clock.seed(own)
    clock.seed(None)
    clock.seed("garbage")
    assert clock.now() > own


def test_concurrent_ticks_are_unique_and_ordered_per_thread():
    clock = hlc.HybridClock(R, Wall())
    out: list[list[str]] = [[] for _ in range(4)]

    def run(i: int) -> None:
        out[i] = [clock.now() for _ in range(500)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [s for chunk in out for s in chunk]
    assert len(set(flat)) == len(flat)
    assert all(chunk == sorted(chunk) for chunk in out)


def test_a_restarted_store_with_a_clock_far_behind_keeps_stamping_forwards(tmp_path):
    path = str(tmp_path / "logstream.sqlite3")
    wall = Wall()
    with LogStore.open(path, clock=wall) as s:
        first = s.event_append(type="x", stream="s", room="r", from_agent="a")
    wall.ms -= 24 * 3_600_000  # a day back: far beyond the 60 s drift rule
    with LogStore.open(path, clock=wall) as s:
        second = s.event_append(type="x", stream="s", room="r", from_agent="a")
    assert second.hlc > first.hlc
    assert second.created_at < first.created_at  # created_at is the wall clock, as it should be


def test_two_stores_on_one_file_stamp_in_commit_order(tmp_path):
    path = str(tmp_path / "logstream.sqlite3")
    wall_a, wall_b = Wall(), Wall(1_780_000_000_000 - 30_000)  # b's clock 30 s behind
    with LogStore.open(path, clock=wall_a) as a, LogStore.open(path, clock=wall_b) as b:
        events = []
        for i in range(6):
            events.append(
                (a if i % 2 else b).event_append(type="x", stream="s", room="r", from_agent="w")
            )
        stamps = [e.hlc for e in sorted(events, key=lambda e: e.seq)]
        assert stamps == sorted(stamps) and len(set(stamps)) == 6


def test_the_clock_keeps_its_last_stamp_only_when_well_formed():
    """`minted` is the very object `tick` last returned, kept only if `is_valid` holds for
    it: the identity verdict takes it unchecked (`stamp is clock.minted`), nothing else."""
    clock = hlc.HybridClock(R, Wall())
    stamp = clock.now()
    assert clock.minted is stamp and hlc.is_valid(stamp)
    assert clock.now() is clock.minted is not stamp
    far = hlc.HybridClock(R, Wall(10**13))  # 14 digits of ms: not a well-formed stamp
    assert not hlc.is_valid(far.now()) and far.minted is None
    spaced = hlc.HybridClock("rep x", Wall())  # a suffix that never makes a valid stamp
    assert not hlc.is_valid(spaced.now()) and spaced.minted is None


@pytest.mark.parametrize("ms", [5, 10**12 - 1, 10**12, 1_783_038_849_123, 10**13 - 1])
def test_a_tick_renders_as_its_stamp_whatever_the_digits_and_counter(ms: int):
    """`tick` writes the stamp without format specs where they change nothing (ms of 13
    digits, a new ms's counter 0): the same text as `Stamp.render` for every ms and counter."""
    wall = Wall(ms)
    clock = hlc.HybridClock(R, wall)
    stamps = [clock.tick() for _ in range(3)]  # counters 0, 1, 2 within the ms
    assert [s for _ms, s in stamps] == [hlc.Stamp(ms, c, R).render() for c in range(3)]
    assert all(clock.minted is None or hlc.is_valid(s) for _ms, s in stamps)
    assert clock.minted == stamps[-1][1]
