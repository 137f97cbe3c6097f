"""Identity on the surfaces (RFC 0008, issue 12): the hub's token is the admin, an agent's
token is its agent; impersonation is refused on HTTP and on MCP (streamable HTTP and stdio
with `--agent`); revoked and rotated tokens stop working; `logstream agent …`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from mempalace_logstream import LogStore, agents, cli, errors
from mempalace_logstream.http import HubSettings, ops
from mempalace_logstream.identity import tokens
from mempalace_logstream.identity.actor import Actor, acting_as
from tests.conftest import REPO, run_cli
from tests.hubkit import LiveHub, live_hub

ADMIN_TOKEN = "admin-tok-5b1e0c9a7d"
MODES = ["auto", "legacy"]  # the SDK client's two protocol eras (see test_mcp.py)


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `check` until it holds (the hub rereads token hashes within a second)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def note(**fields: Any) -> dict[str, Any]:
    return {"type": "note", "stream": "s", "room": "r", "body": "hi", **fields}


class Team:
    """A hub with the admin token and three agents added on its host."""

    def __init__(self, hub: LiveHub) -> None:
        self.hub = hub
        self.minted = {name: agents.add(hub.store, name) for name in ("alice", "bob", "carol")}
        self.admin_key = agents.ensure_admin(hub.store)

    def client(self, who: str) -> httpx.Client:
        token = ADMIN_TOKEN if who == "admin" else self.minted[who].token
        auth = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.hub.url, headers=auth, timeout=30)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    with live_hub(tmp_path_factory.mktemp("team"), token=ADMIN_TOKEN) as hub:
        yield Team(hub)


# --------------------------------------------------------------------------- HTTP


def test_an_agent_token_writes_as_its_agent_signed_and_verified(team: Team) -> None:
    with team.client("alice") as c:
        resp = c.post("/v1/event_append", json=note(from_agent="alice"))
        assert resp.status_code == 200, resp.text
        event = resp.json()["event"]
        assert event["verified"] is True
        assert event["key_id"] == team.minted["alice"].key_id
        got = c.get(f"/v1/events/{event['id']}").json()["event"]
        assert got["verified"] is True and got["sig"] == event["sig"]


def test_another_agents_name_is_403_on_both_request_paths(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route's short path and FastAPI's own handler both run the store call (in a worker
    thread) as bob: the actor crosses into the thread."""
    before = team.hub.store.stats()["events"]
    with team.client("bob") as c:
        fast = c.post("/v1/event_append", json=note(from_agent="alice"))

        def never(*_args: Any) -> None:
            return None

        monkeypatch.setattr(ops, "_plain_args", never)  # every request to FastAPI's handler
        full = c.post("/v1/event_append", json=note(from_agent="alice"))
    for resp in (fast, full):
        assert resp.status_code == 403, resp.text
        assert resp.json()["field"] == "from_agent"
        assert "'alice' is not 'bob'" in resp.json()["error"]
    assert team.hub.store.stats()["events"] == before  # nothing written


def test_the_admin_token_acts_for_anyone_signed_by_the_admin_key(team: Team) -> None:
    with team.client("admin") as c:
        resp = c.post("/v1/event_append", json=note(from_agent="alice"))
    assert resp.status_code == 200, resp.text
    event = resp.json()["event"]
    assert event["verified"] is True and event["key_id"] == team.admin_key


