"""Byte-exact input and output for commands: content from a file or stdin (no newline
translation), text flags with a `--x-file` twin, and `--out` files written atomically.

Errors become the one-line form of `shared.fail`; imports nothing of the store or servers.
"""

from __future__ import annotations

import errno
import os
import secrets
import sys
from pathlib import Path

from mempalace_logstream.cli.shared import fail


def read_bytes(path: str, field: str) -> bytes:
    """Exact bytes from a file or `-` (stdin); no newline translation."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise fail(f"{field}: cannot read {path}: {exc.strerror}") from None


def read_text(path: str, field: str) -> str:
    """A file's (or stdin's) text, refused unless it is valid UTF-8."""
    raw = read_bytes(path, field)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(f"{field} is not valid UTF-8 ({path})") from None


def text_arg(
    value: str | None, file: str | None, field: str, *, required: bool = False
) -> str | None:
    """The value of `--field` or of `--field-file` (never both; one of them when required)."""
    if value is not None and file is not None:
        raise fail(f"give --{field} or --{field}-file, not both", 2)
    if file is not None:
        return read_text(file, field)
    if value is None and required:
        raise fail(f"--{field} or --{field}-file is required", 2)
    return value


def out_path(text: str, force: bool) -> Path:
    """The --out path, `~` expanded; refused early if it exists and --force was not given."""
    path = Path(text).expanduser()
    if path.is_dir() and not path.is_symlink():
        raise fail(f"--out {path} is a directory", field="out")
    if not force and os.path.lexists(path):
        raise fail(f"--out {path} already exists; pass --force to replace it", field="out")
    return path


def write_out(path: Path, data: bytes, force: bool) -> None:
    """Write a temp file beside `path`, then rename it into place: readers never see half a
    file, and a symlink at `path` is replaced (with --force), never written through."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _place(tmp, path, force)
    except FileExistsError:
        raise fail(
            f"--out {path} already exists; pass --force to replace it", field="out"
        ) from None
    except OSError as exc:
        raise fail(f"--out {path}: cannot write: {exc.strerror or exc}", field="out") from None
    finally:
        tmp.unlink(missing_ok=True)


def _place(tmp: Path, path: Path, force: bool) -> None:
    if force:
        os.replace(tmp, path)  # replaces a file or the symlink itself, never its target
        return
    try:
        os.link(tmp, path)  # atomic and no-clobber: fails if the name exists by now
    except OSError as exc:
        no_links = exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK)
        if not no_links or os.path.lexists(path):
            raise
        os.rename(tmp, path)  # a filesystem without hard links: checked just above
