"""Only the admin writes key events (issue 18 item 1, RFC 0008 "Who writes key events").

With alice's agent token only, the attack of the issue — revoke bob's key, add an admin-role
key for herself, move bob onto a key she holds — is refused on every surface (HTTP's
`/v1/event_append`, MCP over streamable HTTP and over stdio with `--agent`, the CLI through
the hub), nothing is written, and an honest replica that syncs from the hub holds exactly the
admin-made keyring, reads nothing forged as verified, and bob still writes. The hub never signs
an agent's write with the admin key; an agent may still revoke its own key (signed with that
key); the admin token still manages keys; a request without a token never gets a local
process's trust (after every agent token was revoked, it is a 401). The store's own rule, on
both backends: tests/test_key_authority_store.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from mempalace_logstream import LogStore, agents, cli, replication, sync
from mempalace_logstream.identity import key_events, keys
from mempalace_logstream.identity.keyring import KEY_ADD, KEY_REVOKE
from tests.conftest import REPO
from tests.hubkit import LiveHub, live_hub
from tests.idsynckit import resign, rewrite

ADMIN_TOKEN = "admin-tok-keys-0f4c2a"
MODES = ["auto", "legacy"]


def ring_view(store: LogStore) -> set[tuple[str, str, str, str | None]]:
    """The keyring as (agent, key id, role, revoked HLC): what must never change by a forgery."""
    return {(r.agent, r.key_id, r.role, r.revoked_hlc) for r in agents.keyring(store).records()}


def key_id_of(store: LogStore, agent: str) -> str:
    return next(r.key_id for r in agents.keyring(store).records() if r.agent == agent)


def attacks(store: LogStore, mine: keys.KeyPair) -> dict[str, dict[str, Any]]:
    """The key events alice tries with her agent token (each an event_append payload)."""
    bob_key = key_id_of(store, "bob")
    alice_key = key_id_of(store, "alice")
    base = {"stream": key_events.STREAM, "room": key_events.ROOM}
    return {
        "revoke_bob": {
            **base,
            "type": KEY_REVOKE,
            "metadata": key_events.key_revoke_metadata("bob", bob_key, "x"),
        },
        "admin_key_for_alice": {
            **base,
            "type": KEY_ADD,
            "metadata": key_events.key_add_metadata("alice", mine.public, role="admin"),
        },
        "move_bob_to_alices_key": {
            **base,
            "type": KEY_ADD,
            "metadata": key_events.key_add_metadata("bob", mine.public, replaces=bob_key),
        },
        "second_key_for_alice": {
            **base,
            "type": KEY_ADD,
            "metadata": key_events.key_add_metadata("alice", mine.public, replaces=alice_key),
        },
        "other_identity_type": {**base, "type": "identity.key_trust", "metadata": {"x": 1}},
    }


class Team:
    """A hub with the admin token, alice and bob added on its host."""

    def __init__(self, hub: LiveHub) -> None:
        self.hub = hub
        self.store = hub.store
        self.alice = agents.add(self.store, "alice")
        self.bob = agents.add(self.store, "bob")
        self.admin_key = agents.ensure_admin(self.store)
        self.mine = keys.KeyPair.generate()  # a key alice holds (never added by the admin)
        self.ring = ring_view(self.store)

    def client(self, token: str) -> httpx.Client:
        auth = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.hub.url, headers=auth, timeout=30)

    def events(self) -> int:
        return int(self.store.stats()["events"])


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    with live_hub(tmp_path, token=ADMIN_TOKEN) as hub:
        yield Team(hub)


def _honest_replica_after_sync(team: Team, tmp_path: Path) -> LogStore:
    """A fresh replica that pins the admin key and pulls everything from the hub."""
    honest = LogStore.open(str(tmp_path / "honest" / "log.sqlite3"))
    honest.pin_admin(team.admin_key)
    peer = sync.HttpPeer(team.hub.url, ADMIN_TOKEN)
    try:
        result = sync.sync_with_peer(honest, peer)
    finally:
        peer.close()
    assert result["rejected_count"] == 0, result["rejected"]
    return honest


def _assert_nothing_forged(team: Team, honest: LogStore) -> None:
    """The honest replica's keyring is the admin-made one, every event it reads verified is
    signed by a key of that keyring's own agent (or the admin), and bob still writes."""
    assert ring_view(honest) == team.ring
    ring = agents.keyring(honest)
    for event in honest.event_list(limit=500).events:
        if event.verified:
            record = ring.key(str(event.key_id))
            assert record is not None
            assert record.agent in (event.from_agent, "admin"), event.id
            if event.type.startswith("identity."):
                assert record.role == "admin" or (
                    event.type == KEY_REVOKE and event.metadata["key_id"] == event.key_id
                ), event.id
    with team.client(team.bob.token) as c:
        resp = c.post("/v1/event_append", json={"type": "note", "stream": "s", "room": "r"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["event"]["verified"] is True
    assert resp.json()["event"]["key_id"] == team.bob.key_id
    peer = sync.HttpPeer(team.hub.url, ADMIN_TOKEN)
    try:
        sync.sync_with_peer(honest, peer)
    finally:
        peer.close()
    assert honest.event_get(resp.json()["event"]["id"]).verified is True


# --------------------------------------------------------------------------- HTTP


def test_an_agent_token_cannot_write_key_events_over_http_or_sync(
    team: Team, tmp_path: Path
) -> None:
    """The issue's attack through the hub's HTTP API with alice's token, then through
    `/sync/push` (admin token only; what it brings is judged like a pull: a key event signed
    by an agent's key changes no keyring, here or downstream); the admin token still manages
    keys; an honest replica synced from the hub reads nothing forged as verified."""
    before = team.events()
    with team.client(team.alice.token) as c:
        for name, payload in attacks(team.store, team.mine).items():
            for body in (payload, {**payload, "from_agent": "alice"}):
                resp = c.post("/v1/event_append", json=body)
                assert resp.status_code == 403, (name, resp.text)
                assert resp.json()["field"] == "type", (name, resp.text)
                assert "admin" in resp.json()["error"], name
    assert team.events() == before  # nothing written
    assert ring_view(team.store) == team.ring
    _push_forged_key_event(team, tmp_path)
    _admin_token_manages_keys(team)
    honest = _honest_replica_after_sync(team, tmp_path)
    try:
        _assert_nothing_forged(team, honest)
    finally:
        honest.close()


def _push_forged_key_event(team: Team, tmp_path: Path) -> None:
    hostile = LogStore.open(str(tmp_path / "hostile" / "log.sqlite3"))
    try:
        hostile.pin_admin(team.admin_key)
        sync.sync_with_peer(hostile, sync.LocalPeer(team.store))
        alice_pair = keys.load_private_key(Path(str(team.alice.key_file)))
        forged = _forged_key_event(hostile, alice_pair, team)
    finally:
        hostile.close()
    with team.client(team.alice.token) as c:
        assert c.post("/sync/push", json={"events": [forged]}).status_code == 403
    with team.client(ADMIN_TOKEN) as c:
        pushed = c.post(
            "/sync/push", json={"replica_id": forged["origin_replica"], "events": [forged]}
        )
    assert pushed.status_code == 200, pushed.text
    reasons = {r["ident"]: r["reason"] for r in replication.list_rejections(team.store)}
    assert reasons.get(forged["id"]) == "not_admin", reasons
    assert ring_view(team.store) == team.ring
    honest = LogStore.open(str(tmp_path / "elsewhere" / "log.sqlite3"))
    try:
        honest.pin_admin(team.admin_key)
        sync.sync_with_peer(honest, sync.LocalPeer(team.store))
        res = replication.apply_remote_events(honest, [forged], peer="hostile")
        assert [r["reason"] for r in res.rejected] == ["not_admin"]
        assert ring_view(honest) == team.ring
    finally:
        honest.close()


def _admin_token_manages_keys(team: Team) -> None:
    dave = keys.KeyPair.generate()
    payload = {
        "type": KEY_ADD,
        "stream": key_events.STREAM,
        "room": key_events.ROOM,
        "from_agent": "admin",
        "metadata": key_events.key_add_metadata("dave", dave.public),
    }
    with team.client(ADMIN_TOKEN) as c:
        resp = c.post("/v1/event_append", json=payload)
        assert resp.status_code == 200, resp.text
        assert resp.json()["event"]["key_id"] == team.admin_key
        revoke = {
            **payload,
            "type": KEY_REVOKE,
            "metadata": key_events.key_revoke_metadata("dave", dave.key_id, "done"),
        }
        assert c.post("/v1/event_append", json=revoke).status_code == 200
    record = agents.keyring(team.store).key(dave.key_id)
    assert record is not None and record.agent == "dave" and record.revoked_hlc is not None
    team.ring = ring_view(team.store)  # the admin-made keyring now holds dave


def test_an_agent_revokes_its_own_key_signed_with_that_key(team: Team, tmp_path: Path) -> None:
    payload = {
        "type": KEY_REVOKE,
        "stream": key_events.STREAM,
        "room": key_events.ROOM,
        "metadata": key_events.key_revoke_metadata("alice", team.alice.key_id, "leaving"),
    }
    with team.client(team.alice.token) as c:
        resp = c.post("/v1/event_append", json=payload)
        assert resp.status_code == 200, resp.text
        event = resp.json()["event"]
        assert event["key_id"] == team.alice.key_id != team.admin_key
        assert event["verified"] is True
        after = c.post("/v1/event_append", json={"type": "note", "stream": "s", "room": "r"})
        assert after.status_code == 403, after.text  # her key is gone: nothing signs for her
    record = agents.keyring(team.store).key(team.alice.key_id)
    assert record is not None and record.revoked_by == event["id"]
    honest = _honest_replica_after_sync(team, tmp_path)
    try:
        got = agents.keyring(honest).key(team.alice.key_id)
        assert got is not None and got.revoked_by == event["id"]
    finally:
        honest.close()


def _forged_key_event(store: LogStore, pair: keys.KeyPair, team: Team) -> dict[str, Any]:
    """alice's key signing an `identity.key_revoke` of bob's key, held by a hostile replica
    (its row rewritten and re-signed), in the wire's event shape."""
    base = store.event_append(type="note", stream="s", room="r", from_agent="zed", body="x")
    meta = key_events.key_revoke_metadata("bob", team.bob.key_id, "x")
    rewrite(
        store,
        base.id,
        type=KEY_REVOKE,
        stream=key_events.STREAM,
        room=key_events.ROOM,
        from_agent="alice",
        metadata_json=json.dumps(meta),
    )
    forged = resign(store, store.event_get(base.id), pair)
    out = forged.to_dict()
    out.pop("verified", None)
    return out


# --------------------------------------------------------------------------- MCP


def _text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_token_cannot_write_key_events_over_mcp_http(
    team: Team, tmp_path: Path, mode: str
) -> None:
    before = team.events()

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {team.alice.token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(team.hub.url + "/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                for name, payload in attacks(team.store, team.mine).items():
                    out = await client.call_tool("mempalace_event_append", payload)
                    assert out.is_error is True, (name, _text(out))
                    assert "admin" in _text(out), name

    asyncio.run(asyncio.wait_for(scenario(), 90))
    assert team.events() == before
    honest = _honest_replica_after_sync(team, tmp_path)
    try:
        _assert_nothing_forged(team, honest)
    finally:
        honest.close()


def test_mcp_stdio_as_an_agent_cannot_write_key_events_with_the_admin_key(
    tmp_path: Path,
) -> None:
    """`logstream mcp --agent alice` on a log whose keys directory holds the admin key: the
    process may read that file, but its tool calls run as alice, so the admin key never signs
    them and key events are refused."""
    db = tmp_path / "log.sqlite3"
    store = LogStore.open(str(db))
    try:
        agents.add(store, "alice")
        bob = agents.add(store, "bob")
        ring = ring_view(store)
        payloads = attacks(store, keys.KeyPair.generate())
        before = store.stats()["events"]
    finally:
        store.close()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mempalace_logstream", "mcp", "--db", str(db), "--agent", "alice"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )

    async def scenario() -> None:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for name, payload in payloads.items():
                        out = await session.call_tool("mempalace_event_append", payload)
                        assert out.is_error is True, (name, _text(out))
                        assert "admin" in _text(out), name
                    own = await session.call_tool(
                        "mempalace_event_append",
                        {"type": "note", "stream": "s", "room": "r", "from_agent": "alice"},
                    )
                    assert json.loads(_text(own))["event"]["verified"] is True

    asyncio.run(asyncio.wait_for(scenario(), 90))
    with LogStore.open(str(db)) as again:
        assert ring_view(again) == ring
        assert again.stats()["events"] == before + 1
        assert agents.keyring(again).key(bob.key_id) is not None


# --------------------------------------------------------------------------- the CLI


def test_the_cli_through_the_hub_with_an_agent_token_cannot_write_key_events(
    team: Team,
) -> None:
    before = team.events()
    remote = ["--hub", team.hub.url, "--token", team.alice.token]
    for name, payload in attacks(team.store, team.mine).items():
        args = ["append", "--type", payload["type"], "--stream", "identity", "--room", "keys"]
        args += ["--from-agent", "alice", "--metadata", json.dumps(payload["metadata"])]
        args += [*remote, "--json"]
        out = CliRunner().invoke(cli.app, args, env={"COLUMNS": "160"})
        assert out.exit_code == 1, (name, out.output)
        assert json.loads(out.stderr)["field"] == "type", name
    assert team.events() == before


# --------------------------------------------------------------------------- no token


def test_after_every_agent_token_is_revoked_a_request_without_a_token_is_401(
    tmp_path: Path,
) -> None:
    """A loopback hub without --token: once the log has key events, a request with no token
    is refused even when no agent token is left (it would otherwise run as a local process)."""
    with live_hub(tmp_path) as hub:
        alice = agents.add(hub.store, "alice")
        agents.revoke(hub.store, "alice", reason="gone")
        assert agents.token_hashes(hub.store) == {}
        before = hub.store.stats()["events"]
        ring = ring_view(hub.store)
        admin_role = key_events.key_add_metadata(
            "eve", keys.KeyPair.generate().public, role="admin"
        )
        payload = {"type": KEY_ADD, "stream": "identity", "room": "keys", "from_agent": "admin"}
        resp = httpx.post(hub.url + "/v1/event_append", json={**payload, "metadata": admin_role})
        assert resp.status_code == 401, resp.text
        note = {"type": "note", "stream": "s", "room": "r", "from_agent": "x"}
        assert httpx.post(hub.url + "/v1/event_append", json=note).status_code == 401
        assert httpx.get(hub.url + "/healthz").status_code == 200
        old = {"Authorization": f"Bearer {alice.token}"}
        assert httpx.get(hub.url + "/v1/stats", headers=old).status_code == 401
        assert hub.store.stats()["events"] == before
        assert ring_view(hub.store) == ring
