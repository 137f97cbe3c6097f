"""PostgreSQL backend: seq order is commit order under concurrent writers (S-2.4), append-only
enforced by the database (S-2.5), group commit, and `logstream migrate --db postgresql…`.

The S-2.4 proof runs writer processes and threads against one schema while a tailing reader
follows the log by cursor. The same checker is run against a deliberately broken store (seq from
a PostgreSQL SEQUENCE, no advisory lock) to prove it detects out-of-order visibility.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import run_cli

from mempalace_logstream import errors
from mempalace_logstream.backends import engine as engine_mod
from mempalace_logstream.schema import SCHEMA_HEAD
from mempalace_logstream.store import LogStore, TxState
from mempalace_logstream.store.pipeline import CommitPipeline

pytestmark = pytest.mark.pg

TESTS_DIR = Path(__file__).resolve().parent
HOLD_MAX_S = 0.003  # how long a writer keeps its transaction open after inserting
RACE_SEQUENCE = "race_broken_seq"


# ----------------------------------------------------------------------------- store variants


class SlowCommitPipeline(CommitPipeline):
    """The real pipeline, but every append holds its transaction open a random short time
    after inserting: this widens any window in which commits could become visible out of seq
    order."""

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        # Every commit, a lone writer's (which runs no batch) as a group's, holds its
        # transaction open after its work (the inserts) and before its COMMIT.
        with super()._transaction() as tx:
            yield tx
            time.sleep(random.uniform(0, HOLD_MAX_S))


class UnserializedPipeline(SlowCommitPipeline):
    """BROKEN on purpose: seq comes from a PostgreSQL SEQUENCE and no lock is taken, the way a
    naive port would do it. Each batch reserves a block of 1000 values (INCREMENT BY 1000).
    Its transactions run on a pooled psycopg connection: BEGIN without the append lock."""

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        proxy = self.engine.raw_connection()
        db = proxy.driver_connection
        try:
            yield SimpleNamespace(db=db, known=None, counters=None, appended=False)
            time.sleep(random.uniform(0, HOLD_MAX_S))
            db.commit()
        except BaseException:
            db.rollback()
            raise
        finally:
            proxy.close()

    def _start(self, tx: Any) -> TxState:
        first = int(tx.db.execute(f"SELECT nextval('{RACE_SEQUENCE}')").fetchone()[0])
        return TxState(next_seq=first, next_artifact_seq=first)


class SlowCommitStore(LogStore):
    pipeline_class = SlowCommitPipeline


class UnserializedStore(LogStore):
    pipeline_class = UnserializedPipeline


STORES = {"serialized": SlowCommitStore, "unserialized": UnserializedStore}


def writer_main(argv: list[str]) -> None:
    """Entry point of a writer process: append until `count` events or the stop file exists."""
    url, kind, agent, count, stop_file = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    store = STORES[kind](engine_mod.create_engine(url), migrate_schema=False)
    try:
        for i in range(count):
            if os.path.exists(stop_file):
                break
            store.event_append(
                type="race.tick", stream="race", room="r", from_agent=agent, body=str(i)
            )
    finally:
        store.close()


def spawn_writer(url: str, kind: str, agent: str, count: int, stop_file: Path):
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import test_pg; "
        "test_pg.writer_main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR.parent)}
    return subprocess.Popen(
        [sys.executable, "-c", code, url, kind, agent, str(count), str(stop_file)],
        env=env,
        stderr=subprocess.PIPE,
    )


# ----------------------------------------------------------------------------- the checker


@dataclass
class TailReport:
    """What a tailing reader saw. `late` lists (seq, highest_seen) for every event that became
    visible behind the reader's cursor; `skipped` are ids in the log the tail never returned."""

    seen: list[tuple[int, str]] = field(default_factory=list)
    late: list[tuple[int, int]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    polls: int = 0

    @property
    def violated(self) -> bool:
        return bool(self.late or self.skipped)


class Tailer:
    """Follows the log by cursor (`since_event_id` = the last event seen), like `watch` does."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.report = TailReport()
        self.cursor: str | None = None
        self.highest = 0

    def poll(self) -> int:
        page = self.store.event_list(since_event_id=self.cursor, order="asc", limit=500)
        self.report.polls += 1
        for e in page.events:
            assert e.seq > self.highest, "a cursor read returned an event at or below the cursor"
            self.report.seen.append((e.seq, e.id))
            self.highest = e.seq
        if page.events:
            self.cursor = page.events[-1].id
        self._probe_behind_cursor()
        return len(page.events)

    def _probe_behind_cursor(self) -> None:
        # Everything at or below the highest seq seen must already be in hand: an extra row
        # there is an event that became visible after the reader passed its seq (S-2.4).
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT seq FROM events WHERE seq <= :hi"), {"hi": self.highest}
            ).scalars()
            missing = set(rows) - {s for s, _ in self.report.seen}
        known = {s for s, _ in self.report.late}
        self.report.late.extend((s, self.highest) for s in sorted(missing) if s not in known)

    def finish(self) -> TailReport:
        while self.poll():
            pass
        with self.store.engine.connect() as conn:
            all_ids = conn.execute(sa.text("SELECT id FROM events ORDER BY seq")).scalars().all()
        got = {i for _, i in self.report.seen}
        self.report.skipped = [i for i in all_ids if i not in got]
        return self.report


def run_race(
    url: str,
    kind: str,
    tmp_path: Path,
    *,
    procs: int,
    threads: int,
    per_writer: int,
    budget_s: float,
    stop_on_violation: bool,
) -> TailReport:
    """Writers (processes + threads in this process) append while a reader tails the log."""
    stop_file = tmp_path / f"stop-{kind}"
    reader = LogStore.open(url)
    local = STORES[kind](engine_mod.create_engine(url), migrate_schema=False)
    children = [spawn_writer(url, kind, f"proc{i}", per_writer, stop_file) for i in range(procs)]
    thread_errors: list[BaseException] = []

    def thread_writer(agent: str) -> None:
        try:
            for i in range(per_writer):
                if stop_file.exists():
                    return
                local.event_append(
                    type="race.tick", stream="race", room="r", from_agent=agent, body=str(i)
                )
        except BaseException as exc:  # surfaced by the assertion below
            thread_errors.append(exc)

    workers = [threading.Thread(target=thread_writer, args=(f"thr{i}",)) for i in range(threads)]
    for w in workers:
        w.start()
    tail = Tailer(reader)
    deadline = time.monotonic() + budget_s
    try:
        while time.monotonic() < deadline:
            tail.poll()
            if stop_on_violation and tail.report.late:
                break
            if all(c.poll() is not None for c in children) and not any(
                w.is_alive() for w in workers
            ):
                break
    finally:
        stop_file.touch()
        for w in workers:
            w.join(timeout=30)
        for c in children:
            _, err = c.communicate(timeout=30)
            assert c.returncode == 0, err.decode(errors="replace")
        report = tail.finish()
        local.close()
        reader.close()
    assert not thread_errors, thread_errors
    return report


@pytest.mark.slow
def test_concurrent_writers_never_become_visible_behind_a_tailing_reader(pg_url, tmp_path):
    LogStore.open(pg_url).close()
    report = run_race(
        pg_url,
        "serialized",
        tmp_path,
        procs=3,
        threads=2,
        per_writer=40,
        budget_s=60,
        stop_on_violation=False,
    )
    assert report.late == []
    assert report.skipped == []
    seqs = [s for s, _ in report.seen]
    assert len(seqs) == 5 * 40
    # Seq is gapless and strictly increasing in the order the reader saw it.
    assert seqs == list(range(1, len(seqs) + 1))
    assert report.polls > 10, "the reader must actually have raced the writers"


@pytest.mark.slow
def test_the_race_checker_catches_unserialized_seq_assignment(pg_url, tmp_path):
    LogStore.open(pg_url).close()
    eng = sa.create_engine(pg_url)
    with eng.begin() as conn:
        conn.execute(sa.text(f"CREATE SEQUENCE {RACE_SEQUENCE} INCREMENT BY 1000"))
    eng.dispose()
    report = run_race(
        pg_url,
        "unserialized",
        tmp_path,
        procs=3,
        threads=2,
        per_writer=5000,
        budget_s=40,
        stop_on_violation=True,
    )
    print(
        f"broken store: {len(report.seen)} events tailed in {report.polls} polls, "
        f"{len(report.late)} became visible behind the cursor, e.g. {report.late[:3]}, "
        f"{len(report.skipped)} skipped forever by the cursor"
    )
    assert report.late, "the checker must detect out-of-order visibility in the broken store"
    # The same events are what a cursor-following reader loses for good.
    assert report.skipped


# ----------------------------------------------------------------------------- S-2.5


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET body = 'changed'",
        "DELETE FROM events",
        "TRUNCATE events CASCADE",
        "UPDATE artifacts SET kind = 'note'",
        "DELETE FROM artifacts",
        "TRUNCATE artifacts CASCADE",
        "UPDATE event_artifacts SET position = 7",
        "DELETE FROM event_artifacts",
        "TRUNCATE event_artifacts",
    ],
)
def test_postgresql_itself_rejects_mutation_of_append_only_tables(pg_url, sql):
    with LogStore.open(pg_url) as store:
        art = store.artifact_put(kind="note", content="x", created_by="a")
        ev = store.event_append(
            type="x", stream="s", room="r", from_agent="a", body="kept", artifact_ids=[art.id]
        )
        with pytest.raises(sa.exc.DBAPIError, match="append-only"), store.engine.begin() as c:
            c.execute(sa.text(sql))
        assert store.event_get(ev.id).to_dict() == ev.to_dict()
        assert store.artifact_get(art.id).kind == "note"


def test_postgresql_keys_compare_bytewise(pg_url):
    """Ids and HLC stamps use the C collation, so string order is causal order on PG too."""
    LogStore.open(pg_url).close()
    eng = sa.create_engine(pg_url)
    with eng.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT column_name, collation_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = 'events' "
                "AND column_name IN ('id', 'hlc', 'origin_replica')"
            )
        ).all()
        values = "SELECT x FROM (VALUES ('b'), ('B'), ('a_'), ('a-')) v(x)"
        ordered = conn.execute(sa.text(f'{values} ORDER BY x COLLATE "C"')).scalars().all()
    eng.dispose()
    assert dict(rows) == {"id": "C", "hlc": "C", "origin_replica": "C"}
    assert ordered == sorted(["b", "B", "a_", "a-"])


# ----------------------------------------------------------------------------- group commit


def all_events(store: LogStore) -> list[Any]:
    out: list[Any] = []
    cursor = None
    while True:
        page = store.event_list(since_event_id=cursor, order="asc", limit=500)
        out.extend(page.events)
        if not page.has_more:
            return out
        cursor = page.cursor


class GatedPipeline(CommitPipeline):
    """Holds the first batch open until `expect` other appends are queued behind it, so the
    second batch deterministically carries all of them. Armed once the store is open:
    opening a new log may write (the fold's version), and that transaction passes ungated."""

    expect = 0
    armed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []

    def _gate(self, size: int) -> None:
        if not self.armed:
            return
        if not self.batches:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with self._queue_lock:
                    if len(self._queue) >= self.expect:
                        break
                time.sleep(0.001)
        self.batches.append(size)

    def _commit(self, work: Any, on_bulk: Any, batch: list[Any] | None) -> Any:
        # Every transaction: a lone writer's (`batch` None: one item, no batch) as a group's.
        self._gate(1 if batch is None else len(batch))
        return super()._commit(work, on_bulk, batch)


class GatedStore(LogStore):
    pipeline_class = GatedPipeline

    def __init__(self, *args: Any, expect: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gated = self.pipeline
        assert isinstance(gated, GatedPipeline)
        gated.expect, gated.armed = expect, True
        self.batches = gated.batches


def test_group_commit_batches_threads_and_keeps_seq_contiguous_on_postgresql(pg_url):
    threads, per = 8, 40
    store = GatedStore(engine_mod.create_engine(pg_url), expect=threads - 1)
    failures: list[BaseException] = []
    results: dict[str, list[Any]] = {}

    def work(agent: str) -> None:
        got = results.setdefault(agent, [])
        try:
            for i in range(per):
                if agent == "t3" and i == 5:  # one bad append inside a batch fails alone
                    with pytest.raises(errors.NotFoundError):
                        store.event_append(
                            type="x",
                            stream="s",
                            room="r",
                            from_agent=agent,
                            artifact_ids=["art_missing"],
                        )
                got.append(
                    store.event_append(
                        type="x", stream="s", room="r", from_agent=agent, body=str(i)
                    )
                )
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    try:
        assert not failures, failures
        assert max(store.batches) >= threads - 1, store.batches
        assert len(store.batches) < threads * per
        listed = all_events(store)
        assert [e.seq for e in listed] == list(range(1, threads * per + 1))
        assert sorted(e.origin_seq for e in listed) == [e.seq for e in listed]
        for mine in results.values():
            assert [e.body for e in mine] == [str(i) for i in range(per)]
            assert [e.seq for e in mine] == sorted(e.seq for e in mine)
        by_id = {e.id: e for e in listed}
        assert all(by_id[e.id] == e for mine in results.values() for e in mine)
        assert [e.hlc for e in listed] == sorted(e.hlc for e in listed)
    finally:
        store.close()


def test_a_database_error_inside_a_batch_fails_only_its_own_item_on_postgresql(pg_url):
    """PostgreSQL aborts the whole transaction on an error unless it sits in a savepoint: each
    group-committed item must be in its own, so its neighbours still commit."""
    store = GatedStore(engine_mod.create_engine(pg_url), expect=3)
    outcomes: dict[str, Any] = {}

    def run(name: str, fn: Any) -> None:
        try:
            outcomes[name] = fn()
        except BaseException as exc:
            outcomes[name] = exc

    def append(body: str) -> Any:
        return lambda: store.event_append(type="x", stream="s", room="r", from_agent="a", body=body)

    def broken() -> Any:
        return store.pipeline.write(
            lambda ex, st: ex.run("test.div", lambda: sa.text("SELECT 1/0"), {})
        )

    jobs = [("first", append("first"))]
    jobs += [("ok1", append("ok1")), ("bad", broken), ("ok2", append("ok2"))]
    threads = [threading.Thread(target=run, args=job) for job in jobs]
    threads[0].start()
    deadline = time.monotonic() + 10
    while not store.pipeline._commit_lock.locked() and time.monotonic() < deadline:
        time.sleep(0.001)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=30)
    try:
        assert store.batches[:2] == [1, 3], store.batches
        assert isinstance(outcomes["bad"], errors.StorageError)
        assert "division by zero" in str(outcomes["bad"])
        assert sorted(e.body for e in all_events(store)) == ["first", "ok1", "ok2"]
        assert [e.seq for e in all_events(store)] == [1, 2, 3]
    finally:
        store.close()


def test_two_schemas_in_one_database_do_not_share_the_append_lock(pg_database, pg_url):
    """The advisory lock is keyed per events table: a writer holding one log's lock does not
    block appends to another log in the same database."""
    other = LogStore.open(pg_url)
    first_url = pg_url.replace(pg_url.rsplit("%3D", 1)[1], "t_lockprobe")
    eng = sa.create_engine(pg_database, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text("CREATE SCHEMA IF NOT EXISTS t_lockprobe"))
    eng.dispose()
    holder = LogStore.open(first_url)
    try:
        with holder.backend.transaction():  # holds this log's append lock
            done = threading.Event()
            t = threading.Thread(
                target=lambda: (
                    other.event_append(type="x", stream="s", room="r", from_agent="a"),
                    done.set(),
                )
            )
            t.start()
            assert done.wait(10), "an append in another schema waited for this schema's lock"
            t.join()
    finally:
        holder.close()
        other.close()


def test_the_append_lock_blocks_writers_of_the_same_log(pg_url):
    a, b = LogStore.open(pg_url), LogStore.open(pg_url)
    try:
        done = threading.Event()
        with a.backend.transaction():  # holds the append lock
            t = threading.Thread(
                target=lambda: (
                    b.event_append(type="x", stream="s", room="r", from_agent="b"),
                    done.set(),
                )
            )
            t.start()
            assert not done.wait(0.3), "a second writer got past a held append lock"
        assert done.wait(10)
        t.join()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(("durability", "expected"), [("full", "on"), ("normal", "off")])
def test_durability_normal_maps_to_asynchronous_commit_on_postgresql(pg_url, durability, expected):
    with LogStore.open(pg_url, durability=durability) as store:
        store.event_append(type="x", stream="s", room="r", from_agent="a")
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SHOW synchronous_commit")).scalar() == expected
            assert conn.execute(sa.text("SELECT count(*) FROM events")).scalar() == 1


def test_stats_reports_the_size_of_this_log_not_of_the_whole_database(pg_url):
    with LogStore.open(pg_url) as store:
        before = store.stats()["db_size_bytes"]
        store.artifact_put(kind="file", content=os.urandom(300_000), created_by="a")
        size = store.stats()["db_size_bytes"]
        with store.engine.connect() as conn:
            whole = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar()
    assert before + 300_000 <= size < whole


def test_a_plain_postgresql_url_selects_psycopg_3_and_other_drivers_are_refused(pg_url):
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with LogStore.open(plain) as store:
        assert store.engine.dialect.driver == "psycopg"
        assert store.event_append(type="x", stream="s", room="r", from_agent="a").seq == 1
    with pytest.raises(errors.ValidationError, match="psycopg 3"):
        LogStore.open(pg_url.replace("postgresql+psycopg://", "postgresql+psycopg2://"))


# ----------------------------------------------------------------------------- CLI on PostgreSQL


@pytest.mark.slow
def test_cli_migrate_and_append_work_against_postgresql(pg_url):
    first = run_cli("migrate", "--db", pg_url, "--json")
    assert first.returncode == 0, first.stderr.decode()
    assert b'"from": null' in first.stdout and f'"to": "{SCHEMA_HEAD}"'.encode() in first.stdout
    again = run_cli("migrate", "--json", env={"LOGSTREAM_DB": pg_url})
    assert again.returncode == 0, again.stderr.decode()
    assert f'"from": "{SCHEMA_HEAD}"'.encode() in again.stdout
    assert b"postgresql+psycopg://" in again.stdout
    put = run_cli(
        "append",
        "--db",
        pg_url,
        "--type",
        "note",
        "--stream",
        "s",
        "--room",
        "r",
        "--from-agent",
        "a",
        "--body",
        "hi",
        "--json",
    )
    assert put.returncode == 0, put.stderr.decode()
    with LogStore.open(pg_url) as store:
        assert [e.body for e in store.event_list().events] == ["hi"]
        assert store.dialect == "postgresql"


def test_cli_migrate_reports_an_unreachable_postgresql_as_one_line():
    bad = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
    out = run_cli("migrate", "--db", bad)
    assert out.returncode == 1
    assert out.stderr.decode().startswith("error:")
    assert "Traceback" not in out.stderr.decode()


def test_an_interrupt_in_a_read_or_write_propagates_and_leaves_usable_connections(pg_url):
    """Ctrl-C inside a psycopg read or write (a command may still be in progress) reaches the
    caller as KeyboardInterrupt, never as a StorageError from the rollback after it, and the
    store keeps working: the interrupted connection is dropped, not reused."""
    store = LogStore.open(pg_url)
    try:
        backend = store.backend
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                with backend.reading() as query:
                    query("SELECT 1", {})
                    raise KeyboardInterrupt
            with pytest.raises(KeyboardInterrupt):
                with backend.transaction() as tx:
                    tx.db.execute("SELECT 1")
                    raise KeyboardInterrupt
        event = store.event_append(type="x", stream="s", room="r", from_agent="a")
        assert store.event_get(event.id) == event
    finally:
        store.close()


def test_the_keyring_marks_probe_reads_one_type_index_entry_per_key_type(pg_url: str) -> None:
    """Issue 25: every read of a page with events probes the keyring's marks. As one
    max(seq) over `type IN (...)` PostgreSQL walked the whole primary key backwards while the
    log held no key event; per key type it is one (type, seq) index lookup."""
    import psycopg

    with LogStore.open(pg_url) as store:
        for i in range(200):
            store.event_append(type="note", stream="s", room="r", from_agent="a", body=str(i))
        seen: list[tuple[str, Any]] = []
        store.backend.statement_hooks.append(lambda sql, params: seen.append((sql, params)))
        store.event_list()
        (sql, params), *_ = [s for s in seen if "logstream_meta" in s[0]]
        dsn = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))
    assert "ix_events_type_seq" in plan, plan
    assert "Filter: (type = ANY" not in plan, plan
