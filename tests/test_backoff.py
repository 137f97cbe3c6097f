"""backoff.py (issue 19): delays between tries never exceed the cap, which failures are worth
another try, and the lines a follower says about its hub (lost once, back once, refused)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import backoff, errors, http_errors

HUB = "http://127.0.0.1:8765"


@given(
    first=st.floats(min_value=0.001, max_value=5.0),
    cap=st.floats(min_value=0.01, max_value=5.0),
    tries=st.integers(min_value=1, max_value=60),
    resets=st.sets(st.integers(min_value=0, max_value=59)),
)
def test_delays_stay_under_the_cap_and_grow_until_a_reset(
    first: float, cap: float, tries: int, resets: set[int]
) -> None:
    pause = backoff.Backoff(first_s=min(first, cap), cap_s=cap)
    for i in range(tries):
        delay = pause.delay()
        assert 0 < delay <= backoff.MAX_DELAY_S and delay <= cap
        if i in resets:
            pause.reset()
            assert pause.delay() <= min(first, cap)


def test_the_default_backoff_reaches_its_5_s_cap_and_stays_there() -> None:
    pause = backoff.Backoff()
    delays = [pause.delay() for _ in range(20)]
    assert max(delays) <= 5.0 and min(delays[-5:]) >= 2.5  # the upper half of the cap


@pytest.mark.parametrize(
    ("status", "transient", "refusal"),
    [
        (401, False, True),
        (403, False, True),
        (500, True, False),
        (502, True, False),
        (503, True, False),
        (504, True, False),
        (404, False, False),
        (422, False, False),
        (409, False, False),
    ],
)
def test_hub_answers_are_sorted_into_transient_refused_and_final(
    status: int, transient: bool, refusal: bool
) -> None:
    exc = http_errors.error_from_answer(status, b'{"error": "x", "field": null}', HUB)
    assert (backoff.is_transient(exc), backoff.is_refusal(exc)) == (transient, refusal)


def test_an_unreachable_hub_is_transient_and_its_reason_does_not_repeat_the_url() -> None:
    exc = errors.PeerUnavailableError(f"cannot reach hub {HUB}: [Errno 111] Connection refused")
    assert backoff.is_transient(exc) and not backoff.is_refusal(exc)
    assert backoff.reason(exc, f"hub {HUB}") == "[Errno 111] Connection refused"


def test_an_outage_is_said_once_when_lost_once_when_back_and_a_refusal_once() -> None:
    said: list[str] = []
    outage = backoff.Outage(f"hub {HUB}", said.append, meanwhile="waiting", back="going on")
    down = errors.PeerUnavailableError(f"cannot reach hub {HUB}: [Errno 111] Connection refused")
    outage.ok()
    for _ in range(5):
        outage.failed(down)
    outage.ok()
    outage.ok()
    assert said == [
        f"hub {HUB} is unreachable ([Errno 111] Connection refused); waiting; retrying at most "
        "5 s apart",
        f"hub {HUB} is back; going on",
    ]
    refused = http_errors.error_from_answer(401, b'{"error": "wrong token"}', HUB)
    outage.refused(refused, "nothing is pushed")
    assert said[-1].startswith(f"hub {HUB} refused the token: wrong token")
    assert said[-1].endswith("not retrying: nothing is pushed")