def test_artifacts_acks_and_task_moves_as_someone_else_are_403(team: Team) -> None:
    with team.client("alice") as alice, team.client("bob") as bob:
        put = bob.post(
            "/v1/artifact_put", json={"kind": "note", "content": "x", "created_by": "alice"}
        )
        assert put.status_code == 403 and put.json()["field"] == "created_by", put.text
        assert "'alice' is not 'bob'" in put.json()["error"]
        own = bob.post(
            "/v1/artifact_put", json={"kind": "note", "content": "x", "created_by": "bob"}
        )
        assert own.status_code == 200, own.text
        patch = bob.post(
            "/v1/patch_submit",
            json={"from_agent": "alice", "stream": "s", "room": "r", "content": "--- a\n+++ b\n"},
        )
        assert patch.status_code == 403, patch.text

        target = alice.post("/v1/event_append", json=note(from_agent="alice", to_agent="bob"))
        eid = target.json()["event"]["id"]
        ack_as_alice = bob.post("/v1/event_ack", json={"event_id": eid, "from_agent": "alice"})
        assert ack_as_alice.status_code == 403 and ack_as_alice.json()["field"] == "from_agent"
        ack = bob.post("/v1/event_ack", json={"event_id": eid, "from_agent": "bob"})
        assert ack.status_code == 200 and ack.json()["event"]["verified"] is True

        task = alice.post(
            "/v1/task_create",
            json={
                "project": "demo",
                "from_agent": "alice",
                "to_agent": "bob",
                "goal": "g",
                "branch": "main",
                "base_commit": "abcdef1",
                "done": "d",
            },
        )
        assert task.status_code == 200, task.text
        tid = task.json()["task"]["correlation_id"]
        for action in ("cancel", "claim"):
            moved = bob.post(
                "/v1/task_update", json={"task_id": tid, "action": action, "from_agent": "alice"}
            )
            assert moved.status_code == 403, moved.text
            assert moved.json()["field"] == "from_agent"
        status = bob.get(f"/v1/tasks/{tid}").json()["task"]
        assert status["state"] == "open"
        claim = bob.post(
            "/v1/task_update", json={"task_id": tid, "action": "claim", "from_agent": "bob"}
        )
        assert claim.status_code == 200, claim.text


def test_reads_sse_and_sync_pulls_take_any_valid_token_but_push_is_admin_only(
    team: Team,
) -> None:
    with team.client("carol") as c:
        assert c.get("/v1/events", params={"limit": 1}).status_code == 200
        assert c.get("/sync/version_vector").status_code == 200
        with c.stream("GET", "/v1/stream") as stream:
            assert stream.status_code == 200
        push = c.post("/sync/push", json={"events": []})
        assert push.status_code == 403 and push.json()["field"] == "token", push.text
    with team.client("admin") as c:
        assert c.post("/sync/push", json={"events": []}).status_code != 403


def test_a_dashboard_operator_session_acts_as_its_operator(team: Team) -> None:
    """It writes under its operator's name only, signed with that agent's key when the hub
    holds one (carol's here), unsigned for a name without a key (issue 18 item 12)."""
    csrf = {"X-Logstream-Dashboard": "1"}
    for operator, key_id in (("carol", team.minted["carol"].key_id), ("ops", None)):
        with httpx.Client(base_url=team.hub.url, timeout=30) as c:
            login = c.post("/dashboard/login", data={"token": ADMIN_TOKEN, "operator": operator})
            assert login.status_code == 303, login.text
            own = c.post("/v1/event_append", json=note(from_agent=operator), headers=csrf)
            other = c.post("/v1/event_append", json=note(from_agent="alice"), headers=csrf)
        assert own.status_code == 200, own.text
        assert own.json()["event"]["key_id"] == key_id
        assert other.status_code == 403 and other.json()["field"] == "from_agent"


def test_an_agent_token_announces_its_own_presence_only(team: Team) -> None:
    with team.client("bob") as c:
        other = c.post("/v1/presence_announce", json={"agent": "alice", "state": "idle"})
        assert other.status_code == 403 and other.json()["field"] == "agent", other.text
        leave = c.post("/v1/presence_leave", json={"agent": "alice"})
        assert leave.status_code == 403
        own = c.post("/v1/presence_announce", json={"agent": "bob", "state": "idle"})
        assert own.status_code == 200, own.text
        assert c.post("/v1/presence_leave", json={"agent": "bob"}).status_code == 200


