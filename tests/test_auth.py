"""Hub auth (S-6.4): bearer token, Host/Origin pinning on loopback, refusing an open bind, and
tokens never shown."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mempalace_logstream import errors
from mempalace_logstream.http import HubSettings, is_loopback_host
from tests.conftest import REPO, run_cli
from tests.hubkit import live_hub

TOKEN = "tok-3f9a1c77d2e54b8a"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(tmp_path_factory.mktemp("auth"), token=TOKEN, allowed_hosts=("hub.lan",)) as h:
        yield h


def test_requests_without_the_token_are_401_except_healthz(hub) -> None:
    with httpx.Client(base_url=hub.url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200
        for method, path in (
            ("GET", "/v1/stats"),
            ("POST", "/v1/event_list"),
            ("GET", "/v1/stream"),
            ("POST", "/mcp"),
            ("GET", "/openapi.json"),
        ):
            resp = c.request(method, path)
            assert resp.status_code == 401, path
            assert resp.headers["www-authenticate"] == "Bearer"
            assert TOKEN not in resp.text
        wrong = c.get("/v1/stats", headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        bare = c.get("/v1/stats", headers={"Authorization": TOKEN})
        assert bare.status_code == 401
        ok = c.get("/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200


def test_a_foreign_host_or_origin_is_403_on_a_loopback_hub(hub) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=hub.url, timeout=10, headers=auth) as c:
        port = hub.url.rsplit(":", 1)[1]
        assert c.get("/v1/stats", headers={"Host": f"evil.example:{port}"}).status_code == 403
        assert c.get("/healthz", headers={"Host": "rebind.attacker.test"}).status_code == 403
        assert c.get("/v1/stats", headers={"Origin": "https://evil.example"}).status_code == 403
        assert c.get("/v1/stats", headers={"Origin": "null"}).status_code == 403
        assert c.get("/v1/stats", headers={"Origin": f"http://localhost:{port}"}).status_code == 200
        assert c.get("/v1/stats", headers={"Host": f"localhost:{port}"}).status_code == 200
        assert c.get("/v1/stats", headers={"Host": "hub.lan"}).status_code == 200  # allowed


def test_host_pinning_is_off_for_a_token_protected_non_loopback_hub(tmp_path: Path) -> None:
    with live_hub(tmp_path, host="0.0.0.0", token=TOKEN) as h:
        resp = httpx.get(
            h.url + "/v1/stats",
            headers={"Host": "hub.example.org", "Authorization": f"Bearer {TOKEN}"},
        )
        assert resp.status_code == 200


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "192.168.1.4", "hub.example.org"):
        assert not is_loopback_host(host), host


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_auth_scheme_is_case_insensitive(hub, scheme: str) -> None:
    with httpx.Client(base_url=hub.url, timeout=10) as c:
        resp = c.get("/v1/stats", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert resp.status_code == 200
        for wrong in (f"Basic {TOKEN}", f"{scheme}{TOKEN}", f"{scheme} x", scheme):
            assert c.get("/v1/stats", headers={"Authorization": wrong}).status_code == 401


@pytest.mark.parametrize("token", [" ", "   ", "\t"])
def test_a_blank_token_is_refused_by_the_settings(token: str) -> None:
    with pytest.raises(errors.ValidationError, match="token is blank"):
        HubSettings(token=token)


@pytest.mark.slow
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_serve_refuses_a_blank_token_like_a_missing_one(tmp_path: Path, host: str) -> None:
    proc = run_cli(
        "serve", "--host", host, "--port", "0", "--db", str(tmp_path / "x.db"), "--token", "   "
    )
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == (
        "error: token is blank (only whitespace); pass a real token or leave it out"
    )
    assert not (tmp_path / "x.db").exists()


def test_settings_repr_hides_the_token() -> None:
    assert TOKEN not in repr(HubSettings(token=TOKEN))


@pytest.mark.slow
def test_serve_refuses_a_non_loopback_bind_without_a_token(tmp_path: Path) -> None:
    proc = run_cli(
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--db",
        str(tmp_path / "x.db"),
        env={"LOGSTREAM_TOKEN": ""},
    )
    assert proc.returncode == 1
    assert b"refusing to bind 0.0.0.0 without a token" in proc.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_serve_prints_its_url_and_never_the_token(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGSTREAM_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mempalace_logstream",
            "serve",
            "--port",
            "0",
            "--db",
            str(tmp_path / "s.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        line = read_line(proc, timeout=60)
        assert line.startswith("logstream hub listening on http://127.0.0.1:")
        url = line.split()[4]
        ok = httpx.get(url + "/v1/stats", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert httpx.get(url + "/v1/stats").status_code == 401
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert TOKEN.encode() not in out + err + line.encode()


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        assert remaining > 0 and proc.poll() is None, "serve did not print its URL"
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            buf += os.read(proc.stdout.fileno(), 1)
    return buf.decode().strip()
