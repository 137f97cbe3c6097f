"""The `logstream` CLI: help everywhere, --json, byte-exact I/O, error form, db resolution.

Real subprocesses (`run_cli`) prove the process boundary: exit codes, one stderr line, no
traceback, exact bytes through stdin/stdout. The long refusal table also runs in-process through
typer's CliRunner so that every limit is covered without paying an interpreter per case.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
import typer
from conftest import REPO, run_cli
from typer.testing import CliRunner

from mempalace_logstream import cli

CORE_COMMANDS = [
    "append",
    "list",
    "get",
    "ack",
    "artifact put",
    "artifact get",
    "patch submit",
    "task create",
    "migrate",
    "stats",
]


def rows(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    with closing(sqlite3.connect(db)) as conn:
        try:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        except sqlite3.OperationalError:  # not created yet
            return 0


def written(db: Path) -> tuple[int, int, int]:
    return rows(db, "events"), rows(db, "artifacts"), rows(db, "artifact_blobs")


def ok(proc, what: str = "") -> dict:
    assert proc.returncode == 0, (what, proc.returncode, proc.stderr.decode(errors="replace"))
    return json.loads(proc.stdout)


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "palace" / "logstream.sqlite3"


def D(db: Path) -> list[str]:
    return ["--db", str(db)]


# --------------------------------------------------------------------------- help


def _walk(group, prefix: str = ""):
    # typer 0.29 vendors its own click: recognise groups by shape, not by class.
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}".strip()
        yield path, cmd
        if getattr(cmd, "commands", None):
            yield from _walk(cmd, path)


def test_every_command_and_option_has_help_text():
    root = typer.main.get_command(cli.app)
    commands = dict(_walk(root))
    for name in CORE_COMMANDS:
        assert name in commands, name
    for path, cmd in commands.items():
        assert (cmd.help or "").strip(), f"`logstream {path}` has no help text"
        for param in cmd.params:
            if not getattr(param, "hidden", False):
                assert (getattr(param, "help", None) or "").strip(), (path, param.name)
    for param in root.params:
        assert (param.help or "").strip(), ("logstream", param.name)


def test_every_help_page_shows_flags_as_flags_and_no_spec_ids():
    root = typer.main.get_command(cli.app)
    runner = CliRunner()
    for path, cmd in [("", root), *_walk(root)]:
        result = runner.invoke(cli.app, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.output)
        page = result.output
        assert "Usage" in page, path
        assert "<bool>" not in page and "BOOLEAN" not in page, (path, page)  # `--json`, a flag
        assert not re.search(r"\bS-\d", page), (path, page)  # no internal spec ids
        flags = [p for p in cmd.params if getattr(p, "is_flag", False) and not p.hidden]
        for flag in flags:
            assert re.search(rf"^\s+{re.escape(flag.opts[0])}\b", page, flags=re.M), (path, flag)
        # serve, mcp, the NATS bridge and the harness hook (its stdout is the harness's JSON)
        # print no answer
        if not getattr(cmd, "commands", None) and path not in (
            "serve",
            "mcp",
            "hook pretooluse",
            "bridge nats",
        ):
            assert "--json" in page, path
        if path in CORE_COMMANDS:
            assert "--db" in page, path


# --------------------------------------------------------------------------- a session


def invoke(*args: str, input: bytes | None = None, env: dict[str, str] | None = None):
    """The CLI in-process (typer's CliRunner): the same code path minus the interpreter start."""
    return CliRunner().invoke(cli.app, list(args), input=input, env=env)


def ok_in(result, what: str = "") -> dict:
    assert result.exit_code == 0, (what, result.exit_code, result.stderr, result.exception)
    return json.loads(result.stdout)


def test_a_full_session_with_json_output(db, tmp_path):
    body = b"line one\r\nline two \xe2\x9c\x93\r\n\r\n"
    ev = ok_in(
        invoke(
            "append",
            *D(db),
            "--type",
            "task.request",
            "--stream",
            "project/x",
            "--room",
            "delegation",
            "--from-agent",
            "lead",
            "--to-agent",
            "worker",
            "--metadata",
            '{"z": 1, "a": 2}',
            "--body-file",
            "-",
            "--json",
            input=body,
        ),
        "append",
    )["event"]
    assert ev["body"].encode() == body
    assert list(ev["metadata"]) == ["z", "a"]

    listed = ok_in(invoke("list", *D(db), "--to-agent", "worker", "--json"), "list")
    assert [e["id"] for e in listed["events"]] == [ev["id"]]
    assert listed["cursor"] == ev["id"] and listed["count"] == 1

    assert ok_in(invoke("get", ev["id"], *D(db), "--json"), "get")["event"] == ev

    ack = ok_in(
        invoke("ack", ev["id"], *D(db), "--from-agent", "worker", "--status", "claimed", "--json"),
        "ack",
    )["event"]
    assert ack["to_agent"] == "lead" and ack["metadata"] == {"ack_of": ev["id"]}

    content = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    art = ok_in(
        invoke(
            "artifact",
            "put",
            "-",
            *D(db),
            "--kind",
            "patch",
            "--created-by",
            "worker",
            "--json",
            input=content,
        ),
        "put",
    )["artifact"]
    assert art["sha256"] == hashlib.sha256(content).hexdigest()
    assert art["size_bytes"] == len(content) and "content" not in art
    got = ok_in(invoke("artifact", "get", art["id"], *D(db), "--json"), "get")["artifact"]
    assert got["content"].encode() == content and got["encoding"] == "utf-8"

    patch = b"--- a/g\n+++ b/g\n@@ -1 +1 @@\n-a\n+b\n"
    sub = ok_in(
        invoke(
            "patch",
            "submit",
            "-",
            *D(db),
            "--from-agent",
            "worker",
            "--stream",
            "project/x",
            "--to-agent",
            "lead",
            "--json",
            input=patch,
        ),
        "patch",
    )
    assert sub["event"]["type"] == "patch.ready" and sub["event"]["status"] == "ready"
    assert sub["event"]["artifact_ids"] == [sub["artifact"]["id"]]
    assert "warnings" not in sub

    task = ok_in(
        invoke(
            "task",
            "create",
            *D(db),
            "--project",
            "Demo",
            "--from-agent",
            "lead",
            "--to-agent",
            "worker",
            "--goal",
            "Ship it",
            "--done",
            "tests pass",
            "--branch",
            "main",
            "--base-commit",
            "ABCDEF1",
            "--json",
        ),
        "task",
    )
    assert task["task"]["stream"] == "project/demo" and task["task"]["base_commit"] == "abcdef1"
    assert task["task"]["correlation_id"] in task["handoff"]

    mig = ok_in(invoke("migrate", *D(db), "--json"), "migrate")
    assert mig["from"] == mig["to"]

    stats = ok_in(invoke("stats", *D(db), "--json"), "stats")
    assert stats["events"] == 4 and stats["artifacts"] == 2
    assert stats["per_writer"] == {"worker": 2, "lead": 2}


def test_human_output_is_readable(db):
    invoke(
        "append",
        *D(db),
        "--type",
        "chat",
        "--stream",
        "s",
        "--room",
        "r",
        "--from-agent",
        "a",
        "--to-agent",
        "b",
        "--body",
        "hello there",
    )
    result = invoke("list", *D(db))
    assert result.exit_code == 0
    assert "1 event(s):" in result.stdout and "a->b" in result.stdout
    assert "hello there" in result.stdout
    assert "replica" in invoke("stats", *D(db)).stdout


def test_raw_bytes_from_a_file_are_sniffed_as_binary(db, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"\xff\xfe plain file \x00")
    put = ok_in(
        invoke("artifact", "put", str(src), *D(db), "--kind", "file", "--created-by", "a", "--json")
    )["artifact"]
    assert put["encoding"] == "base64" and put["size_bytes"] == src.stat().st_size
    got = invoke("artifact", "get", put["id"], *D(db))
    assert got.stdout_bytes == src.read_bytes()


# --------------------------------------------------------------------------- refusals

BIG_BODY = "b" * (256 * 1024 + 1)


def _refusal_cases(tmp_path: Path) -> list[tuple[list[str], bytes | None, str, str | None]]:
    """(args, stdin, field, limit-in-message) for every kind of bad input."""
    big = tmp_path / "big.txt"
    big.write_bytes(BIG_BODY.encode())
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"a\x00b")
    bad_utf8 = tmp_path / "surrogate.txt"
    bad_utf8.write_bytes(b"x\xed\xa0\x80y")  # an encoded lone surrogate
    ev = ["append", "--stream", "s", "--room", "r", "--from-agent", "a"]
    return [
        (ev + ["--type", "Bad Type"], None, "type", "64"),
        (ev + ["--type", "x" * 65], None, "type", "64"),
        (
            ["append", "--type", "x", "--stream", "s" * 257, "--room", "r", "--from-agent", "a"],
            None,
            "stream",
            "256",
        ),
        (ev + ["--type", "x", "--to-agent", "b\tc"], None, "to_agent", None),
        (ev + ["--type", "x", "--status", "done"], None, "status", None),
        (ev + ["--type", "x", "--body-file", str(big)], None, "body", "262144"),
        (ev + ["--type", "x", "--body-file", "-"], b"a\x00b", "body", None),
        (ev + ["--type", "x", "--body-file", str(nul)], None, "body", None),
        (ev + ["--type", "x", "--body-file", str(bad_utf8)], None, "body", None),
        (ev + ["--type", "x", "--metadata", '{"a":'], None, "metadata", None),
        (
            ev + ["--type", "x", "--metadata", json.dumps({"k": "m" * 65529})],
            None,
            "metadata",
            "65536",
        ),
        (ev + ["--type", "x", "--artifact-id", "art_nope"], None, "artifact_ids", None),
        (["list", "--limit", "0"], None, "limit", "500"),
        (["list", "--limit", "501"], None, "limit", "500"),
        (["list", "--order", "sideways"], None, "order", None),
        (["list", "--since-created-at", "2026-02-30"], None, "since_created_at", None),
        (["list", "--since-event-id", "evt_nope"], None, "since_event_id", None),
        (["list", "--type", "ok.type", "--type", "Bad"], None, "type", None),
        (["get", "evt_nope"], None, "event_id", None),
        (["ack", "evt_nope", "--from-agent", "a"], None, "event_id", None),
        (["artifact", "get", "art_nope"], None, "artifact 'art_nope'", None),
        (["artifact", "put", "--kind", "binary", "--created-by", "a"], b"x", "kind", None),
        (["artifact", "put", "--kind", "note", "--created-by", "a\nb"], b"x", "created_by", None),
        (["patch", "submit", "--from-agent", "a", "--stream", "s" * 257], b"+x\n", "stream", "256"),
        (
            ["patch", "submit", "--from-agent", "a", "--stream", "s", "--to-agent", "x\x7f"],
            b"+x\n",
            "to_agent",
            None,
        ),
        (
            [
                "task",
                "create",
                "--project",
                "p",
                "--from-agent",
                "a",
                "--to-agent",
                "b",
                "--goal",
                "g",
                "--done",
                "d",
                "--branch",
                "main",
                "--base-commit",
                "main",
            ],
            None,
            "base_commit",
            None,
        ),
        (
            [
                "task",
                "create",
                "--project",
                "p",
                "--from-agent",
                "a",
                "--to-agent",
                "b",
                "--goal",
                "g",
                "--done",
                "d",
                "--branch",
                "main",
                "--base-commit",
                "abc12",
            ],
            None,
            "base_commit",
            "7-64",
        ),
    ]


