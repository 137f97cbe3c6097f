"""Clients that ride through a hub outage (issue 19, items 2 and 5): `watch --follow --hub`,
`tail --hub --json`, Monitor mode and `wait --hub`, started against a real `logstream serve`
that is stopped for 10 s and started again on the same port while another process keeps
appending (through the hub while it is up, straight into the log meanwhile): every event
arrives exactly once at each client, in order; each says once that the hub was lost (and why)
and once that it is back. A token refused after a restart is not an outage (one line, exit 1);
`--give-up-after` bounds one (exit 3), and so does a `wait`'s own timeout without it, a
hub that never answers included. Real subprocesses on both backends
(`tests/outagekit.py`)."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import httpx
import pytest

from mempalace_logstream import LogStore
from tests.outagekit import (
    Appender,
    CliProcess,
    HubProcess,
    at_wait_cap,
    cli_env,
    free_port,
    running_hub,
    until,
)

OUTAGE_S = 10.0
REASONS = ("HTTP 503: hub is stopping", "connection refused", "connection lost")


def _seed(hub: HubProcess) -> str:
    body = {"type": "note", "stream": "s", "room": "r", "from_agent": "alice", "body": "seed"}
    resp = httpx.post(hub.url + "/v1/event_append", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["event"]["id"])


def _watch_ids(lines: list[str]) -> list[str]:
    return [e["id"] for line in lines if line for e in json.loads(line)["events"]]


def _tail_ids(lines: list[str]) -> list[str]:
    return [json.loads(line)["id"] for line in lines if line]


def _monitor_count(lines: list[str]) -> int:
    """The events Monitor-mode lines tell of: one per line, or the count of a burst line."""
    counts = [re.match(r"\[logstream\] (\d+) new events for ", ln) for ln in lines]
    return sum(int(m.group(1)) if m else 1 for m in counts)


def _told(proc: CliProcess, what: str) -> list[str]:
    return [line for line in proc.err.lines if what in line]


@pytest.mark.slow
def test_watch_and_tail_get_every_event_once_in_order_across_a_hub_restart(
    db_url: str, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    with running_hub(db_url, tmp_path) as hub:
        seed = _seed(hub)
        watch = CliProcess(
            [
                *("watch", "--agent", "bob", "--follow", "--json", "--hub", hub.url),
                *("--since-event-id", seed, "--state-file", str(tmp_path / "watch.json")),
            ],
            env,
        )
        tail = CliProcess(["tail", "--hub", hub.url, "--json", "--since-event-id", seed], env)
        mon = CliProcess(
            [
                *("tail", "--agent", "bob", "--monitor", "--hub", hub.url),
                *("--since-event-id", seed, "--state-file", str(tmp_path / "monitor.json")),
            ],
            env,
        )
        try:
            with Appender(hub, db_url) as appender:
                appender.wait_for_via("hub", 30)
                assert watch.out.wait_for(lambda ls: len(_watch_ids(ls)) >= 5, 60)
                assert tail.out.wait_for(lambda ls: len(_tail_ids(ls)) >= 5, 60)
                hub.stop()  # SIGTERM while both long-poll it
                down_at = time.monotonic()
                appender.wait_for_via("file", 10)
                time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))  # the outage
                through_hub = appender.via["hub"]
                hub.start()
                appender.wait_for_via("hub", through_hub + 30)
            sent = appender.ids
            assert appender.via["file"] >= 10
            assert watch.out.wait_for(lambda ls: len(_watch_ids(ls)) >= len(sent), 60)
            assert tail.out.wait_for(lambda ls: len(_tail_ids(ls)) >= len(sent), 60)
            assert _watch_ids(watch.out.lines) == sent  # once each, in order
            assert _tail_ids(tail.out.lines) == sent
            # Monitor mode tells of each event once (bursts in one line that counts them).
            assert mon.out.wait_for(lambda ls: _monitor_count(ls) >= len(sent), 60)
            assert _monitor_count(mon.out.lines) == len(sent), mon.out.lines
            for proc in (watch, tail, mon):
                lost, back = _told(proc, "is unreachable ("), _told(proc, "is back after")
                assert len(lost) == 1 and len(back) == 1, proc.err.text()
                assert hub.url in lost[0], lost
                # It was long-polling (the stop answered 503), or between two polls.
                assert any(why in lost[0] for why in REASONS), lost
                assert "Traceback" not in proc.err.text()
                assert proc.proc.poll() is None  # still following
        finally:
            watch.stop()
            tail.stop()
            mon.stop()
        assert "Traceback" not in "\n".join(log.text() for log in hub.logs)


@pytest.mark.slow
def test_wait_rides_through_a_restart_and_sees_what_arrived_meanwhile(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "hub.sqlite3")
    with running_hub(db, tmp_path, "--wait-max-clients", "1") as hub:
        _seed(hub)
        wait = CliProcess(
            [
                *("wait", "--hub", hub.url, "--to-agent", "bob", "--json"),
                *("--since-event-id", "tip", "--timeout-ms", "120000"),
            ],
            cli_env(tmp_path),
        )
        try:
            # the wait blocks at the hub (or, if it ended instead, say how)
            until(lambda: wait.proc.poll() is not None or at_wait_cap(hub.url), timeout=60)
            assert wait.proc.poll() is None, (wait.proc.returncode, wait.err.text())
            hub.stop()
            assert wait.err.wait_for(lambda ls: any("is unreachable (" in ln for ln in ls), 30)
            with LogStore.open(db) as store:  # while the hub is down: straight into the log
                sent = store.event_append(
                    type="note", stream="s", room="r", from_agent="alice", to_agent="bob"
                )
            hub.start()
            assert wait.wait(60) == 0, wait.err.text()
        finally:
            wait.kill()
        out = json.loads(wait.out.text())
        assert [e["id"] for e in out["events"]] == [sent.id]
        assert len(_told(wait, "is unreachable (")) == 1 and len(_told(wait, "is back after")) == 1


@pytest.mark.slow
@pytest.mark.parametrize("command", ["watch", "tail", "wait"])
def test_a_token_refused_after_a_restart_is_said_once_and_exits_1(
    tmp_path: Path, command: str
) -> None:
    """The stop is an outage (ridden through); the hub back with another token refuses the
    client's: that is not an outage, so the client says so and exits 1."""
    db = str(tmp_path / "hub.sqlite3")
    hub = HubProcess(db, tmp_path, "--token", "first-token-123")
    hub.start()
    try:
        args = [command, "--hub", hub.url]
        if command == "watch":
            args += ["--agent", "bob", "--follow", "--no-presence", "--state-file", ""]
        if command == "wait":
            args += ["--since-event-id", "tip", "--timeout-ms", "120000"]
        proc = CliProcess(args, cli_env(tmp_path, LOGSTREAM_TOKEN="first-token-123"))
        hub.stop()
        assert proc.err.wait_for(lambda ls: any("is unreachable (" in ln for ln in ls), 60)
        hub.extra = ("--token", "second-token-456")
        hub.start()
        assert proc.wait(60) == 1, proc.err.text()
    finally:
        hub.kill()
    err = proc.err.text()
    assert len(_told(proc, "refused the token")) == 1, err
    assert "first-token-123" not in err and "is back after" not in err
    assert err.splitlines()[-1].startswith("error: hub "), err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["watch", "tail", "wait"])
