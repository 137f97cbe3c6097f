"""Shared fixtures: a manual clock, stores on real SQLite files and on a real PostgreSQL.

PostgreSQL tests use a database made for this run (one schema per test) and skip only when no
server is reachable and LOGSTREAM_REQUIRE_PG is unset; CI sets it so they cannot skip there.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# A suite started from a background job of a shell without job control (`pytest … &`, some
# CI runners) inherits SIGINT ignored, and an ignored signal stays ignored across exec: every
# process a test starts would then shrug off the Ctrl-C the test sends (to end a hub, a watch,
# a waiting CLI) and wait out its deadline instead. Handled here, it is reset to the default
# in each child at exec, as in an interactive shell.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

for _key in list(os.environ):
    if _key.startswith("MEMPALACE_LOGSTREAM_") or _key in ("LOGSTREAM_DB", "MEMPALACE_PALACE_PATH"):
        del os.environ[_key]

settings.register_profile(
    "dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get(
    "LOGSTREAM_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package, the tests and the benches to bytecode once, in the main process.

    CI's environment sets PYTHONDONTWRITEBYTECODE, so no process writes a `.pyc`, and every
    interpreter a test starts (CLI calls, hubs, workers, benches: thousands in a run) would
    compile from source each module it imports: 0.05-0.2 s of CPU a process, a fifth of the
    CPU of a subprocess-heavy test. Bytecode on disk is read even under that variable, and a
    stale file is recompiled by its source's mtime and size, as with any Python install."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller did it
        return
    import compileall

    for folder in ("mempalace_logstream", "tests", "bench"):
        compileall.compile_dir(REPO / folder, quiet=1)


def skip_unless_ci(reason: str) -> None:
    """Skip a test this machine cannot run, except under `.ci/run` (LOGSTREAM_CI=1), where
    the machine is known to have what it needs and a skip would hide a lost test: fail."""
    if os.environ.get("LOGSTREAM_CI"):
        pytest.fail(f"LOGSTREAM_CI is set but this test cannot run here: {reason}")
    pytest.skip(reason)


class ManualClock:
    """A wall clock the test moves by hand, backwards included."""

    def __init__(self, ms: int = 1_780_000_000_000) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# ----------------------------------------------------------------------------- PostgreSQL


def _pg_reachable() -> str | None:
    import sqlalchemy as sa

    try:
        eng = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with eng.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        eng.dispose()
        return None
    except Exception as exc:  # any failure means "no server here"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database made for this test session, dropped afterwards."""
    import sqlalchemy as sa

    problem = _pg_reachable()
    if problem is not None:
        if os.environ.get("LOGSTREAM_REQUIRE_PG"):
            pytest.fail(f"LOGSTREAM_REQUIRE_PG is set but PostgreSQL is unreachable: {problem}")
        pytest.skip(f"no PostgreSQL reachable at {PG_ADMIN_URL} ({problem})")
    name = f"logstream_test_{os.getpid()}_{secrets.token_hex(3)}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    admin.dispose()
    try:
        yield url
    finally:
        drop_database_later(name)


# A DROP DATABASE waits for a checkpoint (PostgreSQL 15: RequestCheckpoint(IMMEDIATE|WAIT)),
# which after a suite that made thousands of tables fsyncs them all: 20-30 s in which each
# worker, its tests done, would wait at the very end of the run. A process of its own drops the
# database instead and nothing waits for it.
_DROP = """
import sys
import psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % sys.argv[2])
"""


