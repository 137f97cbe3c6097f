"""A new user's first hour with identity (issue 18 item 20, the parts outside tasks): a new
replica's `logstream sync` says how many events wait for a key it does not know and prints the
`logstream agent trust KEY_ID` line to run; the catch-up after `agent trust` is not reported
as sequence anomalies; `agent add` with LOGSTREAM_HUB set says to unset it; the README says
what the tool does. The browser side of the Sync tab is tests/test_dashboard.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mempalace_logstream import agents, sync
from mempalace_logstream.store import LogStore
from tests.conftest import REPO, run_cli
from tests.hubkit import live_hub

TOKEN = "first-hour-identity-tok"


def _signed_hub_log(store: LogStore) -> str:
    """alice and bob with keys and a signed note each, plus an unsigned one: the admin key id."""
    for name in ("alice", "bob"):
        agents.add(store, name)
        store.event_append(type="note", stream="s", room="r", from_agent=name, body="signed")
    store.event_append(type="note", stream="s", room="r", from_agent="carol", body="unsigned")
    return agents.ensure_admin(store)


def test_a_new_replica_is_told_what_is_held_and_the_trust_line_then_catches_up_quietly(
    tmp_path: Path,
) -> None:
    with live_hub(tmp_path / "hub", token=TOKEN) as hub:
        admin = _signed_hub_log(hub.store)
        held = hub.store.stats()["events"] - 1  # all but carol's unsigned note
        db = str(tmp_path / "laptop" / "log.sqlite3")
        args = ("sync", "--db", db, "--peer", hub.url)
        env = {"LOGSTREAM_PEER_TOKEN": TOKEN}
        first = run_cli(*args, env=env)
        out = first.stdout.decode()
        assert first.returncode == 0, first.stderr
        assert f"{held} events held" in out and "REJECTED" not in out, out
        assert f"logstream agent trust {admin}" in out.splitlines()[-1], out
        again = run_cli(*args, env=env)  # before trusting: still held, nothing anomalous
        text = again.stdout.decode()
        assert f"{held} events held" in text and "ANOMALIES" not in text, text
        assert run_cli("agent", "trust", admin, "--db", db).returncode == 0
        caught_up = run_cli(*args, env=env)
        text = caught_up.stdout.decode()
        assert caught_up.returncode == 0, caught_up.stderr
        assert f"+{held} events" in text and "ANOMALIES" not in text and "held" not in text, text
        quiet = run_cli(*args, env=env).stdout.decode()
        assert "+0 events" in quiet and "ANOMALIES" not in quiet, quiet


def test_a_held_round_is_no_sequence_anomaly_on_both_backends(
    store: LogStore, tmp_path: Path
) -> None:
    with LogStore.open(str(tmp_path / "hub.sqlite3")) as hub:
        hub.identity.keys_dir = tmp_path / "keys"
        admin = _signed_hub_log(hub)
        peer = sync.LocalPeer(hub, name="hub")
        for _ in range(2):
            result = sync.sync_one(store, peer)
            assert result["sequence_anomaly_count"] == 0, result["sequence_anomalies"]
            assert result["held_count"] == result["rejected_count"] == hub.stats()["events"] - 1
            assert result["trust_keys"] == [admin]
        store.pin_admin(admin)
        result = sync.sync_one(store, peer)
        assert result["sequence_anomaly_count"] == 0, result["sequence_anomalies"]
        assert result["pulled_events"] == hub.stats()["events"] - 1
        assert result["held_count"] == 0 and result["trust_keys"] == []
        assert store.stats()["events"] == hub.stats()["events"]


def test_agent_add_with_logstream_hub_set_says_to_unset_it(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    env = {"LOGSTREAM_HUB": "http://127.0.0.1:8765"}
    for cmd in (("add", "alice"), ("list",), ("rotate", "alice")):
        done = run_cli("agent", *cmd, "--db", db, env=env)
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert "LOGSTREAM_HUB is set" in err and "unset LOGSTREAM_HUB" in err, err
        assert err.count("\n") == 1
    typed = run_cli("agent", "add", "alice", "--hub", "http://127.0.0.1:8765")
    assert "run `logstream agent add` on the hub's host" in typed.stderr.decode()
    assert "LOGSTREAM_HUB is set" not in typed.stderr.decode()
    done = run_cli("agent", "add", "alice", "--db", db, env={"LOGSTREAM_HUB": ""})
    assert done.returncode == 0, done.stderr  # set but empty: as if unset


def test_the_readme_and_pyproject_say_what_the_tool_does() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "not wired into writes yet" not in readme
    assert "not imported yet" not in pyproject
    assert "`logstream mcp --agent` without `--channel` needs `--hub`" not in readme
    # What holds instead: `mcp --agent NAME` on a local log runs every call as NAME.
    presence = " ".join(
        readme[readme.index("## Presence") : readme.index("## MCP: connect")].split()
    )
    assert re.search(r"mcp --agent NAME` without `--hub`.*runs every tool call as NAME", presence)


def test_the_readme_recommends_the_token_in_the_environment(tmp_path: Path) -> None:
    """Issue 18 item 16: a token on the command line is in `ps` for every local user."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Agents and tokens") : readme.index("## Dashboard")]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None and "--token" not in block.group(1)
    assert "`ps`" in section and "LOGSTREAM_TOKEN" in section
    for var in ("LOGSTREAM_TOKEN", "LOGSTREAM_PEER_TOKEN"):
        assert var in readme
    assert not re.search(r"--token \"?\$LOGSTREAM", readme), "expands the secret into argv"


@pytest.mark.parametrize("cmd", [("serve",), ("sync",), ("list",), ("mcp",)])
def test_every_token_option_names_its_variable_and_says_why(cmd: tuple[str, ...]) -> None:
    help_text = run_cli(*cmd, "--help", env={"COLUMNS": "200"}).stdout.decode()
    line = " ".join(help_text.split())
    assert "shows in ps" in line, line
    assert "LOGSTREAM_TOKEN" in line or "LOGSTREAM_PEER_TOKEN" in line, line


def test_json_sync_reports_the_keys_to_trust(tmp_path: Path) -> None:
    with LogStore.open(str(tmp_path / "hub.sqlite3")) as hub:
        hub.identity.keys_dir = tmp_path / "keys"
        admin = _signed_hub_log(hub)
    db = str(tmp_path / "replica.sqlite3")
    done = run_cli("sync", "--db", db, "--peer-db", str(tmp_path / "hub.sqlite3"), "--json")
    (result,) = json.loads(done.stdout)
    assert result["trust_keys"] == [admin] and result["held_count"] == 5
