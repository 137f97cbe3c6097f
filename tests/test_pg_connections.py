"""A PostgreSQL store whose connections the server ended (issue 18, item 17): the first append
and read afterwards succeed, on the store and through the hub; a
write whose connection is lost after it began is never retried (its COMMIT may have happened).

The store's connections carry an `application_name` of their own, so the test ends exactly
those with `pg_terminate_backend` (which waits until each backend has exited).
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors
from mempalace_logstream.http import HubSettings
from tests.hubkit import LiveHub

pytestmark = pytest.mark.pg


def _named(pg_url: str) -> tuple[str, str]:
    name = f"ls_{secrets.token_hex(4)}"
    return f"{pg_url}&application_name={name}", name


def _admin(pg_url: str) -> sa.Engine:
    return sa.create_engine(pg_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def _terminate(admin: sa.Engine, name: str) -> int:
    """End every backend of `name`; how many (each one has exited when this returns)."""
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                "WHERE application_name = :name AND pid <> pg_backend_pid()"
            ),
            {"name": name},
        ).all()
    return len(rows)


def _note(**kw: Any) -> dict[str, Any]:
    return {"type": "note", "stream": "s", "room": "r", "from_agent": "a", **kw}


def test_the_first_append_and_read_after_the_server_ended_the_connections_succeed(
    pg_url: str,
) -> None:
    url, name = _named(pg_url)
    admin = _admin(pg_url)
    try:
        with LogStore.open(url) as store:
            first = store.event_append(**_note(body="first"))
            assert [e.id for e in store.event_list().events] == [first.id]
            for round_ in range(2):  # and again: the replaced connections are fine too
                assert _terminate(admin, name) >= 1
                event = store.event_append(**_note(body=f"after {round_}"))
                assert store.event_get(event.id).body == f"after {round_}"
                assert store.event_list(limit=1).events[0].id == event.id
                assert store.stats()["events"] == 2 + round_
    finally:
        admin.dispose()


def test_the_hub_answers_the_first_append_after_the_server_ended_its_connections(
    pg_url: str,
) -> None:
    url, name = _named(pg_url)
    admin = _admin(pg_url)
    store = LogStore.open(url)
    hub = LiveHub(store, HubSettings())
    hub.start()
    try:
        with httpx.Client(base_url=hub.url, timeout=30) as client:
            assert client.post("/v1/event_append", json=_note()).status_code == 200
            assert _terminate(admin, name) >= 1
            appended = client.post("/v1/event_append", json=_note(body="after"))
            assert appended.status_code == 200, appended.text
            listed = client.get("/v1/events", params={"limit": 1})
            assert listed.status_code == 200 and listed.json()["events"][0]["body"] == "after"
    finally:
        hub.stop()
        store.close()
        admin.dispose()


def test_a_write_whose_connection_is_lost_inside_its_transaction_is_not_retried(
    pg_url: str,
) -> None:
    """The append blocks inside its transaction (its INSERT waits on a row another session
    holds, uncommitted, under the same idempotency key); its connection is ended there. The
    append fails with a StorageError: a retry would block again, and after a COMMIT could
    write twice. The next append takes a new connection and succeeds."""
    url, name = _named(pg_url)
    admin = _admin(pg_url)
    holder = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    outcome: list[BaseException | str] = []
    try:
        with LogStore.open(url) as store:
            store.event_append(**_note())
            with holder.connect() as conn:
                conn.execute(
                    sa.text(
                        "INSERT INTO events (seq, id, origin_replica, origin_seq, hlc, type, "
                        "stream, room, from_agent, body, created_at, metadata_json, "
                        "idempotency_key) VALUES (1000000, 'evt_held', 'rep_held', 1, "
                        "'0000000000000-000000-rep_held', 'note', 's', 'r', 'w', '', "
                        "'2026-12-01T00:00:00.000Z', '{}', 'k')"
                    )
                )  # not committed: the store's INSERT of ('w', 'k') waits for it

                def append() -> None:
                    try:
                        store.event_append(**_note(from_agent="w", idempotency_key="k"))
                        outcome.append("appended")
                    except BaseException as exc:
                        outcome.append(exc)

                thread = threading.Thread(target=append)
                thread.start()
                _until_waiting_on_a_lock(admin, name)
                assert _terminate(admin, name) >= 1
                thread.join(20)
                assert not thread.is_alive(), "the lost write was retried (and blocked again)"
                conn.rollback()
            assert len(outcome) == 1 and isinstance(outcome[0], errors.StorageError), outcome
            again = store.event_append(**_note(from_agent="w", idempotency_key="k"))
            assert store.event_get(again.id).from_agent == "w"
            assert store.stats()["events"] == 2
    finally:
        holder.dispose()
        admin.dispose()


def _until_waiting_on_a_lock(admin: sa.Engine, name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = :name AND wait_event_type = 'Lock'"
    )
    while True:
        with admin.connect() as conn:
            if conn.execute(query, {"name": name}).scalar():
                return
        assert time.monotonic() < deadline, "the append never waited on the held row"
        time.sleep(0.01)


def test_reads_at_a_stricter_isolation_level_still_see_every_commit(pg_url: str) -> None:
    """Readers run in autocommit only at READ COMMITTED (issue 25); a server whose default is
    REPEATABLE READ gets reads in one transaction each, which still see every commit made
    before they began."""
    url = pg_url + "%20-cdefault_transaction_isolation%3Drepeatable%5C%20read"
    with LogStore.open(url) as store:
        with store.engine.connect() as conn:
            level = conn.exec_driver_sql("SHOW default_transaction_isolation").scalar()
        assert level == "repeatable read"
        first = store.event_append(**_note(body="1"))
        assert [e.id for e in store.event_list().events] == [first.id]
        second = store.event_append(**_note(body="2"))
        assert [e.id for e in store.event_list(order="asc").events] == [first.id, second.id]
        assert store.task_list()["tasks"] == []


def test_a_reader_idle_past_its_freshness_goes_back_to_the_pool_out_of_autocommit(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept reader idle longer than FRESH_S goes back through the pool's pre-ping; it went
    back still in autocommit, so the store's own SQLAlchemy work on that connection (doctor's
    SAVEPOINTs) failed with "SAVEPOINT can only be used in transaction blocks" (CI, a hub's
    doctor on PostgreSQL). Every connection the pool holds is out of autocommit."""
    from mempalace_logstream import doctor
    from mempalace_logstream.backends import postgres

    with LogStore.open(pg_url) as store:
        store.event_append(**_note(body="1"))
        assert store.event_list().events  # a reader kept, in autocommit
        store.engine.raw_connection().close()  # another idle connection in the pool, first
        later = time.monotonic() + 60  # the clock moves past FRESH_S
        monkeypatch.setattr(postgres.time, "monotonic", lambda: later)
        assert store.event_list().events  # the idle reader goes back to the pool
        pool = store.engine.pool
        held = [store.engine.raw_connection() for _ in range(pool.checkedin())]
        try:
            assert held, "the idle reader went back to the pool"
            assert [p.driver_connection.autocommit for p in held] == [False] * len(held)
        finally:
            for p in held:
                p.close()
        assert doctor.run(store).healthy, doctor.run(store).to_dict()["findings"]


def test_reads_on_a_kept_reader_make_no_cursor_per_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept reader runs its statements on a cursor held with it (`Connection.execute` made a
    new cursor for each: ~15 µs of CPU, 2-4 statements a read)."""
    import psycopg

    from mempalace_logstream.backends import postgres

    monkeypatch.setattr(postgres, "FRESH_S", 3600.0)  # the kept reader, never a pooled one
    with LogStore.open(pg_url) as store:
        store.event_append(type="note", stream="s", room="r", from_agent="a", to_agent="b")
        assert len(store.event_list(to_agent="b").events) == 1  # the reader made and kept
        made: list[type] = []
        init = psycopg.Cursor.__init__

        def counting(self: Any, *args: Any, **kwargs: Any) -> None:
            made.append(type(self))
            init(self, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "__init__", counting)
        for _ in range(3):
            assert len(store.event_list(to_agent="b").events) == 1
        assert made == []
