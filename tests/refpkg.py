"""Run the reference implementation (PyPI ``mempalace==3.11.0``) beside ours.

The reference is never imported into our interpreter and never installed into our
environment: it lives in a virtualenv of its own and is driven through subprocesses.
This module is plain Python (pytest is imported lazily) so that both ``tests/`` and
``bench/`` can use it::

    from tests import refpkg          # or: import refpkg (with tests/ on sys.path)

    py = refpkg.ref_python()          # builds the venv on first use, reuses it after
    refpkg.run_ref("import mempalace.logstream as m; print(m.MAX_LIST_LIMIT)")
    db = refpkg.build_reference_db(tmp_path / "palace", n_events=30)

Two venvs
---------
``ref_python()``
    ``mempalace==3.11.0`` installed with ``pip install --no-deps`` and nothing else.
    That is enough for ``mempalace.logstream``, ``.hlc``, ``.replica``, ``.logsync``,
    ``.transport``, ``.tasks`` and the whole ``mempalace logstream ...`` /
    ``mempalace artifact ...`` CLI, including ``logstream sync --peer`` (the client half
    uses urllib only). Location: ``$LOGSTREAM_REF_VENV`` or
    ``~/.cache/mempalace-logstream/refvenv-3.11.0``. About 10 s to build.
``ref_full_python()``
    The full ``pip install mempalace==3.11.0`` (chromadb, onnxruntime, ...: about 75 s
    and 525 MB here). Needed only for the reference hub (``mempalace serve``), whose
    module ``mempalace.mcp_server`` imports ``chromadb`` (and ``numpy``) at import time.
    Location: ``$LOGSTREAM_REF_FULL_VENV`` or
    ``~/.cache/mempalace-logstream/refvenv-full-3.11.0``. Use ``ref_hub()``.

Both are created under an exclusive ``fcntl`` lock on ``<venv>.lock`` and marked
complete by a ``.refpkg-complete`` file written last; a directory without the marker
(a crashed build) is deleted and rebuilt. Failure to build (no network, no ensurepip)
raises ``ReferenceUnavailable``; the failure is remembered for the rest of the process so
a test session does not retry pip for every test. ``require_ref_or_skip()`` turns it
into ``pytest.skip`` unless ``LOGSTREAM_REQUIRE_REF`` is set (CI), where it re-raises.

Reference CLI syntax (3.11.0, argparse)
---------------------------------------
The palace is chosen by the *global* ``--palace DIR`` flag, which must come **before**
the subcommand (``mempalace --palace DIR logstream list``); the ``logstream`` and
``artifact`` subparsers reject ``--palace``. Without the flag the palace is
``$MEMPALACE_PALACE_PATH`` (aliases ``$MEMPALACE_PALACE``, ``$MEMPAL_PALACE_PATH``), else
the config file's palace (``~/.mempalace/palace`` or the XDG ``~/.config/mempalace/palace``).
The database is ``<palace>/logstream.sqlite3``; ``replica.json`` sits beside it.
``serve`` is the exception: it has its *own* ``--palace`` whose default (None) overwrites
the global one, so it is ``mempalace serve --palace DIR`` (or the env var).

    mempalace --palace P logstream append --type T --stream S --room R --from-agent A
        [--to-agent X|'*'] [--topic TOPIC] [--correlation-id C] [--branch B]
        [--base-commit H] [--status ST] [--body TEXT | --body-file F|-]
        [--metadata JSON_OBJECT] [--artifact-id ID]... [--json]
    mempalace --palace P logstream list [FILTERS] [--before-event-id ID]
        [--order asc|desc] [--limit N (default 50)] [--json]
    mempalace --palace P logstream wait [FILTERS] [--timeout-ms MS (default 60000)]
        [--limit N] [--json]                          # exit 2 on timeout
    mempalace --palace P logstream watch [--agent ID] [--stream S]... [--room R]...
        [--topic T]... [--type T]... [--status ST]... [--to-agent X]... [--from-agent A]...
        [--exclude-from-agent A]... [--correlation-id C]... [--since-event-id ID]
        [--state-file F] [--from-start] [--follow] [--idle-exit-ms MS]
        [--poll-timeout-ms MS] [--limit N] [--json]
    mempalace --palace P logstream ack EVENT_ID --from-agent A [--status ST]
        [--topic T] [--body TEXT] [--json]
    mempalace --palace P logstream sync [--peer URL [--token T]] [--json]
        # without --peer: every peer of <palace>/peers.json; exit 1 if any peer errored
    mempalace --palace P artifact put --kind patch|file|log|json|note --created-by A
        [--content TEXT | --file F|-] [--metadata JSON] [--json]   # no content arg: stdin
    mempalace --palace P artifact get ART_ID [--out FILE] [--json]  # raw bytes on stdout
    mempalace serve --palace P [--host 127.0.0.1] [--port 8765] [--token T] [--read-only]
        [--allow-insecure] [--tls-cert C --tls-key K]

``FILTERS`` (list/wait) are single-valued: ``--stream --room --topic --type --to-agent
--from-agent --correlation-id --status --since-event-id --since-created-at``.
``--json`` output: append/ack print the event object; list prints ``{events, count}``;
wait prints ``{timed_out, events, count}``; sync prints a list of per-peer stats. Errors
print ``Error: <msg>`` on stderr (or ``{"error": msg}`` on stdout with ``--json``) and
exit 1; argparse usage errors exit 2.

Older schema generations
------------------------
See ``build_reference_db`` and ``docs/reference-schema.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REF_VERSION = "3.11.0"
REF_REQUIREMENT = f"mempalace=={REF_VERSION}"
_CACHE_ROOT = Path.home() / ".cache" / "mempalace-logstream"
_MARKER = ".refpkg-complete"

GENERATIONS = ("newest", "pre_topic", "pre_replication")

# Column sets per generation, in table order (what PRAGMA table_info returns).
EVENT_COLUMNS = {
    "newest": (
        "id",
        "type",
        "stream",
        "room",
        "topic",
        "from_agent",
        "to_agent",
        "correlation_id",
        "branch",
        "base_commit",
        "status",
        "body",
        "created_at",
        "metadata_json",
        "origin_replica",
        "origin_seq",
        "hlc",
    ),
    "pre_topic": (
        "id",
        "type",
        "stream",
        "room",
        "from_agent",
        "to_agent",
        "correlation_id",
        "branch",
        "base_commit",
        "status",
        "body",
        "created_at",
        "metadata_json",
        "origin_replica",
        "origin_seq",
        "hlc",
    ),
    "pre_replication": (
        "id",
        "type",
        "stream",
        "room",
        "from_agent",
        "to_agent",
        "correlation_id",
        "branch",
        "base_commit",
        "status",
        "body",
        "created_at",
        "metadata_json",
    ),
}
ARTIFACT_COLUMNS = {
    "newest": (
        "id",
        "kind",
        "sha256",
        "size_bytes",
        "content",
        "created_by",
        "created_at",
        "metadata_json",
        "origin_replica",
    ),
    "pre_topic": (
        "id",
        "kind",
        "sha256",
        "size_bytes",
        "content",
        "created_by",
        "created_at",
        "metadata_json",
        "origin_replica",
    ),
    "pre_replication": (
        "id",
        "kind",
        "sha256",
        "size_bytes",
        "content",
        "created_by",
        "created_at",
        "metadata_json",
    ),
}
# Secondary (non-autoindex) index names per generation.
EVENT_INDEXES = {
    "newest": (
        "events_stream_created_idx",
        "events_correlation_idx",
        "events_to_agent_idx",
        "events_type_idx",
        "events_topic_created_idx",
        "events_origin_seq_idx",
        "events_hlc_idx",
    ),
    "pre_topic": (
        "events_stream_created_idx",
        "events_correlation_idx",
        "events_to_agent_idx",
        "events_type_idx",
        "events_origin_seq_idx",
        "events_hlc_idx",
    ),
    "pre_replication": (
        "events_stream_created_idx",
        "events_correlation_idx",
        "events_to_agent_idx",
        "events_type_idx",
    ),
}


class ReferenceUnavailable(RuntimeError):
    """The reference venv could not be built or used (reason in the message)."""


class RefError(subprocess.CalledProcessError):
    """A reference subprocess exited non-zero; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        err = (
            self.stderr
            if isinstance(self.stderr, str)
            else (self.stderr or b"").decode("utf-8", "replace")
        )
        return f"{super().__str__()}\n--- stderr ---\n{err[-4000:]}"


