"""`--hub URL --token T` on the CLI: the same output and the same errors as a local run.

The hub serves a SQLite file; every command runs once through the hub and once locally on that
same file, and the outputs must be identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mempalace_logstream import cli
from tests.conftest import run_cli
from tests.hubkit import live_hub

TOKEN = "cli-tok-81c2f0"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(tmp_path_factory.mktemp("hubcli"), token=TOKEN) as h:
        yield h


@pytest.fixture(scope="module")
def both(hub):
    """Run a command through the hub and locally on the hub's own file."""
    runner = CliRunner()
    db = hub.store.engine.url.database

    def invoke(*args: str, input: bytes | None = None):
        remote = runner.invoke(cli.app, [*args, "--hub", hub.url, "--token", TOKEN], input=input)
        local = runner.invoke(cli.app, [*args, "--db", db], input=input)
        return remote, local

    return invoke


def _ok(result) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def test_reads_print_the_same_through_the_hub(both) -> None:
    remote, _ = both(
        "append",
        "--type",
        "note",
        "--stream",
        "cli",
        "--room",
        "r",
        "--from-agent",
        "a",
        "--to-agent",
        "b",
        "--body",
        "héllo",
    )
    assert _ok(remote).startswith("Appended: evt_")
    event_id = _ok(remote).split()[1]
    for args in (
        ("get", event_id),
        ("get", event_id, "--json"),
        ("list", "--stream", "cli", "--json"),
        ("list", "--to-agent", "b"),
        ("stats", "--json"),
    ):
        remote, local = both(*args)
        assert _ok(remote) == _ok(local), args


def test_errors_are_the_same_one_line_through_the_hub(both) -> None:
    for args in (
        ("append", "--type", "Bad Type", "--stream", "s", "--room", "r", "--from-agent", "a"),
        ("get", "evt_missing"),
        ("list", "--limit", "501"),
        ("artifact", "get", "art_missing"),
    ):
        remote, local = both(*args)
        assert remote.exit_code == local.exit_code == 1, args
        assert remote.stderr == local.stderr, args
        assert remote.stderr.startswith("error: ") and remote.stderr.count("\n") == 1


def test_binary_artifacts_and_a_delegation_work_through_the_hub(hub, tmp_path: Path) -> None:
    runner = CliRunner()
    remote = ["--hub", hub.url, "--token", TOKEN]
    raw = bytes(range(256)) + b"\r\n\x00end"
    (tmp_path / "blob").write_bytes(raw)
    put = runner.invoke(
        cli.app,
        [
            "artifact",
            "put",
            str(tmp_path / "blob"),
            "--kind",
            "file",
            "--created-by",
            "a",
            "--binary",
            "--json",
            *remote,
        ],
    )
    art_id = json.loads(_ok(put))["artifact"]["id"]
    got = runner.invoke(cli.app, ["artifact", "get", art_id, *remote])
    assert got.exit_code == 0 and got.stdout_bytes == raw

    task = runner.invoke(
        cli.app,
        [
            "task",
            "create",
            "--project",
            "p",
            "--from-agent",
            "lead",
            "--to-agent",
            "w",
            "--branch",
            "main",
            "--base-commit",
            "abcdef1",
            "--goal",
            "g",
            "--done",
            "d",
            "--json",
            *remote,
        ],
    )
    t = json.loads(_ok(task))["task"]
    claim = runner.invoke(
        cli.app, ["ack", t["id"], "--from-agent", "w", "--status", "claimed", "--json", *remote]
    )
    claim_id = json.loads(_ok(claim))["event"]["id"]
    wait = runner.invoke(
        cli.app,
        [
            "wait",
            "--correlation-id",
            t["correlation_id"],
            "--since-event-id",
            t["id"],
            "--timeout-ms",
            "5000",
            "--json",
            *remote,
        ],
    )
    assert [e["id"] for e in json.loads(_ok(wait))["events"]] == [claim_id]
    (tmp_path / "p.diff").write_text("--- a\n+++ b\n")
    patch = runner.invoke(
        cli.app,
        [
            "patch",
            "submit",
            str(tmp_path / "p.diff"),
            "--from-agent",
            "w",
            "--stream",
            t["stream"],
            "--json",
            *remote,
        ],
    )
    assert json.loads(_ok(patch))["event"]["type"] == "patch.ready"


def test_a_wrong_token_or_a_dead_hub_is_a_one_line_error(hub) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli.app, ["list", "--hub", hub.url, "--token", "nope"])
    assert bad.exit_code == 1 and "refused the token" in bad.stderr
    assert "nope" not in bad.stderr
    dead = runner.invoke(cli.app, ["list", "--hub", "http://127.0.0.1:9", "--token", TOKEN])
    assert dead.exit_code == 1 and dead.stderr.startswith("error: cannot reach hub")


@pytest.mark.slow
def test_the_real_cli_process_talks_to_the_hub(hub) -> None:
    proc = run_cli(
        "list", "--json", "--limit", "3", "--hub", hub.url, env={"LOGSTREAM_TOKEN": TOKEN}
    )
    assert proc.returncode == 0, proc.stderr
    local = CliRunner().invoke(
        cli.app, ["list", "--json", "--limit", "3", "--db", hub.store.engine.url.database]
    )
    assert proc.stdout.decode() == _ok(local)
