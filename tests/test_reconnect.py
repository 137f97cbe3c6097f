"""The CLI's reconnect policy (issue 19, item 2; `reconnect.py` driving backoff.py's rule):
which failures of a hub are an outage (refused, DNS, no answer, 5xx, 503 at the cap or while it
stops) and which are not (a refused token), the capped backoff that honours Retry-After, one
line when the hub is lost and one when it is back, and giving up. Failures come from real
sockets and a real hub; only the clock and the sleep of the policy are manual."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import backoff, errors, http_errors, reconnect, waits
from mempalace_logstream.hub_client import HubClient
from tests.hubkit import live_hub


class Clock:
    """The policy's clock and sleep: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def _policy(clock: Clock, **kw: Any) -> tuple[reconnect.Reconnect, list[reconnect.HubState]]:
    told: list[reconnect.HubState] = []
    policy = reconnect.Reconnect(
        "http://hub", note=told.append, sleep=clock.sleep, clock=clock, **kw
    )
    return policy, told


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there


def _failure(url: str, token: str | None = None, op: str = "event_list") -> errors.LogstreamError:
    with HubClient(url, token=token, timeout=5) as client:
        with pytest.raises(errors.LogstreamError) as caught:
            client.call(op)
    return caught.value


# ----------------------------------------------------------------------------- what is an outage


def test_a_refused_connection_and_a_name_that_does_not_resolve_are_outages() -> None:
    refused = _failure(_dead_url())
    assert backoff.is_transient(refused)
    assert reconnect.reason(refused, "x") == "connection refused"
    unknown = _failure("http://no-such-hub.invalid:8765")
    assert backoff.is_transient(unknown)
    assert reconnect.reason(unknown, "x") == "DNS lookup failed"


def test_a_refused_token_is_not_an_outage(tmp_path: Path) -> None:
    with live_hub(tmp_path, token="s3cret-token-1") as hub:
        refused = _failure(hub.url, token="wrong-token-2")
    assert isinstance(refused, errors.UnauthorizedError)
    assert backoff.is_refusal(refused) and not backoff.is_transient(refused)
    assert "refused the token" in refused.message


def test_the_wait_cap_and_a_stopping_hub_are_outages_with_their_retry_after(
    tmp_path: Path,
) -> None:
    with live_hub(tmp_path) as hub:
        waits.of(hub.store).max_waits = 0  # every wait that would block is refused
        with HubClient(hub.url) as client, pytest.raises(errors.BusyError) as busy:
            client.call("event_wait", since_event_id="tip", timeout_ms=1000)
        assert busy.value.retry_after_s == waits.RETRY_AFTER_S
        assert backoff.is_transient(busy.value)
        assert reconnect.reason(busy.value, hub.url).startswith("HTTP 503: too many open waits")
        waits.of(hub.store).max_waits = 10
        waits.of(hub.store).stop()
        with HubClient(hub.url) as client, pytest.raises(errors.BusyError) as stopping:
            client.call("event_wait", since_event_id="tip", timeout_ms=1000)
    assert stopping.value.retry_after_s == waits.STOP_RETRY_AFTER_S
    assert reconnect.reason(stopping.value, "x") == "HTTP 503: hub is stopping"


def test_a_server_error_of_any_5xx_is_an_outage_and_a_4xx_is_not() -> None:
    failed = http_errors.error_from_answer(500, b"Internal Server Error", "http://hub")
    assert backoff.is_transient(failed)
    assert reconnect.reason(failed, "http://hub") == "answered HTTP 500"
    storage = http_errors.error_from_answer(503, b'{"error": "disk full"}', "http://hub")
    assert isinstance(storage, errors.StorageError) and backoff.is_transient(storage)
    bad = http_errors.error_from_answer(422, b'{"error": "x", "field": "limit"}', "http://hub")
    assert not backoff.is_transient(bad)
    gone = http_errors.error_from_answer(404, b'{"error": "no such event"}', "http://hub")
    assert not backoff.is_transient(gone)


# ----------------------------------------------------------------------------- the policy


def _flaky(failures: list[errors.LogstreamError], answer: Any = "ok") -> Any:
    left = list(failures)

    def call() -> Any:
        if left:
            raise left.pop(0)
        return answer

    return call


def _down() -> errors.LogstreamError:
    return errors.PeerUnavailableError("cannot reach hub http://hub: [Errno 111] refused")


def test_an_outage_is_told_once_when_lost_and_once_when_back() -> None:
    clock = Clock()
    policy, told = _policy(clock)
    assert policy.call(_flaky([_down()] * 12)) == "ok"
    assert [t.state for t in told] == ["lost", "back"]
    assert "hub http://hub is unreachable" in told[0].message
    assert told[1].message.startswith("hub http://hub is back after")
    assert told[1].down_s == pytest.approx(sum(clock.slept))
    assert max(clock.slept) <= reconnect.MAX_DELAY_S
    assert policy.call(_flaky([])) == "ok" and len(told) == 2  # no outage, no line


