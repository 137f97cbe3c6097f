"""The `task` command group (RFC 0007): `create`, one command per lifecycle move (`claim`,
`progress`, `block`, `unblock`, `complete`, `fail`, `decline`, `cancel`, `accept`, `reject`,
`reopen`), `status` and `list`. Each is one core call (`task_create`, `task_update`,
`task_status`, `task_list`); the store decides what is legal. Arguments and answers of the
commands the fast path also answers are writes.py's.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from mempalace_logstream.cli import writes
from mempalace_logstream.cli.byteio import refusals
from mempalace_logstream.cli.options import (
    BodyFileOpt,
    BodyOpt,
    DbOpt,
    FromAgentOpt,
    HubOpt,
    JsonOpt,
    LimitOpt,
    Multi,
    PalaceOpt,
    TokenOpt,
)
from mempalace_logstream.cli.root import app, new_typer
from mempalace_logstream.cli.shared import emit, fail, given_args, run, warn

task_app = new_typer(help="Delegate work as tasks and move them through their lifecycle.")
app.add_typer(task_app, name="task")

ProjectOpt = Annotated[
    str, typer.Option("--project", help="Project name; the stream is project/<slug>.")
]
AssigneeOpt = Annotated[str, typer.Option("--to-agent", help="The agent that should do it.")]
TaskBranchOpt = Annotated[str, typer.Option("--branch", help="Git branch to work on.")]
TaskCommitOpt = Annotated[str, typer.Option("--base-commit", help="7-64 hex commit id.")]
GoalOpt = Annotated[str | None, typer.Option("--goal", help="What to do.")]
GoalFileOpt = Annotated[
    str | None, typer.Option("--goal-file", help="Goal from a file, - = stdin.")
]
DoneOpt = Annotated[str | None, typer.Option("--done", help="Definition of done.")]
DONE_FILE_HELP = "Definition of done from a file, - = stdin."
DoneFileOpt = Annotated[str | None, typer.Option("--done-file", help=DONE_FILE_HELP)]
ParentOpt = Annotated[
    str | None, typer.Option("--parent", help="The task this one is delegated from.")
]
OldParentOpt = Annotated[
    str | None,
    typer.Option("--parent-correlation-id", help="The reference's name for --parent."),
]
LeaseOpt = Annotated[
    int | None,
    typer.Option("--lease-ms", help="How long a claim holds the task without progress (ms)."),
]
TaskIdArg = Annotated[str, typer.Argument(help="The task id (its correlation id).")]
ClaimTimeoutOpt = Annotated[
    int | None,
    typer.Option(
        "--claim-timeout-ms",
        help="Remind the assignee when unclaimed this long (ms; hub default 10 min; 0 off).",
    ),
]
MaxRemindersOpt = Annotated[
    int | None,
    typer.Option("--max-reminders", help="Reminders before task.stalled (hub default 3)."),
]
ThreadBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--thread-budget", help="Agent-written events on the thread between persons (60)."
    ),
]


@task_app.command("create")
def task_create(
    project: ProjectOpt,
    from_agent: FromAgentOpt,
    to_agent: AssigneeOpt,
    branch: TaskBranchOpt,
    base_commit: TaskCommitOpt,
    goal: GoalOpt = None,
    goal_file: GoalFileOpt = None,
    done: DoneOpt = None,
    done_file: DoneFileOpt = None,
    parent: ParentOpt = None,
    parent_correlation_id: OldParentOpt = None,
    lease_ms: LeaseOpt = None,
    claim_timeout_ms: ClaimTimeoutOpt = None,
    max_reminders: MaxRemindersOpt = None,
    thread_budget: ThreadBudgetOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delegate a task: appends task.request and prints a handoff line to paste."""
    # The parameters by name: writes.py builds the call from them, as the fast path does.
    with refusals():
        fields = writes.create_args(locals())
    out = run(db, palace, "task_create", hub, token, **fields)
    emit(out, as_json, writes.created_text(out))
    warn(out)


# ----------------------------------------------------------------------------- moves

MOVES = {
    "claim": "Take the task (you are its addressee, or it is addressed to *).",
    "progress": "Report progress in percent (0-100, above the last value); renews your lease.",
    "block": "Ask the requester a question (--body); the task waits for the answer.",
    "unblock": "Answer a blocked task (--body) as its requester.",
    "complete": "Offer a result (--artifact-id, --disposition, --verification).",
    "fail": "Give up on the task (--retryable if another attempt may work).",
    "decline": "Refuse a task addressed to you before claiming it.",
    "cancel": "Withdraw your task.",
    "accept": "Accept the offered result: the task is completed.",
    "reject": "Send the result back for rework (--body says what).",
    "reopen": "Open a failed or declined task again for a new attempt.",
}
PROGRESS_HELP = "Percent done, 0-100, above the last value you reported."
ProgressArg = Annotated[float | None, typer.Argument(help=PROGRESS_HELP, show_default=False)]
ProgressOpt = Annotated[
    float | None,
    typer.Option("--progress", help="The same as the progress argument.", show_default=False),
]
RetryOpt = Annotated[bool, typer.Option("--retryable", help="Another attempt may work.")]
DispositionOpt = Annotated[
    str | None,
    typer.Option("--disposition", help="completed, partial, blocked, failed or no_artifact."),
]
ArtifactOpt = Annotated[
    Multi, typer.Option("--artifact-id", help="An artifact of the result (repeat).")
]
VerificationOpt = Annotated[
    Multi,
    typer.Option("--verification", help="NAME=passed|failed|not_run, a check you ran (repeat)."),
]
ClaimLeaseOpt = Annotated[
    int | None,
    typer.Option("--lease-ms", help="How long you hold the task without progress (ms)."),
]

