"""A SQLite log file before any engine: is it there, is it ours, may this process write it.

The checks of engine.py's opening rule (see its docstring) that need only the stdlib, so the
lean inbox reader of the hook path (store/lean.py) refuses exactly what the store refuses,
with the same texts, without importing SQLAlchemy.
Must not import sqlalchemy, the store or any surface.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from mempalace_logstream import errors

# `--durability`: the synchronous level of each name (PostgreSQL maps it too, see engine.py).
DURABILITY = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
APPLICATION_ID = 0x4C475354  # "LGST" in the SQLite header: a log made by this package
LOG_TABLES = ("alembic_version", "events")  # ours, or a reference log to adopt
# SQLite has no SHA-256 in SQL: the blob guard's triggers (ddl.py) call this function, which
# every connection the store opens registers (`add_functions`); another program's UPDATE of a
# blob fails for want of it, which refuses it.
SQLITE_SHA256_FUNCTION = "logstream_sha256"


def storage_message(orig: BaseException | None) -> str:
    """The text of a StorageError for a database driver's error (backends.base maps
    SQLAlchemy's and the drivers' errors with it; the lean reader maps sqlite3's)."""
    text = str(orig)
    if "database is locked" in text or "database table is locked" in text:
        # Only reached after the busy timeout (30 s by default) ran out: say what to do.
        return (
            "database busy: another process held the write lock past the busy timeout; "
            "nothing was written, retry the operation"
        )
    return f"database error: {text}"


def fetch_all(
    db: sqlite3.Connection, sql: str, params: Any, cur: sqlite3.Cursor | None = None
) -> list[Any]:
    """`db.execute(sql, params).fetchall()` (on `cur`, a cursor of `db` kept for its
    statements, when given), except that text which is not UTF-8 (written
    behind the API) comes back as bytes instead of failing the whole statement: the row reader
    (store/plan.py `repair_row`) reads such a value with a `row_error`. The lenient decoding
    runs only for a statement that met such text, and returns its rows as `LenientRows`."""
    try:
        return (db if cur is None else cur).execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "Could not decode to UTF-8" not in str(exc):
            raise
    db.text_factory = _text_or_bytes
    try:
        return LenientRows(db.execute(sql, params).fetchall())
    finally:
        db.text_factory = str


class LenientRows(list[Any]):
    """The rows of a statement that met text which is not UTF-8 (`fetch_all`): such a value
    is bytes although SQLite calls it text, so these rows are type-tested by the row reader
    whatever is known of their seqs (backends/sqlite_typed.py)."""


def _text_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def configure(db: Any, database: str, sync: str, busy_timeout_ms: int, writable: bool) -> None:
    """Set up a new DBAPI connection to the log `database` (engine.py's connect listener): the
    busy timeout, WAL (a writable connection; a read-only one reads in whatever mode the file
    is in), the synchronous level `sync` (`DURABILITY`'s), foreign keys."""
    cur = db.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        if writable:
            mode = cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise errors.StorageError(f"could not switch {database} to WAL (got {mode})")
        cur.execute(f"PRAGMA synchronous={sync}")
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def add_functions(db: sqlite3.Connection) -> None:
    """Register the SQL functions the log's triggers call (`SQLITE_SHA256_FUNCTION`)."""
    db.create_function(SQLITE_SHA256_FUNCTION, 1, _sha256_hex, deterministic=True)


def _sha256_hex(data: Any) -> str | None:
    """SQLite's `logstream_sha256(x)`: the lowercase hex SHA-256 of a BLOB (None for NULL)."""
    import hashlib  # only when a blob's trigger runs: the lean hook paths never load it

    if data is None:
        return None
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return hashlib.sha256(raw).hexdigest()


def begin(conn: Any, write: bool) -> None:
    """Open the transaction of a SQLAlchemy connection whose DBAPI connection owns its
    transaction boundaries (isolation_level None): a writer takes the write lock up front."""
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def mark_new_file(db: sqlite3.Connection) -> None:
    """Make the empty database of `db` a log file: our application id, WAL mode."""
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA journal_mode = WAL")


def missing_log(database: str) -> errors.NotFoundError:
    """What a reader (`create=False`) gets for a log file that does not exist."""
    return errors.NotFoundError(
        f"no log at {database}: the file does not exist (a mistyped path?); only "
        "commands that write, such as `logstream append`, create one",
        field="db",
        ident=database,
    )


def sqlite_uri(path: str, *, immutable: bool = False) -> str:
    """The SQLite URI that opens `path` read-only (immutable: no WAL index, no change seen)."""
    return f"file:{quote(path)}?mode=ro" + ("&immutable=1" if immutable else "")


# What `urllib.parse.quote(path)` (safe="/") leaves as it is.
_UNQUOTED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")


def quote(path: str) -> str:
    """`urllib.parse.quote(path)`, the path of a `file:` URI: a path it would leave as it is
    is returned without loading urllib.parse (and ipaddress: ~1 ms of a one-call process,
    issue 25)."""
    if _UNQUOTED.issuperset(path):
        return path
    from urllib.parse import quote as url_quote

    return url_quote(path)


def read_only_mode(path: str) -> str | None:
    """None when this process may write `path` and its directory; else "ro", or "immutable"
    when SQLite could not create the WAL index (-shm) beside a file that has no -wal."""
    directory = os.path.dirname(path) or "."
    dir_ok = os.access(directory, os.W_OK | os.X_OK)
    if os.access(path, os.W_OK) and dir_ok:
        return None
    if dir_ok or os.path.exists(path + "-wal"):
        return "ro"  # SQLite makes (or shares) the -shm; a -wal must be read, never ignored
    return "immutable"


def check_log_file(path: str, mode: str | None) -> None:
    """Refuse anything at `path` that is not a logstream database, reading only.

    The file is read through SQLite alone, never a descriptor of our own: POSIX drops every
    lock a process holds on a file when any descriptor of it is closed, and this process may
    hold SQLite's locks on this very log (a second store, a lean reader beside a store).
    Without its shared lock, another process's last close would delete the -wal and -shm
    under this one's connections (https://www.sqlite.org/howtocorrupt.html, 2.2)."""
    if os.path.isdir(path):
        raise errors.StorageError(f"{path} is not a logstream database (it is a directory)")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise errors.StorageError(f"cannot open {path}: {exc.strerror or exc}") from exc
    if not size:
        raise _not_a_log(path, "the file is empty")
    app_id, tables = _peek(path, mode)
    if app_id != APPLICATION_ID and not tables:
        raise _not_a_log(path, "an SQLite file with no log in it")


def _peek(path: str, mode: str | None) -> tuple[int, list[str]]:
    """(application id, log tables present), through a read-only connection."""
    marks = ",".join("?" * len(LOG_TABLES))
    try:
        db = sqlite3.connect(sqlite_uri(path, immutable=mode == "immutable"), uri=True)
        try:
            app_id = int(db.execute("PRAGMA application_id").fetchone()[0])
            rows = db.execute(
                f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
                LOG_TABLES,
            )
            tables = [r[0] for r in rows]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):  # SQLite's own test of the file's header
            raise _not_a_log(path, "not an SQLite file") from exc
        if "malformed" in str(exc):
            raise _not_a_log(path, str(exc)) from exc
        raise errors.StorageError(f"cannot open {path}: {exc}") from exc
    return app_id, tables


def _not_a_log(path: str, why: str) -> errors.StorageError:
    return errors.StorageError(
        f"{path} is not a logstream database ({why}); check the path (the file was left untouched)"
    )
