"""Which seqs of a SQLite log a reader connection knows to hold only values of their columns'
types (issue 25), so that a page of them needs no type test in the row reader (store/plan.py
`events_from_rows`) when it is read again.

SQLite keeps whatever storage class a writer behind the API chose (a BLOB in a text column,
text in an integer one), and such a row must read with a `row_error`, never fail its page
(S-8.10); the row reader's test of every value of a page costs ~0.4 µs a row. A page that
passed it is remembered by its reader connection (`TypedRange.learn`): a run of consecutive
seqs as one range, other seqs one by one. A page read again is then known by a range check
or a set lookup (~0.04 µs a row). Stored rows never change but for a redaction's body, which
`REDACTIONS_SQL` checks before the connection trusts what it knows after a commit.

Measured and not kept: an AFTER INSERT trigger keeping a "wrong type stored" flag (its mere
presence cost each append ~8 µs of CPU); scanning new seqs in SQL with `typeof()` (~0.7 µs a
row, twice the Python test: a wait or a feed reads new rows once). Text that is not UTF-8 has
the type `text` in SQL; `fetch_all` reads it as bytes into rows that are not a plain list,
which are never trusted nor learnt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

# The newest redaction, and whether one after `rowid` names a tombstone that is not text (an
# event's body becomes its tombstone: the one change a stored row may see).
REDACTIONS_SQL = (
    "SELECT max(rowid), EXISTS (SELECT 1 FROM redactions WHERE rowid > ? "
    "AND typeof(tombstone) NOT IN ('text', 'null')) FROM redactions"
)
# Seqs a connection remembers one by one (`TypedRange.seqs`): a few MB at most.
SEQS_KEPT = 65_536
# Page statements a connection remembers (`TypedRange.pages`).
PAGES_KEPT = 256


class TypedRange:
    """The seqs one reader connection knows to hold only values of their columns' types: the
    range lo..hi and the set `seqs`. `broken` once a redaction gave a body a tombstone that is
    not text: that connection's pages are then tested every time."""

    __slots__ = ("lo", "hi", "seqs", "pages", "redactions", "stale", "broken")

    def __init__(self) -> None:
        self.lo, self.hi = 1, 0  # empty
        self.seqs: set[int] = set()
        # Page statements (SQL text, parameters) whose rows passed, with (how many, the
        # lowest seq, the highest): a page is bounded by seqs and a row's filtered columns
        # never change, so the statement reads the same rows again, known by one lookup
        # rather than one per seq (~0.6k instructions each: a set of ints compares each int
        # it finds; issue 25). A row planted behind the API into a gap of seqs inside the
        # page changes its count or an end: then its seqs are looked up as before.
        self.pages: dict[tuple[str, Any] | None, tuple[int, int, int]] = {}
        self.redactions = 0  # the newest redaction's rowid seen
        self.stale = True  # a commit was seen since the redactions were looked at
        self.broken = False

    def covers(
        self,
        cur: sqlite3.Cursor,
        rows: Sequence[Any],
        low: int,
        high: int,
        seq_at: int,
        statement: tuple[str, Any] | None = None,
    ) -> bool:
        """Whether every row of `rows` (a page of this connection's snapshot, seqs low..high,
        each's seq at `seq_at`, read by `statement` when given) is known to hold values of
        its columns' types."""
        if self.broken or type(rows) is not list:
            return False
        if (
            self.pages.get(statement) != (len(rows), low, high)
            and not (self.lo <= low and high <= self.hi)
            and not self.seqs.issuperset(map(itemgetter(seq_at), rows))
        ):
            return False
        if self.stale:
            newest, mistyped = cur.execute(REDACTIONS_SQL, (self.redactions,)).fetchone()
            if mistyped:
                self.broken = True
                return False
            self.redactions, self.stale = newest or 0, False
        return True

    def learn(
        self,
        rows: Sequence[Any],
        low: int,
        high: int,
        seq_at: int,
        statement: tuple[str, Any] | None = None,
    ) -> None:
        """`rows` (a page of this connection's snapshot, seqs low..high, read by `statement`
        when given) passed the row reader's type test: their seqs are known from now on.
        Consecutive seqs that meet the range extend it; others are kept one by one."""
        if self.broken or type(rows) is not list:
            return
        if statement is not None:
            if len(self.pages) >= PAGES_KEPT:
                self.pages.clear()
            self.pages[statement] = (len(rows), low, high)
        lo, hi = self.lo, self.hi
        if high - low + 1 == len(rows) and (lo > hi or (low <= hi + 1 and high >= lo - 1)):
            self.lo, self.hi = (low, high) if lo > hi else (min(lo, low), max(hi, high))
            return
        if len(self.seqs) >= SEQS_KEPT:
            self.seqs.clear()
        self.seqs.update(map(itemgetter(seq_at), rows))
