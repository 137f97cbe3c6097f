"""The keys directory's probe on an admin write (issue 25): a missing `keys/` costs no raised
and caught exception per write, and a `keys/admin.key` written meanwhile by another process
signs the very next admin write (nothing about its absence is cached)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from mempalace_logstream import agents
from mempalace_logstream.identity import actor
from mempalace_logstream.store import LogStore
from mempalace_logstream.store import identity as store_identity


def admin_add(store: LogStore) -> Any:
    with actor.acting_as(actor.ADMIN):  # as the hub's admin token
        return store.event_append(type="note", stream="s", room="r", from_agent="w00")


def exceptions_in_identity(fn: Any) -> list[str]:
    """The exceptions raised into (or in) a frame of store/identity.py while `fn()` runs."""
    seen: list[str] = []
    target = store_identity.__file__

    def trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != target:
            return None
        if event == "exception":
            seen.append(f"{frame.f_code.co_name}: {arg[0].__name__}")
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return seen


def test_an_admin_write_without_a_keys_directory_raises_nothing(tmp_path: Path) -> None:
    with LogStore.open(str(tmp_path / "log.sqlite3")) as store:
        assert not (tmp_path / "keys").exists()
        admin_add(store)  # the first loads (no keys), the next ones only probe
        raised = exceptions_in_identity(lambda: [admin_add(store) for _ in range(3)])
        assert raised == []
        assert admin_add(store).sig is None  # no admin key held: unsigned


def test_an_admin_key_written_by_another_process_signs_the_next_admin_write(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "log.sqlite3")
    with LogStore.open(db) as hub:
        for _ in range(3):
            assert admin_add(hub).sig is None
        assert not (tmp_path / "keys").exists()
        with LogStore.open(db) as other:  # `logstream agent ...` on the hub's host
            admin_key = agents.ensure_admin(other)
        assert (tmp_path / "keys" / "admin.key").exists()
        signed = admin_add(hub)
        assert (signed.key_id, signed.sig is not None) == (admin_key, True)
        assert hub.event_get(signed.id).key_id == admin_key
