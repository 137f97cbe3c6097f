"""Issue 9, items 4 and 5: which commands may create a log, what is refused as "not a logstream
database", and reading a log this user may not write.

The rule lives once in engine.py (`create_engine(url, create=...)`, used by `LogStore.open`);
the CLI only picks the mode per command. Read-only opens run as a real non-root user (the
suite runs as root): a subprocess under `setpriv --reuid nobody`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, skip_unless_ci
from typer.testing import CliRunner
from watchkit import inotify_fds

from mempalace_logstream import LogStore, cli, errors
from mempalace_logstream.backends import engine as engine_mod

APPEND = ["append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a"]


def invoke(*args: str, input: bytes | None = None):
    return CliRunner().invoke(cli.app, list(args), input=input)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ----------------------------------------------------------------------------- item 4: create


READERS = [
    ["list"],
    ["get", "evt_x"],
    ["wait", "--timeout-ms", "0"],
    ["watch", "--agent", "bob", "--state-file", "", "--idle-exit-ms", "1"],
    ["stats"],
    ["artifact", "get", "art_x"],
    ["peers"],
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0] if a[0] != "artifact" else "art-get")
def test_read_commands_refuse_a_missing_log_and_create_nothing(tmp_path: Path, args) -> None:
    db = tmp_path / "nope" / "deeper" / "x.sqlite3"
    result = invoke(*args, "--db", str(db))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.startswith(f"error: no log at {db}: the file does not exist"), (
        result.stderr
    )
    assert "`logstream append`" in result.stderr and "created a new log" not in result.stderr
    assert files_under(tmp_path) == []  # not even the directories


def test_the_default_palace_is_not_created_by_a_read_either(tmp_path: Path) -> None:
    palace = tmp_path / "home" / ".mempalace" / "palace"
    result = invoke("stats", "--palace", str(palace))
    assert result.exit_code == 1 and f"no log at {palace / 'logstream.sqlite3'}" in result.stderr
    assert files_under(tmp_path) == []


def test_sync_peer_db_and_import_from_refuse_a_missing_source(tmp_path: Path) -> None:
    local = tmp_path / "local.sqlite3"
    LogStore.open(str(local)).close()
    before = files_under(tmp_path)
    typo = tmp_path / "typo.sqlite3"
    for push in ([], ["--push"]):
        result = invoke("sync", "--db", str(local), "--peer-db", str(typo), *push)
        assert result.exit_code == 1, result.stderr
        assert f"no log at {typo}" in result.stderr and "+0 events" not in result.stdout
    result = invoke("import", "--from", str(typo), "--db", str(tmp_path / "target.sqlite3"))
    assert result.exit_code == 1 and str(typo) in result.stderr
    assert files_under(tmp_path) == before


def test_writing_commands_create_the_log_and_say_so_once(tmp_path: Path) -> None:
    db = tmp_path / "new" / "dir" / "logstream.sqlite3"
    first = invoke(*APPEND, "--db", str(db))
    assert first.exit_code == 0, first.stderr
    assert first.stderr == f"created a new log at {db}\n"
    second = invoke(*APPEND, "--db", str(db))
    assert second.exit_code == 0 and second.stderr == ""
    assert invoke("list", "--db", str(db)).stdout.startswith("2 event(s):")
    # Nothing but the log (and its WAL files while open) was left behind: no temporary file.
    assert [p for p in files_under(tmp_path) if ".creating-" in p] == []


@pytest.mark.parametrize(
    "args",
    [
        ["artifact", "put", "--kind", "note", "--created-by", "a", "-"],
        ["patch", "submit", "--from-agent", "a", "--stream", "s", "-"],
        "task create --project P --from-agent a --to-agent b --branch main "
        "--base-commit abcdef1 --goal g --done d".split(),
        ["migrate"],
    ],
    ids=["artifact-put", "patch-submit", "task-create", "migrate"],
)
def test_every_writing_command_creates_a_missing_log(tmp_path: Path, args) -> None:
    db = tmp_path / "logstream.sqlite3"
    result = invoke(*args, "--db", str(db), input=b"diff --git a/x b/x\n")
    assert result.exit_code == 0, result.stderr
    assert f"created a new log at {db}" in result.stderr and db.exists()


def test_sync_creates_its_own_log_but_not_the_peer(tmp_path: Path) -> None:
    peer = tmp_path / "peer.sqlite3"
    with LogStore.open(str(peer)) as s:
        s.event_append(type="note", stream="s", room="r", from_agent="p")
    mine = tmp_path / "mine.sqlite3"
    result = invoke("sync", "--db", str(mine), "--peer-db", str(peer))
    assert result.exit_code == 0, result.stderr
    assert f"created a new log at {mine}" in result.stderr and "peer" not in result.stderr
    again = invoke(
        "sync", "--db", str(tmp_path / "other.sqlite3"), "--peer-db", str(peer), "--json"
    )
    assert again.exit_code == 0 and again.stderr == ""  # with --json stderr is for errors only


def _refused(path: Path, why: str, *args: list[str]) -> None:
    before = path.read_bytes()
    for cmd in args or (["list"], APPEND, ["migrate"]):
        result = invoke(*cmd, "--db", str(path))
        assert result.exit_code == 1, (cmd, result.stderr)
        assert f"{path} is not a logstream database ({why})" in result.stderr, result.stderr
    assert path.read_bytes() == before  # never initialised, never switched to WAL
    assert not Path(f"{path}-wal").exists()


def test_an_empty_file_is_refused_by_readers_and_writers_alike(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    _refused(empty, "the file is empty")
    with pytest.raises(errors.StorageError, match="not a logstream database"):
        LogStore.open(str(empty))


def test_a_file_that_is_not_sqlite_or_holds_no_log_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    _refused(text, "not an SQLite file")
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.close()
    _refused(other, "an SQLite file with no log in it")
    folder = tmp_path / "folder.sqlite3"
    folder.mkdir()
    result = invoke("list", "--db", str(folder))
    assert result.exit_code == 1 and "(it is a directory)" in result.stderr


def test_the_python_api_chooses_the_mode_and_reports_creation(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "api.sqlite3"
    with pytest.raises(errors.NotFoundError) as info:
        LogStore.open(str(path), create=False)
    assert info.value.field == "db" and str(path) in info.value.message
    assert not path.parent.exists()
    with LogStore.open(str(path)) as made:
        assert made.created and not made.read_only
    with LogStore.open(str(path), create=False) as again:
        assert not again.created and again.replica_id == made.replica_id


def test_processes_racing_to_create_one_log_all_open_the_same_one(tmp_path: Path) -> None:
    """The new file appears whole (built aside, then linked): a racing opener never refuses
    a half-made file as "not a logstream database"."""
    path = str(tmp_path / "race.sqlite3")
    results: list[object] = []

    def opener() -> None:
        try:
            with LogStore.open(path) as s:
                results.append((s.created, s.replica_id))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(r, tuple) for r in results), results
    assert sum(r[0] for r in results) == 1  # type: ignore[index]
    assert len({r[1] for r in results}) == 1  # type: ignore[index]
    assert [p for p in os.listdir(tmp_path) if ".creating-" in p] == []


def test_a_new_file_carries_the_logstream_application_id(tmp_path: Path) -> None:
    path = tmp_path / "id.sqlite3"
    engine_mod.create_engine(str(path)).dispose()  # created, not migrated yet
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == engine_mod.APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    with LogStore.open(str(path), create=False) as s:  # ours, so it is migrated on open
        assert s.event_list().events == ()


def test_postgresql_follows_the_create_mode_at_the_schema(pg_url: str) -> None:
    """A reader refuses a schema without a log (issue 18; tests/test_pg_schema.py has the
    rest); once a writer made it, a reader opens it as any other."""
    with pytest.raises(errors.NotFoundError, match="logstream migrate"):
        LogStore.open(pg_url, create=False)
    LogStore.open(pg_url).close()
    with LogStore.open(pg_url, create=False) as s:
        assert not s.created and not s.read_only
        s.event_append(type="note", stream="s", room="r", from_agent="a")


def test_open_errors_name_the_database(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite3"
    LogStore.open(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    result = invoke("list", "--db", str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot open {path}: database schema revision '9999'")


# ----------------------------------------------------------------------------- item 5: read-only

NOBODY = 65534


def _nobody_skip_reason() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to run a subprocess as the unprivileged user nobody"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    return None


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory tree that user nobody can traverse (pytest's tmp_path is root-only)."""
    reason = _nobody_skip_reason()
    if reason:
        skip_unless_ci(reason)
    root = Path(tempfile.mkdtemp(prefix="logstream-ro-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        for p in [root, *root.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(root)


def nobody(*args: str) -> list[str]:
    """`logstream ARGS` run as user nobody."""
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return [*drop, sys.executable, "-m", "mempalace_logstream", *args]


NOBODY_ENV = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": "/nonexistent"}


def as_nobody(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        nobody(*args), capture_output=True, text=True, env=NOBODY_ENV, timeout=timeout, cwd="/"
    )


def _log_with_events(path: Path, n: int = 2) -> list[str]:
    with LogStore.open(str(path)) as s:
        return [
            s.event_append(type="note", stream="s", room="r", from_agent="a").id for _ in range(n)
        ]


def test_a_backup_in_a_read_only_directory_can_be_read(shared_dir: Path) -> None:
    """A copied backup (no -wal, no -shm) where nobody may create one: opened immutable."""
    src = shared_dir / "src.sqlite3"
    ids = _log_with_events(src)
    backup = shared_dir / "ro" / "logstream.sqlite3"
    backup.parent.mkdir()
    shutil.copyfile(src, backup)
    backup.chmod(0o444)
    backup.parent.chmod(0o555)
    listed = as_nobody("list", "--db", str(backup), "--order", "asc", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["id"] for e in json.loads(listed.stdout)["events"]] == ids
    for args in (
        ["stats"],
        ["get", ids[0]],
        ["wait", "--since-event-id", "tip", "--timeout-ms", "50"],
    ):
        proc = as_nobody(*args, "--db", str(backup))
        assert proc.returncode in (0, 2) and "readonly" not in proc.stderr, (args, proc.stderr)
    refused = as_nobody(*APPEND, "--db", str(backup))
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: cannot write {backup}: this user may not write")
    assert sorted(os.listdir(backup.parent)) == ["logstream.sqlite3"]  # nothing created


def test_a_read_only_file_in_a_writable_directory_can_be_read(shared_dir: Path) -> None:
    path = shared_dir / "rw-dir" / "logstream.sqlite3"
    path.parent.mkdir()
    ids = _log_with_events(path, 1)
    path.chmod(0o444)
    path.parent.chmod(0o777)
    listed = as_nobody("list", "--db", str(path))
    assert listed.returncode == 0, listed.stderr
    assert ids[0] in listed.stdout


def test_another_users_live_log_can_be_read_and_waited_on(shared_dir: Path) -> None:
    """A log another user is writing (its -wal and -shm exist, the directory is theirs): read
    through `mode=ro`, and a wait wakes on their next append."""
    path = shared_dir / "live" / "logstream.sqlite3"
    path.parent.mkdir()
    writer = LogStore.open(str(path))
    try:
        first = writer.event_append(type="note", stream="s", room="r", from_agent="owner").id
        assert Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
        listed = as_nobody("list", "--db", str(path))
        assert listed.returncode == 0 and first in listed.stdout, listed.stderr
        args = ("wait", "--db", str(path), "--since-event-id", first, "--timeout-ms", "60000")
        waiter = subprocess.Popen(
            nobody(*args, "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=NOBODY_ENV,
            cwd="/",
        )
        # Blocked in its wait once its change signal (an inotify instance) is up.
        deadline = time.monotonic() + 60
        while inotify_fds(waiter.pid) == 0 and waiter.poll() is None:
            assert time.monotonic() < deadline, "the waiter never blocked"
            time.sleep(0.01)
        assert inotify_fds(waiter.pid) > 0, waiter.communicate(timeout=10)
        try:
            later = writer.event_append(type="note", stream="s", room="r", from_agent="o").id
            out, err = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        assert waiter.returncode == 0, err
        assert later in out
    finally:
        writer.close()


def test_opening_a_log_this_process_holds_leaves_sqlites_locks_on_it(tmp_path: Path) -> None:
    """The opening rule reads the file through SQLite only: a descriptor of our own, closed,
    would drop every POSIX lock this process holds on the log, and another process's last
    close would then delete the -wal and -shm under this one's connections."""
    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store:
        first = store.event_append(type="note", stream="s", room="r", from_agent="a").id
        LogStore.open(path).close()
        code = (
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1])\n"
            "db.execute('SELECT count(*) FROM events').fetchone()\n"
            "db.close()\n"
        )
        subprocess.run([sys.executable, "-c", code, path], check=True)
        assert os.path.exists(f"{path}-wal") and os.path.exists(f"{path}-shm")
        second = store.event_append(type="note", stream="s", room="r", from_agent="a").id
        assert [e.id for e in store.event_list().events] == [second, first]


def test_a_hub_refused_the_file_leaves_sqlites_locks_on_it(tmp_path: Path) -> None:
    """`serve` opens the store, then takes the file's hub lock: when another hub holds it,
    the refused descriptor stays open (closing it would drop SQLite's POSIX locks)."""
    from mempalace_logstream.backends import leader

    path = str(tmp_path / "log.sqlite3")
    LogStore.open(path).close()
    hold = "import fcntl, sys\nf = open(sys.argv[1], 'rb')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
    hold += "print('held', flush=True)\nsys.stdin.read()\n"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with LogStore.open(path) as store:
            store.event_append(type="note", stream="s", room="r", from_agent="a")
            with pytest.raises(errors.ConflictError, match="another hub already serves"):
                leader.hold_sqlite_file(path)
            code = "import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n"
            code += "db.execute('SELECT count(*) FROM events').fetchone()\ndb.close()\n"
            subprocess.run([sys.executable, "-c", code, path], check=True)
            assert os.path.exists(f"{path}-wal") and os.path.exists(f"{path}-shm")
            assert len(store.event_list().events) == 1
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
