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

from mempalace_logstream import LogStore
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
        patch = store.patch_submit(
            content="diff --git a/x b/x\n", from_agent="dev", stream="project/x", to_agent="rev"
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
        store.event_ack(event_id=ask.id, from_agent="dev", status="claimed")
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
