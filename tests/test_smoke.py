from __future__ import annotations

import pytest

from mempalace_logstream import errors


def test_append_then_list_round_trips_every_field(store):
    e = store.event_append(
        type="task.request",
        stream="project/x",
        room="delegation",
        from_agent="a",
        to_agent="b",
        topic="t",
        correlation_id="c1",
        branch="main",
        base_commit="abcdef1",
        status="open",
        body="line\r\nnext",
        metadata={"z": 1, "a": [1, 2]},
    )
    page = store.event_list(since_event_id=None)
    assert [x.to_dict() for x in page.events] == [e.to_dict()]
    assert list(page.events[0].metadata) == ["z", "a"]


def test_update_and_delete_are_rejected_by_the_database(store):
    import sqlalchemy as sa

    store.event_append(type="x", stream="s", room="r", from_agent="a")
    for sql in ("UPDATE events SET body='changed'", "DELETE FROM events"):
        with pytest.raises(sa.exc.DBAPIError), store.engine.begin() as conn:
            conn.execute(sa.text(sql))
    assert store.event_list().events[0].body == ""


def test_unknown_artifact_writes_nothing(store):
    with pytest.raises(errors.NotFoundError, match="unknown artifact"):
        store.event_append(type="x", stream="s", room="r", from_agent="a", artifact_ids=["nope"])
    assert store.event_list().events == ()
