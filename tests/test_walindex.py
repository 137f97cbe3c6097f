"""A SQLite reader tells a commit from its log's WAL index header, not a statement (issue 25,
backends/sqlite_walindex.py): a repeated read on a quiet log runs its page alone; any commit
(another connection, another process, a checkpoint's WAL restart after it) changes the
header exactly when `PRAGMA data_version` moves; a log reached through a symlink maps the file
SQLite uses; where there is no header to map, the PRAGMA tells, as before."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mempalace_logstream import LogStore
from mempalace_logstream.backends import sqlite as sqlite_backend
from mempalace_logstream.backends import sqlite_walindex
from mempalace_logstream.backends.sqlite_walindex import header_reader
from tests.test_stored_events import plant_row

NOTE = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}


def _statements(store: LogStore, **args: Any) -> list[str]:
    """The SQL the reader connection of `store`'s next read runs for `event_list(**args)`."""
    reader = store.backend._readers[-1]  # the idle reader the next read takes
    ran: list[str] = []
    reader.db.set_trace_callback(ran.append)
    try:
        store.event_list(**args)
    finally:
        reader.db.set_trace_callback(None)
    return ran


def test_a_repeated_read_on_a_quiet_log_runs_its_page_alone(sqlite_store: Any) -> None:
    sqlite_store.event_append(**NOTE, body="b", correlation_id="t")
    sqlite_store.event_list(correlation_id="t")
    ran = _statements(sqlite_store, correlation_id="t")
    assert len(ran) == 1 and "FROM events" in ran[0], ran
    assert sqlite_store.backend._readers[-1].header  # the header is mapped


def test_a_commit_by_another_process_is_read_at_once(tmp_path: Path) -> None:
    """Through a symlink too: the map is of the file SQLite opened (`PRAGMA database_list`)."""
    real = tmp_path / "real" / "log.sqlite3"
    real.parent.mkdir()
    link = tmp_path / "link.sqlite3"
    LogStore.open(str(real)).close()
    link.symlink_to(real)
    with LogStore.open(str(link)) as store:
        first = store.event_append(**NOTE, body="mine").id
        for _ in range(3):
            assert store.tip()[1] == first and store.event_list().events[0].id == first
        assert store.backend._readers[-1].header
        code = (
            "import sys; from mempalace_logstream import LogStore\n"
            "with LogStore.open(sys.argv[1]) as s:\n"
            "    print(s.event_append(type='note', stream='s', room='r', from_agent='b',"
            " body='theirs').id)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(real)], check=True, capture_output=True, text=True
        )
        theirs = out.stdout.strip()
        assert [e.id for e in store.event_list().events] == [theirs, first]
        assert store.event_list(from_agent="b").events[0].id == theirs


def test_a_transactions_facts_are_its_snapshots_when_a_commit_lands_as_it_starts(
    sqlite_store: Any,
) -> None:
    """A snapshot that is one transaction (`reading`: `snapshot()`, `event_get`) starts at its
    `PRAGMA data_version`; a commit landing after the header was read and before that
    statement opened the snapshot must not leave it the facts of before (here the tip)."""
    first = sqlite_store.event_append(**NOTE, body="one").id
    path = str(sqlite_store.engine.url.database)
    tip_sql, tip_params = sqlite_store.reads._tip  # a log fact: answered again while quiet

    def tip() -> str:
        with sqlite_store.snapshot() as ex:
            return str(ex.query(tip_sql, tip_params)[0][1])

    for _ in range(3):
        assert tip() == first
    reader = sqlite_store.backend._readers[-1]
    assert reader.header
    planted: list[str] = []

    def commit_as_it_starts(sql: str) -> None:
        if sql == "PRAGMA data_version" and not planted:
            planted.append(plant_row(path, body="theirs"))

    reader.db.set_trace_callback(commit_as_it_starts)
    try:
        seen = tip()
    finally:
        reader.db.set_trace_callback(None)
    assert planted and seen == planted[0]
    assert tip() == planted[0]


def test_the_facts_of_a_snapshot_begun_before_them_are_not_kept(sqlite_store: Any) -> None:
    """A snapshot that began at a statement of its own (`event_get` reads its event, then the
    keyring's marks) reads its facts as they were when it began: a commit since moved the
    header, and those facts must not be kept under the new header for the next read."""
    first = sqlite_store.event_append(**NOTE, body="one").id
    path = str(sqlite_store.engine.url.database)
    tip_sql, tip_params = sqlite_store.reads._tip

    def tip() -> str:
        with sqlite_store.snapshot() as ex:
            return str(ex.query(tip_sql, tip_params)[0][1])

    for _ in range(3):
        assert tip() == first
    with sqlite_store.snapshot() as ex:
        assert ex.query("SELECT count(*) FROM events", {})[0][0] == 1  # the snapshot begins
        theirs = plant_row(path, body="theirs")
        assert str(ex.query(tip_sql, tip_params)[0][1]) == first  # the snapshot's own tip
    assert tip() == theirs
    assert sqlite_store.event_list().events[0].id == theirs


