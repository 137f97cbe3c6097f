"""Reads: one snapshot per call, precompiled SQL text, and the page planner.

A page is "after a seq, up to a limit, in seq order" with the filters of `FILTER_RULES`;
waits re-read after the notifier wakes them.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from mempalace_logstream import notify
from mempalace_logstream import validation as v
from mempalace_logstream.backends import QueryExecutor
from mempalace_logstream.backends.base import Query
from mempalace_logstream.backends.queries import log as log_rows
from mempalace_logstream.models import Event, Page
from mempalace_logstream.store import marks, plan
from mempalace_logstream.store.identity import Identity
from mempalace_logstream.store.pipeline import CommitPipeline

if TYPE_CHECKING:  # the filters are imported where a read uses them: a task move reads its
    # task through `snapshot` only, and never loads them (issue 25)
    from mempalace_logstream.identity.keyring import Keyring
    from mempalace_logstream.store.filters import ReadArgs, ReadRequest

# An inbox read with up to this many to_agent values runs one index-ordered leg per value
# (see `Reads._page_plan`); more values fall back to one IN list. Tests lower it here.
_SPLIT_TO_AGENT_MAX = plan.SPLIT_TO_AGENT_MAX
# Whether a store's reads ask the tip with the log's facts, which let a page statement leave
# columns out (`plan.read_page`); `no_log_facts` turns it off for the stores it opens.
_LOG_FACTS = [True]
# Page statements a store remembers, by request (`Reads._page_entry`), under (the
# request's id, the order, `_SPLIT_TO_AGENT_MAX`, the columns left out).
_PAGES_KEPT = 256
PageKey = tuple[int, str, int, tuple[str, ...]]
# (the request, its page statement's SQL text, its parameters but the bounds, and where the
# backend binds positionally (the same statement with positional parameters, their values
# after the bounds lo and top), else None).
PageEntry = tuple["ReadRequest", str, dict[str, Any], tuple[str, tuple[Any, ...]] | None]


class Reads:
    """Reads and waits (a part of `LogStore`): snapshots on the backend's connections running
    the pipeline's compiled statements, marks
    judged with `identity`'s keyring, waits woken by `notifier`."""

    def __init__(
        self, pipeline: CommitPipeline, identity: Identity, notifier: notify.Notifier
    ) -> None:
        self.pipeline, self.identity, self.notifier = pipeline, identity, notifier
        self.backend, self.engine = pipeline.backend, pipeline.engine
        # A list read's snapshot: the backend's statement-by-statement one where it has it
        # (SQLite's `glancing`: no BEGIN / ROLLBACK), its plain `reading` else (PostgreSQL
        # reads in autocommit already). The page rule (`plan.read_page`) holds either way.
        self._glance = getattr(self.backend, "glancing", self.backend.reading)
        # Bound once: every read runs them (no attribute walk per statement).
        self._sql = pipeline.sql
        self.event_select = pipeline.event_select
        # Every read asks for the tip and (for a page with events) the keyring's marks: facts
        # of the whole log, which a backend may answer again while nothing was committed. Both
        # are run as compiled here, (SQL text, parameters), straight on the read's `Query`.
        # The tip carries the log's facts a page statement may use (`plan.read_page`).
        facts = _LOG_FACTS[-1]
        tip = log_rows.tip_facts_statement if facts else log_rows.tip_statement
        self._tip = tip(self._sql)
        self._marks = identity.marks_statement(self._sql)
        # A cursor's seq too: a poll repeats its cursor while nothing is committed.
        # Run as compiled here too (`_Statements.seq_of`: no executor, no compile lookup).
        self._seq_of = cursor = log_rows.seq_of_statement(self._sql)
        self.backend.remember_log_facts((self._tip[0], self._marks[0], cursor))
        # The page statement of each request read lately (`_page_entry`).
        self._pages: dict[PageKey, PageEntry] = {}
        # A backend whose driver binds positional parameters faster compiles page statements
        # with them too (`_page_entry`), once per shape here.
        positional = getattr(self.backend, "positional_dialect", None)
        self._positional: Any = positional() if positional is not None else None
        self._positional_sql: dict[Any, tuple[str, tuple[str, ...]]] = {}
        # The statements of the last snapshot read (`_read`): a reader connection is one
        # snapshot at a time, so its `_Statements` serve its next read too (no object made).
        self._last: _Statements | None = None

    def event_get(self, event_id: Any) -> Event:
        ident = v.required_routing("event_id", event_id)
        with self._reading() as query:
            ex = QueryExecutor(query, self._sql)
            event = self.pipeline.event_by_id(ex, ident, field="event_id")
            return self._judge_revocations(query, ex, (event,))[0]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[QueryExecutor]:
        """One read snapshot whose executor runs statement shapes compiled once per store
        (`rows(key, build, params)`), or raw SQL text through its `query`."""
        with self._reading() as query:
            yield QueryExecutor(query, self._sql)

    def _reading(self) -> contextlib.AbstractContextManager[Query]:
        """One read snapshot on the backend's own DBAPI connection that runs precompiled SQL
        text and returns plain rows (no SQLAlchemy per statement)."""
        return self.backend.reading()

    def tip(self) -> tuple[int, str | None]:
        """(seq, id) of the newest event, or (0, None) on an empty log."""
        with self._reading() as query:
            row = log_rows.top(QueryExecutor(query, self._sql), None)
        return (int(row[0]), row[1]) if row else (0, None)

    def event_list(self, **args: Unpack[ReadArgs]) -> Page:
        """Read events (S-5.1–S-5.3). `cursor` is the newest event examined, filtered or not.

        Order: explicit `order` wins; else asc with a cursor, desc without. Raises
        ValidationError, NotFoundError for an unknown cursor.
        """
        return self.list_args(args)

    def list_args(self, args: Mapping[str, Any]) -> Page:
        """`event_list` of the arguments already in a dict (not changed): `LogStore.event_list`
        passes its own, not a copy (issue 25)."""
        req = self._request_of(args)
        with self._glance() as query:
            return self._read(query, req)

    @functools.cached_property
    def _request_of(self) -> Callable[[Mapping[str, Any]], ReadRequest]:
        """`filters.request_of`, imported on the first read (an import statement in
        `event_list` was ~0.5 µs of every read, issue 25)."""
        from mempalace_logstream.store.filters import request_of

        return request_of

    def read_request(self, **raw: Any) -> ReadRequest:
        """Validate the raw read arguments shared by list, wait, watch and SSE."""
        from mempalace_logstream.store.filters import read_request

        return read_request(**raw)

    def read(self, req: ReadRequest, after_seq: int | None = None) -> Page:
        """One read of a validated request; `after_seq` (a Page's `scanned_seq`) resumes it.

        The building block of the hub's async waits and SSE feed, which wake on the notifier
        and call this from a worker thread. Raises NotFoundError for an unknown cursor.
        """
        with self._glance() as query:
            return self._read(query, req, after_seq=after_seq)

    def _read(self, query: Query, req: ReadRequest, after_seq: int | None = None) -> Page:
        st = self._last
        if st is None or st.query is not query:
            st = self._last = _Statements(self, query)
        else:
            st.ex = None
        page = plan.read_page(st, req, after_seq)
        if not page.events:
            return page
        # `_judge_revocations` of the page (the marks probe, then `marks.judge`), with no
        # closure or events copy made while the log holds no key event (issue 25), nor a
        # bound method and the call of `judge_page`.
        row = query(*self._marks)[0]
        if not marks.has_key_events(row):
            return page
        return marks.judge_page(row, page, self._keyring, query, st.ex, row)

    def _keyring(self, query: Query, ex: QueryExecutor | None, row: Sequence[Any]) -> Keyring:
        """The keyring of the log's key events and pins (the marks row's), cached by
        `identity` while neither changed."""
        ex = ex or QueryExecutor(query, self._sql)
        return self.identity.keyring(ex, self.event_select, (row[0], row[1]))

    def _judge_revocations(
        self, query: Query, ex: QueryExecutor | None, events: tuple[Event, ...]
    ) -> tuple[Event, ...]:
        """Mark what reads `verified: false` although stored (RFC 0008, `Keyring.read_mark`):
        a signed event whose key was revoked at or before its HLC (stored before the
        revocation arrived), an unsigned event under a name that signs. The marks probe (a
        log fact: one indexed statement, answered again while nothing was committed) says
        whether the log holds any key event; a log without one returns `events` as they are,
        else the keyring (cached while no key event or pin changed) judges each. Returns the
        events, the marked ones as marked copies."""
        row = query(*self._marks)[0]
        return marks.judge(row, events, lambda: self._keyring(query, ex, row))

    def _page_plan(
        self,
        req: ReadRequest,
        lo: int,
        top_seq: int,
        order: str,
        fixed: tuple[str, ...] | None = None,
    ) -> tuple[Any, log_rows.PageShape, dict[str, Any]]:
        """The page: matches in (lo, top_seq], in seq order, limit + 1 rows, as (cache key,
        shape, params) (`plan.page_query`). The statement is compiled once per shape (which
        fields, how many values each) with named parameters, so a read costs no statement
        building or cache-key generation; an inbox read on a backend that splits it runs one
        index-ordered leg per `to_agent` value (`log_rows.page_builder`)."""
        split = self.backend.split_inbox
        return plan.page_query(req, lo, top_seq, order, split, _SPLIT_TO_AGENT_MAX, fixed)

    def _page_statement(
        self, req: ReadRequest, order: str, fixed: tuple[str, ...]
    ) -> tuple[str, dict[str, Any]]:
        """The page statement of `req` in `order` without the columns `fixed` as compiled
        (`_page_plan`): its SQL text and its parameters but the bounds `lo` and `top`, which a
        read adds (`_page_entry`'s named form)."""
        entry = self._page_entry(req, order, fixed)
        return entry[1], entry[2]

    def _page_entry(self, req: ReadRequest, order: str, fixed: tuple[str, ...]) -> PageEntry:
        """`_page_statement`, and the same statement with positional parameters where the
        backend has them (`positional_dialect`: each distinct parameter once, the bounds lo,
        top first; an inbox split in legs repeats them in its text, SQLite's `?NNN` binds them
        once). Remembered per request object
        (`read_request` gives a repeated read the same one; the entry holds it, so its id
        names no other request meanwhile): a read then builds no plan, key or parameters
        (issue 25)."""
        key = (id(req), order, _SPLIT_TO_AGENT_MAX, fixed)
        hit = self._pages.get(key)
        if hit is not None and hit[0] is req:
            return hit
        from mempalace_logstream.store.filters import FILTER_RULES

        plan_key, shape, params = self._page_plan(req, 0, 0, order, fixed)
        build = log_rows.page_builder(self.event_select, FILTER_RULES, shape)
        sql, compiled = self._sql(plan_key, build, params)
        base = {k: v for k, v in compiled.items() if k not in ("lo", "top")}
        by_position: tuple[str, tuple[Any, ...]] | None = None
        if self._positional is not None:
            positional = self._positional_sql.get(plan_key)
            if positional is None:
                made = build().compile(dialect=self._positional)
                positional = self._positional_sql[plan_key] = (str(made), tuple(made.positiontup))
            names = positional[1]
            if names[:2] == ("lo", "top") and not {"lo", "top"} & set(names[2:]):
                by_position = positional[0], tuple(compiled[name] for name in names[2:])
        if len(self._pages) >= _PAGES_KEPT:
            self._pages.clear()
        entry = self._pages[key] = (req, sql, base, by_position)
        return entry

    def event_wait(self, *, timeout_ms: Any = None, **read_args: Unpack[ReadArgs]) -> Page:
        """Return matches after the cursor at once, else block until one arrives (S-5.4).

        Without `since_event_id`, existing matches are returned at once; `"tip"` waits only for
        new events. A timeout is a normal result: `timed_out=True` and no events. Wake-up is
        push-based (notifier); the fallback re-check bounds the cost of a lost signal.
        """
        timeout = v.timeout_ms(timeout_ms) / 1000
        req = plan.wait_request(self.read_request(**read_args))
        deadline = time.monotonic() + timeout
        # Take the notifier version before each read: a commit after it makes wait() return.
        seen = self.notifier.version
        page = self.read(req)
        if not page.events:  # compile the page statement now, not after the wake-up
            from mempalace_logstream.store.filters import FILTER_RULES

            key, shape, params = self._page_plan(req, 0, 0, req.order or "asc")
            self._sql(key, log_rows.page_builder(self.event_select, FILTER_RULES, shape), params)
        while not page.events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return page.replace(timed_out=True)
            self.notifier.wait(seen, min(remaining, notify.FALLBACK_CHECK_S))
            seen = self.notifier.version
            # Resume after everything examined so far (rejected rows included): no rescans.
            page = self.read(req, after_seq=page.scanned_seq)
        return page


