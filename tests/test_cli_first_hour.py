"""The CLI's first hour (issue 9, items 19 and 21-23): what a new user types and reads.

Non-UTF-8 patches kept byte for byte (locally and through a live hub), global options before
the command, `--version`, JSON errors, `artifact get --out` that never clobbers or follows a
link, `--from-agent` refused where it would be read as a filter, `task create` naming the
stream, and a `peers` table that never cuts a URL or a date.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mempalace_logstream import LogStore, __version__, cli, replication
from tests.hubkit import live_hub

TOKEN = "first-hour-tok"
# A diff of a Latin-1 file: 0xE9 is "é" in Latin-1 and never valid UTF-8 on its own.
LATIN1_PATCH = b"--- a/caf\xe9.txt\n+++ b/caf\xe9.txt\n@@ -1 +1 @@\n-caf\xe9\n+caf\xe9 cr\xe8me\n"


def invoke(*args: str, input: bytes | None = None, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli.app, list(args), input=input, env=env)


def ok_json(result) -> dict:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)


def events(db: Path) -> list[dict]:
    return ok_json(invoke("list", "--db", str(db), "--json", "--order", "asc"))["events"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.sqlite3"


EV = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")


# --------------------------------------------------------------------------- item 19


def _submit_and_fetch(where: list[str], tmp_path: Path, content: bytes, name: str):
    sub = invoke(
        "patch",
        "submit",
        "-",
        *where,
        "--from-agent",
        "w",
        "--stream",
        "project/x",
        "--json",
        input=content,
    )
    art = ok_json(sub)["artifact"]
    raw = invoke("artifact", "get", art["id"], *where)
    assert raw.exit_code == 0, raw.stderr
    out = tmp_path / name
    written = invoke("artifact", "get", art["id"], *where, "--out", str(out))
    assert written.exit_code == 0, written.stderr
    return sub, art, raw.stdout_bytes, out.read_bytes()


def test_a_latin1_patch_round_trips_byte_for_byte_locally(db, tmp_path):
    sub, art, printed, saved = _submit_and_fetch(["--db", str(db)], tmp_path, LATIN1_PATCH, "l")
    assert art["encoding"] == "base64" and art["size_bytes"] == len(LATIN1_PATCH)
    assert art["sha256"] == hashlib.sha256(LATIN1_PATCH).hexdigest()
    assert printed == LATIN1_PATCH and saved == LATIN1_PATCH
    assert "warning" not in sub.stderr  # ends with a newline, no CR: nothing to say


def test_a_latin1_patch_round_trips_byte_for_byte_through_a_hub(tmp_path):
    nul_text = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\x00\n+b\n"  # valid UTF-8, but NUL: binary
    with live_hub(tmp_path, token=TOKEN) as hub:
        where = ["--hub", hub.url, "--token", TOKEN]
        for content, name in ((LATIN1_PATCH, "hub-latin1"), (nul_text, "hub-nul")):
            _, art, printed, saved = _submit_and_fetch(where, tmp_path, content, name)
            assert art["encoding"] == "base64", name
            assert art["sha256"] == hashlib.sha256(content).hexdigest(), name
            assert printed == content and saved == content, name
        text = ok_json(
            invoke(
                "artifact",
                "put",
                "-",
                *where,
                "--kind",
                "file",
                "--created-by",
                "a",
                "--json",
                input=nul_text,
            )
        )
        assert text["artifact"]["encoding"] == "base64"  # artifact put sniffs the same way
        stored = hub.store.artifact_get(art["id"])
    assert stored.content == nul_text


def test_an_empty_patch_is_stored_with_a_warning(db):
    result = invoke(
        "patch",
        "submit",
        "-",
        "--db",
        str(db),
        "--from-agent",
        "w",
        "--stream",
        "s",
        "--json",
        input=b"",
    )
    out = ok_json(result)
    assert out["artifact"]["size_bytes"] == 0
    assert out["warnings"] == ["patch is empty; there is nothing to apply"]
    assert "warning: patch is empty" in result.stderr


# --------------------------------------------------------------------------- item 21


def test_version_prints_the_package_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"logstream {__version__}\n"


def test_global_options_work_before_the_command_and_a_later_value_wins(tmp_path):
    a, b, env_db = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3", tmp_path / "env.sqlite3"
    assert invoke("--db", str(a), *EV).exit_code == 0
    assert len(events(a)) == 1
    assert invoke("--db", str(a), *EV, "--db", str(b)).exit_code == 0  # after the command wins
    assert len(events(a)) == 1 and len(events(b)) == 1
    assert invoke("--db", str(a), *EV, env={"LOGSTREAM_DB": str(env_db)}).exit_code == 0
    assert len(events(a)) == 2 and not env_db.exists()  # a flag beats the environment
    listed = invoke("--json", "--db", str(a), "list")  # `--json` first
    assert ok_json(listed)["count"] == 2
    palace = tmp_path / "palace"
    assert invoke("--palace", str(palace), *EV).exit_code == 0
    assert (palace / "logstream.sqlite3").exists()


def test_hub_and_token_work_before_the_command(tmp_path):
    with live_hub(tmp_path, token=TOKEN) as hub:
        made = ok_json(invoke("--hub", hub.url, "--token", TOKEN, "--json", *EV))
        listed = ok_json(invoke("--hub", hub.url, "--token", TOKEN, "list", "--json"))
        assert [e["id"] for e in listed["events"]] == [made["event"]["id"]]
        refused = invoke("--hub", hub.url, "--token", "wrong", "list")
        assert refused.exit_code == 1 and "refused the token" in refused.stderr


def test_a_global_option_a_command_does_not_take_is_refused(tmp_path):
    result = invoke("--hub", "http://127.0.0.1:9", "migrate")
    assert result.exit_code == 2 and "--hub does not apply to `logstream migrate`" in result.stderr
    nested = invoke("--json", "--hub", "http://127.0.0.1:9", "serve")
    assert nested.exit_code == 2
    assert json.loads(nested.stderr)["error"] == "--hub does not apply to `logstream serve`"


def test_usage_errors_with_json_are_one_json_object_and_stay_exit_2(db):
    for args, field in (
        (["list", "--db", str(db), "--limit", "many", "--json"], "limit"),
        (["--json", "list", "--no-such-flag"], "no_such_flag"),
        (["--json", "append", "--db", str(db), "--stream", "s"], "type"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2 and result.stdout == "", (args, result.stderr)
        error = json.loads(result.stderr)
        assert error["field"] == field and error["error"], (args, error)
    plain = invoke("list", "--db", str(db), "--limit", "many")
    assert plain.exit_code == 2 and plain.stderr.startswith("Usage:")


def test_a_domain_error_with_json_names_the_field(db):
    result = invoke(*EV, "--db", str(db), "--status", "done", "--json")
    assert result.exit_code == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["field"] == "status" and "status" in error["error"]
    plain = invoke(*EV, "--db", str(db), "--status", "done")
    assert plain.stderr.startswith("error: status ") and plain.stderr.count("\n") == 1


@pytest.fixture
def stored(db) -> str:
    put = invoke(
        "artifact",
        "put",
        "-",
        "--db",
        str(db),
        "--kind",
        "file",
        "--created-by",
        "a",
        "--json",
        input=b"new bytes\n",
    )
    return ok_json(put)["artifact"]["id"]


def _get_out(db: Path, art: str, out: str, *extra: str, env: dict[str, str] | None = None):
    return invoke("artifact", "get", art, "--db", str(db), "--out", out, *extra, env=env)


def test_out_refuses_an_existing_file_without_force_and_replaces_it_with(db, stored, tmp_path):
    target = tmp_path / "fix.patch"
    target.write_bytes(b"precious")
    refused = _get_out(db, stored, str(target))
    assert refused.exit_code == 1 and "--force" in refused.stderr and "fix.patch" in refused.stderr
    assert target.read_bytes() == b"precious"
    other = tmp_path / "other-name"
    os.link(target, other)  # a second name for the same inode
    forced = _get_out(db, stored, str(target), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert target.read_bytes() == b"new bytes\n"
    assert other.read_bytes() == b"precious"  # renamed into place, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fix.patch", "log.sqlite3", "other-name"]


def test_out_never_writes_through_a_symlink(db, stored, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    link, dangling = tmp_path / "link", tmp_path / "dangling"
    link.symlink_to(victim)
    dangling.symlink_to(tmp_path / "would-be-created")
    for path in (link, dangling):
        refused = _get_out(db, stored, str(path))
        assert refused.exit_code == 1 and "already exists" in refused.stderr, path
    assert not (tmp_path / "would-be-created").exists()
    forced = _get_out(db, stored, str(link), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert not link.is_symlink() and link.read_bytes() == b"new bytes\n"
    assert victim.read_bytes() == b"keep me"


def test_out_expands_the_home_directory_and_names_a_missing_directory(db, stored, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    written = _get_out(db, stored, "~/fix.patch", env={"HOME": str(home)})
    assert written.exit_code == 0, written.stderr
    assert (home / "fix.patch").read_bytes() == b"new bytes\n"
    assert written.stdout.startswith(f"Wrote {stored} to {home / 'fix.patch'} ")
    missing = _get_out(db, stored, str(tmp_path / "no" / "such" / "dir" / "f"))
    assert missing.exit_code == 1 and "no/such/dir/f" in missing.stderr
    assert "No such file or directory" in missing.stderr


# --------------------------------------------------------------------------- item 22


def test_from_agent_is_refused_on_list_and_wait_with_a_hint(db):
    invoke(*EV, "--db", str(db))
    for command in ("list", "wait"):
        result = invoke(command, "--db", str(db), "--from-agent", "bob")
        assert result.exit_code == 2, (command, result.stderr)
        assert "--writer bob" in result.stderr and "not a filter" in result.stderr, command
        as_json = invoke(command, "--db", str(db), "--from-agent", "bob", "--json")
        assert json.loads(as_json.stderr)["field"] == "from_agent"
        page = invoke(command, "--help").stdout
        assert "--from-agent" not in page and "--writer" in page, command
    assert ok_json(invoke("list", "--db", str(db), "--writer", "bob", "--json"))["count"] == 0
    assert ok_json(invoke("list", "--db", str(db), "--writer", "a", "--json"))["count"] == 1


# --------------------------------------------------------------------------- item 23


def test_task_create_names_the_stream_and_says_the_task_id_is_the_correlation_id(db):
    result = invoke(
        "task",
        "create",
        "--db",
        str(db),
        "--project",
        "Demo App",
        "--from-agent",
        "lead",
        "--to-agent",
        "worker",
        "--goal",
        "Fix it",
        "--done",
        "tests pass",
        "--branch",
        "main",
        "--base-commit",
        "3f2a9c1",
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    task = events(db)[0]
    assert lines[0] == f"Task created: {task['correlation_id']} (the task id is the correlation id)"
    assert lines[1] == "Stream: project/demo_app" and task["stream"] == "project/demo_app"
    assert lines[2] == f"Event: {task['id']}"


LONG_URL = "http://build-farm-runner-0042.tailnet-3f9a.ts.net:8765"
LONG_ERROR = "cannot reach hub " + LONG_URL + ": ConnectError [Errno 111] Connection refused"


@pytest.fixture
def palace(tmp_path: Path) -> Path:
    """A palace with two peers: one synced once (a date), one failing (a long error)."""
    palace = tmp_path / "palace"
    palace.mkdir()
    peers = [{"name": "laptop", "url": LONG_URL}, {"name": "ci", "url": LONG_URL + "/ci"}]
    (palace / "peers.json").write_text(json.dumps({"peers": peers}))
    with LogStore.open(str(palace / "logstream.sqlite3")) as store:
        replication.record_estate(store, "laptop", LONG_URL, {"pulled_events": 7}, None)
        replication.record_estate(store, "ci", LONG_URL + "/ci", None, LONG_ERROR)
    return palace


def test_peers_prints_whole_urls_dates_and_errors_when_piped(palace):
    result = invoke("peers", "--palace", str(palace))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    estate = ok_json(invoke("peers", "--palace", str(palace), "--json"))["peers"]
    date = next(p["last_success_at"] for p in estate if p["name"] == "laptop")
    laptop = next(line for line in out.splitlines() if line.startswith("laptop "))
    ci = next(line for line in out.splitlines() if line.startswith("ci "))
    assert f"url={LONG_URL} " in laptop and f"last_success_at={date} " in laptop
    assert "last_pulled_events=7" in laptop
    assert ci.endswith(f"last_error={LONG_ERROR}") and f"url={LONG_URL}/ci " in ci
    assert "…" not in out


def test_peers_on_an_80_column_terminal_folds_but_never_cuts(palace, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    with LogStore.open(str(palace / "logstream.sqlite3")) as store:
        from mempalace_logstream import sync
        from mempalace_logstream.cli import sync as sync_cli

        estate = sync.estate(store, palace)
    text = re.sub(r"\x1b\[[0-9;]*m", "", sync_cli.peers_table(estate))  # styles off
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    columns = [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.startswith("│")
    ]
    url_cells = "".join(row[1] for row in columns)
    assert LONG_URL in url_cells and LONG_URL + "/ci" in url_cells
    assert LONG_ERROR.replace(" ", "") in "".join(row[-1] for row in columns).replace(" ", "")


# --------------------------------------------------------------------------- README: sync


def test_an_artifact_no_event_references_is_not_synced(tmp_path):
    """What the README says about sync and artifacts, checked."""
    a, b = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3"
    put = ["artifact", "put", "-", "--db", str(a), "--kind", "note", "--created-by", "x", "--json"]
    lonely = ok_json(invoke(*put, input=b"nobody points at me"))["artifact"]["id"]
    used = ok_json(invoke(*put, input=b"an event points at me"))["artifact"]["id"]
    assert invoke(*EV, "--db", str(a), "--artifact-id", used).exit_code == 0
    synced = invoke("sync", "--db", str(b), "--peer-db", str(a), "--json")
    assert synced.exit_code == 0, synced.stderr
    assert invoke("artifact", "get", used, "--db", str(b)).exit_code == 0
    missing = invoke("artifact", "get", lonely, "--db", str(b))
    assert missing.exit_code == 1 and "not found" in missing.stderr
