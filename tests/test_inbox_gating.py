"""Sender gating of `logstream inbox` (issue 18 items 4 and 9), as channel mode gates senders:
once the log holds agents' keys, only verified senders are shown, each marked `verified=true`;
`--allow-unverified` shows the rest, marked (an unsigned event under a name that signs reads
`verified=false verified_reason=unsigned_name_signs`, never as plain mail); a log without keys
shows everything unmarked. The lean path (`python -m`, SQLite) and the typer command (through
the store) answer alike; PostgreSQL is read through the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mempalace_logstream import LogStore, agents, inbox
from mempalace_logstream.identity.keyring import KEY_ADD
from tests.conftest import REPO
from tests.test_inbox_hook import PROMPT, context, hook, inbox_args, send, stdin_payload, typer_cli


@pytest.fixture
def log(log_url: str, tmp_path: Path) -> Iterator[LogStore]:
    s = LogStore.open(log_url)
    if s.backend.name != "sqlite":
        s.identity.keys_dir = tmp_path / "keys"  # a PostgreSQL log's keys: <palace>/keys
        s.identity.reload_keys()
    yield s
    s.close()


def _mail(log: LogStore, db_url: str, tmp_path: Path) -> dict[str, str]:
    """Bob's state files at the tip, then: dave writes before he gets a key, alice and dave
    get keys, alice writes (signed), carol (who never gets a key) writes. Before the keys, a
    log without keys shows everyone, unmarked."""
    for name in ("gated", "open", "json", "typer"):
        assert hook(db_url, tmp_path / f"{name}.json").stdout == b""  # first run: the tip
    sent = {"dave": send(log, "dave", "bob", "dave, unsigned, before his key")}
    solo = context(hook(db_url, tmp_path / "solo.json", "--from-start"))
    assert sent["dave"] in solo and "verified=" not in solo and "not shown" not in solo
    agents.add(log, "alice")
    agents.add(log, "dave")
    sent["alice"] = send(log, "alice", "bob", "alice, signed")
    sent["carol"] = send(log, "carol", "bob", "carol, never signs")
    return sent


def test_once_agents_have_keys_the_hook_shows_only_verified_senders(
    log: LogStore, db_url: str, tmp_path: Path
) -> None:
    sent = _mail(log, db_url, tmp_path)
    text = context(hook(db_url, tmp_path / "gated.json"))
    line = next(x for x in text.splitlines() if sent["alice"] in x)
    assert line.endswith("verified=true")
    assert "verified=true on a message means the sender's signature was checked" in text
    assert sent["carol"] not in text and sent["dave"] not in text
    assert "carol, never signs" not in text and "before his key" not in text
    assert "2 message(s) from senders whose signature was not verified are not shown" in text
    assert "--allow-unverified" in text
    assert hook(db_url, tmp_path / "gated.json").stdout == b""  # the cursor moved past all

    shown = context(hook(db_url, tmp_path / "open.json", "--allow-unverified"))
    lines = {k: next(x for x in shown.splitlines() if v in x) for k, v in sent.items()}
    assert lines["alice"].endswith(" verified=true")
    assert lines["carol"].endswith(" verified=null")
    assert lines["dave"].endswith(" verified=false verified_reason=unsigned_name_signs")
    assert "not shown" not in shown

    page = json.loads(run_json(db_url, tmp_path / "json.json").stdout)
    assert [e["id"] for e in page["events"]] == [sent["alice"]]
    assert page["withheld_unverified"] == 2


def run_json(db_url: str, state: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    from tests.conftest import run_cli

    return run_cli(*inbox_args(db_url, state, "--json", *extra), input=b"")


def test_the_lean_path_and_the_store_gate_and_mark_alike(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as log:
        _mail(log, db, tmp_path)
        for extra in ((), ("--allow-unverified",)):
            for flags in (("--hook", "claude"), ("--json",)):
                lean_state, full_state = tmp_path / "l.json", tmp_path / "f.json"
                for state in (lean_state, full_state):
                    state.write_text((tmp_path / "typer.json").read_text())
                args = (*flags, *extra)
                lean = hook(db, lean_state, *args, kind=None)
                full = typer_cli(*inbox_args(db, full_state, *args), stdin=stdin_payload(PROMPT))
                assert lean.returncode == full.returncode == 0, full.stderr
                assert lean.stdout == full.stdout and lean.stdout, args


def test_the_hook_reads_a_keyed_log_without_sqlalchemy_or_the_ed25519_library(
    tmp_path: Path,
) -> None:
    """Gating and marks on the lean path: the key events are folded from the log with their
    stored (already verified) signatures, so neither SQLAlchemy nor `cryptography` loads."""
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as log:
        sent = _mail(log, db, tmp_path)
    code = (
        "import json, sys\n"
        "from mempalace_logstream import hook\n"
        "rc = hook.fast_path(sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'cryptography'})\n"
        "sys.stderr.write(json.dumps({'rc': rc, 'heavy': heavy}))\n"
    )
    argv = inbox_args(db, tmp_path / "open.json", "--hook", "claude", "--allow-unverified")
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        input=stdin_payload(PROMPT),
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert json.loads(proc.stderr.decode().splitlines()[-1]) == {"rc": 0, "heavy": []}
    text = context(subprocess.CompletedProcess([], 0, proc.stdout, b""))
    assert "verified=false verified_reason=unsigned_name_signs" in text
    assert sent["dave"] in text


def test_the_inbox_names_the_key_event_type_of_the_keyring() -> None:
    assert inbox.KEY_ADD == KEY_ADD
