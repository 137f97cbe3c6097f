"""The inbox reader of the hook path (issue 13), and of a plain `logstream list` or `get`
(issue 25): a local SQLite log read without SQLAlchemy, with the store's rule and SQL.

One rule, not a copy: the page algorithm is `plan.read_page` and the request validation
`filters.read_request`, both the store's own; the SQL text is the store's, compiled by
SQLAlchemy for SQLite and kept in backends/sqlite_inbox_sql.py, which
`python -m mempalace_logstream.store.lean` regenerates by running the inbox's reads (and the
common shapes of `list`, `wait` and `tail`) on a real
store (tests/test_lean_inbox.py fails when the two differ). A read whose statement shape is
not there raises `Unplanned` before anything is printed, and the caller reads through the
store instead. A page is marked as the store marks it (store/marks.py: what reads
`verified: false`), from the same keyring statements.

Opening (backends/sqlite_reader.py) refuses a missing file or one that is not a log with the
store's texts. Anything the store would do beyond reading is left to it (`open_lean` is None):
a log whose schema is not the head this SQL was generated for (the store migrates an older one
and refuses a newer one with its own text), a reference log to adopt, PostgreSQL, a URL with
options, an unknown durability.
Must not import sqlalchemy or the store's other modules (only in `generate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import validation as v
from mempalace_logstream.backends import sqlite_inbox_sql as inbox_sql
from mempalace_logstream.backends import sqlite_reader
from mempalace_logstream.backends.sqlite_reader import SnapshotQuery, SqliteReader
from mempalace_logstream.models import Event, Page
from mempalace_logstream.store import marks, plan
from mempalace_logstream.store.filters import ReadRequest, read_request
from mempalace_logstream.store.unplanned import Unplanned as Unplanned

if TYPE_CHECKING:
    from mempalace_logstream.identity.keyring import Keyring


def open_lean(target: str, durability: str = "full") -> LeanReader | None:
    """A lean reader of the log at `target` (the URL config.resolve_db makes), or None when
    the store must open it. Raises the store's errors for a missing file or a foreign one."""
    reader = sqlite_reader.open_reader(target, durability)
    if reader is None:
        return None
    try:
        at_head = reader.schema_revision() == inbox_sql.SCHEMA_HEAD
    except BaseException:
        reader.close()
        raise
    if not at_head:
        reader.close()
        return None
    return LeanReader(reader)


class LeanReader:
    """`call("event_list", ...)`: what `operations.LocalClient` answers for the same
    arguments, for the reads the inbox makes."""

    def __init__(self, reader: SqliteReader) -> None:
        self.reader = reader

    def close(self) -> None:
        self.reader.close()

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        if name == "event_get":
            return self.event_get(**args)
        if name == "event_wait":
            return self.event_wait(**args)
        if name != "event_list":
            raise Unplanned(name)
        return self.read(read_request(**_given(args))).to_dict()

    def read(self, req: ReadRequest) -> Page:
        """One page of a validated request, marked as the store marks it."""
        with self.reader.snapshot() as query:
            st = _Statements(query)
            page = plan.read_page(st, req)
            if page.events:
                page = marks.with_events(page, st.mark(page.events))
        return page

    def event_wait(self, timeout_ms: Any = None, **args: Any) -> dict[str, Any]:
        """`event_wait` when matches are already there (`Reads.event_wait`'s first read: the
        same validation and request); a wait that must block is left to the store
        (Unplanned), whose notifier wakes it."""
        v.timeout_ms(timeout_ms)
        page = self.read(plan.wait_request(read_request(**_given(args))))
        if not page.events:
            raise Unplanned("nothing to answer yet: the store waits")
        return page.to_wait_dict()

    def event_get(self, event_id: Any = None) -> dict[str, Any]:
        """`event_get` as `Reads.event_get` answers it (the event, marked as a page is); an
        unknown id is left to the store (Unplanned), which refuses it in its words."""
        ident = v.required_routing("event_id", event_id)
        with self.reader.snapshot() as query:
            st = _Statements(query)
            rows = st.by_id(ident)
            if not rows:
                raise Unplanned("event_id not found")
            return {"event": st.mark(plan.events_from_rows(rows))[0].to_dict()}


