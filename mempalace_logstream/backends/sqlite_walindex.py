"""Whether anyone committed to a SQLite log since a reader last looked, without a statement:
the header of the log's WAL index (issue 25).

A read on a log nobody wrote to meanwhile answers its log facts (the tip, the keyring's marks)
from what its connection read before (backends/sqlite.py `_Kept`). It used to learn that from
`PRAGMA data_version`, a statement of its own: ~1.7 µs of a 1M-event `correlation_id` read's
~38, most of it the WAL read lock that statement takes and drops. The WAL index (`<db>-shm`,
https://www.sqlite.org/walformat.html) begins with the 48-byte header every connection
compares before each read transaction to tell whether its page cache still holds: every
commit rewrites it (`iChange` counts transactions, `mxFrame` and the frame checksums move, a
WAL restart draws new salts), and `data_version` moves exactly when a connection sees it
changed. Comparing the same 48 bytes through a read-only map is ~0.1 µs.

Sound only within these rules, which `map_header` keeps:
- The file mapped is the one SQLite uses: `PRAGMA database_list` names the log file as SQLite
  opened it (a symlink resolved), and the WAL index is that name with `-shm`.
- The map is made by a connection that has read the log, and kept only with it: a WAL-mode
  connection holds a shared lock on the log while open, so no other connection's close can
  delete the index file and a later one make a new file the map would not see.
- A commit writes the header's second copy, then the first, which is the one compared: a
  header read mid-write differs from the old one (a commit seen early: the facts are read
  again, at a cost), or is the old one whole, when the commit is not yet visible to any
  read (its COMMIT has not returned: no one can have been told of it).
- No map (no WAL index file, a log opened immutable, a file too short, any OSError): the
  reader asks `PRAGMA data_version` as before.
"""

from __future__ import annotations

import mmap
import os
import sqlite3

# The header's first copy (walformat.html, "The WAL-Index Header").
HEADER_BYTES = 48
# Both copies and the checkpoint information: a WAL index shorter than this is not initialized.
_HEADERS_END = 136


def map_header(db: sqlite3.Connection) -> mmap.mmap | None:
    """A read-only map of the WAL index header of the log `db` has open (call it after `db`
    read the log in WAL mode), or None when there is none to map (see the module's rules).
    Compare `map[:HEADER_BYTES]` from one read to the next: equal, nobody committed."""
    if not hasattr(mmap, "PROT_READ"):  # not a POSIX system
        return None
    try:
        rows = db.execute("PRAGMA database_list").fetchall()
        path = next((str(row[2]) for row in rows if row[1] == "main"), "")
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.Error:
        return None
    if not path or str(mode).lower() != "wal":
        return None
    try:
        fd = os.open(path + "-shm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size < _HEADERS_END:
            return None
        return mmap.mmap(fd, HEADER_BYTES, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
