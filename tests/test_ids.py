"""Event and artifact ids (store/ids.py): well formed, never repeated, across threads and a
fork, and the time stamps beside them."""

from __future__ import annotations

import os
import re
import threading
from datetime import UTC, datetime

import pytest

from mempalace_logstream.store import ids

ID_RE = re.compile(r"^evt_\d{8}T\d{6}_[0-9a-f]{20}$")
MS = 1_780_000_000_123


def test_ids_are_well_formed_and_distinct_across_many_draws():
    made = [ids.new_id("evt", MS) for _ in range(1000)]  # many draws of the random parts
    assert all(ID_RE.match(i) for i in made), made[:3]
    assert len(set(made)) == len(made)
    pair = [ids.new_id_and_time("evt", MS) for _ in range(200)]
    assert all(ID_RE.match(i) and at == ids.now_text(MS) for i, at in pair)
    assert len({i for i, _at in pair} | set(made)) == 1200


def test_threads_never_get_the_same_random_part():
    out: list[list[str]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def draw(mine: list[str]) -> None:
        start.wait()
        mine.extend(ids.new_id("evt", MS) for _ in range(500))

    threads = [threading.Thread(target=draw, args=(mine,)) for mine in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for mine in out for i in mine]
    assert len(set(every)) == len(every) == 2000


def test_a_forked_child_draws_its_own_random_parts():
    """The parent drew parts ahead; a child forked then must not hand out the same ones."""
    ids.new_id("evt", MS)  # the parent holds undrawn parts now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids to the parent, then out at once
        try:
            os.write(write, " ".join(ids.new_id("evt", MS) for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    assert os.waitpid(pid, 0)[1] == 0
    parent = {ids.new_id("evt", MS) for _ in range(128)}  # more than one draw holds
    assert len(child) == 8 and not child & parent


@pytest.mark.parametrize("ms", [0, 7, 999, 1000, MS, MS - 123 + 999])
def test_now_text_is_the_utc_time_to_the_millisecond(ms: int):
    want = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
    assert ids.now_text(ms) == f"{want}{ms % 1000:03d}Z"
    assert ids.new_id_and_time("evt", ms)[1] == ids.now_text(ms)