def _given(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: val for k, val in args.items() if val is not None}


class _Statements:
    """`plan.PageStatements` with the store's SQLite text (sqlite_inbox_sql.py)."""

    def __init__(self, query: SnapshotQuery) -> None:
        self.query = query

    def _rows(self, key: Any, params: Mapping[str, Any]) -> Sequence[Any]:
        hit = inbox_sql.STATEMENTS.get(key)
        if hit is None:
            raise Unplanned(repr(key))
        sql, defaults = hit
        return self.query(sql, {**defaults, **params})

    def seq_of(self, ident: str, field: str) -> int:
        rows = self._rows("log.seq-of", {"id": ident})
        if not rows:
            raise plan.unknown_event(field, ident)
        return int(rows[0][0])

    def top(self, hi: int | None) -> Sequence[Any] | None:
        rows = self._rows(("log.top", hi is None), {} if hi is None else {"hi": hi})
        return rows[0] if rows else None

    def by_id(self, ident: str) -> Sequence[Any]:
        return self._rows("appends.event-by-id", {"id": ident})

    def id_at(self, seq: int) -> str | None:
        rows = self._rows("log.id-at", {"seq": seq})
        return str(rows[0][0]) if rows else None

    def mark(self, events: Sequence[Event]) -> tuple[Event, ...]:
        """The store's read marks (store/marks.py) with its keyring statements; the key
        events' signatures are trusted (verified when stored), so no Ed25519 library loads.
        Returns the events, the marked ones as marked copies."""
        row = self._rows(marks.MARKS_SQL, {})[0]

        def keyring() -> Keyring:
            key_events = plan.events_from_rows(self._rows(marks.KEY_EVENTS_SQL, {}))
            return marks.keyring_of(key_events, marks.pins_of(row[1]), check_signatures=False)

        return marks.judge(row, events, keyring)

    def typed(self, rows: Sequence[Any], low: int, high: int) -> bool:
        """Unknown (a reader of one call): the row reader tests the page."""
        return False

    def tested(self, rows: Sequence[Any], low: int, high: int) -> None:
        """Nothing to remember (a reader of one call)."""

    def page(
        self, req: ReadRequest, lo: int, top_seq: int, order: str, fixed: tuple[str, ...]
    ) -> Sequence[Any]:
        split = inbox_sql.SPLIT_INBOX
        key, _shape, params = plan.page_query(
            req, lo, top_seq, order, split, plan.SPLIT_TO_AGENT_MAX, fixed
        )
        return self._rows(key, params)


# ------------------------------------------------------------------ sqlite_inbox_sql.py