def test_unknown_tokens_are_401(team: Team) -> None:
    for token in (tokens.mint(), "lst_short", "nope"):
        resp = httpx.get(
            team.hub.url + "/v1/stats", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert resp.status_code == 401, token
        assert resp.headers["www-authenticate"] == "Bearer"


def test_rotate_gives_a_new_token_and_the_old_one_stops(team: Team) -> None:
    old = team.minted["carol"].token
    new = agents.rotate(team.hub.store, "carol").token
    assert new != old
    auth = lambda t: {"Authorization": f"Bearer {t}"}  # noqa: E731
    url = team.hub.url + "/v1/event_append"
    fresh = httpx.post(url, json=note(from_agent="carol"), headers=auth(new), timeout=30)
    assert fresh.status_code == 200, fresh.text  # at once: an unknown token rereads the hashes
    assert fresh.json()["event"]["key_id"] != team.minted["carol"].key_id
    wait_until(lambda: httpx.get(team.hub.url + "/v1/stats", headers=auth(old)).status_code == 401)
    team.minted["carol"] = agents.Minted(**{**team.minted["carol"].__dict__, "token": new})


def test_a_revoked_agents_token_is_401(tmp_path: Path) -> None:
    with live_hub(tmp_path, token=ADMIN_TOKEN) as hub:
        dave = agents.add(hub.store, "dave")
        auth = {"Authorization": f"Bearer {dave.token}"}
        assert httpx.get(hub.url + "/v1/stats", headers=auth).status_code == 200
        agents.revoke(hub.store, "dave", reason="laptop lost")
        wait_until(lambda: httpx.get(hub.url + "/v1/stats", headers=auth).status_code == 401)


def test_without_an_admin_token_agent_tokens_still_decide(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub:
        # No token anywhere: as before identity.
        assert (
            httpx.post(hub.url + "/v1/event_append", json=note(from_agent="x")).status_code == 200
        )
        erin = agents.add(hub.store, "erin")
        auth = {"Authorization": f"Bearer {erin.token}"}
        wait_until(lambda: httpx.get(hub.url + "/v1/stats").status_code == 401)
        bare = httpx.get(hub.url + "/v1/stats")
        assert "agent tokens" in bare.json()["error"]
        assert httpx.get(hub.url + "/healthz").status_code == 200
        ok = httpx.post(hub.url + "/v1/event_append", json=note(from_agent="erin"), headers=auth)
        assert ok.status_code == 200 and ok.json()["event"]["verified"] is True
        as_x = httpx.post(hub.url + "/v1/event_append", json=note(from_agent="x"), headers=auth)
        assert as_x.status_code == 403


def test_the_cli_through_the_hub_with_an_agent_token(team: Team) -> None:
    remote = ["--hub", team.hub.url, "--token", team.minted["bob"].token]
    base = ["append", "--type", "note", "--stream", "s", "--room", "r", *remote]
    forged = _cli(*base, "--from-agent", "alice", "--json")
    assert forged.exit_code == 1
    error = json.loads(forged.stderr)
    assert error["field"] == "from_agent" and "'alice' is not 'bob'" in error["error"]
    own = _cli(*base, "--from-agent", "bob", "--json")
    assert own.exit_code == 0, own.output
    assert json.loads(own.stdout)["event"]["verified"] is True


def test_the_hub_enforces_tokens_on_both_backends(store: LogStore, tmp_path: Path) -> None:
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    alice = agents.add(store, "alice")
    hub = LiveHub(store, HubSettings(token=ADMIN_TOKEN))
    hub.start()
    try:
        auth = {"Authorization": f"Bearer {alice.token}"}
        url = hub.url + "/v1/event_append"
        ok = httpx.post(url, json=note(from_agent="alice"), headers=auth, timeout=30)
        assert ok.status_code == 200 and ok.json()["event"]["key_id"] == alice.key_id
        forged = httpx.post(url, json=note(from_agent="bob"), headers=auth, timeout=30)
        assert forged.status_code == 403 and forged.json()["field"] == "from_agent"
        agents.revoke(store, "alice")
        wait_until(lambda: httpx.get(hub.url + "/v1/stats", headers=auth).status_code == 401)
    finally:
        hub.stop()


# --------------------------------------------------------------------------- MCP over HTTP


def _text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize("mode", MODES)
def test_mcp_over_http_binds_the_session_to_its_token(team: Team, mode: str) -> None:
    async def session(who: str, args: dict[str, Any]) -> Any:
        token = ADMIN_TOKEN if who == "admin" else team.minted[who].token
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(team.hub.url + "/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                return await client.call_tool("mempalace_event_append", args)

    async def scenario() -> None:
        forged = await session("bob", note(from_agent="alice"))
        assert forged.is_error is True
        assert "from_agent 'alice' is not 'bob'" in _text(forged)
        own = await session("bob", note(from_agent="bob"))
        assert own.is_error is False, _text(own)
        event = json.loads(_text(own))["event"]
        assert event["verified"] is True and event["key_id"] == team.minted["bob"].key_id
        admin = await session("admin", note(from_agent="alice"))
        assert json.loads(_text(admin))["event"]["key_id"] == team.admin_key

    asyncio.run(asyncio.wait_for(scenario(), 90))


@pytest.mark.parametrize("mode", MODES)
def test_mcp_over_http_takes_each_requests_token_not_the_sessions_first(
    team: Team, mode: str
) -> None:
    """A session opened with alice's token, then used with bob's: bob's calls run as bob (a
    session's task was started under its first request, whose context it would inherit)."""

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {team.minted['alice'].token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(team.hub.url + "/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                first = await client.call_tool("mempalace_event_append", note(from_agent="alice"))
                assert first.is_error is False, _text(first)
                http.headers["Authorization"] = f"Bearer {team.minted['bob'].token}"
                forged = await client.call_tool("mempalace_event_append", note(from_agent="alice"))
                assert forged.is_error is True, _text(forged)
                assert "from_agent 'alice' is not 'bob'" in _text(forged)

    asyncio.run(asyncio.wait_for(scenario(), 90))


# --------------------------------------------------------------------------- MCP over stdio


def test_mcp_stdio_refuses_to_run_as_the_broadcast_address(tmp_path: Path) -> None:
    """`mcp --agent '*'` would write as everyone's address: refused at start, nothing made."""
    db = tmp_path / "log.sqlite3"
    done = run_cli("mcp", "--db", str(db), "--agent", "*", input=b"")
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode().strip() == (
        "error: agent is '*', the broadcast address; a writer writes under its own name"
    )
    assert not db.exists()


def test_mcp_stdio_with_agent_writes_as_that_agent_only(tmp_path: Path) -> None:
    db = tmp_path / "log.sqlite3"
    store = LogStore.open(str(db))
    try:
        bob = agents.add(store, "bob")
        agents.add(store, "alice")
    finally:
        store.close()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mempalace_logstream", "mcp", "--db", str(db), "--agent", "bob"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )

    async def scenario() -> None:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    forged = await session.call_tool(
                        "mempalace_event_append", note(from_agent="alice")
                    )
                    assert forged.is_error is True
                    assert "from_agent 'alice' is not 'bob'" in _text(forged)
                    own = await session.call_tool("mempalace_event_append", note(from_agent="bob"))
                    event = json.loads(_text(own))["event"]
                    assert event["verified"] is True and event["key_id"] == bob.key_id

    asyncio.run(asyncio.wait_for(scenario(), 90))


# --------------------------------------------------------------------------- the core rule


@pytest.fixture
def store_with_keys(store: LogStore, tmp_path: Path) -> LogStore:
    """The contract store (SQLite file or PostgreSQL) with its own keys directory."""
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def test_an_agent_puts_artifacts_under_its_own_name_only(store_with_keys: LogStore) -> None:
    store = store_with_keys
    agents.add(store, "bob")
    with acting_as(Actor(agent="bob")):
        with pytest.raises(errors.ForbiddenError) as info:
            store.artifact_put(kind="note", content="x", created_by="alice")
        assert info.value.field == "created_by"
        assert store.artifact_put(kind="note", content="x", created_by="bob").created_by == "bob"
    assert store.stats()["artifacts"] == 1


# --------------------------------------------------------------------------- the CLI


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "160"})


def test_agent_commands_add_list_rotate_revoke_trust(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "log.sqlite3")]
    added = _cli("agent", "add", "alice", *db, "--json")
    assert added.exit_code == 0, added.output
    out = json.loads(added.stdout)
    assert tokens.is_token(out["token"]) and out["private_key"] is None
    key_file = Path(out["key_file"])
    assert key_file == tmp_path / "keys" / "alice.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    human = _cli("agent", "add", "bob", *db)
    assert human.exit_code == 0, human.output
    bob_token = human.stdout.split("token (shown once; this hub keeps only its hash): ")[1].strip()
    assert tokens.is_token(bob_token)
    printed = _cli("agent", "add", "carol", "--print", *db)
    assert "-----BEGIN PRIVATE KEY-----" in printed.stdout
    assert not (tmp_path / "keys" / "carol.key").exists()

    again = _cli("agent", "add", "alice", *db)
    assert again.exit_code == 1 and "already has a key" in again.stderr
    assert again.stderr.count("\n") == 1

    rotated = json.loads(_cli("agent", "rotate", "alice", *db, "--json").stdout)
    assert rotated["token"] != out["token"] and rotated["key_id"] != out["key_id"]
    revoked = _cli("agent", "revoke", "bob", "--reason", "laptop lost", *db)
    assert revoked.exit_code == 0 and "revoked agent bob" in revoked.stdout

    for listing in (_cli("agent", "list", *db), _cli("agent", "list", *db, "--json")):
        assert listing.exit_code == 0, listing.output
        text = listing.stdout
        for secret in (out["token"], rotated["token"], bob_token, "lst_", "PRIVATE KEY"):
            assert secret not in text
    rows = json.loads(_cli("agent", "list", *db, "--json").stdout)["agents"]
    states = {(r["agent"], r["key_id"]): r["state"] for r in rows}
    assert states[("alice", out["key_id"])] == "revoked"  # replaced by the rotation
    assert states[("alice", rotated["key_id"])] == "active"
    assert {r["state"] for r in rows if r["agent"] == "bob"} == {"revoked"}
    table = _cli("agent", "list", *db).stdout
    for column in ("agent", "role", "key id", "state", "key held here", "token"):
        assert column in table
    assert "laptop lost" in table

    other = "ed25519:" + "ab" * 16
    assert "pinned admin key" in _cli("agent", "trust", other, *db).stdout
    assert other in json.loads(_cli("agent", "list", *db, "--json").stdout)["pinned"]
    assert "unpinned" in _cli("agent", "untrust", other, *db).stdout
    bad = _cli("agent", "trust", "nope", *db, "--json")
    assert bad.exit_code == 1 and json.loads(bad.stderr)["field"] == "key_id"


def test_agent_commands_refuse_bad_input_and_the_hub_in_one_line(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "log.sqlite3")]
    admin = _cli("agent", "add", "admin", *db, "--json")
    assert admin.exit_code == 1 and json.loads(admin.stderr)["field"] == "agent"
    missing = _cli("agent", "rotate", "ghost", *db)
    assert missing.exit_code == 1 and "has no active key" in missing.stderr
    remote = _cli("agent", "add", "alice", "--hub", "http://127.0.0.1:9")
    assert remote.exit_code == 1
    assert "agents are managed where the hub's log is" in remote.stderr
    as_json = _cli("agent", "list", "--hub", "http://127.0.0.1:9", "--json")
    assert json.loads(as_json.stderr)["field"] == "hub"


def test_the_real_cli_adds_an_agent_whose_token_the_hub_takes(tmp_path: Path) -> None:
    with live_hub(tmp_path, token=ADMIN_TOKEN) as hub:
        db = str(tmp_path / "hub.sqlite3")  # the hub's own log, from another process
        out = run_cli("agent", "add", "frank", "--db", db, "--json")
        assert out.returncode == 0, out.stderr
        minted = json.loads(out.stdout)
        auth = {"Authorization": f"Bearer {minted['token']}"}
        resp = httpx.post(hub.url + "/v1/event_append", json=note(from_agent="frank"), headers=auth)
        assert resp.status_code == 200, resp.text
        assert resp.json()["event"]["key_id"] == minted["key_id"]


def test_the_readmes_team_setup_runs(tmp_path: Path) -> None:
    """The five commands of README "Agents and tokens": the `logstream agent` ones run for real
    (on this test's own log); the hub takes its token from the environment, never argv (issue
    18 item 16); step 4 sends a bearer token."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Agents and tokens") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    commands = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    assert len(commands) == 5
    assert commands[0].startswith("logstream serve ") and "--token" not in commands[0]
    assert "Authorization: Bearer lst_" in commands[3]
    db = ["--db", str(tmp_path / "log.sqlite3")]
    for command in (commands[1], commands[2], commands[4]):
        words = shlex.split(command)
        assert words[:2] == ["logstream", "agent"], command
        result = _cli(*words[1:], *db)
        assert result.exit_code == 0, (command, result.output)
    listed = _cli("agent", "list", *db, "--json")
    assert {r["agent"] for r in json.loads(listed.stdout)["agents"]} == {"admin", "alice", "bob"}


def test_an_agent_token_may_leave_its_name_out(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """from_agent / created_by absent: filled in with the token's agent (both request paths);
    the admin token names the writer, as before."""
    with team.client("carol") as c:
        fast = c.post("/v1/event_append", json=note())
        art = c.post("/v1/artifact_put", json={"kind": "note", "content": "x"})

        def never(*_args: Any) -> None:
            return None

        monkeypatch.setattr(ops, "_plain_args", never)
        full = c.post("/v1/event_append", json=note())
    for resp in (fast, full):
        assert resp.status_code == 200, resp.text
        assert resp.json()["event"]["from_agent"] == "carol"
        assert resp.json()["event"]["verified"] is True
    assert art.status_code == 200, art.text
    assert art.json()["artifact"]["created_by"] == "carol"
    with team.client("admin") as c:
        resp = c.post("/v1/event_append", json=note())
    assert resp.status_code == 422 and resp.json()["field"] == "from_agent"