_EMPTY = inspect.Parameter.empty
# Every parameter a move command may take, in the order --help lists them: (type, default).
_PARAMS: dict[str, tuple[Any, Any]] = {
    "task_id": (TaskIdArg, _EMPTY),
    "progress": (ProgressArg, None),
    "from_agent": (FromAgentOpt, _EMPTY),
    "body": (BodyOpt, None),
    "body_file": (BodyFileOpt, None),
    "progress_option": (ProgressOpt, None),
    "lease_ms": (ClaimLeaseOpt, None),
    "retryable": (RetryOpt, False),
    "disposition": (DispositionOpt, None),
    "artifact_id": (ArtifactOpt, None),
    "verification": (VerificationOpt, None),
    "db": (DbOpt, None),
    "palace": (PalaceOpt, None),
    "hub": (HubOpt, None),
    "token": (TokenOpt, None),
    "as_json": (JsonOpt, False),
}
# What each move takes beyond the task, the writer, a body and the global options.
_OWN = {
    "claim": ("lease_ms",),
    "progress": ("progress", "progress_option"),
    "complete": ("disposition", "artifact_id", "verification"),
    "fail": ("retryable",),
}


def _signature(action: str) -> inspect.Signature:
    """The move's own parameters (so `task ACTION --help` lists only what that move takes)."""
    own = set(_OWN.get(action, ()))
    common = {"task_id", "from_agent", "body", "body_file", "db", "palace", "hub", "token"}
    wanted = [n for n in _PARAMS if n in own or n in common or n == "as_json"]
    return inspect.Signature(
        [
            inspect.Parameter(
                n, inspect.Parameter.KEYWORD_ONLY, annotation=_PARAMS[n][0], default=_PARAMS[n][1]
            )
            for n in wanted
        ]
    )


def _move(action: str) -> Any:
    def command(**given: Any) -> None:
        with refusals():
            fields = writes.move_args(action, given)
        db, palace, hub, token = (given.get(k) for k in ("db", "palace", "hub", "token"))
        out = run(db, palace, "task_update", hub, token, **fields)
        emit(out, given.get("as_json", False), writes.moved_text(out))

    command.__doc__ = MOVES[action]
    command.__name__ = f"task_{action}"
    command.__signature__ = _signature(action)  # type: ignore[attr-defined]
    return command


for _action in MOVES:
    task_app.command(_action)(_move(_action))


# ----------------------------------------------------------------------------- reads

StateOpt = Annotated[str | None, typer.Option("--state", help="Only tasks in this state.")]
ToOpt = Annotated[str | None, typer.Option("--to-agent", help="Tasks addressed to this agent.")]
RequesterOpt = Annotated[
    str | None, typer.Option("--from-agent", help="Tasks this agent requested.")
]
StreamOpt = Annotated[str | None, typer.Option("--stream", help="Tasks of this stream.")]
CursorOpt = Annotated[str | None, typer.Option("--cursor", help="The next page's cursor.")]


@task_app.command("status")
def task_status(
    task_id: TaskIdArg,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Where a task stands: state, holder, goal, definition of done, a blocked task's question,
    lost leases, progress, result, children."""
    out = run(db, palace, "task_status", hub, token, task_id=task_id)
    emit(out, as_json, writes.status_text(out))


@task_app.command("list")
def task_list(
    state: StateOpt = None,
    to_agent: ToOpt = None,
    from_agent: RequesterOpt = None,
    stream: StreamOpt = None,
    parent: ParentOpt = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    hub: HubOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tasks, most recently moved first."""
    args = given_args(
        state=state,
        to_agent=to_agent,
        from_agent=from_agent,
        stream=stream,
        parent_task_id=parent,
        limit=limit,
        cursor=cursor,
    )
    out = run(db, palace, "task_list", hub, token, **args)
    lines = [writes.task_line(t) for t in out["tasks"]] or ["No tasks."]
    if out["has_more"]:
        lines.append(f"(more: --cursor {out['cursor']})")
    emit(out, as_json, "\n".join(lines))


@task_app.command("remind")
def task_remind(
    claim_timeout_ms: ClaimTimeoutOpt = None,
    max_reminders: MaxRemindersOpt = None,
    db: DbOpt = None,
    palace: PalaceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One pass of the reminders for unclaimed tasks, without a hub (a hub runs them itself):
    the next task.reminder to each overdue assignee, or the task.stalled to its requester."""
    from mempalace_logstream import errors, reminders
    from mempalace_logstream.cli.shared import guard_settings, open_store

    try:
        store = open_store(db, palace, create=False)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    try:
        store.task_settings = guard_settings(
            store.task_settings, claim_timeout_ms=claim_timeout_ms, max_reminders=max_reminders
        )
        written = reminders.remind_once(store)
    except errors.LogstreamError as exc:
        raise fail(exc.message) from None
    finally:
        store.close()
    rows = [x.to_dict() for x in written]
    lines = [
        f"{r['kind']}{' ' + str(r['n']) if r['n'] else ''}: {r['task_id']} ({r['event_id']})"
        for r in rows
    ]
    emit({"written": rows, "count": len(rows)}, as_json, "\n".join(lines) or "nothing due")