def _assert_refused(result_code, stderr: str, field: str, limit: str | None, case) -> None:
    assert result_code == 1, (case, result_code, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, (case, stderr)
    assert lines[0].startswith("error: ") and field in lines[0], (case, stderr)
    if limit:
        assert limit in lines[0], (case, stderr)
    assert "Traceback" not in stderr


def test_every_refusal_exits_1_with_one_line_naming_the_field_and_writes_nothing(tmp_path, db):
    invoke("migrate", *D(db))  # a file with the schema, so the counts are meaningful
    before = written(db)
    for args, stdin, field, limit in _refusal_cases(tmp_path):
        result = invoke(*args, *D(db), input=stdin)
        _assert_refused(result.exit_code, result.stderr, field, limit, args[:3])
        assert result.stdout == "", args
        assert written(db) == before, args


def test_an_artifact_over_the_configured_limit_is_refused_and_leaves_no_blob(db):
    env = {"MEMPALACE_LOGSTREAM_MAX_ARTIFACT_BYTES": "16"}
    okay = invoke(
        "artifact",
        "put",
        *D(db),
        "--kind",
        "file",
        "--created-by",
        "a",
        "--json",
        input=b"x" * 16,
        env=env,
    )
    assert ok_in(okay)["artifact"]["size_bytes"] == 16
    before = written(db)
    result = invoke(
        "artifact", "put", *D(db), "--kind", "file", "--created-by", "a", input=b"y" * 17, env=env
    )
    _assert_refused(result.exit_code, result.stderr, "content", "16", "artifact")
    assert written(db) == before


def test_usage_errors_exit_2(db):
    in_process = [
        ["no-such-command"],
        ["append", *D(db), "--stream", "s"],
        ["list", *D(db), "--limit", "many"],
        [
            "append",
            *D(db),
            "--type",
            "x",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "a",
            "--body",
            "b",
            "--body-file",
            "-",
        ],
        [
            "task",
            "create",
            *D(db),
            "--project",
            "p",
            "--from-agent",
            "a",
            "--to-agent",
            "b",
            "--branch",
            "m",
            "--base-commit",
            "abcdef1",
            "--done",
            "d",
        ],
    ]
    for args in in_process:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.stderr)
    assert rows(db, "events") == 0


