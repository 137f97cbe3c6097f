"""The plumbing every command shares: the run's state, the one error form, opening a client
(the local store, or a hub with --hub), one operation per command, and the printed event line.

Imports the store, the hub client and every server lazily, inside functions: `--help` and a
plain `list` must stay cheap. Must not import the command modules or the root app.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from mempalace_logstream import display, errors, reconnect
from mempalace_logstream.cli import plain, writes
from mempalace_logstream.cli.plain import event_line, given_args

__all__ = ["event_line", "given_args"]  # the commands' names for them, from plain

if TYPE_CHECKING:
    from rich.console import Console

    from mempalace_logstream.hub_client import HubClient
    from mempalace_logstream.natsbridge import BridgeConfig
    from mempalace_logstream.operations import LocalClient
    from mempalace_logstream.store import LogStore
    from mempalace_logstream.tasks import TaskSettings

# The exceptions of click, or of the copy of click that typer >= 0.29 vendors.
click_errors = importlib.import_module(typer.BadParameter.__module__)


class State:
    """What the root options said for this run; `_Group.main` resets it before each run."""

    debug = False
    durability = "full"
    as_json = False  # errors as one JSON object on stderr
    hub_typed = False  # --hub was typed (not taken from LOGSTREAM_HUB)

    def reset(self) -> None:
        self.debug, self.durability, self.as_json = False, "full", False
        self.hub_typed = False


STATE = State()


def fail(message: str, code: int = 1, field: str | None = None) -> typer.Exit:
    """One line on stderr, always: `error: …`, or with --json `{"error": …, "field": …}`.

    The field defaults to that of the domain error being handled, if any."""
    if field is None:
        field = getattr(sys.exc_info()[1], "field", None)
    typer.echo(plain.error_text(message, field, STATE.as_json), err=True)
    return typer.Exit(code)


def open_client(
    db: str | None,
    palace: str | None,
    hub: str | None = None,
    token: str | None = None,
    *,
    create: bool = False,
    delivery: str | None = None,
) -> LocalClient | HubClient:
    """A client with `.call(op, **args)`: the local store, or a remote hub with --hub, whose
    reads are pushes through `delivery` (watch, channel, codex) when given."""
    if hub:
        return plain.hub_client(hub, token, delivery)
    from mempalace_logstream.operations import LocalClient

    return LocalClient(open_store(db, palace, create=create), delivery=delivery)


def open_reader(
    db: str | None,
    palace: str | None,
    hub: str | None,
    token: str | None,
    give_up_after: float | None,
    delivery: str | None = None,
) -> tuple[LocalClient | HubClient, reconnect.Reconnect | None]:
    """(client, policy) for the commands that follow the log (`watch`, `tail`, `wait`): with
    --hub, the policy (reconnect.py) makes calls ride through an outage, told in one stderr
    line when the hub is lost and one when it is back; None for a local store. `riding`
    gives the client whose every call goes through it."""
    client = open_client(db, palace, hub, token, delivery=delivery)
    if not hub:
        return client, None
    policy = reconnect.Reconnect(
        hub.rstrip("/"), note=note_hub_state, give_up_after_s=give_up_after
    )
    return client, policy


def riding(
    client: LocalClient | HubClient, policy: reconnect.Reconnect | None
) -> LocalClient | HubClient | reconnect.Client:
    """`client` with each call run through `policy` (as it is without one)."""
    return client if policy is None else policy.client(client)


def note_hub_state(change: reconnect.HubState) -> None:
    """A hub lost, back or given up on: one line on stderr (with --json, one JSON object)."""
    if STATE.as_json:
        doc = {
            "hub": change.hub,
            "state": change.state,
            "reason": change.reason,
            "down_s": round(change.down_s, 3),
            "message": change.message,
        }
        typer.echo(json.dumps(doc, ensure_ascii=False), err=True)
    else:
        typer.echo(display.terminal(change.message), err=True)


def open_store(db: str | None, palace: str | None, *, create: bool) -> LogStore:
    """The local store; `create` for commands that write (a reader refuses a missing file)."""
    from mempalace_logstream.store import LogStore
    from mempalace_logstream.store.options import log_options

    url, options = log_options(db, palace, durability=STATE.durability)
    return said_created(LogStore.open(url, create=create, **options))


def said_created(store: LogStore) -> LogStore:
    """Say once, on stderr, that this command made a new log (a typo is then visible); not
    with --json, where stderr holds only the one JSON error object scripts parse."""
    if store.created and not STATE.as_json:
        typer.echo(f"created a new log at {store.engine.url.database}", err=True)
    return store


def run(
    db: str | None,
    palace: str | None,
    op: str,
    hub: str | None = None,
    token: str | None = None,
    **args: Any,
) -> dict[str, Any]:
    """Open, call one operation, close; domain errors become one stderr line and exit 1."""
    try:
        answer = None if hub else plain.lean_read(db, palace, STATE.durability, op, args)
        if answer is not None:
            return answer
        client = open_client(db, palace, hub, token, create=not hub and _writes(op))
        try:
            return client.call(op, **args)
        finally:
            client.close()
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None


def _writes(op: str) -> bool:
    """Whether `op` writes: only the commands that write (and serve, mcp, migrate, sync's own
    log, import's target) create a missing log; every other command refuses a mistyped path.
    Asked for a local log only: the operation table (pydantic models) is not imported for a
    call to a hub."""
    from mempalace_logstream import operations

    return op in operations.MUTATING


def emit(data: dict[str, Any], as_json: bool, human: str | None = None) -> None:
    """`data` as indented JSON (--json: the exact bytes), or the human text when there is one
    and --json was not given; what a terminal is shown has every hidden character escaped."""
    typer.echo(plain.emit_text(data, as_json, human))


def warn(out: dict[str, Any]) -> None:
    """An answer's `warning` (the addressee has no live delivery path), on stderr."""
    text = writes.warning_text(out)
    if text:
        typer.echo(display.terminal(text), err=True)


def console(**options: Any) -> Console:
    """A rich Console that reads no markup, emoji codes or highlights in what it prints: a
    sender's `[link=…]` stays text. Cells and lines given to it are `display.terminal`'d."""
    from rich.console import Console

    return Console(markup=False, emoji=False, highlight=False, **options)


def check_sync_limits(
    deadline_flag: str, deadline_s: float, bytes_flag: str, max_bytes: int, min_bytes: int
) -> None:
    """The deadline and response-size flags of `sync` and `serve`, refused as usage errors."""
    if not deadline_s > 0:
        raise fail(f"{deadline_flag} must be a positive number of seconds, got {deadline_s}", 2)
    if max_bytes < min_bytes:
        raise fail(f"{bytes_flag} is {max_bytes}; it must be at least {min_bytes} bytes", 2)


def guard_settings(
    base: TaskSettings, *, humans: tuple[str, ...] = (), **given: Any
) -> TaskSettings:
    """`base` with the reminder and loop-guard flags that were given (None: keep), each
    checked like a task's own option (ValidationError naming the flag's field)."""
    import dataclasses

    from mempalace_logstream.tasks import guards

    checks = {
        "claim_timeout_ms": guards.claim_timeout_ms,
        "max_reminders": guards.max_reminders,
        "thread_budget": lambda x: guards.budget("thread_budget", x),
        "pair_budget": lambda x: guards.budget("pair_budget", x),
        "pair_window_ms": guards.pair_window_ms,
    }
    changes: dict[str, Any] = {k: checks[k](x) for k, x in given.items() if x is not None}
    if humans:
        changes["humans"] = tuple(dict.fromkeys((*base.humans, *humans)))
    return dataclasses.replace(base, **changes)


def close_after(client: Any) -> None:
    """Close a reader's client in the `finally` of its command. When the command is ending by
    an exception (Ctrl-C in the middle of a query can leave a database connection unusable), a
    failing close never replaces that first error: the command still exits as for it."""
    if sys.exc_info()[0] is None:
        client.close()
        return
    with contextlib.suppress(errors.LogstreamError):
        client.close()


interrupted = errors.interrupted  # the commands that follow the log end on it


def nats_config(url: str, stream: str, prefix: str) -> BridgeConfig:
    """The bridge's settings, or a usage failure naming the bad option (and the extra to
    install when the NATS client is missing)."""
    try:
        from mempalace_logstream.natsbridge import BridgeConfig
    except ImportError:
        raise fail(
            "the NATS bridge needs the nats extra: pip install 'mempalace-logstream[nats]'"
        ) from None
    try:
        return BridgeConfig(url=url, stream=stream, prefix=prefix)
    except ValueError as exc:
        raise fail(str(exc)) from None
