"""No stored event can make a read fail (S-8.10), and deep metadata is refused before it is
stored (issue 9, item 1).

Rows are planted behind the API with plain sqlite3, as an older version, a legacy file or a
hand edit could leave them; then every read path of every surface must keep serving.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from mempalace_logstream import LogStore, mcp_server, sync
from tests.conftest import run_cli
from tests.hubkit import LiveHub, append, live_hub


def _nested(depth: int, kind: str = "object") -> Any:
    value: Any = {} if kind == "object" else []
    for _ in range(depth - 1):
        value = {"k": value} if kind == "object" else [value]
    return value


def deep_text(depth: int, kind: str = "object") -> str:
    """The JSON text of `_nested(depth, kind)`, built without recursion."""
    if kind == "object":
        return '{"k":' * (depth - 1) + "{}" + "}" * (depth - 1)
    return "[" * depth + "]" * depth


def plant(path: str, metadata_json: str) -> str:
    """Insert a copy of the newest event with new ids and this metadata text; returns its id."""
    db = sqlite3.connect(path)
    try:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM events ORDER BY seq DESC LIMIT 1").fetchone())
        top = db.execute("SELECT max(seq), max(origin_seq) FROM events").fetchone()
        n = int(top[0]) + 1
        row.update(
            id=f"evt_20261201T000000_{n:020x}",
            seq=n,
            origin_seq=int(top[1]) + 1,
            hlc=f"{row['hlc'][:13]}-{n:06x}-{row['origin_replica']}",
            metadata_json=metadata_json,
            idempotency_key=None,
        )
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        db.execute(f"INSERT INTO events ({cols}) VALUES ({marks})", list(row.values()))
        db.commit()
        return str(row["id"])
    finally:
        db.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    with live_hub(tmp_path_factory.mktemp("stored"), ping_interval_s=5) as h:
        yield h


@pytest.fixture
def client(hub: LiveHub):
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        yield c


@pytest.mark.parametrize("depth", [65, 254, 300, 900])
@pytest.mark.parametrize("as_text", [False, True])
def test_deep_metadata_is_refused_on_http_and_nothing_is_written(
    client: httpx.Client, hub: LiveHub, depth: int, as_text: bool
) -> None:
    before = hub.store.stats()["events"]
    meta = deep_text(depth)
    head = '{"type": "note", "stream": "s", "room": "r", "from_agent": "a", "metadata": '
    content = head + (json.dumps(meta) if as_text else meta) + "}"
    resp = client.post(
        "/v1/event_append", content=content.encode(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422, resp.text
    assert resp.json() == {
        "error": f"metadata nests {depth} levels deep; the limit is 64 levels",
        "field": "metadata",
    }
    assert hub.store.stats()["events"] == before


def test_json_too_deep_for_the_parser_is_a_clear_422(client: httpx.Client, hub: LiveHub) -> None:
    before = hub.store.stats()["events"]
    head = '{"type": "note", "stream": "s", "room": "r", "from_agent": "a", "metadata": '
    resp = client.post(
        "/v1/event_append",
        content=(head + deep_text(5000) + "}").encode(),
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 422 and resp.json()["field"] == "body"
    assert "nested too deeply" in resp.json()["error"]
    assert hub.store.stats()["events"] == before


def test_metadata_at_the_limit_is_stored_and_read_back(client: httpx.Client) -> None:
    meta = _nested(64, "array")
    meta = {"deep": meta[0]} if isinstance(meta, list) else meta
    event = append(client, metadata=meta)
    assert client.get(f"/v1/events/{event['id']}").json()["event"]["metadata"] == meta


def test_sync_apply_refuses_deep_metadata_from_a_peer(tmp_path: Path) -> None:
    with (
        LogStore.open(str(tmp_path / "a.sqlite3")) as a,
        LogStore.open(str(tmp_path / "b.sqlite3")) as b,
    ):  # noqa: E501
        a.event_append(type="note", stream="s", room="r", from_agent="x")
        bad = plant(str(tmp_path / "a.sqlite3"), deep_text(300))
        a.event_append(type="note", stream="s", room="r", from_agent="x", body="after")
        result = sync.sync_with_peer(b, sync.LocalPeer(a))
        held = {e.id: e for e in b.event_list(limit=10).events}
        # Either refused (recorded) or kept without the unreadable metadata: never stored deep,
        # and the events around it arrive.
        assert len(held) >= 2
        if bad in held:
            assert held[bad].to_dict()["metadata"] == {}
        else:
            assert result["rejected_count"] >= 1
        for e in b.event_list(limit=10).events:
            json.dumps(e.to_dict())


BROKEN = [
    deep_text(300),
    deep_text(985),
    '{"a": ' + deep_text(200, "array") + "}",
    "[" * 100_000,
    '{"a": NaN}',
    '{"a": Infinity}',
    '{"a": 1e999}',
    '{"a": ' + "1" * 5000 + "}",
    "not json",
    "[1, 2]",
    '"text"',
    "",
]


@pytest.mark.parametrize("text", BROKEN, ids=range(len(BROKEN)))
def test_a_hub_holding_a_broken_event_keeps_serving_every_read(
    hub: LiveHub, client: httpx.Client, text: str
) -> None:
    before = append(client, body="before")
    bad = plant(str(hub.store.engine.url.database), text)
    after = append(client, body="after")
    ids = [before["id"], bad, after["id"]]

    listed = client.get("/v1/events", params={"limit": 3})
    assert listed.status_code == 200, listed.text
    assert [e["id"] for e in listed.json()["events"]] == ids[::-1]
    got = client.get(f"/v1/events/{bad}")
    assert got.status_code == 200 and got.json()["event"]["metadata"] == {}
    assert "metadata_error" in got.json()["event"]
    posted = client.post("/v1/event_list", json={"since_event_id": before["id"]})
    assert [e["id"] for e in posted.json()["events"]] == ids[1:]
    waited = client.post("/v1/event_wait", json={"since_event_id": before["id"]})
    assert waited.status_code == 200 and waited.json()["count"] == 2
    assert _sse_ids(hub, before["id"], 2) == ids[1:]
    assert _mcp_list(hub.store, before["id"]) == ids[1:]


def _sse_ids(hub: LiveHub, after: str, n: int) -> list[str]:
    async def scenario() -> list[str]:
        out: list[str] = []
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as ac:
            params = {"since_event_id": after}
            async with aconnect_sse(ac, "GET", "/v1/stream", params=params) as source:
                async for sse in source.aiter_sse():
                    if sse.event == "logstream":
                        json.loads(sse.data)
                        out.append(sse.id)
                        if len(out) == n:
                            break
        return out

    return asyncio.run(asyncio.wait_for(scenario(), 30))


def _mcp_list(store: LogStore, after: str) -> list[str]:
    async def scenario() -> list[str]:
        server = mcp_server.build_server(store)
        async with Client(server.protocol) as client:
            result = await client.call_tool(
                "mempalace_event_list", {"since_event_id": after, "limit": 2}
            )
        assert result.is_error is False, result.content
        return [e["id"] for e in json.loads(result.content[0].text)["events"]]

    return asyncio.run(scenario())


def test_list_through_the_hub_cli_reads_past_a_broken_event(hub: LiveHub, client) -> None:
    append(client, body="anchor")
    plant(str(hub.store.engine.url.database), deep_text(400))
    done = run_cli("list", "--hub", hub.url, "--limit", "3", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 3


# ----------------------------------------------------------------------------- property

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def metadata_texts(draw: st.DrawFn) -> str:
    """Metadata text of every shape: valid objects, deep nests, non-objects, non-JSON."""
    kind = draw(st.sampled_from(["value", "deep", "raw"]))
    if kind == "deep":
        depth = draw(st.integers(1, 1200))
        inner = deep_text(depth, draw(st.sampled_from(["object", "array"])))
        return '{"m": ' + inner + "}" if draw(st.booleans()) else inner
    if kind == "raw":
        return draw(st.text(max_size=40))
    value = draw(_json)
    return json.dumps(value, allow_nan=True)


@given(text=metadata_texts())
def test_no_stored_metadata_can_make_any_read_fail(hub: LiveHub, text: str) -> None:
    with httpx.Client(base_url=hub.url, timeout=30) as c:
        before = append(c, body="p")
        bad = plant(str(hub.store.engine.url.database), text)
        event = c.get(f"/v1/events/{bad}")
        assert event.status_code == 200, event.text
        meta = event.json()["event"]["metadata"]
        assert isinstance(meta, dict)
        listed = c.get("/v1/events", params={"since_event_id": before["id"]})
        assert listed.status_code == 200 and listed.json()["events"][0]["id"] == bad
        waited = c.post("/v1/event_wait", json={"since_event_id": before["id"], "slim": True})
        assert waited.status_code == 200 and waited.json()["count"] == 1
    assert _mcp_list(hub.store, before["id"]) == [bad]


# ----------------------------------------------------------------------------- wrong SQL types
# SQLite keeps the storage class a writer behind the API chose: a BLOB in a text column (a
# tool that wrote bytes), text that is not UTF-8, text in an integer column. Each such row
# reads with a `row_error` naming the column (as bad metadata reads with `metadata_error`), and
# the rest of its page is served, on every read path. (PostgreSQL's columns refuse a value of
# another type when it is written, so only SQLite can hold these rows.)


def plant_row(path: str, sql: dict[str, str] | None = None, **values: Any) -> str:
    """A copy of the newest event with new ids and these column values (bytes are stored as
    BLOBs), or SQL expressions per column in `sql` (their `?` bound to `values[column]`)."""
    db = sqlite3.connect(path)
    try:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM events ORDER BY seq DESC LIMIT 1").fetchone())
        top = db.execute("SELECT max(seq), max(origin_seq) FROM events").fetchone()
        n = int(top[0]) + 1
        row.update(
            id=f"evt_20261201T000000_{n:020x}",
            seq=n,
            origin_seq=int(top[1]) + 1,
            hlc=f"{row['hlc'][:13]}-{n:06x}-{row['origin_replica']}",
            idempotency_key=None,
            sig=None,
            key_id=None,
        )
        row.update(values)
        marks = ", ".join((sql or {}).get(col, "?") for col in row)
        db.execute(f"INSERT INTO events ({', '.join(row)}) VALUES ({marks})", list(row.values()))
        db.commit()
        return str(row["id"])
    finally:
        db.close()


WRONG_TYPES: dict[str, tuple[dict[str, str], dict[str, Any], str]] = {
    # kind: (SQL per column, values, the column the row_error names)
    "body BLOB, not UTF-8": ({}, {"body": b"\xff\xfe\x00 bytes"}, "body"),
    "body BLOB, UTF-8": ({}, {"body": "héllo ✓".encode()}, "body"),
    "body TEXT, not UTF-8": ({"body": "CAST(? AS TEXT)"}, {"body": b"caf\xe9"}, "body"),
    "metadata BLOB": ({}, {"metadata_json": b'{"a": 1}'}, "metadata_json"),
    "stream BLOB": ({}, {"stream": b"s"}, "stream"),
    "to_agent BLOB": ({}, {"to_agent": b"\x80"}, "to_agent"),
    "created_at BLOB": ({}, {"created_at": b"2026-12-01T00:00:00.000Z"}, "created_at"),
    "origin_seq TEXT": (
        {},
        {"origin_seq": "later", "origin_replica": "rep_" + "e" * 32},
        "origin_seq",
    ),
}


def _wrong(hub: LiveHub, kind: str) -> str:
    sql, values, _ = WRONG_TYPES[kind]
    return plant_row(str(hub.store.engine.url.database), sql, **values)


@pytest.mark.parametrize("kind", WRONG_TYPES)
def test_a_row_of_the_wrong_sql_type_reads_with_an_error_on_every_path(
    hub: LiveHub, client: httpx.Client, kind: str
) -> None:
    column = WRONG_TYPES[kind][2]
    before = append(client, body="before", to_agent="reader")
    bad = _wrong(hub, kind)
    after = append(client, body="after", to_agent="reader")
    ids = [before["id"], bad, after["id"]]

    listed = client.get("/v1/events", params={"limit": 3})
    assert listed.status_code == 200, listed.text
    assert [e["id"] for e in listed.json()["events"]] == ids[::-1]
    row = listed.json()["events"][1]
    assert column in row["row_error"] and all(isinstance(row[k], str) for k in ("body", "stream"))
    got = client.get(f"/v1/events/{bad}")
    assert got.status_code == 200 and column in got.json()["event"]["row_error"]
    posted = client.post("/v1/event_list", json={"since_event_id": before["id"], "slim": True})
    assert [e["id"] for e in posted.json()["events"]] == ids[1:]
    waited = client.post("/v1/event_wait", json={"since_event_id": before["id"]})
    assert waited.status_code == 200 and waited.json()["count"] == 2
    assert _sse_ids(hub, before["id"], 2) == ids[1:]
    assert _mcp_list(hub.store, before["id"]) == ids[1:]
    for e in hub.store.event_list(since_event_id=before["id"]).events:
        json.dumps(e.to_dict(preview=True))
    cli = run_cli("list", "--db", str(hub.store.engine.url.database), "--limit", "3")
    assert cli.returncode == 0 and b"after" in cli.stdout, cli.stderr


@pytest.mark.parametrize("kind", WRONG_TYPES)
def test_the_lean_inbox_reader_reads_past_a_row_of_the_wrong_type(
    tmp_path: Path, kind: str
) -> None:
    from mempalace_logstream.store import lean

    path = str(tmp_path / "log.sqlite3")
    with LogStore.open(path) as store:
        first = store.event_append(type="note", stream="s", room="r", from_agent="a", to_agent="b")
        sql, values, column = WRONG_TYPES[kind]
        bad = plant_row(path, sql, **{"to_agent": "b", **values})
        last = store.event_append(type="note", stream="s", room="r", from_agent="a", to_agent="b")
    reader = lean.open_lean(f"sqlite:///{path}")
    assert reader is not None
    try:
        args = {"to_agent": ["b"], "exclude_writer": ["b"], "limit": 20, "order": "asc"}
        page = reader.call("event_list", since_event_id=first.id, **args)
    finally:
        reader.close()
    json.dumps(page)
    got = [e["id"] for e in page["events"]]
    assert got[-1] == last.id and (bad in got) == (column != "to_agent")


@pytest.mark.parametrize("kind", [k for k in WRONG_TYPES if k != "origin_seq TEXT"])
def test_sync_pages_and_a_sync_round_read_past_a_row_of_the_wrong_type(
    tmp_path: Path, kind: str
) -> None:
    from mempalace_logstream import replication

    with (
        LogStore.open(str(tmp_path / "a.sqlite3")) as a,
        LogStore.open(str(tmp_path / "b.sqlite3")) as b,
    ):
        a.event_append(type="note", stream="s", room="r", from_agent="x")
        sql, values, _ = WRONG_TYPES[kind]
        bad = plant_row(str(tmp_path / "a.sqlite3"), sql, **values)
        a.event_append(type="note", stream="s", room="r", from_agent="x", body="after")
        origin = a.replica_id
        page = replication.ops_page(a, origin, 0, 10)
        assert page["count"] == 3 and "row_error" in page["events"][1]
        json.dumps(page)
        assert replication.ops_rows(a, origin, 0, 10)["count"] == 3
        _, text, count = replication.ops_rows_json(a, origin, 0, 10)
        assert count == 3 and len(json.loads(text)) == 3
        sync.sync_with_peer(b, sync.LocalPeer(a))
        held = [e.body for e in b.event_list(limit=10, order="asc").events]
        assert held[-1] == "after" and len(held) >= 2  # the broken one is kept or reported
        assert bad is not None


def test_one_row_of_the_wrong_type_marks_only_itself_in_a_page(tmp_path: Path) -> None:
    """The row reader tests a page's types at once (issue 25) and falls back to row by row:
    the bad row reads with its error, the others exactly as stored."""
    from mempalace_logstream.store import LogStore, plan

    with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
        for i in range(3):
            store.event_append(type="note", stream="s", room="r", from_agent="a", body=f"b{i}")
        events = store.event_list(order="asc").events
    rows = [
        tuple(None if f == "artifact_ids" else getattr(e, f) for f in plan.EVENT_FIELDS)
        for e in events
    ]
    body_at = plan.EVENT_FIELDS.index("body")
    rows[1] = (*rows[1][:body_at], b"\xff", *rows[1][body_at + 1 :])
    read = plan.events_from_rows(rows)
    assert [e.to_dict() for i, e in enumerate(read) if i != 1] == [
        e.to_dict() for i, e in enumerate(events) if i != 1
    ]
    assert "body" in read[1].to_dict()["row_error"]
    assert plan.events_from_rows([]) == []
