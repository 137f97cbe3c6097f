"""The dashboard's login session at the HTTP level (issue 14): what the cookie may and may not
do, on a hub with a token. The browser side is tests/test_dashboard.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from mempalace_logstream.http import session
from mempalace_logstream.store import sessions
from tests.hubkit import LiveHub, live_hub

TOKEN = "tok-session-7"
NOTE = {"type": "note", "stream": "s", "room": "r", "body": "hi"}
CSRF = {"X-Logstream-Dashboard": "1"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    with live_hub(tmp_path_factory.mktemp("session"), token=TOKEN, host="0.0.0.0") as h:
        yield h


@contextmanager
def login(hub: LiveHub, **form: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hub.url) as client:
        resp = client.post("/dashboard/login", data={"token": TOKEN, **form})
        assert resp.status_code == 303 and resp.headers["location"] == "/"
        cookie = resp.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        assert "Secure" not in cookie  # plain http here; https adds it
        yield client


def test_without_credentials_the_root_is_the_login_form_and_the_api_refuses(
    hub: LiveHub,
) -> None:
    root = httpx.get(hub.url + "/")
    assert root.status_code == 401 and 'name="token"' in root.text and 'method="post"' in root.text
    assert httpx.get(hub.url + "/v1/events").status_code == 401
    assert httpx.get(hub.url + "/dashboard/assets/app.js").status_code == 200  # code, no data
    wrong = httpx.post(hub.url + "/dashboard/login", data={"token": "nope"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert "That is not this hub" in wrong.text
    foreign = {"Origin": "https://evil.example"}
    cross = httpx.post(hub.url + "/dashboard/login", data={"token": TOKEN}, headers=foreign)
    assert cross.status_code == 403 and "set-cookie" not in cross.headers


def test_a_read_only_session_reads_and_never_writes(hub: LiveHub) -> None:
    with login(hub) as c:
        assert c.get("/").status_code == 200 and "app.js" in c.get("/").text
        assert c.get("/v1/events").status_code == 200
        info = c.get("/dashboard/session").json()
        assert info["cookie_session"] and info["operator"] is None and not info["can_write"]
        assert c.post("/v1/task_list", json={}, headers=CSRF).status_code == 200
        refused = c.post("/v1/event_append", json={**NOTE, "from_agent": "x"}, headers=CSRF)
        assert refused.status_code == 403 and refused.json()["field"] == "token"


def test_an_operator_session_writes_with_the_header_and_from_this_hub_only(hub: LiveHub) -> None:
    with login(hub, operator="operator") as c:
        info = c.get("/dashboard/session").json()
        assert info["operator"] == "operator" and info["can_write"]
        body = {**NOTE, "from_agent": "operator"}
        no_header = c.post("/v1/event_append", json=body)
        assert no_header.status_code == 403 and no_header.json()["field"] == "csrf"
        foreign = c.post(
            "/v1/event_append", json=body, headers={**CSRF, "Origin": "https://evil.example"}
        )
        assert foreign.status_code == 403 and foreign.json()["field"] == "Origin"
        ok = c.post("/v1/event_append", json=body, headers={**CSRF, "Origin": hub.url})
        assert ok.status_code == 200 and ok.json()["event"]["from_agent"] == "operator"
        # Only the operator's two writes: nothing else that mutates.
        other = c.post("/v1/presence_announce", json={"agent": "x", "state": "idle"}, headers=CSRF)
        assert other.status_code == 403
        out = c.post("/dashboard/logout", headers=CSRF)
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]


def test_a_forged_or_expired_cookie_is_no_session(hub: LiveHub) -> None:
    forged = session.cookie_value("another-token", "operator")
    expired = session.cookie_value(TOKEN, None, now_s=1_000_000)
    for value in (forged, expired, "v1:9999999999::00", "garbage"):
        with httpx.Client(base_url=hub.url, cookies={session.COOKIE: value}) as c:
            assert c.get("/v1/events").status_code == 401, value
            assert c.get("/").status_code == 401, value  # the login form again
    assert session.session_of(TOKEN, f"{session.COOKIE}={expired}") is None


def test_a_loopback_hub_without_a_token_serves_the_page_as_it_serves_the_api(
    tmp_path: Path,
) -> None:
    with live_hub(tmp_path) as hub:
        page = httpx.get(hub.url + "/")
        assert page.status_code == 200 and "/dashboard/assets/app.js" in page.text
        info = httpx.get(hub.url + "/dashboard/session").json()
        assert not info["token_required"] and info["can_write"]
        evil = httpx.get(hub.url + "/", headers={"Origin": "http://evil.example"})
        assert evil.status_code == 403  # the loopback Origin guard still applies


# --------------------------------------------------------------------------- issue 18 item 12


def _from(address: str, hub: LiveHub) -> httpx.Client:
    """A client whose connections come from `address` (any of 127.0.0.0/8 reaches the hub)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=hub.url, transport=transport, timeout=30)