# --------------------------------------------------------------------------- db resolution


def test_db_resolution_db_flag_then_palace_flag_then_env_then_default(tmp_path):
    home = tmp_path / "home"
    palace_flag, palace_env = tmp_path / "flag-palace", tmp_path / "env-palace"
    explicit = tmp_path / "explicit.sqlite3"
    by_env_db = tmp_path / "env-db.sqlite3"
    base = ["append", "--type", "x", "--stream", "s", "--room", "r", "--from-agent", "a"]
    runs = [
        (base + ["--palace", str(palace_flag)], {"HOME": str(home)}),
        (base, {"HOME": str(home), "MEMPALACE_PALACE_PATH": str(palace_env)}),
        (
            base + ["--palace", str(palace_flag), "--db", f"sqlite:///{explicit}"],
            {"HOME": str(home), "MEMPALACE_PALACE_PATH": str(palace_env)},
        ),
        (base, {"HOME": str(home), "LOGSTREAM_DB": str(by_env_db)}),
        (base, {"HOME": str(home)}),
    ]
    for args, env in runs:
        result = invoke(*args, env=env)
        assert result.exit_code == 0, (args, result.stderr)
    assert rows(palace_flag / "logstream.sqlite3", "events") == 1
    assert rows(palace_env / "logstream.sqlite3", "events") == 1  # the env palace
    assert rows(explicit, "events") == 1  # --db wins over --palace and the env
    assert rows(by_env_db, "events") == 1
    assert rows(home / ".mempalace" / "palace" / "logstream.sqlite3", "events") == 1  # default


