"""The lean entry point for `logstream inbox` (the context hooks run it on every prompt).

`hook pretooluse` (the lease hook, issue 22) takes the same road through lease_hook.py.
The `logstream` and `logstream-hook` console scripts and `python -m mempalace_logstream` call
`fast_path(argv)` first: a command line the fast parser fully understands (cli/fast.py:
`[global options] inbox [its options]`, and the other commands of its table) runs without
importing typer, rich, click or the servers; anything else (`--help`, a typo, a bad value,
another command) returns None and goes to the typer app, which prints the usage errors.
`run_inbox` is the one implementation: the typer command `inbox` calls it too, so behaviour and
error texts are the same on both paths.
A local SQLite log is read by the lean reader (store/lean.py), without SQLAlchemy.
Must not import typer, rich, click, fastapi, mcp or sse_starlette (httpx only with --hub; the
store and SQLAlchemy only when the lean reader leaves the log to the store).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from mempalace_logstream import config, errors

if TYPE_CHECKING:
    from mempalace_logstream import inbox as inbox_mod
    from mempalace_logstream.watch import Client


def parse_argv(argv: Sequence[str]) -> dict[str, Any] | None:
    """The inbox call's arguments (`run_inbox`'s), or None when this command line is not an
    inbox call the fast parser (cli/fast.py, the table of every fast command) fully
    understands: typer must handle it."""
    from mempalace_logstream.cli import fast

    parsed = fast.parse(argv)
    if parsed is None or parsed[0].words != ("inbox",):
        return None
    return fast.inbox_args(parsed[1])


def fast_path(argv: Sequence[str]) -> int | None:
    """Run `inbox` without the typer app when the command line is one it parses; the exit
    code, or None to hand the command line to the full CLI."""
    if list(argv[:1]) == ["hook"]:
        from mempalace_logstream import lease_hook

        return lease_hook.fast_path(argv)
    from mempalace_logstream.cli import fast

    return fast.run(argv)


def run_inbox(
    *,
    agent: str | None = None,
    hook: str | None = None,
    state_file: str | None = None,
    from_start: bool = False,
    limit: int | None = None,
    max_body: int | None = None,
    as_json: bool = False,
    allow_unverified: bool = False,
    db: str | None = None,
    palace: str | None = None,
    hub: str | None = None,
    token: str | None = None,
    durability: str | None = None,
    debug: bool = False,
    crash_hook: Callable[[str, int], None] | None = None,
    lean: bool = True,
) -> int:
    """`logstream inbox`: exit 0 (nothing printed when there is no unseen mail), or 1 after
    one `error: …` line on stderr (with --json one `{"error", "field"}` object; a traceback
    instead with --debug).

    `lean`: read a local SQLite log with the lean reader (store/lean.py: the store's rule and
    SQL on the stdlib `sqlite3`, no SQLAlchemy); the store reads whatever it leaves (a hub,
    PostgreSQL, a log to migrate). The typer command passes False: it reads through the store,
    the reference the lean path is tested against."""
    # Imported here: `logstream` runs every command line through fast_path (cli.main).
    from mempalace_logstream import cursors
    from mempalace_logstream import inbox as inbox_mod

    try:
        settings = config.Settings.from_env()
        palace = palace or settings.palace
        target = cursors.log_target(db or settings.db, palace, hub)
        opts = inbox_mod.InboxOptions.parse(
            agent=agent,
            hook=hook,
            state_file=state_file,
            from_start=from_start,
            limit=limit,
            max_body=max_body,
            as_json=as_json,
            allow_unverified=allow_unverified,
            target=target,
            palace=palace,
        )
        event = _hook_event(opts, target, palace)
        durability = durability or _env_durability()
        if lean and not hub:
            code = _deliver_lean(target, durability, opts, event, crash_hook)
            if code is not None:
                return code
        client, close = _open(target, hub, token, durability, settings)
        try:
            return inbox_mod.deliver(client, opts, _write, _note, event, crash_hook)
        finally:
            close()
    except errors.LogstreamError as exc:
        if debug:
            raise
        _say_error(exc, as_json)
        return 1


def _hook_event(opts: inbox_mod.InboxOptions, target: str, palace: str | None) -> str | None:
    """The hook event the client runs (its JSON on stdin); on Codex's SessionStart, the
    session's thread is recorded for `logstream deliver --codex` (codex_thread.py)."""
    from mempalace_logstream import inbox as inbox_mod

    if not opts.hook:
        return None
    stdin_text = _stdin()
    event = inbox_mod.hook_event_name(opts.hook, stdin_text)
    if opts.hook == "codex":
        from mempalace_logstream import codex_thread

        codex_thread.record_from_hook(stdin_text, opts.agent, target, palace, _note)
    return event


