"""Ids and times: event/artifact ids, replica ids, UTC timestamps, slugs."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

REPLICA_ID_KEY = "replica_id"  # the meta row holding this database's replica id


@functools.lru_cache(maxsize=4)
def _second_stamps(second: int) -> tuple[str, str]:
    """("YYYY-MM-DDTHH:MM:SS.", "YYYYMMDDTHHMMSS") of a UTC second: formatted once per second,
    not twice per append (strftime was a tenth of an append's CPU)."""
    dt = datetime.fromtimestamp(second, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S."), dt.strftime("%Y%m%dT%H%M%S")


# "000" … "999": a time stamp's milliseconds by index (an int's format spec costs ~0.15 µs),
# made by C loops (`f"{n:03d}"` a thousand times was ~2.9M instructions of a CLI append's
# start; this is ~0.8M, issue 25).
_MILLIS = tuple(map("".join, itertools.product("0123456789", repeat=3)))


def now_text(ms: int) -> str:
    return f"{_second_stamps(ms // 1000)[0]}{_MILLIS[ms % 1000]}Z"


def new_id_and_time(prefix: str, ms: int) -> tuple[str, str]:
    """(`new_id(prefix, ms)`, `now_text(ms)`) with the second's stamps looked up once."""
    day_time, compact = _second_stamps(ms // 1000)
    part = next(_parts, None)
    if part is None:
        part = _refill()
    return f"{prefix}_{compact}_{part}", f"{day_time}{_MILLIS[ms % 1000]}Z"


def new_id(prefix: str, ms: int) -> str:
    part = next(_parts, None)
    if part is None:
        part = _refill()
    return f"{prefix}_{_second_stamps(ms // 1000)[1]}_{part}"


# An id's random part: 10 bytes of the OS's CSPRNG as 20 hex digits (`secrets.token_hex(10)`
# without its two calls, and without importing `secrets`, which loads `random`, on the hook
# paths). Drawn 64 at a time: one `os.urandom` call (a syscall, ~0.4 µs here) for 64 ids, each
# part handed out once (`next` on the shared iterator is one C call: two threads never get the
# same one); a forked child draws its own (`_forget`), so a parent's and its child's ids never
# share a part.
_PARTS_DRAWN = 64
_parts: Iterator[str] = iter(())


def _refill() -> str:
    """A fresh draw of random parts (the last one was used up); returns the first."""
    global _parts
    text = os.urandom(10 * _PARTS_DRAWN).hex()
    _parts = iter([text[i : i + 20] for i in range(20, len(text), 20)])
    return text[:20]


def _forget() -> None:
    """In a forked child: the parent's undrawn parts are the parent's (`os.register_at_fork`)."""
    global _parts
    _parts = iter(())


if hasattr(os, "register_at_fork"):  # (no fork elsewhere)
    os.register_at_fork(after_in_child=_forget)


def mint_replica_id() -> str:
    import secrets

    return f"rep_{secrets.token_hex(16)}"


def slug(text: str, fallback: str) -> str:
    out = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40].rstrip("_")
    return out or fallback


def json_str(text: str) -> str:
    """`text` as a JSON string literal."""
    return json.dumps(text, ensure_ascii=False)


PROJECT_PREFIX = "project/"


def project_stream(value: Any, field: str = "project") -> str | None:
    """A project's stream: 'project/<slug>' (a stream given whole is kept)."""
    from mempalace_logstream import validation as v

    name = v.routing(field, value)
    if name is None:
        return None
    if name.startswith(PROJECT_PREFIX):
        return name
    return f"{PROJECT_PREFIX}{slug(name, 'project')}"
