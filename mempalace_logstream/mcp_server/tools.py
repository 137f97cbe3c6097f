"""The MCP tools: thin module-level functions whose signatures and docstrings are what agents
read (the JSON schemas and descriptions). Each passes its arguments to the server's backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from mempalace_logstream.mcp_server.server import LogstreamMCP


async def _call(ctx: Context, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """The tool functions' own path (a direct call, not through `call_tool`)."""
    server = ctx.mcp_server
    assert isinstance(server, LogstreamMCP)
    return await server.run_op(op, {k: val for k, val in args.items() if k != "ctx"})


# Parameter types shared by several tools; descriptions are read by agents.
Agent = Annotated[str, Field(description="Your agent id, e.g. 'claude-1'. Max 256 chars.")]
Filter = Annotated[
    str | list[str] | None,
    Field(description="Filter; a list means any of these values (OR). Filters AND together."),
]
Cursor = Annotated[
    str | None,
    Field(
        description="Only events strictly after this event id (the `cursor` of your last read); "
        "'tip' means only events that arrive from now on."
    ),
]
Limit = Annotated[int | None, Field(description="Max events to return, 1-500 (default 50).")]
Metadata = Annotated[
    dict[str, Any] | str | None, Field(description="A JSON object (max 64 KiB serialized).")
]
IdemKey = Annotated[
    str | None,
    Field(description="Retry-safe key: re-sending the same call returns the stored result."),
]