# ── venvs ──────────────────────────────────────────────────────────────────

_failures: dict[str, ReferenceUnavailable] = {}


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment minus anything that would leak our packages into theirs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
        and not k.startswith("MEMPALACE_")
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    if extra:
        env.update(extra)
    return env


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _ensure_venv(venv: Path, pip_args: list[str], probe: str, timeout: float) -> Path:
    key = str(venv)
    if key in _failures:
        raise _failures[key]
    py = _venv_python(venv)
    if (venv / _MARKER).exists() and py.exists():
        return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / (venv.name + ".lock")
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if (venv / _MARKER).exists() and py.exists():
                return py
            if venv.exists():
                shutil.rmtree(venv)  # a half-built venv from a crashed run
            env = _clean_env()
            steps = [
                [sys.executable, "-m", "venv", str(venv)],
                [str(py), "-m", "pip", "install", "-q", *pip_args],
                [str(py), "-c", probe],
            ]
            for cmd in steps:
                try:
                    proc = subprocess.run(
                        cmd, env=env, capture_output=True, text=True, timeout=timeout
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    reason = f"{' '.join(cmd[:4])} failed: {exc}"
                    break
                if proc.returncode != 0:
                    tail = "\n".join(
                        line
                        for line in (proc.stderr or proc.stdout).strip().splitlines()
                        if not line.startswith("WARNING: Location")
                    )[-1500:]
                    reason = f"`{' '.join(cmd[:4])} ...` exited {proc.returncode}: {tail}"
                    break
            else:
                (venv / _MARKER).write_text(f"{' '.join(pip_args)}\n", encoding="utf-8")
                return py
            shutil.rmtree(venv, ignore_errors=True)
            exc = ReferenceUnavailable(f"cannot build reference venv at {venv}: {reason}")
            _failures[key] = exc
            raise exc
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def ref_venv_dir() -> Path:
    return Path(
        os.environ.get("LOGSTREAM_REF_VENV") or _CACHE_ROOT / f"refvenv-{REF_VERSION}"
    ).expanduser()


def ref_full_venv_dir() -> Path:
    return Path(
        os.environ.get("LOGSTREAM_REF_FULL_VENV") or _CACHE_ROOT / f"refvenv-full-{REF_VERSION}"
    ).expanduser()


def ref_python() -> Path:
    """Python of the ``--no-deps`` reference venv (built on first call)."""
    return _ensure_venv(
        ref_venv_dir(),
        ["--no-deps", REF_REQUIREMENT],
        "import mempalace.logstream, mempalace.hlc, mempalace.replica, mempalace.logsync,"
        " mempalace.tasks, mempalace.cli",
        timeout=600,
    )


def ref_full_python() -> Path:
    """Python of the full reference install (needed for ``mempalace serve``)."""
    return _ensure_venv(
        ref_full_venv_dir(),
        [REF_REQUIREMENT],
        "import mempalace.mcp_server",
        timeout=1200,
    )


def require_ref_or_skip(full: bool = False) -> Path:
    """For tests: the reference python, or ``pytest.skip`` with the reason.

    When ``LOGSTREAM_REQUIRE_REF`` is set (CI) the ``ReferenceUnavailable`` is re-raised,
    so a missing reference fails the run instead of silently skipping.
    """
    try:
        return ref_full_python() if full else ref_python()
    except ReferenceUnavailable as exc:
        if os.environ.get("LOGSTREAM_REQUIRE_REF"):
            raise
        import pytest

        pytest.skip(f"reference mempalace {REF_VERSION} unavailable: {exc}")


# ── running things in the reference venv ────────────────────────────────────


def run_ref(
    code: str,
    *args: Any,
    timeout: float = 120,
    input: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    full: bool = False,
) -> subprocess.CompletedProcess:
    """Run a Python snippet in the reference venv (``python -c code *args``).

    ``sys.argv[1:]`` are ``args`` as strings. Text mode, UTF-8, output captured. Raises
    ``RefError`` (a ``CalledProcessError`` whose message carries stderr) on non-zero exit.
    """
    py = ref_full_python() if full else ref_python()
    cmd = [str(py), "-c", code, *map(str, args)]
    proc = subprocess.run(
        cmd,
        input=input,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        env=_clean_env(env),
        cwd=cwd,
    )
    if proc.returncode != 0:
        raise RefError(proc.returncode, cmd[:2] + ["<code>", *cmd[3:]], proc.stdout, proc.stderr)
    return proc


def start_ref(code: str, *args: Any, **popen: Any) -> subprocess.Popen:
    """Start a Python snippet in the reference venv (``python -c code *args``) and return the
    running process, in the environment ``run_ref`` gives (``popen``: ``subprocess.Popen``
    keywords such as the pipes). For a process that answers commands while the caller
    measures other things between them (bench/ref_worker.py)."""
    return subprocess.Popen(
        [str(ref_python()), "-c", code, *map(str, args)], env=_clean_env(), **popen
    )


def run_ref_json(code: str, *args: Any, **kwargs: Any) -> Any:
    """``run_ref`` and decode the last non-empty stdout line as JSON."""
    out = run_ref(code, *args, **kwargs).stdout.strip().splitlines()
    return json.loads(out[-1]) if out else None


def ref_cli(
    *argv: str,
    palace: str | os.PathLike | None = None,
    input_bytes: bytes | None = None,
    timeout: float = 120,
    check: bool = False,
    env: dict[str, str] | None = None,
    home: str | os.PathLike | None = None,
    full: bool = False,
) -> subprocess.CompletedProcess:
    """Run the reference ``mempalace`` console script; bytes in, bytes out.

    ``palace`` becomes the global ``--palace`` flag placed *before* ``argv`` (and
    ``MEMPALACE_PALACE_PATH``), which is how every ``logstream``/``artifact`` subcommand
    selects its database; for ``serve`` pass ``"serve", "--palace", P`` yourself. Example::

        ref_cli("logstream", "list", "--json", "--limit", "500", palace=p)

    Exit codes are part of the behaviour under test, so ``check`` defaults to False
    (``wait`` exits 2 on timeout, errors exit 1). ``home`` sets ``HOME`` for commands
    that write under ``~/.mempalace`` (``watch --agent``'s default state file).
    See the module docstring for the full syntax.
    """
    py = ref_full_python() if full else ref_python()
    cmd = [str(py.parent / "mempalace")]
    extra = dict(env or {})
    if palace is not None:
        cmd += ["--palace", str(palace)]
        extra.setdefault("MEMPALACE_PALACE_PATH", str(palace))
    if home is not None:
        extra["HOME"] = str(home)
    cmd += [str(a) for a in argv]
    proc = subprocess.run(
        cmd, input=input_bytes, capture_output=True, timeout=timeout, env=_clean_env(extra)
    )
    if check and proc.returncode != 0:
        raise RefError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def ref_cli_json(*argv: str, **kwargs: Any) -> Any:
    """``ref_cli(*argv, "--json")`` decoded (any exit code; errors are ``{"error": ...}``)."""
    proc = ref_cli(*argv, "--json", **kwargs)
    return json.loads(proc.stdout.decode("utf-8"))


# ── reference hub (needs the full install) ──────────────────────────────────


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def ref_hub(
    palace: str | os.PathLike,
    *,
    token: str = "ref-token",
    sync_interval: float = 0,
    startup_timeout: float = 60,
    env: dict[str, str] | None = None,
):
    """Run ``mempalace serve --palace P --port <free> --token T`` from the full venv.

    Yields the base URL (``http://127.0.0.1:<port>``). ``HOME`` points to a temporary
    directory (serve writes ``~/.mempalace/server``, ``~/.config/mempalace``), and
    ``MEMPALACE_SYNC_INTERVAL`` defaults to 0 (the background peer loop is off; pass a
    number of seconds to turn it on). Routes: ``/healthz`` (no auth), ``/sync/*`` and
    ``/logstream/stream`` (``Authorization: Bearer <token>``).
    """
    py = ref_full_python()
    port = _free_port()
    home = tempfile.mkdtemp(prefix="refhub-home-")
    extra = {"HOME": home, "MEMPALACE_SYNC_INTERVAL": str(sync_interval), **(env or {})}
    cmd = [
        str(py.parent / "mempalace"),
        "serve",
        "--palace",
        str(palace),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--token",
        token,
    ]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=_clean_env(extra), start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise ReferenceUnavailable(
                    f"reference hub exited {proc.returncode}: "
                    f"{log.read().decode('utf-8', 'replace')[-2000:]}"
                )
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ReferenceUnavailable(f"reference hub did not answer on {url}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def hub_get(url: str, path: str, token: str = "ref-token", **params: Any) -> Any:
    """GET ``url+path?params`` with the bearer token; JSON-decoded body (raises on 4xx)."""
    from urllib.parse import urlencode

    full = url.rstrip("/") + path + (("?" + urlencode(params)) if params else "")
    req = urllib.request.Request(full, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read().decode("utf-8"))


# ── reference databases ─────────────────────────────────────────────────────

# Runs inside the reference venv. argv: params-json-path, output-json-path.
_BUILD_SCRIPT = r'''
import json, os, shutil, sqlite3, sys, secrets
from pathlib import Path
from mempalace.logstream import Logstream

p = json.load(open(sys.argv[1], encoding="utf-8"))
palace = Path(p["palace"]); n = p["n_events"]; gen = p["generation"]
db = palace / "logstream.sqlite3"
with_topic = gen == "newest"
ls = Logstream(db_path=str(db))
if p["fast"]:
    ls._conn().execute("PRAGMA synchronous=OFF")

def topic(t):
    return t if with_topic else None

PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old = 1\n+new = 2\n"
first = None
i = 0
while i < n:
    if i == 0:
        first = ls.append_event(
            type="task.request", stream="project/alpha", room="delegation",
            topic=topic("auth-v2"), from_agent="codex-mac", to_agent="claude-win",
            correlation_id="task_fix_auth_0a1b2c", branch="main", base_commit="a1b2c3d4",
            status="open",
            body="Goal:\n- fix the login \u2713 caf\u00e9\r\nDefinition of done:\n- tests pass\n",
            metadata={"priority": 2, "labels": ["auth", "bug"], "nested": {"b": 1, "a": [1, 2]},
                      "none": None, "\u00fc": "\u00df"},
        )
    elif i == 1:
        ls.append_event(type="agent.status", stream="project/alpha", room="presence",
                        from_agent="claude-win", to_agent="*", body="")
    elif i == 2:
        ls.ack_event(first["id"], from_agent="claude-win", status="claimed", body="on it")
    elif i == 3 and p["with_artifacts"]:
        ls.submit_patch(content=PATCH, from_agent="claude-win", stream="project/alpha",
                        to_agent="codex-mac", correlation_id="task_fix_auth_0a1b2c",
                        branch="fix/auth", base_commit="a1b2c3d4", body="patch attached",
                        metadata={"files": 1}, topic=topic("auth-v2"))
    elif i == 4 and p["with_artifacts"]:
        note = ls.put_artifact(kind="note", content="hello\r\nworld \u2713 no newline",
                               created_by="codex-mac", metadata={"lang": "en"})
        log = ls.put_artifact(kind="log", content="line 1\nline 2\n", created_by="codex-mac")
        ls.append_event(type="note.added", stream="project/alpha", room="notes",
                        from_agent="codex-mac", to_agent="*",
                        artifact_ids=[note["id"], log["id"]], body="two artifacts")
    else:
        types = ["task.request", "task.progress", "chat.message", "status.update", "task.done"]
        tos = [None, "*", "agent-a", "agent-b"]
        statuses = [None, "open", "claimed", "ready", "applied", "blocked", "failed", "superseded"]
        topics = [None, "t1", "t2"]
        ls.append_event(
            type=types[i % 5], stream=["project/alpha", "project/beta", "ops"][i % 3],
            room=["delegation", "chat"][i % 2], topic=topic(topics[i % 3]),
            from_agent=["agent-a", "agent-b", "agent-c"][i % 3], to_agent=tos[i % 4],
            correlation_id=(f"task_{i % 7}" if i % 2 else None), status=statuses[i % 8],
            body=f"event {i}", metadata=({"i": i} if i % 3 == 0 else None),
        )
    i += 1

def all_events(ls):
    out, cursor = [], None
    while True:
        page = ls.list_events(since_event_id=cursor, limit=500)
        if not page:
            return out
        out += page
        cursor = page[-1]["id"]

events = all_events(ls) if p["return_events"] else None
conn = ls._conn()
art_ids = [r[0] for r in conn.execute("SELECT id FROM artifacts ORDER BY rowid")]
artifacts = [ls.get_artifact(a) for a in art_ids]
replica_id = ls.replica_id
ls.close()

EV_OLD = {
    "pre_topic": """CREATE TABLE events (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, stream TEXT NOT NULL, room TEXT NOT NULL,
    from_agent TEXT NOT NULL, to_agent TEXT, correlation_id TEXT, branch TEXT,
    base_commit TEXT, status TEXT, body TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}', origin_replica TEXT, origin_seq INTEGER,
    hlc TEXT)""",
    "pre_replication": """CREATE TABLE events (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, stream TEXT NOT NULL, room TEXT NOT NULL,
    from_agent TEXT NOT NULL, to_agent TEXT, correlation_id TEXT, branch TEXT,
    base_commit TEXT, status TEXT, body TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}')""",
}
ART_OLD = """CREATE TABLE artifacts (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, sha256 TEXT NOT NULL, size_bytes INTEGER NOT NULL,
    content TEXT NOT NULL, created_by TEXT NOT NULL, created_at TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}')"""
BASE_IDX = [
    "CREATE INDEX events_stream_created_idx ON events(stream, created_at)",
    "CREATE INDEX events_correlation_idx ON events(correlation_id, created_at)",
    "CREATE INDEX events_to_agent_idx ON events(to_agent, created_at)",
    "CREATE INDEX events_type_idx ON events(type, created_at)",
]
REPL_IDX = [
    "CREATE UNIQUE INDEX events_origin_seq_idx ON events(origin_replica, origin_seq)",
    "CREATE INDEX events_hlc_idx ON events(hlc)",
]

def cols(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]

if gen != "newest":
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ALTER TABLE events RENAME TO _events_src")  # its indexes follow it
    conn.execute(EV_OLD[gen])
    keep = cols(conn, "events")
    cl = ", ".join(keep)
    conn.execute(
        f"INSERT INTO events (rowid, {cl}) SELECT rowid, {cl} FROM _events_src ORDER BY rowid")
    conn.execute("DROP TABLE _events_src")
    for sql in BASE_IDX + (REPL_IDX if gen == "pre_topic" else []):
        conn.execute(sql)
    if gen == "pre_replication":
        conn.execute("ALTER TABLE artifacts RENAME TO _artifacts_src")
        conn.execute(ART_OLD)
        acl = ", ".join(cols(conn, "artifacts"))
        conn.execute(f"INSERT INTO artifacts (rowid, {acl}) SELECT rowid, {acl}"
                     " FROM _artifacts_src ORDER BY rowid")
        conn.execute("DROP TABLE _artifacts_src")
        conn.execute("CREATE INDEX artifacts_sha256_idx ON artifacts(sha256)")
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    drop = {"topic"} if gen == "pre_topic" else {"topic", "origin_replica", "origin_seq", "hlc"}
    if events is not None:
        events = [{k: v for k, v in e.items() if k not in drop} for e in events]
    if gen == "pre_replication":
        artifacts = [{k: v for k, v in a.items() if k != "origin_replica"} for a in artifacts]
        (palace / "replica.json").unlink()
        replica_id = None
else:
    conn = sqlite3.connect(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()

migrated_events = migrated_replica_id = None
if gen != "newest" and p["with_migrated"] and p["return_events"]:
    # What the 3.11.0 reference itself shows after its open-time migration of this file,
    # done on a copy so the file under test stays in the old generation.
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="refmig-"))
    try:
        shutil.copy2(db, tmp / "logstream.sqlite3")
        if (palace / "replica.json").exists():
            shutil.copy2(palace / "replica.json", tmp / "replica.json")
        else:
            (tmp / "replica.json").write_text(json.dumps(
                {"replica_id": "rep_" + secrets.token_hex(16), "minted_at_note": "RFC 004 step 0"},
                indent=2) + "\n", encoding="utf-8")
        mls = Logstream(db_path=str(tmp / "logstream.sqlite3"))
        migrated_events = all_events(mls)
        migrated_replica_id = mls.replica_id
        mls.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

json.dump({"events": events, "artifacts": artifacts, "replica_id": replica_id,
           "migrated_events": migrated_events, "migrated_replica_id": migrated_replica_id},
          open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
'''


@dataclasses.dataclass
class RefDB:
    """A ``logstream.sqlite3`` written by the reference (see ``build_reference_db``)."""

    palace: Path
    db_path: Path
    generation: str
    events: list[dict] | None  # as the reference lists them, keys of this generation only
    artifacts: list[dict]  # get_artifact() records incl. content, in insertion order
    replica_id: str | None  # from <palace>/replica.json; None for pre_replication
    # Old generations only: the events as 3.11.0 shows them after *its own* open-time
    # migration of a copy of this file, with the replica id it used (the copy of
    # replica.json, or a fresh one for pre_replication). For exact backfill comparisons
    # write {"replica_id": migrated_replica_id} into <palace>/replica.json first.
    migrated_events: list[dict] | None = None
    migrated_replica_id: str | None = None


def build_reference_db(
    palace_dir: str | os.PathLike,
    n_events: int = 20,
    with_artifacts: bool = True,
    generation: str = "newest",
    *,
    return_events: bool = True,
    with_migrated: bool = True,
    fast: bool | None = None,
    timeout: float = 600,
) -> RefDB:
    """Create ``<palace_dir>/logstream.sqlite3`` with the reference's own ``Logstream``.

    Exactly ``n_events`` events are written, in this order (each slot only if ``n_events``
    reaches it): 0 ``task.request`` (topic ``auth-v2``, to ``claude-win``, correlation id,
    branch, base_commit, status ``open``, a CRLF + non-ASCII body, nested non-ASCII
    metadata); 1 ``agent.status`` to ``*`` with an empty body; 2 an ``event.ack`` of event 0
    (status ``claimed``); 3 a ``submit_patch`` (one ``patch`` artifact + ``patch.ready``,
    status ``ready``); 4 a ``note.added`` event referencing a ``note`` (CRLF, no final
    newline) and a ``log`` artifact; then fillers cycling types, streams, rooms, topics
    (``None``/``t1``/``t2``), to_agent (``None``/``*``/``agent-a``/``agent-b``), every status,
    correlation ids and metadata. ``with_artifacts=False`` replaces slots 3-4 by fillers.
    ``fast`` (default: on above 1000 events) sets ``synchronous=OFF`` on the builder's
    connection only; it changes nothing in the file's contents.

    ``generation``:

    ``"newest"``
        The file exactly as 3.11.0 writes it (identical schema in 3.9.0 and 3.10.0).
    ``"pre_topic"``
        The 3.7.x/3.8.0 shape (verified against those wheels): ``events`` without the
        ``topic`` column and without ``events_topic_created_idx``; provenance columns,
        ``events_origin_seq_idx`` and ``events_hlc_idx`` present; ``replica.json`` present.
    ``"pre_replication"``
        The RFC 003 pilot shape that 3.7.0's migration upgrades (never shipped on PyPI):
        ``events`` without ``topic``/``origin_replica``/``origin_seq``/``hlc``, ``artifacts``
        without ``origin_replica``, only the four ``(x, created_at)`` event indexes plus
        ``artifacts_sha256_idx``, and no ``replica.json``.

    Old generations are written with ``topic=None`` everywhere (the column does not exist),
    then rebuilt in the reference venv with plain ``sqlite3`` in one transaction: rename
    ``events`` to ``_events_src`` (its indexes follow it), ``CREATE TABLE events`` with the
    old column list, ``INSERT INTO events (rowid, cols...) SELECT rowid, cols... FROM
    _events_src ORDER BY rowid`` (rowids = ``seq`` preserved), drop ``_events_src``, create
    the old generation's indexes; for ``pre_replication`` the same for ``artifacts`` (drop
    ``origin_replica``) and ``replica.json`` is deleted. ``event_artifacts`` is untouched.
    Then ``VACUUM`` and ``wal_checkpoint(TRUNCATE)``; the file stays in WAL mode.

    Returns a ``RefDB``. ``events`` is what ``list_events`` returned (ascending, all
    pages) before the rebuild, minus the keys the old generation does not have.
    """
    if generation not in GENERATIONS:
        raise ValueError(f"generation must be one of {GENERATIONS}, not {generation!r}")
    if not isinstance(n_events, int) or n_events < 0:
        raise ValueError("n_events must be a non-negative integer")
    palace = Path(palace_dir).resolve()
    db = palace / "logstream.sqlite3"
    if db.exists():
        raise FileExistsError(f"{db} already exists")
    palace.mkdir(parents=True, exist_ok=True)
    params = {
        "palace": str(palace),
        "n_events": n_events,
        "generation": generation,
        "with_artifacts": bool(with_artifacts),
        "return_events": bool(return_events),
        "with_migrated": bool(with_migrated),
        "fast": n_events > 1000 if fast is None else bool(fast),
    }
    with tempfile.TemporaryDirectory(prefix="refbuild-") as tmp:
        pin, pout = Path(tmp) / "params.json", Path(tmp) / "out.json"
        pin.write_text(json.dumps(params), encoding="utf-8")
        run_ref(_BUILD_SCRIPT, pin, pout, timeout=timeout)
        out = json.loads(pout.read_text(encoding="utf-8"))
    return RefDB(
        palace=palace,
        db_path=db,
        generation=generation,
        events=out["events"],
        artifacts=out["artifacts"],
        replica_id=out["replica_id"],
        migrated_events=out["migrated_events"],
        migrated_replica_id=out["migrated_replica_id"],
    )


# ── benchmark helpers ───────────────────────────────────────────────────────

_BENCH_APPEND = r"""
import json, sys, time
from mempalace.logstream import Logstream
ls = Logstream(db_path=sys.argv[1] + "/logstream.sqlite3")
n = int(sys.argv[2])
ls.append_event(type="bench.warmup", stream="bench", room="r", from_agent="w")
t0 = time.perf_counter()
for i in range(n):
    ls.append_event(type="bench.append", stream="bench", room="r", from_agent="w",
                    to_agent="*", body="x" * 100)
dt = time.perf_counter() - t0
ls.close()
print(json.dumps({"seconds": dt}))
"""


def ref_bench_append(db_dir: str | os.PathLike, n: int, timeout: float = 600) -> float:
    """Appends/second of one reference writer (``Logstream.append_event``, default
    durability: WAL with SQLite's default ``synchronous=FULL``), 100-byte bodies."""
    Path(db_dir).mkdir(parents=True, exist_ok=True)
    res = run_ref_json(_BENCH_APPEND, Path(db_dir).resolve(), int(n), timeout=timeout)
    return n / res["seconds"]


_BENCH_LIST = r"""
import json, sys, time
from mempalace.logstream import Logstream
ls = Logstream(db_path=sys.argv[1] + "/logstream.sqlite3")
n = int(sys.argv[2]); filters = json.loads(sys.argv[3])
ls.list_events(**filters)
samples = []
for _ in range(n):
    t0 = time.perf_counter(); ls.list_events(**filters); samples.append(time.perf_counter() - t0)
ls.close()
print(json.dumps(sorted(samples)))
"""


def ref_list_latency(
    db_dir: str | os.PathLike, n: int = 200, timeout: float = 600, **filters: Any
) -> dict[str, float]:
    """In-process ``list_events(**filters)`` latency of the reference on an existing db.

    Returns ``{"p50": s, "p95": s, "max": s}`` in seconds (no subprocess overhead).
    Example: ``ref_list_latency(d, to_agent="agent-a", order="desc", limit=50)``.
    """
    samples = run_ref_json(
        _BENCH_LIST, Path(db_dir).resolve(), int(n), json.dumps(filters), timeout=timeout
    )
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]  # noqa: E731
    return {"p50": pick(0.5), "p95": pick(0.95), "max": samples[-1]}