def test_the_cli_runs_against_postgresql_with_a_db_url(pg_url):
    appended = ok_in(
        invoke(
            "append",
            "--db",
            pg_url,
            "--type",
            "x",
            "--stream",
            "s",
            "--room",
            "r",
            "--from-agent",
            "a",
            "--body",
            "on pg",
            "--json",
        )
    )
    listed = ok_in(invoke("list", "--db", pg_url, "--json"))
    assert [e["id"] for e in listed["events"]] == [appended["event"]["id"]]


# --------------------------------------------------------------------------- real processes

BODY = b"crlf\r\nkept \xe2\x9c\x93\r\n"
PATCH = b"--- a/f\r\n+++ b/f\r\n@@ -1 +1 @@\r\n-a\r\n+b"  # CRLF and no final newline
BLOB = bytes(range(256)) * 3 + b"\r\n\x00\r"


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    """Every real-process case of this module, launched together (two at a time): an
    interpreter start costs about a second here, so they share the wait."""
    tmp = tmp_path_factory.mktemp("real")
    db, refusal_db = tmp / "palace" / "logstream.sqlite3", tmp / "refusals.sqlite3"
    garbage = tmp / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a sqlite database" * 100)
    ev = ["--type", "x", "--stream", "s", "--room", "r", "--from-agent", "a"]
    CliRunner().invoke(cli.app, ["migrate", *D(refusal_db)])
    before = written(refusal_db)
    first = {
        "body": (["append", *D(db), *ev, "--body-file", "-", "--json"], BODY, None),
        "put": (
            ["artifact", "put", "-", *D(db), "--kind", "patch", "--created-by", "a", "--json"],
            PATCH,
            None,
        ),
        "binary": (
            [
                "artifact",
                "put",
                *D(db),
                "--kind",
                "file",
                "--created-by",
                "a",
                "--binary",
                "--json",
            ],
            BLOB,
            None,
        ),
        "nul_body": (["append", *D(refusal_db), *ev, "--body-file", "-"], b"a\x00b", None),
        "limit": (["list", *D(refusal_db), "--limit", "0"], None, None),
        "garbage": (["list", "--db", str(garbage)], None, None),
        "json_garbage": (["--json", "list", "--db", str(garbage)], None, None),
        "json_refusal": (["list", *D(refusal_db), "--order", "sideways", "--json"], None, None),
        "json_usage": (["list", *D(refusal_db), "--limit", "many", "--json"], None, None),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(run_cli, *a, input=i, env=e) for k, (a, i, e) in first.items()}
        out = {k: f.result() for k, f in futures.items()}
        put_id = json.loads(out["put"].stdout)["artifact"]["id"]
        bin_id = json.loads(out["binary"].stdout)["artifact"]["id"]
        out_file = tmp / "copy.bin"
        get_raw = pool.submit(run_cli, "artifact", "get", put_id, *D(db))
        get_out = pool.submit(run_cli, "artifact", "get", bin_id, *D(db), "--out", str(out_file))
        out["get_raw"], out["get_out"] = get_raw.result(), get_out.result()
        json_file = tmp / "copy.json.bin"
        out["get_out_json"] = run_cli(
            "--json", "artifact", "get", bin_id, *D(db), "--out", str(json_file)
        )
    out.update(
        tmp=tmp, out_file=out_file, json_file=json_file, refusal_db=refusal_db, before=before
    )
    return out