async def mempalace_event_append(
    ctx: Context,
    type: Annotated[
        str,
        Field(
            description="Event type, e.g. 'task.reply', 'note', 'status' ('identity.*' is "
            "reserved for the admin's key events)."
        ),
    ],
    stream: Annotated[str, Field(description="Stream, e.g. 'project/myrepo'.")],
    room: Annotated[str, Field(description="Room within the stream, e.g. 'delegation'.")],
    from_agent: Agent,
    topic: str | None = None,
    to_agent: Annotated[str | None, Field(description="Addressee agent id, or '*'.")] = None,
    correlation_id: Annotated[str | None, Field(description="Thread/task id to reply on.")] = None,
    branch: str | None = None,
    base_commit: str | None = None,
    status: Annotated[
        str | None,
        Field(description="open, claimed, ready, applied, blocked, failed or superseded."),
    ] = None,
    body: Annotated[str, Field(description="Text body, max 256 KiB; never truncated.")] = "",
    metadata: Metadata = None,
    artifact_ids: Annotated[
        list[str] | None, Field(description="Artifacts this event refers to.")
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Append one event to the shared log and return it ({event}) with its id.

    Use it to post a status, a reply on a task (set correlation_id), a claim (status=claimed)
    or a note to another agent (to_agent). Events are immutable: to change a status, append a
    new event. Invalid input is an error naming the field; nothing is written.
    """
    return await _call(ctx, "event_append", locals())


async def mempalace_event_list(
    ctx: Context,
    stream: Filter = None,
    room: Filter = None,
    topic: Filter = None,
    type: Filter = None,
    to_agent: Annotated[
        str | list[str] | None, Field(description="Inbox: events addressed to you (or to '*').")
    ] = None,
    from_agent: Annotated[
        str | None, Field(description="Your identity; NOT a filter (use writer).")
    ] = None,
    writer: Annotated[
        str | list[str] | None, Field(description="Filter by author agent id.")
    ] = None,
    exclude_writer: Annotated[
        str | list[str] | None, Field(description="Leave out events by these authors.")
    ] = None,
    correlation_id: Filter = None,
    status: Filter = None,
    since_event_id: Cursor = None,
    before_event_id: Annotated[str | None, Field(description="Only events before this id.")] = None,
    since_created_at: Annotated[
        str | None, Field(description="Time window start: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ.")
    ] = None,
    limit: Limit = None,
    order: Annotated[
        str | None, Field(description="'asc' or 'desc'; default asc with a cursor, else desc.")
    ] = None,
    preview: Annotated[
        bool | None, Field(description="Cut bodies to 200 characters (body_truncated).")
    ] = None,
    slim: Annotated[
        bool | None, Field(description="Drop replication fields and empty values.")
    ] = None,
) -> dict[str, Any]:
    """Read events now, without waiting: {events, count, cursor, has_more[, note]}.

    Newest first without a cursor; oldest first after since_event_id. Pass the returned `cursor`
    as since_event_id next time to get only newer events (it also skips rows your filters
    rejected). To block until something arrives, use mempalace_event_wait instead.
    """
    return await _call(ctx, "event_list", locals())


async def mempalace_event_wait(
    ctx: Context,
    stream: Filter = None,
    room: Filter = None,
    topic: Filter = None,
    type: Filter = None,
    to_agent: Annotated[
        str | list[str] | None, Field(description="Wait for events addressed to you (or '*').")
    ] = None,
    from_agent: Annotated[
        str | None, Field(description="Your identity; NOT a filter (use writer).")
    ] = None,
    writer: Annotated[
        str | list[str] | None, Field(description="Filter by author agent id.")
    ] = None,
    exclude_writer: Annotated[
        str | list[str] | None, Field(description="Ignore events by these authors (e.g. you).")
    ] = None,
    correlation_id: Filter = None,
    status: Filter = None,
    since_event_id: Cursor = None,
    since_created_at: str | None = None,
    timeout_ms: Annotated[
        int | None, Field(description="How long to block, 0-300000 ms (default 60000).")
    ] = None,
    limit: Limit = None,
    preview: bool | None = None,
    slim: bool | None = None,
) -> dict[str, Any]:
    """Block until a matching event exists after since_event_id, then return it.

    Returns {timed_out, events, count, cursor, has_more}. Returns at once if matches already
    exist after the cursor (or at all, without one; use since_event_id='tip' for only new ones).
    A timeout is a normal answer (timed_out=true, events=[]): call again with the same cursor.
    Wake-up is push-based (milliseconds), and a long wait does not block other calls.
    """
    return await _call(ctx, "event_wait", locals())


async def mempalace_event_get(
    ctx: Context, event_id: Annotated[str, Field(description="The event id.")]
) -> dict[str, Any]:
    """Fetch one event by id: {event}. Errors if the id is unknown on this log."""
    return await _call(ctx, "event_get", locals())


async def mempalace_event_ack(
    ctx: Context,
    event_id: Annotated[str, Field(description="The event you acknowledge.")],
    from_agent: Agent,
    status: Annotated[
        str | None, Field(description="e.g. claimed, applied, blocked, failed.")
    ] = None,
    body: str = "",
    topic: str | None = None,
    metadata: Metadata = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Acknowledge an event: appends an `event.ack` addressed to its author on the same thread.

    Returns {event}. The acknowledged event never changes. Use status=claimed to claim a task,
    status=applied after applying a patch.
    """
    return await _call(ctx, "event_ack", locals())


async def mempalace_event_redact(
    ctx: Context,
    event_id: Annotated[str, Field(description="The event whose content is removed.")],
    reason: Annotated[str, Field(description="Why (kept with the tombstone).")],
    from_agent: Annotated[
        str | None, Field(description="Who redacts: the admin or the event's own writer.")
    ] = None,
    artifact_ids: Annotated[
        list[str] | None,
        Field(description="Artifacts of the event to redact too (only ones you created)."),
    ] = None,
    keep_body: Annotated[
        bool | None, Field(description="Remove only the artifacts, keep the body.")
    ] = None,
    body_sha256: Annotated[
        str | None, Field(description="Refuse unless the body held hashes to this.")
    ] = None,
) -> dict[str, Any]:
    """Redact a leaked secret: the body (and/or artifact bytes) become a tombstone on every
    replica; the SHA-256, the signature and who/when/why stay. Returns {event, target, parts}.
    """
    return await _call(ctx, "event_redact", locals())


async def mempalace_artifact_put(
    ctx: Context,
    kind: Annotated[str, Field(description="patch, file, log, json or note.")],
    content: Annotated[
        str, Field(description="Exact content (UTF-8 text, or base64 with encoding=base64).")
    ],
    created_by: Agent,
    metadata: Metadata = None,
    encoding: Annotated[
        str | None, Field(description="'utf-8' (default for text) or 'base64' for binary.")
    ] = None,
) -> dict[str, Any]:
    """Store content byte-exact (max 4 MiB) and return {artifact} with its id and sha256.

    Reference the id from an event (artifact_ids) so others can fetch it with
    mempalace_artifact_get. For a patch meant for review, mempalace_patch_submit does both steps.
    """
    return await _call(ctx, "artifact_put", locals())


async def mempalace_artifact_get(
    ctx: Context, artifact_id: Annotated[str, Field(description="The artifact id.")]
) -> dict[str, Any]:
    """Fetch an artifact with its exact content: {artifact: {id, kind, sha256, content, ...}}.

    Binary content comes base64-encoded (encoding=base64). Check `sha256` against the bytes.
    """
    return await _call(ctx, "artifact_get", locals())


async def mempalace_patch_submit(
    ctx: Context,
    content: Annotated[str, Field(description="The unified diff, exact (max 4 MiB).")],
    from_agent: Agent,
    stream: Annotated[str, Field(description="Stream, e.g. the task's 'project/<slug>'.")],
    room: str = "patches",
    topic: str | None = None,
    to_agent: Annotated[str | None, Field(description="Who should review/apply it.")] = None,
    correlation_id: Annotated[str | None, Field(description="The task's correlation_id.")] = None,
    branch: str | None = None,
    base_commit: str | None = None,
    body: str = "",
    metadata: Metadata = None,
    encoding: Annotated[
        str | None, Field(description="'utf-8' (default) or 'base64' for a non-UTF-8 diff.")
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Deliver a patch: stores it as an artifact and appends `patch.ready`, in one transaction.

    Returns {artifact, event[, warnings]}. Warnings (e.g. no trailing newline) are advice;
    the content is stored exactly as sent.
    """
    return await _call(ctx, "patch_submit", locals())


async def mempalace_task_create(
    ctx: Context,
    project: Annotated[str, Field(description="Project name; the stream is project/<slug>.")],
    from_agent: Agent,
    to_agent: Annotated[str, Field(description="The agent that should do the work.")],
    goal: Annotated[str, Field(description="What to do, in plain words.")],
    branch: Annotated[str, Field(description="Branch to work on.")],
    base_commit: Annotated[str, Field(description="Commit hash (7-64 hex), not a branch name.")],
    done: Annotated[str, Field(description="Definition of done: how to tell it is finished.")],
    parent_task_id: Annotated[
        str | None,
        Field(description="The task this one is delegated from (chains: depth <= 3 by default)."),
    ] = None,
    parent_correlation_id: Annotated[
        str | None, Field(description="The reference's name for parent_task_id.")
    ] = None,
    lease_ms: Annotated[
        int | None,
        Field(description="How long a claim holds the task without progress (ms; default 15 min)."),
    ] = None,
    claim_timeout_ms: Annotated[
        int | None,
        Field(
            description="Remind the assignee when unclaimed this long (ms; default 10 min; 0 off)."
        ),
    ] = None,
    max_reminders: Annotated[
        int | None,
        Field(description="Reminders before task.stalled goes to you (hub default 3)."),
    ] = None,
    thread_budget: Annotated[
        int | None,
        Field(
            description="Agent-written events allowed on the thread between persons (default 60)."
        ),
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Delegate work: appends a `task.request` (state open); returns {task_id, task, handoff}.

    `task_id` (the request's correlation_id) names the task in the other task tools: the
    thread for claims, progress and the result; `task` is the request event.
    Give `handoff` (one line) to the worker so it can find the task. Follow it with
    mempalace_task_status; the worker moves it with mempalace_task_update.
    """
    return await _call(ctx, "task_create", locals())


async def mempalace_task_update(
    ctx: Context,
    task_id: Annotated[str, Field(description="The task (its correlation_id).")],
    action: Annotated[
        str,
        Field(
            description="claim | progress | block | complete | fail | decline (the worker); "
            "unblock | accept | reject | cancel | reopen (the requester)."
        ),
    ],
    from_agent: Agent,
    body: Annotated[
        str,
        Field(
            description="Words for the other side: the question (block), the answer "
            "(unblock), what to rework (reject), the reason (fail, decline, cancel)."
        ),
    ] = "",
    progress: Annotated[
        float | None,
        Field(
            description="progress: percent done, 0-100, above the last value you reported.",
            json_schema_extra={"minimum": 0, "maximum": 100},
        ),
    ] = None,
    lease_ms: Annotated[
        int | None, Field(description="claim: how long you hold it without progress (ms).")
    ] = None,
    retryable: Annotated[bool | None, Field(description="fail: may another attempt work?")] = None,
    result: Annotated[
        dict[str, Any] | None,
        Field(
            description="complete: {disposition: completed|partial|blocked|failed|no_artifact, "
            "verification: [{name, status: passed|failed|not_run}]}; completed needs artifact_ids."
        ),
    ] = None,
    artifact_ids: Annotated[
        list[str] | None, Field(description="complete: the artifacts of your result.")
    ] = None,
    idempotency_key: IdemKey = None,
) -> dict[str, Any]:
    """Move a task through its lifecycle; returns {event, task} with the task's new state.

    States: open -> claimed -> working -> ready -> completed, plus blocked, failed, declined,
    cancelled. The worker (the addressee; anyone for to_agent '*') claims, then reports
    progress in percent, 0-100 (renews its lease), blocks with a question, completes with a
    result, or fails.
    The requester answers a block (unblock), accepts or rejects a result, cancels, or reopens
    a failed/declined task. A refused move writes nothing and says why: the task's state
    ("task x is cancelled; claim refused"), who may act, a lost lease or a lost race.
    """
    return await _call(ctx, "task_update", locals())


async def mempalace_task_status(
    ctx: Context, task_id: Annotated[str, Field(description="The task (its correlation_id).")]
) -> dict[str, Any]:
    """Where a task stands: {task: {state, a2a_state, requester, assignee, attempt,
    lease_expires_at, progress (percent), goal, done, question (while blocked), result,
    parent_task_id, children, conflicts, anomalies, lost, events, artifacts}}. A lease that
    passed shows the task open again (lost)."""
    return await _call(ctx, "task_status", locals())


async def mempalace_task_list(
    ctx: Context,
    state: Annotated[
        str | None,
        Field(
            description="open, claimed, working, blocked, ready, completed, declined, failed "
            "or cancelled."
        ),
    ] = None,
    to_agent: Annotated[str | None, Field(description="Tasks addressed to this agent.")] = None,
    from_agent: Annotated[str | None, Field(description="Tasks this agent requested.")] = None,
    stream: str | None = None,
    parent_task_id: Annotated[str | None, Field(description="Children of this task.")] = None,
    limit: Limit = None,
    cursor: Annotated[
        str | None, Field(description="The cursor of the previous page, for the next one.")
    ] = None,
) -> dict[str, Any]:
    """Tasks, most recently moved first: {tasks, count, cursor, has_more}. E.g. your open
    work: state=open, to_agent=<you>; what you delegated that is ready: state=ready,
    from_agent=<you>."""
    return await _call(ctx, "task_list", locals())


async def mempalace_version_vector(ctx: Context) -> dict[str, Any]:
    """This log's replica id and version vector: {replica_id, version_vector}.

    The vector maps each origin replica to the highest origin_seq held here; compare two hubs'
    vectors to see whether they are in sync.
    """
    return await _call(ctx, "version_vector", {})


async def mempalace_stats(ctx: Context) -> dict[str, Any]:
    """Overview of the log: event counts per stream, type and writer, artifact totals and the
    database size. Cheap; use it to find which streams are active before listing."""
    return await _call(ctx, "stats", {})


async def mempalace_presence_announce(
    ctx: Context,
    agent: Agent,
    state: Annotated[str, Field(description="watching, working or idle.")],
    task_id: Annotated[str | None, Field(description="The task you are on.")] = None,
    note: Annotated[str | None, Field(description="A short note, max 500 chars.")] = None,
    ttl_s: Annotated[
        int | None, Field(description="Seconds until you vanish unless you announce again (60).")
    ] = None,
) -> dict[str, Any]:
    """Tell the hub you are home: {presence}. Held in the hub's memory, never in the log; it
    vanishes after ttl_s unless announced again. Needs a hub (the /mcp endpoint, or --hub)."""
    return await _call(ctx, "presence_announce", locals())


async def mempalace_presence_leave(ctx: Context, agent: Agent) -> dict[str, Any]:
    """Leave presence at once, when you stop working for the session: {left}. Others then
    stop counting on you; announcing again brings you back."""
    return await _call(ctx, "presence_leave", locals())


async def mempalace_presence_list(ctx: Context) -> dict[str, Any]:
    """Who is home now: {agents: [{agent, state, task_id, note, expires_at}], count}. Use it
    to pick a free worker before delegating, or to see whether the agent you wait on is up."""
    return await _call(ctx, "presence_list", {})


READ_TOOLS: tuple[Callable[..., Any], ...] = (
    mempalace_event_list,
    mempalace_event_wait,
    mempalace_event_get,
    mempalace_artifact_get,
    mempalace_task_status,
    mempalace_task_list,
    mempalace_version_vector,
    mempalace_stats,
    mempalace_presence_list,
)
WRITE_TOOLS: tuple[Callable[..., Any], ...] = (
    mempalace_event_append,
    mempalace_event_ack,
    mempalace_event_redact,
    mempalace_artifact_put,
    mempalace_patch_submit,
    mempalace_task_create,
    mempalace_task_update,
    mempalace_presence_announce,
    mempalace_presence_leave,
)
