"""Whether anyone committed to a SQLite log since a reader last looked, in one `pread`: the
header of the log's WAL index (issue 25).

A read on a log nobody wrote to meanwhile answers its log facts (the tip, the keyring's marks)
from what its connection read before (backends/sqlite.py `_Kept`). It used to learn that from
`PRAGMA data_version`, a statement of its own: ~1.7 µs of a 1M-event `correlation_id` read's
~38, most of it the WAL read lock that statement takes and drops. The WAL index (`<db>-shm`,
https://www.sqlite.org/walformat.html) begins with the 48-byte header every connection
compares before each read transaction to tell whether its page cache still holds: every
commit rewrites it (`iChange` counts transactions, `mxFrame` and the frame checksums move, a
WAL restart draws new salts), and `data_version` moves exactly when a connection sees it
changed. Reading the same 48 bytes with `os.pread` is ~0.3 µs.

Sound only within these rules, which `header_reader` keeps:
- The file read is the one SQLite uses: `PRAGMA database_list` names the log file as SQLite
  opened it (a symlink resolved), the WAL index is that name with `-shm`, and the descriptor is
  checked to be that file (device and inode) by a connection that has it open. While it is
  open, no other connection can delete the file or start it anew (a WAL-mode connection holds
  a shared lock on the log, and SQLite's dead-man lock on the index).
- A descriptor of an index in use is never closed. POSIX drops every lock a process holds on
  a file when any descriptor of that file is closed: closing ours would drop SQLite's own
  locks on the index (another process would then take the index for unused and start it anew
  under our connections). So a descriptor is opened once per index file and kept until the
  file is deleted (SQLite deletes it when the last connection to the log, in any process,
  closes: no lock is left to drop), and the header is read with `pread`, never a map (a map
  dups the descriptor and closes the dup; a map past the end of a truncated file is a SIGBUS;
  a `pread` there reads short, a header that differs).
- A commit writes the header's second copy, then the first, which is the one read: a header
  read mid-write differs from the old one (a commit seen early: the facts are read again, at
  a cost), or is the old one whole, when the commit is not yet visible to any read (its
  COMMIT has not returned: no one can have been told of it).
- Deleting the index (or the log) by hand while connections have it open is outside these
  rules, as it is outside SQLite's (https://www.sqlite.org/howtocorrupt.html).
- No header (no WAL index file, a log opened immutable, a file too short, any OSError): the
  reader asks `PRAGMA data_version` as before.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Callable

# The header's first copy (walformat.html, "The WAL-Index Header").
HEADER_BYTES = 48
# Both copies and the checkpoint information: a WAL index shorter than this is not initialized.
_HEADERS_END = 136
# The index files of this process's logs, by path: (device, inode, descriptor), closed only
# once the file is deleted (see the module's rules). Past this many files in use at once,
# readers of a new one ask the PRAGMA.
_DESCRIPTORS_MAX = 256
_descriptors: dict[str, tuple[int, int, int]] = {}
_lock = threading.Lock()


def header_reader(db: sqlite3.Connection) -> Callable[[], bytes] | None:
    """A function that reads the WAL index header of the log `db` has open (call it after `db`
    read the log in WAL mode, while `db` is open), or None when there is none to read (see
    the module's rules). Equal headers from one read to the next: nobody committed between."""
    if not hasattr(os, "pread"):  # not a POSIX system
        return None
    try:
        rows = db.execute("PRAGMA database_list").fetchall()
        path = next((str(row[2]) for row in rows if row[1] == "main"), "")
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    except sqlite3.Error:
        return None
    if not path or str(mode).lower() != "wal":
        return None
    fd = _descriptor(path + "-shm")
    if fd is None:
        return None
    return functools.partial(os.pread, fd, HEADER_BYTES, 0)


def _descriptor(index: str) -> int | None:
    """A descriptor of the file `index` is now, or None."""
    try:
        st = os.stat(index)
    except OSError:
        return None
    if st.st_size < _HEADERS_END:
        return None
    with _lock:
        known = _descriptors.get(index)
        if known is not None and known[:2] == (st.st_dev, st.st_ino):
            return known[2]
        _close_deleted()
        if len(_descriptors) >= _DESCRIPTORS_MAX:
            return None
        try:
            fd = os.open(index, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        opened = os.fstat(fd)
        old = _descriptors.get(index)  # (a deleted old file's was closed just above)
        if old is not None:  # the path's old file, replaced, not deleted: kept until it is
            _descriptors[f"{index}\0{old[2]}"] = old
        _descriptors[index] = (opened.st_dev, opened.st_ino, fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            return None  # made anew between the two looks: kept, used by the next reader
        return fd


def _close_deleted() -> None:
    """Close the descriptors of index files that are deleted (`_lock` held)."""
    for key, (_dev, _ino, fd) in list(_descriptors.items()):
        try:
            deleted = os.fstat(fd).st_nlink == 0
        except OSError:  # not ours any more (never closed elsewhere): forgotten, not closed
            del _descriptors[key]
            continue
        if deleted:
            del _descriptors[key]
            os.close(fd)