def test_an_outage_raised_while_a_ctrl_c_is_handled_ends_the_call_at_once() -> None:
    """Ctrl-C cut an answer short and closing the stream then failed as a lost connection:
    that is the Ctrl-C, not an outage to ride through (`tail --hub` hung on it)."""
    clock = Clock()
    policy, told = _policy(clock, give_up_after_s=30)  # without the rule: GaveUpError

    def cut_short() -> str:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise _down() from None  # `from None` hides the cause; the context stays

    with pytest.raises(errors.PeerUnavailableError) as caught:
        policy.call(cut_short)
    assert errors.interrupted(caught.value)
    assert clock.slept == [] and told == []


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    clock = Clock()
    policy, _told = _policy(clock)
    busy = [errors.BusyError("busy", retry_after_s=3), errors.BusyError("busy", retry_after_s=60)]
    policy.call(_flaky(busy))
    assert clock.slept == [3.0, reconnect.MAX_DELAY_S]


def test_a_refused_token_is_raised_at_once_without_a_line() -> None:
    clock = Clock()
    policy, told = _policy(clock)
    refused = errors.UnauthorizedError("hub refused the token")
    with pytest.raises(errors.UnauthorizedError):
        policy.call(_flaky([refused]))
    assert told == [] and clock.slept == []


def test_the_policy_gives_up_after_the_bound_and_says_why() -> None:
    clock = Clock()
    policy, told = _policy(clock, give_up_after_s=10)
    with pytest.raises(reconnect.GaveUpError) as gave_up:
        policy.call(_flaky([_down()] * 1000))
    assert [t.state for t in told] == ["lost", "gave_up"]
    assert sum(clock.slept) == pytest.approx(10.0)  # the last try is right at the bound
    assert "--give-up-after 10" in gave_up.value.message


def test_until_ends_the_ride_at_that_instant_with_a_last_try_right_at_it() -> None:
    """A `wait`'s timeout (issue 25 follow-up): without --give-up-after, the ride ends when
    the instant has passed, after one try made right at it."""
    clock = Clock()
    policy, told = _policy(clock)
    tries: list[float] = []

    def down() -> str:
        tries.append(clock.now)
        raise _down()

    with pytest.raises(reconnect.GaveUpError) as gave_up:
        policy.call(down, until=clock.now + 7.5)
    assert tries[-1] == pytest.approx(107.5) and sum(clock.slept) == pytest.approx(7.5)
    assert [t.state for t in told] == ["lost", "gave_up"]
    assert "giving up once the wait's timeout has passed" in told[0].message
    assert "the wait's timeout has passed" in gave_up.value.message


def test_until_does_not_stop_a_hub_that_comes_back_before_it() -> None:
    clock = Clock()
    policy, told = _policy(clock)
    assert policy.call(_flaky([_down()] * 3), until=clock.now + 60) == "ok"
    assert [t.state for t in told] == ["lost", "back"]


def test_the_nearer_of_until_and_the_bound_gives_up() -> None:
    clock = Clock()
    policy, _told = _policy(clock, give_up_after_s=3)
    with pytest.raises(reconnect.GaveUpError) as gave_up:
        policy.call(_flaky([_down()] * 1000), until=clock.now + 60)
    assert sum(clock.slept) == pytest.approx(3.0) and "--give-up-after 3" in gave_up.value.message
    clock = Clock()
    policy, _told = _policy(clock, give_up_after_s=60)
    with pytest.raises(reconnect.GaveUpError) as gave_up:
        policy.call(_flaky([_down()] * 1000), until=clock.now + 2)
    assert sum(clock.slept) == pytest.approx(2.0)
    assert "the wait's timeout has passed" in gave_up.value.message


@given(
    st.lists(
        st.one_of(
            st.just(0),  # a success
            st.integers(min_value=1, max_value=30),  # an outage of that many failures
        ),
        max_size=12,
    ),
    st.integers(min_value=0, max_value=120),
)
def test_every_outage_makes_two_lines_and_no_wait_exceeds_five_seconds(
    schedule: list[int], retry_after: int
) -> None:
    clock = Clock()
    policy, told = _policy(clock)
    outages = 0
    for failures in schedule:
        kinds = [
            errors.BusyError("b", retry_after_s=retry_after) if i % 2 else _down()
            for i in range(failures)
        ]
        assert policy.call(_flaky(kinds)) == "ok"
        outages += failures > 0
    assert [t.state for t in told] == ["lost", "back"] * outages
    assert all(0 <= s <= reconnect.MAX_DELAY_S for s in clock.slept)


def test_a_negative_bound_is_refused_by_name() -> None:
    with pytest.raises(errors.ValidationError) as refused:
        reconnect.Reconnect("http://hub", note=print, give_up_after_s=-1)
    assert refused.value.field == "give_up_after"


def test_a_503_without_retry_after_stays_a_storage_error() -> None:
    resp = httpx.Response(503, json={"error": "database is locked", "field": None})
    exc = http_errors.error_from_answer(resp.status_code, resp.content, "http://hub")
    assert type(exc) is errors.StorageError and exc.message == "database is locked"
