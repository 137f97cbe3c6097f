"""Sync over real HTTP between hubs built by `http.create_app` and served by uvicorn on
loopback ports: the /sync routes' shapes and errors, push auth, two-hub convergence, the
background loop and the estate route."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mempalace_logstream import LogStore, errors, migrate, replication, sync
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.http import HubSettings, create_app
from tests.conftest import run_cli

pytestmark = pytest.mark.slow
TOKEN = "sync-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_hub(store: LogStore, token: str | None = TOKEN) -> Iterator[str]:
    """The real hub app on a free loopback port, in a uvicorn thread; yields its URL."""
    import uvicorn

    port = free_port()
    app = create_app(store, HubSettings(port=port, token=token))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "hub did not start"
        time.sleep(0.01)  # polling a flag that uvicorn sets; not a settle-sleep
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tpl") / "template.sqlite3"
    eng = engine_mod.create_engine(f"sqlite:///{path}")
    migrate.upgrade(eng)
    eng.dispose()
    return path


@pytest.fixture
def make(tmp_path: Path, template: Path):
    opened: list[LogStore] = []

    def factory(name: str) -> LogStore:
        path = tmp_path / f"{name}.sqlite3"
        shutil.copy(template, path)
        s = LogStore.open(str(path), durability="normal")
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


def note(store: LogStore, body: str = "hi", **kw: Any):
    return store.event_append(type="note", stream="s", room="r", from_agent="a", body=body, **kw)


def get(url: str, path: str, token: str | None = TOKEN, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url + path, params=params, headers=headers, timeout=30)


def test_sync_routes_serve_the_reference_shapes(make) -> None:
    a = make("a")
    art = a.artifact_put(kind="patch", content="diff\n", created_by="x")
    ev = note(a, "with art", artifact_ids=[art.id])
    with running_hub(a) as url:
        vv = get(url, "/sync/version_vector").json()
        assert vv["replica_id"] == a.replica_id and vv["version_vector"] == {a.replica_id: 1}
        assert {"profile", "profiles"} <= set(vv)
        ops = get(url, "/sync/ops", origin=a.replica_id, after=0, limit=10).json()
        assert set(ops) == {"origin", "events", "count"} and ops["count"] == 1
        assert ops["events"][0]["id"] == ev.id and ops["events"][0]["artifact_ids"] == [art.id]
        got = get(url, "/sync/artifact", id=art.id).json()["artifact"]
        assert got["content"] == "diff\n" and got["sha256"] == hashlib.sha256(b"diff\n").hexdigest()
        assert get(url, "/sync/ops", origin=a.replica_id, after=5).json()["events"] == []
        errors_expected = [
            ({"origin": ""}, "origin must be a non-empty string"),
            ({"origin": "x", "after": "x"}, "invalid literal for int() with base 10: 'x'"),
            ({"origin": "x", "after": -1}, "after_seq must be a non-negative integer"),
            ({"origin": "x", "limit": 0}, "limit must be a positive integer"),
        ]
        for params, message in errors_expected:
            resp = get(url, "/sync/ops", **params)
            assert (resp.status_code, resp.json()) == (400, {"error": message})
        missing = get(url, "/sync/artifact", id="art_nope")
        assert (missing.status_code, missing.json()) == (
            404,
            {"error": "artifact 'art_nope' not found"},
        )
        assert get(url, "/sync/artifact", id="").status_code == 400
        assert get(url, "/sync/version_vector", token=None).status_code == 401


def test_batched_artifact_route_and_push_need_the_token_and_validate(make) -> None:
    a, b = make("a"), make("b")
    arts = [a.artifact_put(kind="note", content=f"c{i}", created_by="x") for i in range(3)]
    with running_hub(a) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        body = {"ids": [x.id for x in arts] + ["art_missing"]}
        out = httpx.post(url + "/sync/artifacts", json=body, headers=auth).json()
        assert [x["id"] for x in out["artifacts"]] == [x.id for x in arts]
        assert out["not_found"] == ["art_missing"] and out["more"] == []
        note(b, "pushed")
        wire = replication.ops_page(b, b.replica_id, 0, 10)["events"]
        push = {"replica_id": b.replica_id, "artifacts": [], "events": wire}
        assert httpx.post(url + "/sync/push", json=push).status_code == 401
        bad = {**push, "events": [{**wire[0], "type": "NOPE"}]}
        refused = httpx.post(url + "/sync/push", json=bad, headers=auth).json()
        assert refused["applied_events"] == 0 and refused["rejected"][0]["field"] == "type"
        ok = httpx.post(url + "/sync/push", json=push, headers=auth).json()
        assert ok["applied_events"] == 1 and a.event_get(wire[0]["id"]).body == "pushed"


def test_two_hubs_converge_over_http_with_push(make) -> None:
    a, b = make("a"), make("b")
    for i in range(30):
        art = a.artifact_put(kind="note", content=f"a{i}", created_by="x")
        note(a, f"a{i}", artifact_ids=[art.id])
    blob = b.artifact_put(kind="file", content=bytes(range(256)), created_by="x")
    note(b, "b0", artifact_ids=[blob.id])
    with running_hub(a) as url_a, running_hub(b) as url_b:
        peer = sync.HttpPeer(url_a, TOKEN)
        try:
            result = sync.sync_with_peer(b, peer, push=True)
        finally:
            peer.close()
        assert peer.batched is True
        assert (result["pulled_events"], result["pulled_artifacts"]) == (30, 30)
        assert (result["pushed_events"], result["pushed_artifacts"]) == (1, 1)
        assert a.version_vector() == b.version_vector()
        assert a.artifact_get(blob.id).content == bytes(range(256))
        back = sync.HttpPeer(url_b, TOKEN)
        try:
            assert sync.sync_with_peer(a, back)["pulled_events"] == 0
        finally:
            back.close()


def test_hub_loop_picks_up_peers_json_written_after_start(make, tmp_path) -> None:
    a, b = make("a"), make("b")
    note(a, "remote")
    palace = tmp_path / "palace-b"
    palace.mkdir()
    loop = sync.SyncLoop(b, palace, interval_s=0.05)
    with running_hub(a) as url:
        loop.start()
        try:
            assert loop.wait_rounds(1, 30)
            assert b.stats()["events"] == 0
            peers = {"peers": [{"name": "alpha", "url": url, "token": TOKEN}]}
            (palace / "peers.json").write_text(json.dumps(peers))
            assert loop.wait_peer_rounds("alpha", 1, 30)
        finally:
            loop.stop()
    assert b.stats()["events"] == 1
    est = loop.estate()
    assert est["peers"][0]["name"] == "alpha" and est["peers"][0]["reachable"] is True
    assert est["estate_source"]["in_process"] is True and TOKEN not in json.dumps(est)


def test_interval_zero_disables_the_loop(make, tmp_path) -> None:
    loop = sync.SyncLoop(make("a"), tmp_path, interval_s=0)
    loop.start()
    assert loop._thread is None and not loop.enabled
    loop.stop()


def test_peers_route_lists_estate_without_tokens(make, tmp_path) -> None:
    a, b = make("a"), make("b")
    note(a)
    with running_hub(a) as url_a:
        peer = sync.HttpPeer(url_a, TOKEN, name="alpha")
        sync.sync_one(b, peer)
        peer.close()
        dead = sync.HttpPeer("http://127.0.0.1:9", "secret", name="dead")
        assert "error" in sync.sync_one(b, dead)
        dead.close()
        with running_hub(b) as url_b:
            est = get(url_b, "/sync/peers").json()
    by_name = {p["name"]: p for p in est["peers"]}
    assert by_name["alpha"]["reachable"] is True and by_name["alpha"]["last_pulled_events"] == 1
    assert by_name["dead"]["reachable"] is False and by_name["dead"]["last_error"]
    assert est["self"]["replica_id"] == b.replica_id
    assert "secret" not in json.dumps(est) and TOKEN not in json.dumps(est)


def test_cli_sync_pulls_over_real_http(make, tmp_path) -> None:
    a = make("a")
    note(a, "over the wire")
    db = str(tmp_path / "cli.sqlite3")
    with running_hub(a) as url:
        proc = run_cli("sync", "--db", db, "--peer", url, "--token", TOKEN, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)[0]["pulled_events"] == 1
        bad = run_cli("sync", "--db", db, "--peer", url, "--token", "wrong")
        assert bad.returncode == 1 and b"401" in bad.stdout


def test_hole_probe_route_and_repair_over_http(make) -> None:
    a, b = make("a"), make("b")
    for i in range(10):
        note(a, str(i))
    wires = replication.ops_page(a, a.replica_id, 0, 50)["events"]
    replication.apply_remote_events(b, wires[:6] + wires[7:])
    with running_hub(a) as url:
        probe = get(url, "/sync/count", origin=a.replica_id, upto=5).json()
        # positions 1..5: count 5, sum 15, sum of squares 55
        assert probe == {"origin": a.replica_id, "upto": 5, "count": 5, "fingerprint": [5, 15, 55]}
        assert get(url, "/sync/count", origin="").status_code == 400
        peer = sync.HttpPeer(url, TOKEN)
        try:
            out = sync.sync_one(b, peer, repair=True)
        finally:
            peer.close()
    # The round itself sees the hole below equal tops (origin_fingerprints) and finds it with
    # /sync/count probes; the explicit repair then finds nothing left.
    [hole] = out["sequence_anomalies"]
    assert (hole["reason"], hole["resume_after"]) == ("hole", wires[6]["origin_seq"] - 1)
    assert out["pulled_events"] == 1 and out["repair"]["holes"] == []
    assert b.event_get(wires[6]["id"]).body == "6"


def test_serve_runs_background_rounds_with_the_peers_of_its_palace(make, tmp_path) -> None:
    import os
    import subprocess
    import sys

    from tests.test_auth import read_line

    a = make("a")
    sent = note(a, "pulled by the hub loop")
    palace = tmp_path / "palace-b"
    palace.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "LOGSTREAM_TOKEN": "b-token",
        "MEMPALACE_PALACE_PATH": str(palace),
    }
    with running_hub(a) as url_a:
        peers = {"peers": [{"name": "alpha", "url": url_a, "token": TOKEN}]}
        (palace / "peers.json").write_text(json.dumps(peers))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mempalace_logstream",
                "serve",
                "--port",
                "0",
                "--sync-interval",
                "0.2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            url_b = read_line(proc, timeout=60).split()[4]
            deadline, got = time.monotonic() + 30, []
            while not got:  # wait on the condition: the loop's round has pulled the event
                assert time.monotonic() < deadline, "the hub loop never pulled the event"
                # `serve` listens before it prints its URL: no connection is ever refused.
                resp = get(url_b, "/v1/events", token="b-token")
                got = [e for e in resp.json()["events"] if e["id"] == sent.id]
                if not got:
                    time.sleep(0.05)
            est = get(url_b, "/sync/peers", token="b-token").json()
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=30)
    assert got[0]["body"] == "pulled by the hub loop"
    assert est["sync_interval_s"] == 0.2 and est["estate_source"]["in_process"] is True
    alpha = est["peers"][0]
    assert alpha["name"] == "alpha" and alpha["reachable"] is True
    assert alpha["total_pulled_events"] >= 1
    assert TOKEN not in json.dumps(est) and b"b-token" not in out + err
    assert b"a round every 0.2 s" in err


def test_serve_refuses_a_negative_sync_interval(tmp_path) -> None:
    proc = run_cli("serve", "--port", "0", "--db", str(tmp_path / "x.db"), "--sync-interval", "-1")
    assert proc.returncode == 1
    assert b"--sync-interval must be 0 (off) or a positive number" in proc.stderr
    assert not (tmp_path / "x.db").exists()


# ----------------------------------------------------------------------------- compact pages


def test_compact_rows_route_serves_the_ops_events_and_names_bad_parameters(make) -> None:
    a = make("a")
    art = a.artifact_put(kind="patch", content="diff\n", created_by="x")
    note(a, "with art", artifact_ids=[art.id], metadata={"k": [1, "é"]})
    for i in range(3):
        note(a, f"n{i}")
    with running_hub(a) as url:
        offer = get(url, "/sync/version_vector").json()["profile"]["sync_rows"]
        assert offer == {"format": "rows-v2", "route": "/sync/ops_rows", "max_limit": 5000}
        body = get(url, "/sync/ops_rows", origin=a.replica_id, after=0, limit=3).json()
        assert set(body) == {"origin", "format", "columns", "rows", "count"}
        assert body["columns"] == list(replication.ROW_COLUMNS) and body["count"] == 3
        ops = get(url, "/sync/ops", origin=a.replica_id, after=0, limit=3).json()["events"]
        assert body["rows"] == [[e[c] for c in replication.ROW_COLUMNS] for e in ops]
        more = get(url, "/sync/ops_rows", origin=a.replica_id, after=2, limit=99999).json()
        assert [r[2] for r in more["rows"]] == [3, 4]  # a limit over the cap is clamped
        refusals = [
            ({}, "origin"),
            ({"origin": " "}, "origin"),
            ({"origin": a.replica_id, "after": "x"}, "after"),
            ({"origin": a.replica_id, "after": -1}, "after"),
            ({"origin": a.replica_id, "limit": 0}, "limit"),
            ({"origin": a.replica_id, "limit": "ten"}, "limit"),
        ]
        for params, name in refusals:
            resp = get(url, "/sync/ops_rows", **params)
            assert resp.status_code == 400, params
            assert resp.json()["field"] == name and name in resp.json()["error"], resp.json()
        assert get(url, "/sync/ops_rows", token=None, origin=a.replica_id).status_code == 401


class _Proxy:
    """An httpx transport in front of a real hub that can refuse, reshape or corrupt routes."""

    def __init__(self, url: str, rewrite: Any = None) -> None:
        self.real = httpx.Client(base_url=url, timeout=30)
        self.rewrite = rewrite or (lambda path, resp: resp)
        self.paths: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.paths.append(request.url.path)
        resp = self.real.request(
            request.method,
            request.url.path,
            params=request.url.params,
            content=request.content,
            headers=dict(request.headers),
        )
        kind = {"content-type": resp.headers.get("content-type", "")}
        out = httpx.Response(resp.status_code, content=resp.content, headers=kind)
        return self.rewrite(request.url.path, out)

    def peer(self, url: str, rows_limit: int | None = None) -> sync.HttpPeer:
        peer = _SmallPages(url, TOKEN, rows_limit, self)
        peer._client.close()
        peer._client = httpx.Client(
            base_url=url,
            transport=httpx.MockTransport(self),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        return peer


class _SmallPages(sync.HttpPeer):
    """HttpPeer with a smaller compact page than the hub offers (many pages from a small log)."""

    def __init__(self, url: str, token: str, rows_limit: int | None, proxy: _Proxy) -> None:
        super().__init__(url, token)
        self.cap, self.proxy = rows_limit, proxy

    def close(self) -> None:
        super().close()
        self.proxy.real.close()

    def version_vector(self) -> dict[str, Any]:
        out = super().version_vector()
        if self.cap is not None and self.rows_limit:
            self.rows_limit = self.cap
        return out


def _json_rewrite(path: str, resp: httpx.Response, fn: Any) -> httpx.Response:
    body = fn(resp.json())
    return httpx.Response(resp.status_code, json=body)


def _fill(store: LogStore, n: int, every_art: int = 5) -> None:
    for i in range(n):
        ids = []
        if i % every_art == 0:
            ids = [store.artifact_put(kind="note", content=f"c{i}", created_by="x").id]
        note(store, f"e{i}", artifact_ids=ids)


def test_http_pull_pipelines_compact_pages_and_converges(make) -> None:
    a, b = make("a"), make("b")
    _fill(a, 40)
    with running_hub(a) as url:
        proxy = _Proxy(url)
        peer = proxy.peer(url, rows_limit=7)
        try:
            result = sync.sync_with_peer(b, peer)
        finally:
            peer.close()
    assert (result["pulled_events"], result["pulled_artifacts"]) == (40, 8)
    assert result["duplicates"] == 0 and result["rejected_count"] == 0
    assert proxy.paths.count("/sync/ops_rows") == 6 and "/sync/ops" not in proxy.paths
    assert a.version_vector() == b.version_vector()
    mine = b.event_list(limit=100, order="asc").events
    assert [e.seq for e in mine] == list(range(1, 41))  # seq = commit order, dense
    assert [e.origin_seq for e in mine] == sorted(e.origin_seq for e in mine)


@pytest.mark.parametrize("refusal", ["route missing", "not advertised", "other columns"])
def test_http_pull_falls_back_to_reference_pages(make, refusal: str) -> None:
    a, b = make("a"), make("b")
    _fill(a, 12)

    def rewrite(path: str, resp: httpx.Response) -> httpx.Response:
        if refusal == "route missing" and path == "/sync/ops_rows":
            return httpx.Response(404, json={"detail": "Not Found"})
        if refusal == "not advertised" and path == "/sync/version_vector":
            return _json_rewrite(
                path,
                resp,
                lambda d: {
                    **d,
                    "profile": {k: v for k, v in d["profile"].items() if k != "sync_rows"},
                },
            )
        if refusal == "other columns" and path == "/sync/ops_rows":
            return _json_rewrite(path, resp, lambda d: {**d, "columns": d["columns"][::-1]})
        return resp

    with running_hub(a) as url:
        proxy = _Proxy(url, rewrite)
        peer = proxy.peer(url)
        try:
            result = sync.sync_with_peer(b, peer)
        finally:
            peer.close()
    assert result["pulled_events"] == 12 and peer.rows_limit == 0
    assert "/sync/ops" in proxy.paths
    assert proxy.paths.count("/sync/ops_rows") == (0 if refusal == "not advertised" else 1)
    assert a.version_vector() == b.version_vector()


def test_tampered_compact_pages_are_refused_and_the_rest_applies(make) -> None:
    a, b = make("a"), make("b")
    _fill(a, 10, every_art=3)  # artifacts on events 0, 3, 6, 9
    at = replication.ROW_COLUMNS.index
    victim: dict[str, Any] = {}

    def tamper(d: dict[str, Any]) -> dict[str, Any]:
        rows = [list(r) for r in d["rows"]]
        rows[1][at("type")] = "Not A Type"  # invalid: refused, named
        rows[2][at("origin_seq")] = -2  # invalid: refused, named
        rows[4] = rows[4][:3]  # not a row of the format
        victim["art"] = rows[3][at("artifact_ids")][0]
        return {**d, "rows": rows}

    def evil_artifacts(d: dict[str, Any]) -> dict[str, Any]:
        return {
            **d,
            "artifacts": [
                {**x, "content": "evil"} if x["id"] == victim["art"] else x for x in d["artifacts"]
            ],
        }

    def rewrite(path: str, resp: httpx.Response) -> httpx.Response:
        if path == "/sync/ops_rows":
            return _json_rewrite(path, resp, tamper)
        if path == "/sync/artifacts":
            return _json_rewrite(path, resp, evil_artifacts)
        return resp

    with running_hub(a) as url:
        peer = _Proxy(url, rewrite).peer(url)
        try:
            result = sync.sync_with_peer(b, peer)
        finally:
            peer.close()
    reasons = sorted((r["reason"], r["field"]) for r in result["rejected"])
    assert reasons == [
        ("invalid", "event"),
        ("invalid", "origin_seq"),
        ("invalid", "type"),
        ("missing_artifact", "artifact_ids"),
        ("tampered", "sha256"),
    ]
    assert result["pulled_events"] == 6 and result["pulled_artifacts"] == 3
    with pytest.raises(errors.NotFoundError):
        b.artifact_get(victim["art"])
    # An honest round applies the deferred event with its artifact (refused positions below it
    # stay holes until `--repair-holes`, as with reference pages).
    with running_hub(a) as url:
        peer = sync.HttpPeer(url, TOKEN)
        try:
            sync.sync_with_peer(b, peer)
        finally:
            peer.close()
    assert replication.counts(b)["deferred"] == 0
    assert b.artifact_get(victim["art"]).content == b"c3"


def test_http_pull_that_drops_midway_keeps_its_pages_and_resumes(make) -> None:
    a, b = make("a"), make("b")
    _fill(a, 30)
    calls = {"rows": 0}

    def rewrite(path: str, resp: httpx.Response) -> httpx.Response:
        if path == "/sync/ops_rows":
            calls["rows"] += 1
            if calls["rows"] == 3:
                raise httpx.ConnectError("connection lost")
        return resp

    with running_hub(a) as url:
        peer = _Proxy(url, rewrite).peer(url, rows_limit=6)
        try:
            out = sync.sync_one(b, peer)
        finally:
            peer.close()
        assert "connection lost" in out["error"]
        assert b.stats()["events"] == 12  # two pages were applied before the drop
        again = _Proxy(url).peer(url, rows_limit=6)
        try:
            result = sync.sync_with_peer(b, again)
        finally:
            again.close()
    assert result["pulled_events"] == 18 and result["duplicates"] == 0
    assert a.version_vector() == b.version_vector()
