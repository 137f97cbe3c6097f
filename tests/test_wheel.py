"""The installed wheel carries Alembic's scripts (they live in `migrations/` at the top of the
repository), so a `pip install` still migrates a fresh file. Built and installed for real."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

CHECK = """
import sqlite3, sys
import mempalace_logstream
from mempalace_logstream import LogStore, migrate
from mempalace_logstream.schema import SCHEMA_HEAD
assert mempalace_logstream.__file__.startswith(sys.argv[1]), mempalace_logstream.__file__
assert str(migrate.MIGRATIONS_DIR).startswith(sys.argv[1]), migrate.MIGRATIONS_DIR
with LogStore.open(sys.argv[2]) as store:
    store.event_append(type="note", stream="s", room="r", from_agent="a")
db = sqlite3.connect(sys.argv[2])
print(db.execute("SELECT version_num FROM alembic_version").fetchone()[0], SCHEMA_HEAD)
"""


def test_an_installed_wheel_migrates_a_fresh_file(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("mempalace_logstream-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "mempalace_logstream/migrations/env.py" in names
    assert any(n.startswith("mempalace_logstream/migrations/versions/0001") for n in names)
    for asset in ("index.html", "login.html", "app.js", "style.css"):  # the dashboard
        assert f"mempalace_logstream/http/dashboard/{asset}" in names, asset
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # PYTHONPATH comes before site-packages, so the installed copy wins over this checkout;
    # the dependencies come from the test environment. Run outside the repository.
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(site), str(tmp_path / "fresh.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    found, head = done.stdout.split()
    assert found == head