def test_stdin_bodies_and_artifacts_keep_crlf_byte_for_byte(real):
    assert ok(real["body"])["event"]["body"].encode() == BODY
    art = ok(real["put"])["artifact"]
    assert art["sha256"] == hashlib.sha256(PATCH).hexdigest() and art["encoding"] == "utf-8"
    assert b"warning:" in real["put"].stderr  # advisories on stderr; the content is kept


def test_artifact_get_writes_the_exact_bytes_to_stdout_and_to_out(real):
    assert real["get_raw"].returncode == 0 and real["get_raw"].stdout == PATCH
    binary = ok(real["binary"])["artifact"]
    assert binary["encoding"] == "base64"
    assert binary["sha256"] == hashlib.sha256(BLOB).hexdigest()
    assert real["get_out"].returncode == 0 and real["out_file"].read_bytes() == BLOB
    line = real["get_out"].stdout.decode()  # one line for a person; JSON only with --json
    assert line.count("\n") == 1 and line.startswith(f"Wrote {binary['id']} to "), line
    assert str(real["out_file"]) in line and binary["sha256"] in line
    assert real["json_file"].read_bytes() == BLOB
    meta = json.loads(real["get_out_json"].stdout)["artifact"]
    assert meta["content_written_to"] == str(real["json_file"]) and "content" not in meta


def test_with_json_every_error_is_one_json_object_on_stderr(real):
    for key, field, code in (
        ("json_garbage", None, 1),
        ("json_refusal", "order", 1),
        ("json_usage", "limit", 2),
    ):
        proc = real[key]
        assert proc.returncode == code and proc.stdout == b"", (key, proc)
        lines = proc.stderr.decode().strip().splitlines()
        assert len(lines) == 1, (key, proc.stderr)
        error = json.loads(lines[0])
        assert set(error) == {"error", "field"} and error["field"] == field, (key, error)
        assert error["error"] and "Traceback" not in error["error"], (key, error)
    order = json.loads(real["json_refusal"].stderr)["error"]
    assert order == "order must be 'asc' or 'desc', not 'sideways'"  # one sentence


