"""`logstream agent add|list|rotate|revoke|trust|untrust` (RFC 0008): agents' keys and tokens.

They run against the local log (the hub host: the keys live in `<keys_dir>`, the hub keeps the
tokens' hashes in its database); the rules are `agents.py`'s. With --hub they say where to run
them instead: no secret ever travels over a surface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from mempalace_logstream import display, errors
from mempalace_logstream.cli.options import DbOpt, HubOpt, JsonOpt, PalaceOpt, TokenOpt
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import STATE, console, emit, fail, open_store

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore

T = TypeVar("T")

agent_app = new_typer(
    help="Agents' keys and tokens: add, list, rotate, revoke; trust admin keys (RFC 0008)."
)
app.add_typer(agent_app, name="agent")

NameArg = Annotated[str, typer.Argument(help="The agent's name (its from_agent).")]
KeyIdArg = Annotated[str, typer.Argument(help="An admin key id: ed25519:<32 hex>.")]
PrintOpt = Annotated[
    bool,
    typer.Option(
        "--print", help="Print the private key (PEM) once instead of writing keys/NAME.key."
    ),
]
UnicodeOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unicode",
        help="Take a name in another script than ASCII (Unicode NFKC, letters and digits of "
        "one script); look-alikes of other agents are refused either way.",
    ),
]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (kept in the log).")]
ON_THE_HUB = (
    "agents are managed where the hub's log is: run `logstream agent {cmd}` on the hub's host "
    "with its --db/--palace (keys and token hashes stay there; no secret goes over HTTP)"
)

FROM_ENV = (
    "LOGSTREAM_HUB is set ({hub}), and agents are managed on the hub's host against its own "
    "log, never over HTTP: on the hub's host, unset LOGSTREAM_HUB (or run `env -u "
    "LOGSTREAM_HUB logstream agent {cmd} …`) and give the hub's --db/--palace"
)


def _local(
    cmd: str,
    db: str | None,
    palace: str | None,
    hub: str | None,
    work: Callable[[LogStore], T],
    *,
    create: bool = False,
) -> T:
    """Run `work` on the local store; one stderr line and exit 1 on a domain error."""
    if hub and not STATE.hub_typed:  # from LOGSTREAM_HUB: perhaps on the hub's host itself
        raise fail(FROM_ENV.format(cmd=cmd, hub=hub), field="hub")
    if hub:
        raise fail(ON_THE_HUB.format(cmd=cmd), field="hub")
    try:
        store = open_store(db, palace, create=create)
        try:
            return work(store)
        finally:
            store.close()
    except errors.LogstreamError as exc:
        if STATE.debug:
            raise
        raise fail(exc.message) from None


def _minted(out: dict[str, Any], verb: str) -> str:
    lines = [
        f"{verb} agent {out['agent']}: key {out['key_id']} "
        f"(key event {out['event_id']}, signed by admin key {out['admin_key_id']})"
    ]
    if out["key_file"]:
        lines.append(f"key file: {out['key_file']} (mode 0600; keep it on this host)")
    else:
        lines.append("private key (shown once; store it as a 0600 file):")
        lines.append(str(out["private_key"]).rstrip("\n"))
    lines.append(f"token (shown once; this hub keeps only its hash): {out['token']}")
    return "\n".join(lines)


@agent_app.command("add")
def add(
    name: NameArg,
    print_key: PrintOpt = False,
    allow_unicode: UnicodeOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add an agent: an Ed25519 key (keys/NAME.key, 0600) and a bearer token, shown once.

    The first `agent add` also makes the palace's admin key (keys/admin.key) and pins it. A
    revoked agent gets a new key and token the same way. NAME is ASCII unless
    --allow-unicode, and never a look-alike of another agent with a key."""
    from mempalace_logstream import agents

    def work(store: LogStore) -> Any:
        return agents.add(store, name, print_key=print_key, allow_unicode=allow_unicode)

    minted = _local("add", db, palace, hub, work, create=True)
    out = minted.to_dict()
    emit(out, as_json, _minted(out, "added"))


@agent_app.command("list")
def list_agents(
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every key the log knows: agent, role, key id, state, whether its key file is on this
    host and whether it has a token here. Never a secret."""
    from mempalace_logstream import agents

    def work(store: LogStore) -> dict[str, Any]:
        return {"agents": agents.listing(store), "pinned": store.pinned_admins()}

    out = _local("list", db, palace, hub, work)
    if as_json:
        emit(out, True)
        return
    from rich import box
    from rich.table import Table

    screen = console()
    if not out["agents"]:
        screen.print("no agents yet: `logstream agent add NAME` makes the first")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for col in ("agent", "role", "key id", "state", "key held here", "token"):
        table.add_column(col, no_wrap=col in ("agent", "key id"))
    for row in out["agents"]:
        state = row["state"]
        if row["revoke_reason"]:
            state += f" ({row['revoke_reason']})"
        cells = (row["agent"], row["role"], row["key_id"], state)
        table.add_row(
            *map(display.terminal, cells),
            "yes" if row["key_held_here"] else "-",
            "yes" if row["token"] else "-",
        )
    screen.print(table)
    pinned = display.terminal(", ".join(out["pinned"]) or "none")
    screen.print("pinned admin keys: " + pinned, soft_wrap=True)


@agent_app.command("rotate")
def rotate(
    name: NameArg,
    print_key: PrintOpt = False,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A new key and token for NAME; the old token stops working, the old key stays valid for
    the events it already signed."""
    from mempalace_logstream import agents

    minted = _local(
        "rotate", db, palace, hub, lambda s: agents.rotate(s, name, print_key=print_key)
    )
    out = minted.to_dict()
    emit(out, as_json, _minted(out, "rotated"))


@agent_app.command("revoke")
def revoke(
    name: NameArg,
    reason: ReasonOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke NAME's key (later events under it are refused everywhere) and drop its token."""
    from mempalace_logstream import agents

    out = _local("revoke", db, palace, hub, lambda s: agents.revoke(s, name, reason=reason))
    human = f"revoked agent {out['agent']}: key {out['key_id']} ({out['reason']}); token dropped"
    emit(out, as_json, human)


@agent_app.command("trust")
def trust(
    key_id: KeyIdArg,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pin an admin key id on this replica (what its first `agent add` printed elsewhere)."""
    from mempalace_logstream import agents

    out = _local("trust", db, palace, hub, lambda s: agents.trust(s, key_id), create=True)
    human = f"pinned admin key {key_id}" + ("" if out["changed"] else " (already pinned)")
    emit(out, as_json, human)


@agent_app.command("untrust")
def untrust(
    key_id: KeyIdArg,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop trusting an admin key id on this replica."""
    from mempalace_logstream import agents

    out = _local("untrust", db, palace, hub, lambda s: agents.trust(s, key_id, trusted=False))
    human = f"unpinned admin key {key_id}" + ("" if out["changed"] else " (was not pinned)")
    emit(out, as_json, human)