def test_failed_logins_are_rate_limited_per_address_and_logged_without_the_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="mempalace_logstream.dashboard")
    with live_hub(tmp_path, token=TOKEN, host="0.0.0.0") as hub:
        with _from("127.0.0.2", hub) as guesser, _from("127.0.0.3", hub) as other:
            guesses = [f"guess-{i}-not-the-token" for i in range(session.MAX_LOGIN_FAILURES)]
            for guess in guesses:
                assert guesser.post("/dashboard/login", data={"token": guess}).status_code == 401
            locked = guesser.post("/dashboard/login", data={"token": TOKEN})
            assert locked.status_code == 429 and "set-cookie" not in locked.headers
            assert 0 < int(locked.headers["retry-after"]) <= session.LOGIN_WINDOW_S
            assert "Too many failed logins" in locked.text
            # Another address is not held back by the first one's failures.
            ok = other.post("/dashboard/login", data={"token": TOKEN})
            assert ok.status_code == 303 and "set-cookie" in ok.headers
    logged = [r.getMessage() for r in caplog.records if r.name == "mempalace_logstream.dashboard"]
    assert len([m for m in logged if "failed dashboard login from 127.0.0.2" in m]) == len(guesses)
    assert any("127.0.0.2" in m and "locked" in m for m in logged), logged
    assert not any(g in m for m in logged for g in [*guesses, TOKEN]), logged


def test_logout_ends_the_session_on_the_hub_so_a_copied_cookie_stops_working(
    hub: LiveHub,
) -> None:
    with login(hub, operator="operator") as c:
        copied = c.cookies[session.COOKIE]
        assert c.get("/v1/events").status_code == 200
        assert c.post("/dashboard/logout", headers=CSRF).status_code == 303
    with httpx.Client(base_url=hub.url, cookies={session.COOKIE: copied}) as thief:
        assert thief.get("/v1/events").status_code == 401
        assert thief.get("/").status_code == 401  # the login form again
        body = {**NOTE, "from_agent": "operator"}
        assert thief.post("/v1/event_append", json=body, headers=CSRF).status_code == 401
    with login(hub) as again:  # a new login works as before
        assert again.get("/v1/events").status_code == 200


def test_a_logged_out_session_stays_out_after_the_hub_restarts(tmp_path: Path) -> None:
    path = tmp_path / "hub.sqlite3"
    with live_hub(tmp_path, token=TOKEN, host="0.0.0.0") as hub:
        with login(hub) as c:
            copied = c.cookies[session.COOKIE]
            c.post("/dashboard/logout", headers=CSRF)
    assert path.exists()
    with live_hub(tmp_path, token=TOKEN, host="0.0.0.0") as hub:
        with httpx.Client(base_url=hub.url, cookies={session.COOKIE: copied}) as thief:
            assert thief.get("/v1/events").status_code == 401


def test_an_operator_session_writes_only_as_its_operator(hub: LiveHub) -> None:
    with login(hub, operator="ops") as c:
        other = c.post("/v1/event_append", json={**NOTE, "from_agent": "alice"}, headers=CSRF)
        assert other.status_code == 403 and other.json()["field"] == "from_agent", other.text
        assert "'ops'" in other.json()["error"]
        own = c.post("/v1/event_append", json={**NOTE, "from_agent": "ops"}, headers=CSRF)
        assert own.status_code == 200 and own.json()["event"]["from_agent"] == "ops"
        task = {
            "project": "demo",
            "from_agent": "alice",
            "to_agent": "bob",
            "goal": "a task of alice's",
            "branch": "main",
            "base_commit": "abc1234",
            "done": "tests pass",
        }
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        made = httpx.post(f"{hub.url}/v1/task_create", json=task, headers=bearer).json()
        tid = made["task"]["correlation_id"]
        cancel = {"task_id": tid, "action": "cancel", "from_agent": "alice"}
        moved = c.post("/v1/task_update", json=cancel, headers=CSRF)
        assert moved.status_code == 403 and moved.json()["field"] == "from_agent", moved.text


@pytest.mark.parametrize(
    "path", ["/", "/dashboard/assets/app.js", "/about", "/docs", "/healthz", "/v1/events"]
)
def test_every_page_refuses_to_be_framed(hub: LiveHub, path: str) -> None:
    with httpx.Client(base_url=hub.url) as anonymous, login(hub) as logged_in:
        for client in (anonymous, logged_in):
            resp = client.get(path)
            assert resp.headers.get("x-frame-options") == "DENY", (path, resp.status_code)
            assert "frame-ancestors 'none'" in resp.headers.get("content-security-policy", "")


def test_ended_sessions_are_kept_in_the_database_until_they_expire(store) -> None:
    """The store's side of logout, on both backends: kept, read by every hub of the database,
    and forgotten once past its expiry (the next logout prunes it)."""
    sessions.end_session(store, "a" * 32, 2_000, now_s=1_000)
    sessions.end_session(store, "a" * 32, 2_000, now_s=1_000)  # twice: one row
    sessions.end_session(store, "b" * 32, 5_000, now_s=1_500)
    assert sessions.ended_sessions(store) == {"a" * 32: 2_000, "b" * 32: 5_000}
    sessions.end_session(store, "c" * 32, 9_000, now_s=2_500)  # "a" has expired by now
    assert sessions.ended_sessions(store) == {"b" * 32: 5_000, "c" * 32: 9_000}
