"""A PostgreSQL group commit's items without savepoints (backends/pg_batch.py, issue 25): a
batch of appends is one message (BEGIN, the lock, the check, every item's writes and guard
checks, the NOTIFY, the COMMIT); a statement failing on the server fails that message and
the batch runs again with a savepoint per item, where the failing item fails alone. Counted
(round trips, statements sent, commits), never timed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors
from mempalace_logstream.backends import pg_batch
from tests.conftest import batched

pytestmark = pytest.mark.pg


def add(store: LogStore, **fields: Any) -> Any:
    base = {"type": "note", "stream": "s", "room": "r", "from_agent": "a"}
    return store.event_append(**{**base, **fields})


def trips(store: LogStore) -> int:
    count: int = store.backend.round_trips  # type: ignore[attr-defined]
    return count


@pytest.fixture
def store(pg_url: str) -> Iterator[LogStore]:
    with LogStore.open(pg_url) as opened:
        add(opened, body="first")
        add(opened, to_agent="b", body="warm")  # the pair guard's check, prepared
        yield opened


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every statement message sent through a psycopg cursor."""
    texts: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        texts.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return texts


def test_a_batch_of_appends_is_one_message_without_savepoints(
    store: LogStore, sent: list[str]
) -> None:
    before, commits = trips(store), store.pipeline.commits
    calls = [lambda i=i: add(store, to_agent="b", body=f"d{i}") for i in range(4)]
    calls += [lambda: add(store, body="plain")]
    results = batched(store, calls)
    assert not any(isinstance(r, BaseException) for r in results), results
    assert store.pipeline.commits - commits == 1
    assert trips(store) - before == 1
    assert len(sent) == 1 and "SAVEPOINT" not in sent[0]
    # (each the EXECUTE of the INSERT prepared with the starting state: test_write_costs.py)
    assert sent[0].count("_insert(") == 5 and sent[0].endswith("COMMIT")
    listed = store.event_list(order="asc").events
    assert [e.seq for e in listed] == [1, 2, 3, 4, 5, 6, 7]
    assert sorted(e.body for e in listed[2:]) == ["d0", "d1", "d2", "d3", "plain"]


def test_an_item_failing_on_the_server_fails_alone_after_one_failed_message(
    store: LogStore, sent: list[str]
) -> None:
    dup = "INSERT INTO logstream_meta (key, value) VALUES ('replica_id', 'dup')"

    def raw_sql() -> Any:
        return store.pipeline.write(lambda ex, st: ex.run("test.sql", lambda: sa.text(dup), {}))

    commits = store.pipeline.commits
    calls = [lambda: add(store, body="ok-1"), raw_sql, lambda: add(store, body="ok-2")]
    results = batched(store, calls)
    assert isinstance(results[1], errors.StorageError), results
    assert isinstance(results[1].__cause__, psycopg.errors.UniqueViolation)
    assert not isinstance(results[0], Exception) and not isinstance(results[2], Exception)
    assert store.pipeline.commits - commits == 1
    assert "SAVEPOINT" not in sent[0]  # the first run, failed
    assert any("SAVEPOINT logstream_item" in text for text in sent[1:])  # the second
    listed = store.event_list(order="asc").events
    assert [e.body for e in listed][2:] == ["ok-1", "ok-2"]
    assert [e.seq for e in listed] == [1, 2, 3, 4]
    # The next batch goes without savepoints again, optimistically: one message.
    before = trips(store)
    assert not any(isinstance(r, Exception) for r in batched(store, calls[::2]))
    assert trips(store) - before == 1
    assert [e.seq for e in store.event_list(order="asc").events] == [1, 2, 3, 4, 5, 6]


def test_an_item_refused_after_its_read_sent_only_the_items_before_it_runs_once(
    store: LogStore, sent: list[str]
) -> None:
    """The missing artifact is read (a message with the items' writes queued before it) and
    refused in Python: nothing of its own was sent, so nothing needs undoing and the batch
    runs once, without savepoints (each write sent once)."""
    with pytest.raises(errors.NotFoundError):  # the artifact's read, prepared
        add(store, artifact_ids=["art_missing"])
    sent.clear()
    commits = store.pipeline.commits
    calls = [
        lambda: add(store, body="ok-1"),
        lambda: add(store, artifact_ids=["art_missing"]),
        lambda: add(store, body="ok-2"),
    ]
    results = batched(store, calls)
    assert isinstance(results[1], errors.NotFoundError), results
    assert store.pipeline.commits - commits == 1
    assert not any("SAVEPOINT" in text for text in sent)
    assert sum(text.count("'ok-1'") + text.count("'ok-2'") for text in sent) == 2
    listed = store.event_list(order="asc").events
    assert [e.body for e in listed][2:] == ["ok-1", "ok-2"]
    assert [e.seq for e in listed] == [1, 2, 3, 4]


def test_an_item_refused_after_its_own_writes_were_sent_runs_the_batch_again(
    store: LogStore,
) -> None:
    """An item whose write went to the server before it failed in Python cannot be undone
    without its savepoint: the batch runs again, each item in one, and only it fails."""

    def work(ex: Any, st: Any) -> None:
        ex.run("test.meta", lambda: sa.text(_META), {"key": "kept?"})
        ex.rows("test.read", lambda: sa.text("SELECT 1"), {})  # sends the write
        raise errors.ConflictError("refused after its write")

    commits = store.pipeline.commits
    calls = [lambda: add(store, body="ok-1"), lambda: store.pipeline.write(work)]
    calls += [lambda: add(store, body="ok-2")]
    results = batched(store, calls)
    assert isinstance(results[1], errors.ConflictError), results
    assert store.pipeline.commits - commits == 1
    with store.engine.connect() as conn:
        held = conn.execute(sa.text("SELECT key FROM logstream_meta WHERE key = 'kept?'")).all()
    assert held == []
    assert [e.body for e in store.event_list(order="asc").events][2:] == ["ok-1", "ok-2"]


_META = "INSERT INTO logstream_meta (key, value) VALUES (:key, 'no')"


def test_an_item_refused_after_writing_rows_at_once_runs_the_batch_again(store: LogStore) -> None:
    """Rows written at once (not queued: a page of them) reached the server as surely as a
    flushed queue: the item refused afterwards is undone in its savepoint, on a second run."""

    def work(ex: Any, st: Any) -> None:
        ex.run_many("test.meta", lambda: sa.text(_META), [{"key": "kept?"}, {"key": "too?"}])
        raise errors.ConflictError("refused after its rows")

    calls = [lambda: add(store, body="ok-1"), lambda: store.pipeline.write(work)]
    results = batched(store, calls + [lambda: add(store, body="ok-2")])
    assert isinstance(results[1], errors.ConflictError), results
    with store.engine.connect() as conn:
        held = conn.execute(sa.text("SELECT key FROM logstream_meta WHERE value = 'no'")).all()
    assert held == []
    assert [e.body for e in store.event_list(order="asc").events][2:] == ["ok-1", "ok-2"]


def test_only_errors_the_server_answered_run_a_batch_again() -> None:
    """A lost connection, a cancelled statement or a lock timeout ends the transaction as
    before (its COMMIT may have happened: never run again)."""
    assert pg_batch.failed_on_server(psycopg.errors.UniqueViolation())
    assert pg_batch.failed_on_server(psycopg.errors.DivisionByZero())
    assert not pg_batch.failed_on_server(psycopg.OperationalError())
    assert not pg_batch.failed_on_server(psycopg.errors.QueryCanceled())
    assert not pg_batch.failed_on_server(psycopg.errors.LockNotAvailable())
    assert not pg_batch.failed_on_server(ValueError())