def _say_error(exc: errors.LogstreamError, as_json: bool) -> None:
    """One `error: …` line on stderr, or one `{"error", "field"}` object with --json."""
    text = " ".join(exc.message.split())
    if as_json:
        field = getattr(exc, "field", None)
        _note(json.dumps({"error": text, "field": field}, ensure_ascii=False))
    else:
        from mempalace_logstream import display

        _note("error: " + display.terminal(text))


def _deliver_lean(
    target: str,
    durability: str,
    opts: inbox_mod.InboxOptions,
    event: str | None,
    crash_hook: Callable[[str, int], None] | None,
) -> int | None:
    """`deliver` through the lean reader; None when the store must read this log (it then
    raises the errors of a log it cannot read, with its own texts). `Unplanned` comes from a
    read, before anything is printed or checkpointed."""
    from mempalace_logstream import inbox as inbox_mod
    from mempalace_logstream.store import lean

    reader = lean.open_lean(target, durability)
    if reader is None:
        return None
    try:
        return inbox_mod.deliver(reader, opts, _write, _note, event, crash_hook)
    except lean.Unplanned:
        return None
    finally:
        reader.close()


def _open(
    target: str, hub: str | None, token: str | None, durability: str, settings: config.Settings
) -> tuple[Client, Callable[[], None]]:
    """A client for the log (a reader: a missing file is refused) and its close."""
    if hub:
        from mempalace_logstream.hub_client import HubClient

        remote = HubClient(hub, token=token, timeout=settings.hub_timeout_s)
        # HubClient names call()'s first parameter `op`; it is only ever passed positionally.
        return cast("Client", remote), remote.close
    from mempalace_logstream.operations import LocalClient
    from mempalace_logstream.store import LogStore

    store = LogStore.open(
        target,
        durability=durability,
        create=False,
        max_body_bytes=settings.max_body_bytes,
        max_artifact_bytes=settings.max_artifact_bytes,
    )
    local = LocalClient(store)
    return local, local.close


def _stdin() -> str:
    """The hook's JSON input; nothing when stdin is a terminal (a manual run) or closed."""
    stream = sys.stdin
    if stream is None or stream.closed or stream.isatty():
        return ""
    return stream.read()


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _note(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None, *, exit_now: bool = False) -> None:
    """`logstream` (and the `logstream-hook` console script): the lean inbox path first, else
    the typer app (cli/root.py). `exit_now` (the `logstream` console script, `cli.console`):
    a call the lean path answered ends the process there, its output flushed, without the
    interpreter's teardown (`os._exit`: ~2 ms of CPU freeing every module; issue 25)."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = fast_path(args)
    if code is None:
        from mempalace_logstream.cli.root import main as cli_main

        sys.argv[1:] = args
        cli_main()
        return
    if exit_now:
        _exit_now(code)
    # Every store is closed: exit without the interpreter's last cyclic-GC scan.
    import gc

    gc.freeze()
    raise SystemExit(code)


def _exit_now(code: int) -> None:
    """End the process with `code` once stdout and stderr are flushed; if either cannot be
    (a reader closed the pipe), return: the caller exits as Python does, which reports it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _env_durability() -> str:
    """The CLI's `--durability` default: $MEMPALACE_LOGSTREAM_DURABILITY, else full."""
    return (os.environ.get("MEMPALACE_LOGSTREAM_DURABILITY") or "full").strip().lower()
