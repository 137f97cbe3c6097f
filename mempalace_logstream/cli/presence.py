"""The `presence` command group (S-8.4): announce, leave and list who is home. Presence lives at
a hub (shared by the hubs of a PostgreSQL log), so every command needs `--hub` (or
LOGSTREAM_HUB); without one it says so."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mempalace_logstream.cli.options import HubOpt, JsonOpt, TokenOpt
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import emit, fail, given_args, run

presence_app = new_typer(
    help="Who is home: presence kept by a hub, never in the log (needs --hub)."
)
app.add_typer(presence_app, name="presence")

AgentOpt = Annotated[str, typer.Option("--agent", help="Your agent id.")]
StateOpt = Annotated[str, typer.Option("--state", help="watching, working or idle.")]
TaskOpt = Annotated[str | None, typer.Option("--task-id", help="The task you are on.")]
NoteOpt = Annotated[str | None, typer.Option("--note", help="A short note (max 500 chars).")]
PathOpt = Annotated[
    str | None,
    typer.Option(
        "--path",
        help="The delivery path you are reached by while this lives: watch, channel, codex, "
        "monitor, sse, or hook (hooks only: nothing pushes to you).",
    ),
]
TtlOpt = Annotated[
    int | None, typer.Option("--ttl-s", help="Seconds until the entry vanishes (default 60).")
]


def _hub_call(hub: str | None, token: str | None, op: str, **args: Any) -> dict[str, Any]:
    from mempalace_logstream.presence import NEEDS_A_HUB

    if not hub:
        raise fail(NEEDS_A_HUB, field="hub")
    return run(None, None, op, hub, token, **args)


def _line(entry: dict[str, Any]) -> str:
    task = f" on {entry['task_id']}" if entry.get("task_id") else ""
    note = f" ({entry['note']})" if entry.get("note") else ""
    line = f"{entry['agent']}: {entry['state']}{task}{note}, until {entry['expires_at']}"
    if "wakeable" not in entry:  # an announcement's answer
        return line
    paths = ", ".join(f"{p['path']} since {p['since']}" for p in entry["paths"]) or "none"
    push = entry.get("last_push_at")
    pushed = f"; last push {push} ({entry['last_push_path']})" if push else ""
    held = entry.get("leases") or {}
    leases = f"; leases: {held['count']} ({', '.join(held['paths'])})" if held.get("count") else ""
    return f"{line}; wakeable: {entry['wakeable']} (paths: {paths}{pushed}){leases}"


@presence_app.command("announce")
def announce(
    agent: AgentOpt,
    state: StateOpt,
    task_id: TaskOpt = None,
    note: NoteOpt = None,
    ttl_s: TtlOpt = None,
    path: PathOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Announce (or refresh) yourself; the entry vanishes after --ttl-s unless refreshed."""
    args = given_args(agent=agent, state=state, task_id=task_id, note=note, ttl_s=ttl_s, path=path)
    out = _hub_call(hub, token, "presence_announce", **args)
    emit(out, as_json, _line(out["presence"]))


@presence_app.command("leave")
def leave(
    agent: AgentOpt, hub: HubOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Remove yourself from presence at once."""
    out = _hub_call(hub, token, "presence_leave", agent=agent)
    emit(out, as_json, f"{agent}: {'left' if out['left'] else 'was not present'}")


@presence_app.command("list")
def list_(hub: HubOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Who is home now."""
    out = _hub_call(hub, token, "presence_list")
    lines = [_line(e) for e in out["agents"]] or ["Nobody is announced."]
    lines += [f"{e['agent']}: no live delivery path (wakeable: no)" for e in out["unreachable"]]
    emit(out, as_json, "\n".join(lines))
