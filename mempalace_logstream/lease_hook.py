"""`logstream hook pretooluse` (issue 22, RFC 0010): the harness asks before each edit; when
another agent holds an exclusive lease on a path the tool would write, the edit is denied
(Claude Code's and Codex's PreToolUse deny on stdout, exit 0); otherwise nothing is printed.

The decision is `lease_check`'s (store/lease_ops.py, one rule), asked of the log through the
operations client (a local log) or the hub (`--hub`). A log that cannot be read fails open
(a warning on stderr, the edit allowed) unless `--fail-closed` (denied, naming the failure).
`fast_path` runs it without the typer app (hook.py calls it first); `run_pretooluse` is the
one implementation, which the typer command calls too.
Must not import typer, rich, click or the servers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mempalace_logstream import config, errors
from mempalace_logstream.leases import globs, harness

VALUES = {"--agent", "--client", "--project", "--db", "--palace", "--hub", "--token", "--ttl"}
FLAGS = {"--auto-lease", "--fail-closed"}
AUTO_LEASE_TTL_S = 300  # a short lease: renewed by the next edit's hook
ENV = {"hub": "LOGSTREAM_HUB", "token": "LOGSTREAM_TOKEN", "project": "LOGSTREAM_PROJECT"}
Call = Callable[..., dict[str, Any]]


def parse_argv(argv: Sequence[str]) -> dict[str, Any] | None:
    """`hook pretooluse [options]` as keyword arguments of run_pretooluse; None for anything
    else (typer answers: usage errors, --help)."""
    if len(argv) < 2 or argv[0] != "hook" or argv[1] != "pretooluse":
        return None
    out: dict[str, Any] = {}
    args = list(argv[2:])
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name in FLAGS and not eq:
            out[name[2:].replace("-", "_")] = True
        elif name in VALUES and eq:
            out[name[2:]] = inline
        elif name in VALUES and i + 1 < len(args):
            out[name[2:]] = args[i + 1]
            i += 1
        else:
            return None
        i += 1
    if "agent" not in out and not os.environ.get("LOGSTREAM_AGENT"):
        return None
    if out.get("client", "claude") not in harness.CLIENTS:
        return None
    if "ttl" in out:
        if not out["ttl"].isdigit():
            return None
        out["ttl"] = int(out["ttl"])
    return out


def fast_path(argv: Sequence[str]) -> int | None:
    """Run `hook pretooluse` without the typer app; None to hand the line to the CLI."""
    args = parse_argv(argv)
    if args is None:
        return None
    args.setdefault("agent", os.environ.get("LOGSTREAM_AGENT"))
    return run_pretooluse(**args)


def run_pretooluse(
    *,
    agent: str,
    client: str = "claude",
    auto_lease: bool = False,
    fail_closed: bool = False,
    ttl: int | None = None,
    project: str | None = None,
    db: str | None = None,
    palace: str | None = None,
    hub: str | None = None,
    token: str | None = None,
    stdin_text: str | None = None,
) -> int:
    """Read the PreToolUse JSON, check each path the tool writes, print the deny if one is
    held by another agent. Always exit 0 (the harness reads the decision from stdout)."""
    hub = hub or os.environ.get(ENV["hub"]) or None
    token = token or os.environ.get(ENV["token"]) or None
    project = project or os.environ.get(ENV["project"]) or None
    try:
        data = harness.payload(sys.stdin.read() if stdin_text is None else stdin_text)
    except ValueError as exc:
        return _failed(f"unreadable hook input: {exc}", fail_closed)
    cwd = str(data.get("cwd") or os.getcwd())
    root = str(data.get("cwd") or _git_root(cwd) or cwd)
    paths = [
        p for p in (harness.relative(r, cwd, root) for r in harness.edited_paths(client, data)) if p
    ]
    if not paths:
        return 0
    try:
        call, close = _client(db, palace, hub, token)
    except Exception as exc:  # the log or hub cannot be reached: never block silently
        return _failed(_what(exc), fail_closed)
    try:
        return _decide(call, agent, paths, project, auto_lease, ttl, root)
    except errors.LogstreamError as exc:
        return _failed(_what(exc), fail_closed)
    except Exception as exc:
        return _failed(_what(exc), fail_closed)
    finally:
        close()


def _decide(
    call: Call,
    agent: str,
    paths: list[str],
    project: str | None,
    auto_lease: bool,
    ttl: int | None,
    root: str,
) -> int:
    for path in paths:
        check = call("lease_check", agent=agent, path=path, project=project)
        if not check["allowed"]:
            _write(harness.deny(harness.holder_reason(check)))
            return 0
        if auto_lease and not check["own"]:
            try:
                call(
                    "lease_acquire",
                    agent=agent,
                    paths=[globs.literal(path)],
                    ttl_s=ttl or AUTO_LEASE_TTL_S,
                    reason="auto-lease by the PreToolUse hook",
                    project=project or os.path.basename(root.rstrip("/")) or "default",
                )
            except errors.ConflictError as exc:  # taken between the check and the acquire
                _write(harness.deny(" ".join(exc.message.split())))
                return 0
    return 0


def _failed(what: str, fail_closed: bool) -> int:
    if fail_closed:
        _write(harness.deny(f"logstream lease hook could not check the leases: {what}"))
    else:
        _note(f"logstream hook pretooluse: could not check the leases ({what}); edit allowed")
    return 0


def _what(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, errors.LogstreamError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def _git_root(cwd: str) -> str | None:
    import subprocess  # only when the hook input names no cwd

    try:
        done = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _client(
    db: str | None, palace: str | None, hub: str | None, token: str | None
) -> tuple[Call, Callable[[], None]]:
    """The operations client of the log (an existing one: never created) and its close: the
    hub's, or a local log's (`lease_check` by the lean reader, the rest by the store)."""
    settings = config.Settings.from_env()
    if hub:
        remote = _Hub(hub, token, settings.hub_timeout_s)
        return remote.call, remote.close
    local = _Local(config.resolve_db(db or settings.db, palace or settings.palace))
    return local.call, local.close


class _Hub:
    """`POST /v1/<op>` on the hub with the standard library's http.client (httpx, which
    HubClient uses, costs about 80 ms to import on every edit): the same request and the same
    domain errors (http_errors.error_from_answer), one connection, `timeout` per call and an
    answer of at most MAX_ANSWER_BYTES."""

    MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a lease_check answer is a few KB

    def __init__(self, url: str, token: str | None, timeout: float) -> None:
        from urllib.parse import urlsplit

        from mempalace_logstream import validation as v

        v.token(token)
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise errors.ValidationError(f"hub {url!r} is not an http(s) URL", field="hub")
        self.parts, self.token, self.timeout = parts, token, timeout
        self.conn: Any = None

    def call(self, op: str, /, **args: Any) -> dict[str, Any]:
        import http.client
        import json

        from mempalace_logstream import http_errors

        body = json.dumps({k: x for k, x in args.items() if x is not None}).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            if self.conn is None:
                host, port = str(self.parts.hostname), self.parts.port
                if self.parts.scheme == "https":
                    self.conn = http.client.HTTPSConnection(host, port, timeout=self.timeout)
                else:
                    self.conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
            self.conn.request("POST", f"{self.parts.path}/v1/{op}", body, headers)
            resp = self.conn.getresponse()
            raw = resp.read(self.MAX_ANSWER_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise errors.PeerUnavailableError(
                f"cannot reach hub {self.url}: {exc or type(exc).__name__}", peer_id=self.url
            ) from None
        if len(raw) > self.MAX_ANSWER_BYTES:
            raise errors.PeerUnavailableError(
                f"hub {self.url} answered {op} with more than {self.MAX_ANSWER_BYTES} bytes",
                peer_id=self.url,
            )
        if resp.status == 200:
            try:
                return dict(json.loads(raw))
            except (ValueError, TypeError):
                raise errors.PeerUnavailableError(
                    f"hub {self.url} answered {op} with something that is not a JSON object; "
                    "is it a logstream hub?",
                    peer_id=self.url,
                ) from None
        retry = resp.getheader("retry-after")
        raise http_errors.error_from_answer(resp.status, bytes(raw), self.url, retry)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class _Local:
    """A local log: `lease_check` read by store/lean_leases.py (stdlib sqlite3, the store's
    rule and SQL) when it can; the store (SQLAlchemy) opened only for what it cannot."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.durability = (
            (os.environ.get("MEMPALACE_LOGSTREAM_DURABILITY") or "full").strip().lower()
        )
        self.store: Any = None

    def call(self, name: str, /, **args: Any) -> dict[str, Any]:
        if name == "lease_check" and self.store is None:
            from mempalace_logstream.store import lean_leases

            found = lean_leases.check(self.target, self.durability, **args)
            if found is not None:
                return found
        if self.store is None:
            from mempalace_logstream.operations import LocalClient
            from mempalace_logstream.store import LogStore

            store = LogStore.open(self.target, durability=self.durability, create=False)
            self.store = LocalClient(store)
        return dict(self.store.call(name, **args))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _note(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------- the git guard

GUARD_MARK = "# logstream lease guard (issue 22)"
GUARD_BODY = """
agent="${LOGSTREAM_AGENT:-}"
if [ -z "$agent" ]; then
    echo "logstream lease guard: LOGSTREAM_AGENT is not set; leases not checked" >&2
    exit 0
fi
staged=$(mktemp) || exit 1
git -c core.quotePath=false diff --cached --name-only > "$staged"
status=0
while IFS= read -r path; do
    [ -n "$path" ] || continue
    if ! out=$(logstream lease check "$path" --agent "$agent" 2>&1); then
        echo "logstream lease guard: $out" >&2
        status=1
    fi
done < "$staged"
rm -f "$staged"
if [ "$status" -ne 0 ]; then
    echo "logstream lease guard: commit refused (git commit --no-verify skips this check)" >&2
fi
exit "$status"
"""


def guard_script(db: str | None = None, project: str | None = None, hub: str | None = None) -> str:
    """The pre-commit hook: `logstream lease check PATH --agent $LOGSTREAM_AGENT` for each
    staged path (this interpreter's logstream; --db, --project, --hub as given at install,
    else the environment as every command reads it); the commit is refused, naming the
    holder, the expiry and the fencing token, when any path is held by another agent."""
    import shlex

    fixed = [sys.executable, "-m", "mempalace_logstream"]
    tail = [
        arg
        for flag, value in (("--db", db), ("--project", project), ("--hub", hub))
        if value
        for arg in (flag, value)
    ]
    call = " ".join(shlex.quote(x) for x in fixed)
    opts = " ".join(shlex.quote(x) for x in tail)
    define = f'logstream() {{ {call} "$@" {opts}; }}'.replace("  ;", " ;").replace(" ;", ";")
    return f"#!/bin/sh\n{GUARD_MARK}: skip once with `git commit --no-verify`.\n{define}\n" + (
        GUARD_BODY.lstrip("\n")
    )


def install_guard(
    repo: str = ".", db: str | None = None, project: str | None = None, hub: str | None = None
) -> str:
    """Write the guard as the pre-commit hook of the git repository at `repo` (its hooks
    directory as git names it); returns the hook's path. A pre-commit hook that is not the
    guard is left alone and refused (ValidationError naming `repo`)."""
    import subprocess

    from mempalace_logstream import validation as v

    try:
        done = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--git-path", "hooks"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError as exc:
        raise v.fail("repo", f"could not run git: {exc}") from None
    if done.returncode != 0:
        raise v.fail("repo", f"{repo!r} is not a git repository ({done.stderr.strip()})")
    hooks = os.path.abspath(os.path.join(repo, done.stdout.strip()))
    os.makedirs(hooks, exist_ok=True)
    path = os.path.join(hooks, "pre-commit")
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if GUARD_MARK not in f.read():
                raise v.fail(
                    "repo",
                    f"already has a pre-commit hook that is not the lease guard ({path}); "
                    "move it away or call `logstream lease check` from it",
                )
    with open(path, "w", encoding="utf-8") as f:
        f.write(guard_script(db, project, hub))
    os.chmod(path, 0o755)
    return path