def test_refusals_from_a_real_process_are_one_line_exit_1_and_write_nothing(real):
    for key, field, limit in (("nul_body", "body", None), ("limit", "limit", "500")):
        proc = real[key]
        _assert_refused(proc.returncode, proc.stderr.decode(), field, limit, key)
        assert proc.stdout == b""
    assert written(real["refusal_db"]) == real["before"]


def test_unexpected_failures_are_one_line_without_debug_and_raise_with_it(real, monkeypatch):
    plain = real["garbage"]
    assert plain.returncode == 1
    lines = plain.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), plain.stderr
    assert b"Traceback" not in plain.stderr
    # --debug: main() lets the exception through, so the interpreter prints the traceback.
    garbage = real["tmp"] / "garbage.sqlite3"
    monkeypatch.setattr("sys.argv", ["logstream", "--debug", "list", "--db", str(garbage)])
    with pytest.raises(Exception) as info:
        cli.main()
    assert not isinstance(info.value, SystemExit)
    cli.STATE.debug = False


def test_help_touches_no_database(tmp_path):
    result = invoke("--help", env={"HOME": str(tmp_path)})
    assert result.exit_code == 0
    for word in ("append", "list", "artifact", "patch", "task", "migrate", "stats"):
        assert word in result.stdout
    assert not (tmp_path / ".mempalace").exists()


# What a plain `list` must not load: the servers, their frameworks, the hub client and sync.
SERVER_MODULES = (
    "fastapi",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "mcp",
    "httpx",
    "mempalace_logstream.http",
    "mempalace_logstream.mcp_server",
    "mempalace_logstream.hub_client",
    "mempalace_logstream.sync",
)
LIST_THEN_SHOW_MODULES = """
import json, sys
from mempalace_logstream import cli
db, report = sys.argv[1:]
sys.argv = ["logstream", "list", "--json", "--db", db]
try:
    cli.main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
with open(report, "w") as fh:
    json.dump(sorted(sys.modules), fh)
"""


def test_a_plain_list_imports_no_server_framework(db, tmp_path):
    """`list` and `wait` run in loops from scripts: they must not pay for FastAPI, the MCP SDK,
    uvicorn or httpx. Measured in a fresh interpreter, by what `sys.modules` holds after."""
    note = ("--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")
    assert invoke("append", *D(db), *note, "--body", "hi").exit_code == 0
    report = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", LIST_THEN_SHOW_MODULES, str(db), str(report)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(proc.stdout)["count"] == 1
    loaded = json.loads(report.read_text())
    heavy = [m for m in loaded if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)]
    assert heavy == []
    # The command really ran, locally: through the lean reader (tests/test_cli_lean.py).
    assert "mempalace_logstream.store.lean" in loaded


FILTER_FLAGS = (
    "--stream",
    "--room",
    "--topic",
    "--type",
    "--to-agent",
    "--writer",
    "--exclude-writer",
    "--correlation-id",
    "--status",
)


def test_the_readers_share_one_declaration_of_the_filter_options(db):
    """list, wait and watch take the same filter flags with the same help, and all three refuse
    --from-agent (an identity, not a filter) the same way."""
    root = typer.main.get_command(cli.app)
    helps = {}
    for name in ("list", "wait", "watch"):
        params = {p.opts[0]: p for p in root.commands[name].params}  # type: ignore[attr-defined]
        helps[name] = {flag: params[flag].help for flag in FILTER_FLAGS}
        assert all(params[flag].multiple for flag in FILTER_FLAGS), name
        assert params["--from-agent"].hidden, name
    assert helps["list"] == helps["wait"] == helps["watch"]
    assert all(text and "repeat" in text for text in helps["list"].values())
    for name in ("list", "wait", "watch"):
        refused = invoke(name, *D(db), "--from-agent", "bob", "--json")
        assert refused.exit_code == 2, (name, refused.stderr)
        assert json.loads(refused.stderr)["field"] == "from_agent", name
        assert "--writer bob" in json.loads(refused.stderr)["error"], name
