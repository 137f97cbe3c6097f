"""Which seqs of a SQLite log are known to hold only values of their columns' types (issue 25),
so that a page of them needs no type test in the row reader (store/plan.py `events_from_rows`).

SQLite keeps whatever storage class a writer behind the API chose (a BLOB in a text column,
text in an integer one), and such a row must read with a `row_error`, never fail its page
(S-8.10); the test of every value of a page costs ~0.4 µs a row in Python. A reader connection
instead scans the rows of the seqs its pages return, once, in SQL (`SCAN_SQL`, ~0.7 µs a row),
and keeps the range it found clean (`TypedRange`), and the seqs of the sparse pages (spread
over more than `SCAN_MAX` seqs) that passed the row reader's own test. Stored rows never change
but for a redaction's body, which `REDACTIONS_SQL` watches at every commit the connection
sees. (An AFTER INSERT trigger keeping a flag was measured first: its mere presence cost each
append ~8 µs of CPU.) Text that is not UTF-8 has the type `text` here; `fetch_all` reads it as
bytes into rows that are not a plain list, which the reader then tests.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from mempalace_logstream.models import EVENT_SPEC

# A range the reader scans at most at once (seqs): ~3 ms of SQLite CPU. A page whose rows
# span more (a rare value over a big log) is tested in Python, as before.
SCAN_MAX = 4096

# A column of the event read columns holding a value of another type than it is written with:
# a BLOB in a text column (text affinity turns any number into text), anything but an integer
# in an integer one. `seq` is the rowid: always an integer.
_WRONG = " OR ".join(
    f"typeof({name}) <> 'integer'" if spec.kind in ("seq", "int") else f"typeof({name}) = 'blob'"
    for name, spec in EVENT_SPEC
    if spec.kind != "seq" and name != "artifact_ids"
)
# The rows of seqs lo..hi: how many, and whether one holds a value of the wrong type.
SCAN_SQL = f"SELECT count(*), max({_WRONG}) FROM events WHERE seq >= ? AND seq <= ?"  # noqa: S608 - column names from EVENT_SPEC
# The newest redaction, and whether one after `rowid` names a tombstone that is not text (an
# event's body becomes its tombstone: the one change a stored row may see).
REDACTIONS_SQL = (
    "SELECT max(rowid), EXISTS (SELECT 1 FROM redactions WHERE rowid > ? "
    "AND typeof(tombstone) NOT IN ('text', 'null')) FROM redactions"
)


# Seqs of sparse pages a connection remembers (`TypedRange.seqs`): ~4 MB at most.
SEQS_KEPT = 65_536


class TypedRange:
    """The seqs lo..hi that one reader connection found holding only values of their columns'
    types, and the seqs of sparse pages the row reader tested (`learn`). `broken` once a scan
    met a row of the wrong type, a gap in the seqs (a row inserted there later was not
    scanned), or a redaction with a tombstone that is not text: that connection's pages are
    then tested row by row."""

    __slots__ = ("lo", "hi", "seqs", "redactions", "stale", "broken")

    def __init__(self) -> None:
        self.lo, self.hi = 1, 0  # empty
        self.seqs: set[int] = set()
        self.redactions = 0  # the newest redaction's rowid seen
        self.stale = True  # a commit was seen since the redactions were looked at
        self.broken = False

    def covers(
        self, cur: sqlite3.Cursor, rows: Sequence[Any], low: int, high: int, seq_at: int
    ) -> bool:
        """Whether every row of seqs low..high (a page's `rows`, from this connection's
        snapshot, each's seq at `seq_at`) holds values of its columns' types, scanning what
        is not known yet."""
        if self.broken or type(rows) is not list:
            return False
        if self.stale:
            newest, mistyped = cur.execute(REDACTIONS_SQL, (self.redactions,)).fetchone()
            if mistyped:
                self.broken = True
                return False
            self.redactions, self.stale = newest or 0, False
        lo, hi = self.lo, self.hi
        if lo <= low and high <= hi:
            return True
        if lo > hi or high < lo - SCAN_MAX or low > hi + SCAN_MAX:
            if high - low >= SCAN_MAX:  # a sparse page: known if tested before
                return self.seqs.issuperset([row[seq_at] for row in rows])
            if not self._scan(cur, low, high):
                return False
            self.lo, self.hi = low, high
            return True
        if (max(lo - low, 0) + max(high - hi, 0)) > SCAN_MAX:
            return self.seqs.issuperset([row[seq_at] for row in rows])
        if low < lo and not self._scan(cur, low, lo - 1):
            return False
        if high > hi and not self._scan(cur, hi + 1, high):
            return False
        self.lo, self.hi = min(lo, low), max(hi, high)
        return True

    def learn(self, rows: Sequence[Any], seq_at: int) -> None:
        """`rows` (a page of this connection's snapshot) passed the row reader's type test:
        their seqs are known from now on (while nothing is `broken`)."""
        if self.broken or type(rows) is not list or self.stale:
            return
        if len(self.seqs) >= SEQS_KEPT:
            self.seqs.clear()
        self.seqs.update([row[seq_at] for row in rows])

    def _scan(self, cur: sqlite3.Cursor, low: int, high: int) -> bool:
        count, mistyped = cur.execute(SCAN_SQL, (low, high)).fetchone()
        if mistyped or count != high - low + 1:
            self.broken = True
            return False
        return True
