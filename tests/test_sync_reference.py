"""Wire compatibility with the reference (S-7.6), in both directions, over real HTTP.

The reference `mempalace logstream sync --peer <our hub>` pulls from ours (its own client code,
`--no-deps` venv), and our `logstream sync --peer <reference hub>` pulls from `mempalace serve`
(full venv). The reference runs only in its own virtualenv, through tests/refpkg.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, agents, workflows
from tests import refpkg
from tests.conftest import run_cli
from tests.test_sync_http import TOKEN, running_hub

pytestmark = [pytest.mark.ref, pytest.mark.slow]
WIRE_KEYS = (
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "status",
    "body",
    "created_at",
    "metadata",
)


def ref_events(palace: Path) -> list[dict[str, Any]]:
    out = refpkg.ref_cli_json(
        "logstream", "list", "--limit", "500", "--order", "asc", palace=palace
    )
    return out["events"]


def test_reference_client_pulls_from_our_hub(tmp_path: Path) -> None:
    refpkg.require_ref_or_skip()
    store = LogStore.open(str(tmp_path / "ours.sqlite3"))
    try:
        patch = workflows.patch_submit(
            store,
            content="diff --git a/x b/x\n",
            from_agent="dev",
            stream="project/x",
            to_agent="rev",
        )
        ask = store.event_append(
            type="task.request",
            stream="project/x",
            room="delegation",
            from_agent="lead",
            to_agent="dev",
            status="open",
            body="héllo\nworld",
            metadata={"z": 1, "a": {"k": [1]}},
        )
        workflows.event_ack(store, event_id=ask.id, from_agent="dev", status="claimed")
        ours = {e.id: e.to_dict() for e in store.event_list(limit=50).events}
        palace = tmp_path / "ref-palace"
        with running_hub(store) as url:
            proc = refpkg.ref_cli(
                "logstream", "sync", "--peer", url, "--token", TOKEN, "--json", palace=palace
            )
            assert proc.returncode == 0, proc.stderr.decode()
            stats = json.loads(proc.stdout)[0]
            assert (stats["pulled_events"], stats["pulled_artifacts"]) == (3, 1)
            assert stats["peer_replica"] == store.replica_id
            again = refpkg.ref_cli_json(
                "logstream", "sync", "--peer", url, "--token", TOKEN, palace=palace
            )
            assert again[0]["pulled_events"] == 0
    finally:
        store.close()
    theirs = {e["id"]: e for e in ref_events(palace)}
    assert set(theirs) == set(ours)
    for ident, mine in ours.items():
        for key in WIRE_KEYS:
            assert theirs[ident][key] == mine[key], (ident, key)
        assert sorted(theirs[ident]["artifact_ids"]) == sorted(mine["artifact_ids"])
    got = refpkg.ref_cli("artifact", "get", patch["artifact"].id, palace=palace, check=True)
    assert got.stdout == b"diff --git a/x b/x\n"


def test_we_pull_from_the_reference_hub_and_relay_to_another_reference(tmp_path: Path) -> None:
    refpkg.require_ref_or_skip(full=True)
    src = tmp_path / "ref-src"
    art = refpkg.ref_cli_json(
        "artifact",
        "put",
        "--kind",
        "patch",
        "--created-by",
        "dev",
        "--content",
        "diff --git a/y b/y\n",
        palace=src,
    )
    for i in range(3):
        refpkg.ref_cli(
            "logstream",
            "append",
            "--type",
            "patch.ready",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "dev",
            "--body",
            f"r{i}",
            "--metadata",
            '{"b": 2, "a": 1}',
            "--artifact-id",
            art["id"],
            palace=src,
            check=True,
        )
    source = {e["id"]: e for e in ref_events(src)}
    db = str(tmp_path / "ours.sqlite3")
    with LogStore.open(db) as mine:
        mine.event_append(type="note", stream="s", room="r", from_agent="us", body="local")
    with refpkg.ref_hub(src) as ref_url:
        proc = run_cli(
            "sync", "--db", db, "--peer", ref_url, "--token", "ref-token", "--json", "--push"
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)[0]
        assert (result["pulled_events"], result["pulled_artifacts"]) == (3, 1)
        assert "push_error" in result  # the reference hub is pull-only: reported, not fatal
        again = json.loads(
            run_cli("sync", "--db", db, "--peer", ref_url, "--token", "ref-token", "--json").stdout
        )
        assert again[0]["pulled_events"] == 0 and again[0]["duplicates"] == 0
    store = LogStore.open(db)
    try:
        for ident, theirs in source.items():
            mine = store.event_get(ident).to_dict()
            for key in WIRE_KEYS:
                assert mine[key] == theirs[key], (ident, key)
        assert store.artifact_get(art["id"]).content == b"diff --git a/y b/y\n"
        relay = tmp_path / "ref-relay"
        with running_hub(store) as our_url:
            out = refpkg.ref_cli_json(
                "logstream", "sync", "--peer", our_url, "--token", TOKEN, palace=relay
            )
        assert out[0]["pulled_events"] == 4  # the reference's 3, relayed, and our own
        assert {e["id"] for e in ref_events(relay)} >= set(source)
    finally:
        store.close()


def test_signed_events_travel_to_the_reference_and_back(tmp_path: Path) -> None:
    """With signed events (and key events) in our log the reference still pulls from our hub,
    and we still pull from its hub. The reference keeps no signatures (it ignores unknown
    fields), so what comes back is unsigned: the key events are refused (a key event must be
    signed), and a replica that never saw alice's key keeps her events as unverified (null),
    never as verified."""
    refpkg.require_ref_or_skip(full=True)
    (tmp_path / "ours").mkdir()
    store = LogStore.open(str(tmp_path / "ours" / "ours.sqlite3"))
    try:
        admin = agents.ensure_admin(store)
        agents.add(store, "alice")
        for i in range(2):
            store.event_append(type="note", stream="s", room="r", from_agent="alice", body=f"{i}")
        ours = {e.id: e.to_dict() for e in store.event_list(limit=50).events}
        assert all(e["verified"] is True for e in ours.values())
        palace = tmp_path / "ref-palace"
        with running_hub(store) as url:
            proc = refpkg.ref_cli(
                "logstream", "sync", "--peer", url, "--token", TOKEN, "--json", palace=palace
            )
            assert proc.returncode == 0, proc.stderr.decode()
            assert json.loads(proc.stdout)[0]["pulled_events"] == len(ours)
    finally:
        store.close()
    theirs = {e["id"]: e for e in ref_events(palace)}
    assert set(theirs) == set(ours)
    for ident, mine in ours.items():
        for key in WIRE_KEYS:
            assert theirs[ident][key] == mine[key], (ident, key)
    (tmp_path / "back").mkdir()
    db = str(tmp_path / "back" / "back.sqlite3")
    with LogStore.open(db) as back:
        agents.trust(back, admin)
    with refpkg.ref_hub(palace) as ref_url:
        proc = run_cli("sync", "--db", db, "--peer", ref_url, "--token", "ref-token", "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)[0]
    key_ids = {i for i, e in ours.items() if e["type"].startswith("identity.")}
    assert {r["ident"]: r["reason"] for r in result["rejected"]} == dict.fromkeys(
        key_ids, "unsigned_required"
    )
    with LogStore.open(db) as back:
        got = {e.id: e for e in back.event_list(limit=50).events}
    assert set(got) == set(ours) - key_ids
    assert all(e.verified is None for e in got.values())
