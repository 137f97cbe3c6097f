"""Convergence through the NATS bridge (issue 24, RFC 0011) as a property: random appends on
three logs while their bridges are randomly stopped and started again, then every bridge runs:
every log holds every event exactly once, with the author's id, position and HLC. One real
nats-server for the module; each example on its own stream and subject prefix."""

from __future__ import annotations

import secrets
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore
from mempalace_logstream.natsbridge import BridgeConfig, BridgeThread
from tests.logfiles import new_log
from tests.natskit import NatsServer, wait_for

pytestmark = pytest.mark.slow

move = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.sampled_from(["bob", "*", None, "a.b c"])),
    st.tuples(st.sampled_from(["stop", "start"]), st.integers(0, 2)),
)


@pytest.fixture(scope="module")
def nats_url(tmp_path_factory: pytest.TempPathFactory):
    srv = NatsServer(tmp_path_factory.mktemp("nats")).start()
    yield srv.url
    srv.stop()


def _held(store: LogStore) -> Counter[tuple[str, str, int, str]]:
    events = store.event_list(limit=500, order="asc").events
    return Counter((e.id, e.origin_replica, e.origin_seq, e.hlc) for e in events)


@settings(
    max_examples=settings().max_examples // 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(moves=st.lists(move, max_size=30))
def test_bridged_logs_converge_exactly_once(nats_url: str, moves: list[tuple]) -> None:
    tag = secrets.token_hex(4)
    cfg = BridgeConfig(url=nats_url, stream=f"P{tag}", prefix=f"p{tag}")
    with tempfile.TemporaryDirectory() as root:
        logs = [LogStore.open(new_log(Path(root) / f"{i}.sqlite3")) for i in range(3)]
        running: dict[int, BridgeThread] = {}

        def start(i: int) -> None:
            if i not in running:
                running[i] = BridgeThread(logs[i], cfg, lambda _line: None).start()

        def stop(i: int) -> None:
            if i in running:
                running.pop(i).stop()

        try:
            written = set()
            for m in moves:
                if m[0] == "append":
                    _, i, to = m
                    ev = logs[i].event_append(
                        type="note", stream="s", room="r", from_agent=f"w{i}", to_agent=to, body="x"
                    )
                    written.add((ev.id, ev.origin_replica, ev.origin_seq, ev.hlc))
                elif m[0] == "start":
                    start(m[1])
                else:
                    stop(m[1])
            for i in range(3):
                start(i)

            def converged() -> bool:
                held = [_held(s) for s in logs]
                return all(set(h) == written and max(h.values(), default=1) == 1 for h in held)

            try:
                wait_for(converged, 20, "three logs to hold every event once")
            except AssertionError as exc:
                missing = [sorted(k[0] for k in written - set(_held(s))) for s in logs]
                raise AssertionError(f"{exc}; missing per log: {missing}") from None
        finally:
            for i in list(running):
                stop(i)
            for s in logs:
                s.close()