def generate() -> dict[str, Any]:
    """{SCHEMA_HEAD, SPLIT_INBOX, STATEMENTS} taken from a real store on SQLite: the inbox's
    reads (inbox.read_unseen's, for one agent and for "*": the tip, a page after a cursor, an
    empty page after the newest event) are run, and every statement the store compiled for
    them is kept. Imports SQLAlchemy and the store: never called on the hook path."""
    import tempfile

    from mempalace_logstream.backends.sqlite import SqliteBackend
    from mempalace_logstream.identity.keyring import KEY_ADD
    from mempalace_logstream.schema import SCHEMA_HEAD
    from mempalace_logstream.store import reads
    from mempalace_logstream.store.core import LogStore
    from mempalace_logstream.store.filters import PAGE_FILTERS

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/log.sqlite3"
        with LogStore.open(path) as writer:
            sent = [
                writer.event_append(type="note", stream="s", room="r", from_agent="a", to_agent=to)
                for to in ("b", "*", "b")
            ]
        # A fresh store: only these reads; its tip without the log's facts, as this reader's
        # (so its pages keep every column whatever the log holds: `plan.read_page`).
        with reads.no_log_facts(), LogStore.open(path, create=False) as store:
            store.event_list(limit=1, order="desc")  # the first run's tip; `logstream list`
            store.event_get(sent[0].id)  # `logstream get`
            store.event_list(type=[KEY_ADD], limit=1)  # the inbox's "agents have keys" probe
            for agent in ("b", "*"):
                args = {"to_agent": [agent], "exclude_writer": [agent], "limit": 20}
                for cursor in (None, sent[0].id, sent[-1].id):
                    store.event_list(since_event_id=cursor, order="asc", **args)
            # `logstream list`, `wait` and `tail` (issue 25): no filter or one filter of one
            # value, either order; a page back; `wait` and `tail` read oldest first
            for order in ("asc", "desc"):
                store.event_list(since_event_id=sent[0].id, order=order)
                for name in (*PAGE_FILTERS, "to_agent"):
                    value = "open" if name == "status" else "b"
                    store.event_list(order=order, **{name: [value]})
            store.event_list(before_event_id=sent[-1].id)
            # The key events' statement, which a read asks only of a log with key events
            # (`marks.judge`), as the keyring reads it.
            with store.snapshot() as ex:
                store.identity.keyring(ex, store.event_select)
            statements = store.compiled_sql()
    return {
        "SCHEMA_HEAD": SCHEMA_HEAD,
        "SPLIT_INBOX": SqliteBackend.split_inbox,
        "STATEMENTS": statements,
    }


def render(values: dict[str, Any]) -> str:
    """sqlite_inbox_sql.py's text (run `ruff format` on it after writing)."""
    lines = [
        '"""GENERATED by `python -m mempalace_logstream.store.lean`: do not edit.',
        "",
        "The SQLite statements of the inbox's reads as the store compiles them",
        "(`CommitPipeline.sql`: key -> (SQL text, default parameters)), for store/lean.py.",
        '"""',
        "",
        "from typing import Any",
        "",
        f"SCHEMA_HEAD = {values['SCHEMA_HEAD']!r}",
        f"SPLIT_INBOX = {values['SPLIT_INBOX']!r}",
        "STATEMENTS: dict[Any, tuple[str, dict[str, Any]]] = {",
    ]
    for key, (sql, defaults) in sorted(values["STATEMENTS"].items(), key=repr):
        lines.append(f"    {key!r}: (")
        lines.append("        (")
        lines += [f"            {chunk!r}" for chunk in _chunks(sql, 72)]
        lines.append("        ),")
        lines.append(f"        {defaults!r},")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_module(
    command: str, about: str, constants: dict[str, Any], statements: dict[Any, Any]
) -> str:
    """A generated module's text: its docstring, `constants`, and STATEMENTS (key -> (SQL,
    default parameters)), as render writes sqlite_inbox_sql.py."""
    lines = [f'"""GENERATED by `{command}`: do not edit.', "", about, '"""', ""]
    lines += ["from typing import Any", ""]
    lines += [f"{name} = {value!r}" for name, value in constants.items()]
    lines.append("STATEMENTS: dict[Any, tuple[str, dict[str, Any]]] = {")
    for key, (sql, defaults) in sorted(statements.items(), key=repr):
        lines += [f"    {key!r}: (", "        ("]
        lines += [f"            {chunk!r}" for chunk in _chunks(sql, 72)]
        lines += ["        ),", f"        {defaults!r},", "    ),"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _chunks(text: str, width: int) -> list[str]:
    """`text` cut after spaces or newlines into pieces of about `width` characters (so the
    generated file keeps to the line length); they concatenate back to `text`."""
    out: list[str] = []
    while len(text) > width:
        cut = max(text.rfind(" ", 0, width), text.rfind("\n", 0, width))
        cut = cut + 1 if cut > 0 else width
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text] if text else out


GENERATED = inbox_sql.__file__


if __name__ == "__main__":
    with open(GENERATED, "w", encoding="utf-8") as out:
        out.write(render(generate()))
    print(f"wrote {GENERATED}; now run `ruff format {GENERATED}`")
