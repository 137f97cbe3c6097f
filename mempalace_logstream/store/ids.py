"""Ids and times: event/artifact ids, replica ids, UTC timestamps, slugs."""

from __future__ import annotations

import functools
import json
import os
import re
from datetime import UTC, datetime
from typing import Any

REPLICA_ID_KEY = "replica_id"  # the meta row holding this database's replica id


@functools.lru_cache(maxsize=4)
def _second_stamps(second: int) -> tuple[str, str]:
    """("YYYY-MM-DDTHH:MM:SS.", "YYYYMMDDTHHMMSS") of a UTC second: formatted once per second,
    not twice per append (strftime was a tenth of an append's CPU)."""
    dt = datetime.fromtimestamp(second, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S."), dt.strftime("%Y%m%dT%H%M%S")


def now_text(ms: int) -> str:
    return f"{_second_stamps(ms // 1000)[0]}{ms % 1000:03d}Z"


def new_id_and_time(prefix: str, ms: int) -> tuple[str, str]:
    """(`new_id(prefix, ms)`, `now_text(ms)`) with the second's stamps looked up once."""
    day_time, compact = _second_stamps(ms // 1000)
    return f"{prefix}_{compact}_{os.urandom(10).hex()}", f"{day_time}{ms % 1000:03d}Z"


def new_id(prefix: str, ms: int) -> str:
    # 10 bytes of the OS's CSPRNG as hex: `secrets.token_hex(10)` without its two calls
    # (and without importing `secrets`, which loads `random`, on the hook paths).
    return f"{prefix}_{_second_stamps(ms // 1000)[1]}_{os.urandom(10).hex()}"


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
