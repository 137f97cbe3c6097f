"""Settings from the environment and the resolution of where the log lives (S-2.1).

`MEMPALACE_LOGSTREAM_*` variables, plus `LOGSTREAM_DB`, `LOGSTREAM_HUB_TIMEOUT` and
`MEMPALACE_PALACE_PATH` from the spec.
Only cli.py and the server factories call `Settings.from_env()`; the core takes arguments.
"""

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from mempalace_logstream import errors

if TYPE_CHECKING:
    from pathlib import Path

    from mempalace_logstream.tasks import TaskSettings

DB_FILENAME = "logstream.sqlite3"
DEFAULT_PALACE = "~/.mempalace/palace"
# Sync apply holds an event signed by a key whose revocation arrived here first and stamped
# less than this before it (RFC 0008 "Threat model": backdating); 0 holds none.
DEFAULT_BACKDATE_WINDOW_MS = 24 * 60 * 60 * 1000
MAX_BACKDATE_WINDOW_MS = 366 * 24 * 60 * 60 * 1000


def _int(environ: Mapping[str, str], key: str, default: int) -> int:
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.ValidationError(f"{key}={raw!r} must be an integer", field=key) from None


def _bounded(environ: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    value = _int(environ, key, default)
    if not low <= value <= high:
        raise errors.ValidationError(
            f"{key}={value} must be between {low} and {high}", field=key, limit=high
        )
    return value


def _seconds(environ: Mapping[str, str], key: str, default: float) -> float:
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise errors.ValidationError(
            f"{key}={raw!r} must be a positive number of seconds", field=key
        ) from None
    return value


def _lease_ms(environ: Mapping[str, str], key: str, default: int) -> int:
    """The task lease, checked against the lifecycle's bounds when it is set. The tasks
    package is imported only then: the hook path (issue 13) reads settings on every prompt."""
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    from mempalace_logstream.tasks.model import MAX_LEASE_MS, MIN_LEASE_MS

    return _bounded(environ, key, default, MIN_LEASE_MS, MAX_LEASE_MS)


class Settings(NamedTuple):  # not a dataclass: the hook paths import no dataclasses
    db: str | None = None
    palace: str | None = None
    max_body_bytes: int = 256 * 1024
    max_artifact_bytes: int = 4 * 1024 * 1024
    hub_timeout_s: float = 30.0  # every `--hub` call; `wait` gets its own timeout on top
    task_max_depth: int = 3
    task_max_children: int = 10
    task_lease_ms: int = 15 * 60 * 1000
    backdate_window_ms: int = DEFAULT_BACKDATE_WINDOW_MS
    # Reminders for unclaimed tasks and loop guards (issue 20, tasks/guards.py).
    claim_timeout_ms: int = 10 * 60 * 1000
    max_reminders: int = 3
    thread_budget: int = 60
    pair_budget: int = 30
    pair_window_ms: int = 10 * 60 * 1000
    humans: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        p = "MEMPALACE_LOGSTREAM_"
        return cls(
            db=env.get("LOGSTREAM_DB") or env.get(p + "DB") or None,
            palace=env.get("MEMPALACE_PALACE_PATH") or None,
            max_body_bytes=_int(env, p + "MAX_BODY_BYTES", 256 * 1024),
            max_artifact_bytes=_int(env, p + "MAX_ARTIFACT_BYTES", 4 * 1024 * 1024),
            hub_timeout_s=_seconds(env, "LOGSTREAM_HUB_TIMEOUT", 30.0),
            task_max_depth=_bounded(env, p + "TASK_MAX_DEPTH", 3, 1, 100),
            task_max_children=_bounded(env, p + "TASK_MAX_CHILDREN", 10, 1, 100_000),
            task_lease_ms=_lease_ms(env, p + "TASK_LEASE_MS", 15 * 60 * 1000),
            backdate_window_ms=_bounded(
                env, p + "BACKDATE_WINDOW_MS", DEFAULT_BACKDATE_WINDOW_MS, 0, MAX_BACKDATE_WINDOW_MS
            ),
            claim_timeout_ms=_bounded(env, p + "CLAIM_TIMEOUT_MS", 600_000, 0, 7 * 86_400_000),
            max_reminders=_bounded(env, p + "MAX_REMINDERS", 3, 0, 20),
            thread_budget=_bounded(env, p + "THREAD_BUDGET", 60, 1, 100_000),
            pair_budget=_bounded(env, p + "PAIR_BUDGET", 30, 1, 100_000),
            pair_window_ms=_bounded(env, p + "PAIR_WINDOW_MS", 600_000, 1_000, 7 * 86_400_000),
            humans=tuple(n.strip() for n in env.get(p + "HUMANS", "").split(",") if n.strip()),
        )

    def task_settings(self) -> "TaskSettings | None":
        """The task lifecycle's limits (RFC 0007): delegation depth and breadth, lease; None
        when each is its default, which the store takes as `TaskSettings()` (the same values:
        tests/test_cli_fast_writes.py), so that a write that moves no task never builds
        them (issue 25)."""
        if all(getattr(self, name) == _DEFAULTS[name] for name in _TASK_FIELDS):
            return None
        return self.all_task_settings()

    def all_task_settings(self) -> "TaskSettings":
        """`task_settings()`, built even when each is its default."""
        from mempalace_logstream.tasks import TaskSettings

        return TaskSettings(
            max_depth=self.task_max_depth,
            max_children=self.task_max_children,
            lease_ms=self.task_lease_ms,
            claim_timeout_ms=self.claim_timeout_ms,
            max_reminders=self.max_reminders,
            thread_budget=self.thread_budget,
            pair_budget=self.pair_budget,
            pair_window_ms=self.pair_window_ms,
            humans=self.humans,
        )


# The settings `task_settings` passes on, and their defaults.
_TASK_FIELDS = (
    "task_max_depth",
    "task_max_children",
    "task_lease_ms",
    "claim_timeout_ms",
    "max_reminders",
    "thread_budget",
    "pair_budget",
    "pair_window_ms",
    "humans",
)
_DEFAULTS = Settings._field_defaults


def palace_dir(palace: str | None) -> "Path":
    from pathlib import Path  # here: the hook paths resolve the log without pathlib

    return Path(palace_path(palace))


def palace_path(palace: str | None) -> str:
    """The palace directory (`palace_dir`) as a str: the flag or env value, else the default,
    `~` expanded with `os.path` (the lean paths open a log without importing pathlib)."""
    return os.path.expanduser(palace or DEFAULT_PALACE)


def resolve_db(db: str | None, palace: str | None) -> str:
    """`--db URL` wins, else `<palace>/logstream.sqlite3` (palace from flag, env or default);
    a path is made absolute with its links resolved."""
    if db:
        return db if "://" in db else f"sqlite:///{os.path.realpath(os.path.expanduser(db))}"
    return f"sqlite:///{os.path.realpath(os.path.join(palace_path(palace), DB_FILENAME))}"