@contextlib.contextmanager
def no_log_facts() -> Iterator[None]:
    """Stores opened inside read their tip without the log's facts, so their pages select
    every column (the lean reader's statements are made so: `lean.generate`)."""
    _LOG_FACTS.append(False)
    try:
        yield
    finally:
        _LOG_FACTS.pop()


class _Statements:
    """`plan.PageStatements` on one read snapshot of the store: its SQL compiled once. The
    executor of the statements compiled by key is made on first use (`executor`): a read
    whose tip, page and marks are all it runs needs none."""

    __slots__ = ("reads", "query", "ex", "typed_rows", "tested_rows")

    def __init__(self, reads: Reads, query: Query) -> None:
        self.reads, self.query = reads, query
        self.ex: QueryExecutor | None = None
        # The backend snapshot's row-type memory, if it has one (`typed`, `tested`).
        self.typed_rows = getattr(query, "typed_rows", None)
        self.tested_rows = getattr(query, "tested_rows", None)

    def executor(self) -> QueryExecutor:
        if self.ex is None:
            self.ex = QueryExecutor(self.query, self.reads._sql)
        return self.ex

    def seq_of(self, ident: str, field: str) -> int:
        # `log_rows.seq_of`'s statement as compiled (`Reads.__init__`: it binds `id` only), run
        # straight on the snapshot: a poll after a cursor asks it on every read (issue 25).
        rows = self.query(self.reads._seq_of, {"id": ident})
        if not rows:
            raise plan.unknown_event(field, ident)
        return int(rows[0][0])

    def top(self, hi: int | None) -> Sequence[Any] | None:
        if hi is None:  # the tip: a log fact, its statement compiled once (`Reads.__init__`)
            rows = self.query(*self.reads._tip)
            return rows[0] if rows else None
        return log_rows.top(self.executor(), hi)

    def id_at(self, seq: int) -> str | None:
        return log_rows.id_at(self.executor(), seq)

    def page(
        self, req: ReadRequest, lo: int, top_seq: int, order: str, fixed: tuple[str, ...]
    ) -> Sequence[Any]:
        reads = self.reads
        hit = reads._pages.get((id(req), order, _SPLIT_TO_AGENT_MAX, fixed))  # `_page_entry`'s
        if hit is None or hit[0] is not req:
            hit = reads._page_entry(req, order, fixed)
        by_position = hit[3]
        if by_position is not None:  # the bounds first, then the request's values
            return self.query(by_position[0], (lo, top_seq, *by_position[1]))
        return self.query(hit[1], {**hit[2], "lo": lo, "top": top_seq})

    def typed(self, rows: Sequence[Any], low: int, high: int) -> bool:
        # The backend's read snapshot answers it (its `typed_rows`); one that cannot has
        # every page tested.
        typed_rows = self.typed_rows
        return typed_rows is not None and typed_rows(rows, low, high, plan.SEQ_AT) is True

    def tested(self, rows: Sequence[Any], low: int, high: int) -> None:
        tested_rows = self.tested_rows
        if tested_rows is not None:
            tested_rows(rows, low, high, plan.SEQ_AT)
