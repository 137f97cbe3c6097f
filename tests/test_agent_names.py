"""Look-alike agent names (issue 18 item 13): the name of an agent with a key is NFKC and ASCII
by default (`--allow-unicode`: one script), no two agents with keys look alike, and no local
write names a look-alike of an agent with a key in `from_agent`, `to_agent` or `created_by`,
on every surface with the same text. Events from peers and old files read as they are."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mempalace_logstream import agents, confusables, errors, names, sync
from mempalace_logstream.store import LogStore
from tests.conftest import run_cli
from tests.hubkit import live_hub

CYRILLIC = "cl\u0430ude-laptop"  # U+0430 CYRILLIC SMALL LETTER A
FULLWIDTH = "\uff42\uff4f\uff42"  # ｂｏｂ
COMBINING = "bob\u0301"  # b, o, b, U+0301 COMBINING ACUTE ACCENT
LOOKS_LIKE = (
    "from_agent 'cl\u0430ude-laptop' looks like 'claude-laptop', an agent with a key here "
    "(U+0430 CYRILLIC SMALL LETTER A); names that look alike cannot coexist"
)


@pytest.fixture
def store(store: LogStore, tmp_path: Path) -> LogStore:
    store.identity.keys_dir = tmp_path / "keys"
    store.identity.reload_keys()
    return store


def _note(store: LogStore, **fields: object) -> dict:
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "carol", "body": "hi"}
    return store.event_append(**{**base, **fields}).to_dict()


# --------------------------------------------------------------------------- the core rule


def test_an_agent_name_is_nfkc_and_ascii_by_default() -> None:
    with pytest.raises(errors.ValidationError) as info:
        names.agent_name(CYRILLIC)
    assert info.value.field == "agent"
    assert "U+0430 (CYRILLIC SMALL LETTER A)" in info.value.message
    assert "--allow-unicode" in info.value.message
    with pytest.raises(errors.ValidationError) as info:
        names.agent_name(FULLWIDTH)
    assert "is not in Unicode NFKC form (it reads as 'bob')" in info.value.message
    with pytest.raises(errors.ValidationError) as info:
        names.agent_name(COMBINING)
    assert "U+0301 (COMBINING ACUTE ACCENT)" in info.value.message
    assert names.agent_name("claude-laptop") == "claude-laptop"


def test_unicode_names_when_allowed_are_nfkc_and_one_script() -> None:
    assert names.agent_name("\u0431\u043e\u0431", allow_unicode=True) == "боб"  # Cyrillic only
    assert names.agent_name("東京-agent", allow_unicode=True) == "東京-agent"  # Han with Latin
    with pytest.raises(errors.ValidationError) as info:
        names.agent_name(CYRILLIC, allow_unicode=True)
    assert "mixes scripts (CYRILLIC, LATIN)" in info.value.message
    with pytest.raises(errors.ValidationError) as info:
        names.agent_name(FULLWIDTH, allow_unicode=True)
    assert "NFKC" in info.value.message
    with pytest.raises(errors.ValidationError):
        names.agent_name("\u0301bob", allow_unicode=True)  # a mark cannot start a name


@pytest.mark.parametrize(
    "other",
    [
        CYRILLIC,  # Cyrillic а
        "cIaude-laptop",  # capital I for l
        "c1aude-laptop",  # digit one for l
        "Claude-Laptop",  # case only
        "claude-lapt\u03bfp",  # Greek omicron
        "\uff43laude-laptop",  # fullwidth c
        "cla\u0301ude-laptop",  # a combining mark
        "claude-laptop\u0307",
    ],
)
def test_look_alikes_of_a_registered_name_are_found(other: str) -> None:
    with pytest.raises(errors.ValidationError) as info:
        names.check_lookalike("to_agent", other, frozenset({"claude-laptop", "bob"}))
    assert info.value.field == "to_agent"
    assert "looks like 'claude-laptop', an agent with a key here" in info.value.message


def test_distinct_names_and_the_name_itself_pass() -> None:
    registered = frozenset({"claude-laptop", "bob"})
    for name in ("claude-laptop", "claude-desktop", "bobby", "alice", "*"):
        names.check_lookalike("to_agent", name, registered)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._", min_size=1, max_size=20))
def test_a_name_never_looks_like_itself_and_the_skeleton_is_stable(name: str) -> None:
    names.check_lookalike("from_agent", name, frozenset({name}))
    assert confusables.skeleton(confusables.skeleton(name)) == confusables.skeleton(name)


# --------------------------------------------------------------------------- registration


def test_agent_add_refuses_a_look_alike_of_an_agent_with_a_key(store: LogStore) -> None:
    agents.add(store, "claude-laptop")
    for other in ("cIaude-laptop", "Claude-Laptop", "c1aude-laptop"):
        with pytest.raises(errors.ValidationError) as info:
            agents.add(store, other)
        assert info.value.field == "agent"
        assert "looks like 'claude-laptop'" in info.value.message
    assert {r["agent"] for r in agents.listing(store)} == {"admin", "claude-laptop"}
    with pytest.raises(errors.ValidationError) as info:
        agents.add(store, "Admin")
    assert "looks like 'admin'" in info.value.message


def test_no_agent_takes_the_name_the_hub_writes_under(store: LogStore) -> None:
    """`logstream` writes the hub's reminders and notices, which no thread's budget counts: an
    agent of that name (or one that looks like it) would be exempt from the loop guards."""
    with pytest.raises(errors.ValidationError) as info:
        agents.add(store, "logstream")
    assert (info.value.field, info.value.message) == (
        "agent",
        "agent 'logstream' is the name the hub writes its reminders and notices under; pick "
        "another name",
    )
    for name in ("Logstream", "l0gstream", "Iogstream"):
        with pytest.raises(errors.ValidationError) as info:
            agents.add(store, name)
        assert info.value.field == "agent"
        assert "looks like 'logstream'" in info.value.message
    assert {r["agent"] for r in agents.listing(store)} <= {"admin"}


def test_agent_add_takes_unicode_names_only_when_asked(store: LogStore) -> None:
    with pytest.raises(errors.ValidationError):
        agents.add(store, "\u0431\u043e\u0431")
    minted = agents.add(store, "\u0431\u043e\u0431", allow_unicode=True)
    assert minted.key_file is not None and minted.key_file.name == "боб.key"
    out = _note(store, from_agent="\u0431\u043e\u0431")
    assert out["verified"] is True and out["key_id"] == minted.key_id
    rotated = agents.rotate(store, "\u0431\u043e\u0431")  # managing it needs no flag
    assert _note(store, from_agent="\u0431\u043e\u0431")["key_id"] == rotated.key_id


def test_the_cli_refuses_look_alikes_in_one_line(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "log.sqlite3")]
    assert run_cli("agent", "add", "claude-laptop", *db).returncode == 0
    for name in (CYRILLIC, FULLWIDTH, "cIaude-laptop"):
        out = run_cli("agent", "add", name, *db, "--json")
        assert out.returncode == 1, out.stdout
        assert json.loads(out.stderr)["field"] == "agent"
    ok = run_cli("agent", "add", "\u0431\u043e\u0431", "--allow-unicode", *db)
    assert ok.returncode == 0, ok.stderr


# --------------------------------------------------------------------------- writes


def test_no_write_names_a_look_alike_of_an_agent_with_a_key(store: LogStore) -> None:
    # Before any agent has a key, any name writes, as the reference and old files do.
    assert _note(store, from_agent=CYRILLIC, to_agent="claude-laptop")["from_agent"] == CYRILLIC
    agents.add(store, "claude-laptop")
    before = store.stats()["events"]
    with pytest.raises(errors.ValidationError) as info:
        _note(store, from_agent=CYRILLIC)
    assert info.value.field == "from_agent" and info.value.message == LOOKS_LIKE
    with pytest.raises(errors.ValidationError) as info:
        _note(store, to_agent="Claude-laptop")
    assert info.value.field == "to_agent"
    with pytest.raises(errors.ValidationError) as info:
        store.artifact_put(kind="note", content="x", created_by="c1aude-laptop")
    assert info.value.field == "created_by"
    assert store.stats()["events"] == before and store.stats()["artifacts"] == 0
    # The name itself, and names that do not look like it, write as before.
    assert _note(store, from_agent="claude-laptop")["verified"] is True
    assert _note(store, from_agent="carol", to_agent="claude-laptop")["verified"] is None
    assert _note(store, from_agent="claude-desktop", to_agent="*")["verified"] is None


def test_a_peers_events_under_a_look_alike_are_kept_as_they_are(
    store: LogStore, tmp_path: Path
) -> None:
    """Sync apply keeps a peer's (and an old file's) events: the rule is for local writes."""
    with LogStore.open(str(tmp_path / "peer.sqlite3")) as peer:
        old = _note(peer, from_agent=CYRILLIC, to_agent="claude-laptop", body="from before")
        agents.add(store, "claude-laptop")
        sync.sync_one(store, sync.LocalPeer(peer, name="peer"))
    assert store.event_get(old["id"]).from_agent == CYRILLIC
    with pytest.raises(errors.ValidationError):  # a local write under it is refused
        _note(store, from_agent=CYRILLIC)


def test_every_surface_refuses_a_look_alike_with_the_same_text(tmp_path: Path) -> None:
    token = "admin-tok-names-1"
    note = {"type": "note", "stream": "s", "room": "r", "body": "hi", "from_agent": CYRILLIC}
    with live_hub(tmp_path, token=token) as hub:
        agents.add(hub.store, "claude-laptop")
        before = hub.store.stats()["events"]
        auth = {"Authorization": f"Bearer {token}"}
        resp = httpx.post(f"{hub.url}/v1/event_append", json=note, headers=auth, timeout=30)
        assert resp.status_code == 422
        assert resp.json() == {"error": LOOKS_LIKE, "field": "from_agent"}

        async def over_mcp() -> str:
            async with httpx2.AsyncClient(headers=auth, timeout=60) as http:
                transport = streamable_http_client(f"{hub.url}/mcp", http_client=http)
                async with Client(transport) as client:
                    result = await client.call_tool("mempalace_event_append", note)
                    assert result.is_error
                    return str(result.content[0].text)

        assert asyncio.run(asyncio.wait_for(over_mcp(), 60)) == LOOKS_LIKE
        db = str(hub.store.engine.url.database)
        cli = run_cli(
            *("append", "--db", db, "--type", "note", "--stream", "s", "--room", "r"),
            *("--from-agent", CYRILLIC),
        )
        assert cli.returncode == 1 and cli.stderr.decode().strip() == f"error: {LOOKS_LIKE}"
        assert hub.store.stats()["events"] == before