def drop_database_later(name: str) -> None:
    """Drop the database `name` (of the admin URL's server) from a process of its own, in the
    background of a shell that exits at once (so nothing is left to wait for here)."""
    import sqlalchemy as sa

    url = sa.make_url(PG_ADMIN_URL).set(drivername="postgresql")
    url_text = url.render_as_string(hide_password=False)
    subprocess.run(
        ["sh", "-c", '"$0" -c "$1" "$2" "$3" &', sys.executable, _DROP, url_text, name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        check=True,
        timeout=30,
    )


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A fresh schema in the session database, as a URL whose search_path points at it."""
    return new_pg_schema(pg_database)


def new_pg_schema(pg_database: str) -> str:
    """A URL whose search_path points at a new schema of `pg_database`."""
    import sqlalchemy as sa

    schema = f"t_{secrets.token_hex(6)}"
    eng = sa.create_engine(pg_database, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    sep = "&" if "?" in pg_database else "?"
    return f"{pg_database}{sep}options=-csearch_path%3D{schema}"


# ----------------------------------------------------------------------------- stores


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.pg)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'logstream.sqlite3'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def log_url(db_url: str, request: pytest.FixtureRequest) -> str:
    """`db_url` made an empty log at the schema head, as its first open would make it, from a
    template migrated once per worker instead of by Alembic per test: a SQLite file is a copy
    (`tests/logfiles.py`), a PostgreSQL schema gets the template's `pg_dump` replayed."""
    from tests.logfiles import new_log

    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        if not path.exists():
            new_log(path)
    elif _SEARCH_PATH in db_url:
        fill_pg_schema(
            db_url, request.getfixturevalue("pg_database"), request.getfixturevalue("pg_template")
        )
    return db_url


def fill_pg_schema(url: str, pg_database: str, template: tuple[str, str] | None) -> None:
    """Make the empty schema of `url` (a `new_pg_schema` URL) a log at the schema head by
    replaying `template` (the `pg_template` fixture); with None, the first open migrates it."""
    if template is None:
        return
    import psycopg

    name, sql = template
    schema = url.rsplit(_SEARCH_PATH, 1)[1]
    with psycopg.connect(_libpq(pg_database)) as conn:
        conn.execute(sql.replace(name, schema).encode())


def new_pg_log(pg_database: str, template: tuple[str, str] | None) -> str:
    """A URL whose search_path points at a new schema of `pg_database` holding an empty log at
    the schema head (a replay of `template`, as `log_url` makes one)."""
    url = new_pg_schema(pg_database)
    fill_pg_schema(url, pg_database, template)
    return url


_SEARCH_PATH = "options=-csearch_path%3D"


def _libpq(url: str) -> str:
    import sqlalchemy as sa

    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_template(pg_database: str) -> tuple[str, str] | None:
    """(name, SQL) of a schema migrated once per worker: `pg_dump --inserts` of it (tables,
    triggers, functions, the alembic_version row), its own CREATE SCHEMA left out; None where
    there is no pg_dump (each test's first open then migrates its schema)."""
    import shutil

    from mempalace_logstream import migrate
    from mempalace_logstream.backends import engine as engine_mod

    if shutil.which("pg_dump") is None:
        return None
    url = new_pg_schema(pg_database)
    name = url.rsplit(_SEARCH_PATH, 1)[1]
    eng = engine_mod.create_engine(url)
    migrate.upgrade(eng)
    eng.dispose()
    dump = subprocess.run(
        ["pg_dump", "--schema", name, "--inserts", "--no-owner", "--no-privileges"]
        + [_libpq(pg_database)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    skip = ("--", "\\", f"CREATE SCHEMA {name};")
    return name, "\n".join(line for line in dump.splitlines() if not line.startswith(skip))


@pytest.fixture
def store(log_url: str, clock: ManualClock):
    from mempalace_logstream import LogStore

    s = LogStore.open(log_url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path):
    from mempalace_logstream import LogStore
    from tests.logfiles import new_log

    s = LogStore.open(new_log(tmp_path / "logstream.sqlite3"))
    yield s
    s.close()


def run_cli(
    *args: str, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m mempalace_logstream` as a real subprocess, bytes in and out."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mempalace_logstream", *args],
        input=input,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


# ----------------------------------------------------------------------------- group commit


def batched(store: Any, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run `calls` in threads so that they all land in ONE group commit; return results."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    with store.pipeline._commit_lock:  # hold the leader seat until every caller has queued
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(store.pipeline._queue) < len(calls):
            assert time.monotonic() < deadline, "callers did not queue"
            time.sleep(0.001)
    for t in threads:
        t.join(10)
    return results


# ----------------------------------------------------------------------------- PG count

_PG_OUTCOMES: dict[str, int] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reaches PostgreSQL (through `pg_database`) carries the `pg` marker."""
    for item in items:
        if "pg_database" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.pg)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "pg" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _PG_OUTCOMES[report.outcome] = _PG_OUTCOMES.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line that says how many PostgreSQL tests ran (CI must show no skips there)."""
    if _PG_OUTCOMES:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(_PG_OUTCOMES.items()))
        terminalreporter.write_line(f"PostgreSQL tests (marker pg): {counts}")
