"""Reads: one snapshot per call, precompiled SQL text, and the page planner.

A page is "after a seq, up to a limit, in seq order" with the filters of `FILTER_RULES`;
waits re-read after the notifier wakes them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream import notify
from mempalace_logstream import validation as v
from mempalace_logstream.backends import CoreExecutor, QueryExecutor
from mempalace_logstream.backends.base import Query
from mempalace_logstream.models import Event, Page
from mempalace_logstream.schema import events
from mempalace_logstream.store import marks, plan
from mempalace_logstream.store.filters import FILTER_RULES, ReadRequest, read_request
from mempalace_logstream.store.pipeline import CommitPipeline

# An inbox read with up to this many to_agent values runs one index-ordered leg per value
# (see LogStore._page_query); more values fall back to one IN list. Tests lower it here.
_SPLIT_TO_AGENT_MAX = plan.SPLIT_TO_AGENT_MAX


class Reads(CommitPipeline):
    """Reads and waits (a base of `LogStore`)."""

    def event_get(self, event_id: Any) -> Event:
        ident = v.required_routing("event_id", event_id)
        with self._reading() as query:
            ex = QueryExecutor(query, self._sql)
            event = self.event_by_id(ex, ident, field="event_id")
            return self._judge_revocations(ex, [event])[0]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[QueryExecutor]:
        """One read snapshot whose executor runs statement shapes compiled once per store
        (`rows(key, build, params)`), or raw SQL text through its `query`."""
        with self._reading() as query:
            yield QueryExecutor(query, self._sql)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Query]:
        """One read snapshot that runs precompiled SQL text and returns plain rows.

        On the backend's fast path: its own DBAPI connection, no SQLAlchemy per statement.
        Otherwise (PostgreSQL, or an engine with cursor listeners): the same text through
        `exec_driver_sql`, so listeners see every statement.
        """
        fast = self.backend.fast_path()
        if fast is None:
            with self._storage_errors(), self.engine.connect() as conn:
                yield lambda sql, params: conn.exec_driver_sql(sql, dict(params)).all()
            return
        with fast.reading() as query:
            yield query

    def _hydrate(self, conn: sa.Connection, rows: Sequence[sa.Row[Any]]) -> list[Event]:
        """The Events of rows that carry an `id`, read again through SQLAlchemy."""
        ex = CoreExecutor(conn)
        return [self.event_by_id(ex, row.id, field="event_id") for row in rows]

    def _seq_of(self, query: Query, ident: str, field: str) -> int:
        sql, params = self._sql(
            "seq-of",
            lambda: sa.select(events.c.seq).where(events.c.id == sa.bindparam("id")),
            {"id": ident},
        )
        rows = query(sql, params)
        if not rows:
            raise plan.unknown_event(field, ident)
        return int(rows[0][0])

    def tip(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        with self._reading() as query:
            row = self._top(query, None)
        return (int(row[0]), row[1]) if row else (0, None)

    def _top(self, query: Query, hi: int | None) -> Sequence[Any] | None:
        """(seq, id) of the newest event below `hi` (all events when None)."""

        def build() -> sa.Select[Any]:
            q = sa.select(events.c.seq, events.c.id).order_by(events.c.seq.desc())
            q = q.limit(1)
            return q if hi is None else q.where(events.c.seq < sa.bindparam("hi"))

        sql, params = self._sql(("top", hi is None), build, {} if hi is None else {"hi": hi})
        rows = query(sql, params)
        return rows[0] if rows else None

    def event_list(
        self,
        *,
        since_event_id: Any = None,
        before_event_id: Any = None,
        since_created_at: Any = None,
        limit: Any = None,
        order: Any = None,
        preview: Any = False,
        from_agent: Any = None,
        **filters: Any,
    ) -> Page:
        """Read events (S-5.1–S-5.3). `cursor` is the newest event examined, filtered or not.

        Order: explicit `order` wins; else asc with a cursor, desc without. Raises
        ValidationError, NotFoundError for an unknown cursor.
        """
        req = self.read_request(
            since_event_id=since_event_id,
            before_event_id=before_event_id,
            since_created_at=since_created_at,
            limit=limit,
            order=order,
            preview=preview,
            from_agent=from_agent,
            **filters,
        )
        with self._reading() as query:
            return self._read(query, req)

    def read_request(self, **raw: Any) -> ReadRequest:
        """Validate the raw read arguments shared by list, wait, watch and SSE."""
        return read_request(**raw)

    def read(self, req: ReadRequest, after_seq: int | None = None) -> Page:
        """One read of a validated request; `after_seq` (a Page's `scanned_seq`) resumes it.

        The building block of the hub's async waits and SSE feed, which wake on the notifier
        and call this from a worker thread. Raises NotFoundError for an unknown cursor.
        """
        with self._reading() as query:
            return self._read(query, req, after_seq=after_seq)

    def _read(self, query: Query, req: ReadRequest, after_seq: int | None = None) -> Page:
        page = plan.read_page(_Statements(self, query), req, after_seq)
        marked = self._judge_revocations(QueryExecutor(query, self._sql), page.events)
        return marks.with_events(page, marked)

    def _judge_revocations(self, ex: QueryExecutor, events: Sequence[Event]) -> tuple[Event, ...]:
        """Mark what reads `verified: false` although stored (RFC 0008, `Keyring.read_mark`):
        a signed event whose key was revoked at or before its HLC (stored before the
        revocation arrived), an unsigned event under a name that signs. An empty page pays
        nothing; any other one keyring probe (one indexed statement while no key event or
        pin changed: the keyring is cached), and a log without keys nothing more. Returns
        the events, the marked ones as marked copies."""
        if not events:
            return tuple(events)
        return marks.mark_reads(self.identity.keyring(ex, self.event_select), events)

    def _page_query(
        self, req: ReadRequest, lo: int, top_seq: int, order: str
    ) -> tuple[str, Mapping[str, Any]]:
        """The page: matches in (lo, top_seq], in seq order, limit + 1 rows, as (SQL, params).

        An inbox filter is `to_agent IN (X, '*')`; SQLite cannot read an IN list in the order
        of the (to_agent, seq) index, so it would collect every match and sort it (a temp
        B-tree: ~100k rows for one inbox on a 1M-event log). One leg per value instead, each an
        index range already in seq order, merged by UNION ALL (MERGE, no sort) and stopped at
        the limit. The values are distinct, so the legs are disjoint: the same rows.

        The SQL is compiled once per filter shape (`plan.page_query`: which fields, how many
        values each) with named parameters, so a read costs no statement building or cache-key
        generation.
        """
        split = self.backend.split_inbox
        key, shape, params = plan.page_query(req, lo, top_seq, order, split, _SPLIT_TO_AGENT_MAX)
        return self._sql(key, lambda: self._page_statement(*shape), params)

    def _page_statement(
        self,
        shape: tuple[tuple[str, int], ...],
        n_to: int,
        split: bool,
        since_created: bool,
        order: str,
    ) -> sa.Executable:
        where: list[sa.ColumnElement[bool]] = [
            events.c.seq > sa.bindparam("lo"),
            events.c.seq <= sa.bindparam("top"),
        ]
        if since_created:
            where.append(events.c.created_at >= sa.bindparam("since_created_at"))
        for name, n in shape:
            column, how = FILTER_RULES[name]
            col = events.c[column]
            binds: list[sa.BindParameter[Any]] = [sa.bindparam(f"{name}_{i}") for i in range(n)]
            if how == "not_in":
                where.append(col.not_in(binds))
            else:
                where.append(col == binds[0] if n == 1 else col.in_(binds))
        to_binds: list[sa.BindParameter[Any]] = [sa.bindparam(f"to_{i}") for i in range(n_to)]
        limit: sa.BindParameter[int] = sa.bindparam("lim")
        if not split:
            if to_binds:
                where.append(events.c.to_agent.in_(to_binds))
            q = self.event_select(*where)
            q = q.order_by(events.c.seq.asc() if order == "asc" else events.c.seq.desc())
            return q.limit(limit)
        legs = [self.event_select(*where, events.c.to_agent == b) for b in to_binds]
        merged = sa.union_all(*legs)
        seq = merged.selected_columns.seq
        return merged.order_by(seq.asc() if order == "asc" else seq.desc()).limit(limit)

    def _id_at(self, query: Query, seq: int) -> str | None:
        """The id of the event at `seq`."""
        sql, params = self._sql(
            "id-at",
            lambda: sa.select(events.c.id).where(events.c.seq == sa.bindparam("seq")),
            {"seq": seq},
        )
        rows = query(sql, params)
        return rows[0][0] if rows else None

    def event_wait(self, *, timeout_ms: Any = None, **read_args: Any) -> Page:
        """Return matches after the cursor at once, else block until one arrives (S-5.4).

        Without `since_event_id`, existing matches are returned at once; `"tip"` waits only for
        new events. A timeout is a normal result: `timed_out=True` and no events. Wake-up is
        push-based (notifier); the fallback re-check bounds the cost of a lost signal.
        """
        timeout = v.timeout_ms(timeout_ms) / 1000
        req = self.read_request(**read_args)
        if req.order is None:
            req = req.replace(order="asc")
        deadline = time.monotonic() + timeout
        # Take the notifier version before each read: a commit after it makes wait() return.
        seen = self.notifier.version
        page = self.read(req)
        if not page.events:  # compile the page statement now, not after the wake-up
            self._page_query(req, 0, 0, req.order or "asc")
        while not page.events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return page.replace(timed_out=True)
            self.notifier.wait(seen, min(remaining, notify.FALLBACK_CHECK_S))
            seen = self.notifier.version
            # Resume after everything examined so far (rejected rows included): no rescans.
            page = self.read(req, after_seq=page.scanned_seq)
        return page


class _Statements:
    """`plan.PageStatements` on one read snapshot of the store: its SQL compiled once."""

    def __init__(self, reads: Reads, query: Query) -> None:
        self.reads, self.query = reads, query

    def seq_of(self, ident: str, field: str) -> int:
        return self.reads._seq_of(self.query, ident, field)

    def top(self, hi: int | None) -> Sequence[Any] | None:
        return self.reads._top(self.query, hi)

    def id_at(self, seq: int) -> str | None:
        return self.reads._id_at(self.query, seq)

    def page(self, req: ReadRequest, lo: int, top_seq: int, order: str) -> Sequence[Any]:
        return self.query(*self.reads._page_query(req, lo, top_seq, order))
