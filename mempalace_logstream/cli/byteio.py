"""Byte-exact input and output for commands: content from a file or stdin (no newline
translation), text flags with a `--x-file` twin (`refusals` around writes.py's argument
builders), and `--out` files written atomically.

Reading input is writes.py's (the fast path reads the same way); its refusals become the
one-line form of `shared.fail` here. Imports nothing of the store or servers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import typer

from mempalace_logstream.cli import writes
from mempalace_logstream.cli.shared import fail


def read_bytes(path: str, field: str) -> bytes:
    """Exact bytes from a file or `-` (stdin); no newline translation (writes.py's)."""
    try:
        return writes.read_bytes(path, field)
    except writes.Refusal as exc:
        raise refused(exc) from None


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Build a command's arguments (writes.py): a refused input becomes the one-line failure
    of `shared.fail`."""
    try:
        yield
    except writes.Refusal as exc:
        raise refused(exc) from None


def refused(exc: writes.Refusal) -> typer.Exit:
    """A refused input (writes.py) as the one-line failure of `shared.fail`."""
    return fail(exc.message, exc.code, exc.field)


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