def test_give_up_after_bounds_an_outage_with_exit_3(tmp_path: Path, command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = [command, "--hub", url, "--give-up-after", "1"]
    if command == "watch":
        args += ["--agent", "bob", "--follow", "--no-presence", "--state-file", ""]
    proc = CliProcess(args, cli_env(tmp_path))
    assert proc.wait(60) == 3, proc.err.text()
    lost, gave_up = _told(proc, "is unreachable ("), _told(proc, "gave up on hub")
    assert len(lost) == 1 and "connection refused" in lost[0], proc.err.text()
    assert len(gave_up) == 1 and "--give-up-after 1" in gave_up[0]


@pytest.mark.slow
def test_a_wait_gives_up_on_a_lost_hub_once_its_timeout_has_passed(tmp_path: Path) -> None:
    """Without --give-up-after a `wait` is still bounded: by its own --timeout-ms (exit 3,
    not 2, since what arrived meanwhile is unknown). Nothing listens at the port."""
    url = f"http://127.0.0.1:{free_port()}"
    proc = CliProcess(["wait", "--hub", url, "--timeout-ms", "1500"], cli_env(tmp_path))
    assert proc.wait(60) == 3, proc.err.text()
    lost, gave_up = _told(proc, "is unreachable ("), _told(proc, "gave up on hub")
    assert len(lost) == 1 and "giving up once the wait's timeout has passed" in lost[0]
    assert len(gave_up) == 1 and "the wait's timeout has passed" in gave_up[0], proc.err.text()


@pytest.mark.slow
def test_a_wait_on_a_hub_that_never_answers_ends_within_its_deadlines(tmp_path: Path) -> None:
    """A hub that accepts the connection and never answers (a listening socket nobody
    accepts from): each call ends at its deadline (the wait's timeout plus the hub timeout,
    here 1 s), and the wait gives up once its timeout has passed, instead of retrying a
    silent hub for ever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = cli_env(tmp_path, LOGSTREAM_HUB_TIMEOUT="1")
        proc = CliProcess(["wait", "--hub", url, "--to-agent", "bob", "--timeout-ms", "500"], env)
        assert proc.wait(60) == 3, proc.err.text()
    lost, gave_up = _told(proc, "is unreachable ("), _told(proc, "gave up on hub")
    assert len(lost) == 1 and "no answer in time" in lost[0], proc.err.text()
    assert len(gave_up) == 1 and "the wait's timeout has passed" in gave_up[0]


def test_give_up_after_refuses_a_negative_bound(tmp_path: Path) -> None:
    args = ["tail", "--hub", "http://127.0.0.1:9", "--give-up-after", "-1"]
    proc = CliProcess(args, cli_env(tmp_path))
    assert proc.wait(60) == 2
    assert "Invalid value for '--give-up-after'" in proc.err.text(), proc.err.text()
