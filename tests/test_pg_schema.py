"""Who creates a log in a PostgreSQL database (issue 18, item 18): only writes, `serve` and
`logstream migrate`. A read on a database (schema) that holds no log refuses, naming it and
`logstream migrate`, and leaves it as it was; a `search_path` naming a schema that does not
exist says so, for reads and writes alike. The rule SQLite files already follow.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from mempalace_logstream import LogStore, errors
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.pg


def _tables(pg_database: str, schema: str) -> int:
    eng = sa.create_engine(pg_database, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as conn:
            query = "SELECT count(*) FROM information_schema.tables WHERE table_schema = :s"
            return int(conn.execute(sa.text(query), {"s": schema}).scalar() or 0)
    finally:
        eng.dispose()


def _schema_of(pg_url: str) -> str:
    return pg_url.rsplit("%3D", 1)[1]


@pytest.fixture
def missing_schema_url(pg_database: str) -> Iterator[tuple[str, str]]:
    name = f"nope_{secrets.token_hex(4)}"
    sep = "&" if "?" in pg_database else "?"
    yield f"{pg_database}{sep}options={quote('-csearch_path=' + name)}", name


READS = [
    ("list",),
    ("list", "--json"),
    ("get", "evt_20261201T000000_00000000000000000001"),
    ("wait", "--timeout-ms", "0"),
    ("stats",),
    ("task", "list"),
]


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_a_read_command_refuses_a_database_without_a_log_and_creates_nothing(
    pg_database: str, pg_url: str, command: tuple[str, ...]
) -> None:
    schema = _schema_of(pg_url)
    out = run_cli(*command, "--db", pg_url)
    err = out.stderr.decode()
    assert out.returncode == 1, (out.stdout, err)
    assert "no log in" in err and "logstream migrate" in err and schema in err, err
    assert "Traceback" not in err
    assert _tables(pg_database, schema) == 0


def test_a_reader_in_process_refuses_and_a_writer_creates(pg_database: str, pg_url: str) -> None:
    schema = _schema_of(pg_url)
    with pytest.raises(errors.NotFoundError, match="logstream migrate") as info:
        LogStore.open(pg_url, create=False)
    assert info.value.field == "db" and schema in info.value.message
    assert _tables(pg_database, schema) == 0
    with LogStore.open(pg_url) as store:  # a writer (create=True, the default) makes the log
        store.event_append(type="note", stream="s", room="r", from_agent="a")
    with LogStore.open(pg_url, create=False) as reader:
        assert reader.stats()["events"] == 1


def test_migrate_and_a_write_create_the_log_then_reads_open_it(pg_url: str) -> None:
    made = run_cli("migrate", "--db", pg_url)
    assert made.returncode == 0, made.stderr.decode()
    listed = run_cli("list", "--db", pg_url, "--json")
    assert listed.returncode == 0, listed.stderr.decode()
    assert b'"count": 0' in listed.stdout


def test_an_append_creates_the_log_in_an_empty_schema(pg_database: str, pg_url: str) -> None:
    args = ("--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")
    put = run_cli("append", *args, "--db", pg_url)
    assert put.returncode == 0, put.stderr.decode()
    assert _tables(pg_database, _schema_of(pg_url)) > 0


def test_serve_creates_the_log_in_an_empty_schema(pg_database: str, pg_url: str, tmp_path) -> None:
    """The hub writes (appends, sync): like `append`, it makes the log it is pointed at."""
    palace = tmp_path / "palace"
    palace.mkdir()
    cmd = [sys.executable, "-m", "mempalace_logstream", "serve", "--port", "0"]
    cmd += ["--db", pg_url, "--palace", str(palace), "--sync-interval", "0"]
    env = {"PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            assert "listening on" in proc.stdout.readline().decode()
            assert _tables(pg_database, _schema_of(pg_url)) > 0
        finally:
            proc.terminate()
            proc.wait(30)


@pytest.mark.parametrize(
    "command",
    [
        ("list",),
        ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a"),
        ("migrate",),
    ],
    ids=lambda c: c[0],
)
def test_a_search_path_naming_a_missing_schema_says_so(
    pg_database: str, missing_schema_url: tuple[str, str], command: tuple[str, ...]
) -> None:
    url, name = missing_schema_url
    public = _tables(pg_database, "public")
    out = run_cli(*command, "--db", url)
    err = out.stderr.decode()
    assert out.returncode == 1, (out.stdout, err)
    assert "search_path" in err and name in err and "does not exist" in err, err
    assert "Traceback" not in err
    assert _tables(pg_database, "public") == public