def test_without_a_header_to_map_the_pragma_tells(
    sqlite_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that could map no header (a log opened immutable, a system without mmap's
    POSIX flags) asks `PRAGMA data_version` on each read and still sees every commit."""
    monkeypatch.setattr(sqlite_backend, "header_reader", lambda db: None)
    while sqlite_store.backend._readers:  # readers made from now on
        sqlite_store.backend._readers.pop().proxy.close()
    first = sqlite_store.event_append(**NOTE, body="one").id
    assert sqlite_store.event_list().events[0].id == first
    ran = _statements(sqlite_store)
    assert ran[0] == "PRAGMA data_version" and len(ran) == 2, ran
    assert sqlite_store.backend._readers[-1].header is None
    second = sqlite_store.event_append(**NOTE, body="two").id
    assert [e.id for e in sqlite_store.event_list().events] == [second, first]


def test_no_header_is_mapped_for_a_log_not_in_wal_mode(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "plain.sqlite3", isolation_level=None)
    try:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert header_reader(db) is None
    finally:
        db.close()


# Steps another connection takes between two looks of the reader: a commit, a rolled-back
# write, a read, or a checkpoint (RESTART and TRUNCATE make the next commit restart the WAL).
_STEPS = st.lists(
    st.sampled_from(["commit", "rollback", "read", "passive", "restart", "truncate"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(rounds=st.lists(_STEPS, min_size=1, max_size=6))
def test_the_header_changes_exactly_when_data_version_does(
    tmp_path_factory: pytest.TempPathFactory, rounds: list[list[str]]
) -> None:
    path = tmp_path_factory.mktemp("walindex") / "log.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("CREATE TABLE t (x)")
        version = reader.execute("PRAGMA data_version").fetchone()[0]
        header = header_reader(reader)
        assert header is not None
        seen = header()
        for steps in rounds:
            for step in steps:
                if step in ("commit", "rollback"):
                    writer.execute("BEGIN IMMEDIATE")
                    writer.execute("INSERT INTO t VALUES (?)", (os.urandom(8).hex(),))
                    writer.execute(step.upper())
                elif step == "read":
                    writer.execute("SELECT count(*) FROM t").fetchone()
                else:
                    writer.execute(f"PRAGMA wal_checkpoint({step.upper()})").fetchone()
            now = header()
            moved = reader.execute("PRAGMA data_version").fetchone()[0]
            assert (now != seen) == (moved != version), steps
            if "commit" in steps:  # a checkpoint that empties the WAL moves both too
                assert now != seen, steps
            seen, version = now, moved
    finally:
        reader.close()
        writer.close()


# Another process asks which lock would stop it taking SQLite's dead-man byte of the WAL index
# (os_unix.c: UNIX_SHM_DMS, byte 128) for writing: the pid that holds it, or 0.
_DMS_HOLDER = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 128, 1, 0)
kind, _whence, _start, _len, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, lock))
print(0 if kind == fcntl.F_UNLCK else pid)
"""


def test_reading_the_header_leaves_sqlites_locks_on_the_index_held(sqlite_store: Any) -> None:
    """POSIX drops a process's locks on a file when any descriptor of it is closed: the
    header's descriptor must never be one closed while the log is open, or another process
    would take the index for unused and start it anew under this one's connections."""
    sqlite_store.event_append(**NOTE, body="b")
    for _ in range(3):
        sqlite_store.event_list()
    assert sqlite_store.backend._readers[-1].header
    index = str(sqlite_store.engine.url.database) + "-shm"
    holder = subprocess.run(
        [sys.executable, "-c", _DMS_HOLDER, index], check=True, capture_output=True, text=True
    )
    assert int(holder.stdout) == os.getpid()


def test_the_descriptors_of_closed_logs_are_closed(tmp_path: Path) -> None:
    """SQLite deletes a log's index when its last connection closes: its descriptor is closed
    when the next index is opened, so a process that opens many logs in turn keeps a few."""
    for n in range(sqlite_walindex._DESCRIPTORS_MAX + 20):
        path = tmp_path / f"log{n}.sqlite3"
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE t (x)")
            db.execute("SELECT count(*) FROM t").fetchone()
            header = header_reader(db)
            assert header is not None and len(header()) == sqlite_walindex.HEADER_BYTES
        finally:
            db.close()
        assert not os.path.exists(f"{path}-shm")
    assert len(sqlite_walindex._descriptors) <= 2


def test_a_log_opened_again_after_its_index_was_deleted_keeps_one_live_descriptor(
    tmp_path: Path,
) -> None:
    """Every connection closed (SQLite deletes the index), then a new one (a new index file
    at the same path): the old descriptor is closed, and no closed one is kept."""
    path = tmp_path / "log.sqlite3"
    for _ in range(3):
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS t (x)")
            db.execute("SELECT count(*) FROM t").fetchone()
            assert header_reader(db) is not None
        finally:
            db.close()
    mine = [fd for key, (_d, _i, fd) in sqlite_walindex._descriptors.items() if str(path) in key]
    assert len(mine) <= 1
    for _dev, _ino, fd in sqlite_walindex._descriptors.values():
        os.fstat(fd)  # every descriptor kept is open
