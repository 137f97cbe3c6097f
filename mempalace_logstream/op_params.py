"""The parameters of every operation (SPEC §3), one pydantic model each: the names, the types
agents read, what each parameter means (its description) and which are required. Each model's
docstring is the operation's description. `operations.OPERATIONS` pairs each model with its
handler; the MCP tools, the HTTP request models and the CLI's checks are derived from these.

Describes only: the values are checked once, by the core (`validation`, the store), so every
surface refuses bad input with the same text. Pure: pydantic and the core's constants.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from mempalace_logstream import tasks
from mempalace_logstream import validation as v
from mempalace_logstream.models import DRAFT_SPEC, EVENT_SPEC


class Params(BaseModel):
    """The parameters of one operation (the docstring of a subclass describes the operation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def described(text: str, **schema: Any) -> Any:
    """A field's description (and any JSON-schema extras, such as bounds)."""
    return Field(description=text, json_schema_extra=schema or None)


# Types shared by several operations.
Agent = Annotated[str, described("Your agent id, e.g. 'claude-1'. Max 256 chars.")]
Filter = Annotated[
    str | list[str] | None,
    described("Filter; a list means any of these values (OR). Filters AND together."),
]
Metadata = Annotated[
    dict[str, Any] | str | None, described("A JSON object (max 64 KiB serialized).")
]
IdemKey = Annotated[
    str | None,
    described("Retry-safe key: re-sending the same call returns the stored result."),
]
Limit = Annotated[int | None, described(f"Max items to return, 1-{v.MAX_LIST_LIMIT} (default 50).")]
Topic = Annotated[str | None, described("Topic within the room, e.g. 'review'.")]
Branch = Annotated[str | None, described("The git branch the event is about.")]
BaseCommit = Annotated[str | None, described("The commit (hash) the work is based on.")]
Body = Annotated[str, described("Text body, max 256 KiB; never truncated.")]
Encoding = Annotated[
    str | None, described("'utf-8' (default for text) or 'base64' for binary content.")
]
TaskId = Annotated[str, described("The task (its correlation_id).")]


# The type and default of an event field a writer gives, by its rule (`models.FieldSpec.check`).
_BY_RULE: dict[str, tuple[Any, Any]] = {
    "type": (str, ...),
    "required": (str, ...),
    "routing": (str | None, None),
    "status": (str | None, None),
    "artifact_ids": (list[str] | None, None),
    "body": (str, ""),
    "metadata": (dict[str, Any] | str | None, None),
}
_NOTES = {"status": f" One of {', '.join(v.STATUSES)}."}  # what a rule allows, spelled out


def _event_params() -> dict[str, Any]:
    """The append operation's event parameters, derived from the event spec (`DRAFT_SPEC`):
    each field a writer gives, by its wire name, typed by its rule, described by its `param`."""
    out: dict[str, Any] = {}
    for name, wire, rule in DRAFT_SPEC:
        kind, default = _BY_RULE[rule]
        text = dict(EVENT_SPEC)[name].param + _NOTES.get(rule, "")
        out[wire] = (kind, Field(default, description=text))
    return out


EventAppend: type[Params] = create_model(
    "EventAppend",
    __base__=Params,
    __module__=__name__,
    __doc__="""Append one event to the shared log and return it ({event}) with its id.

    Use it to post a status, a reply on a task (set correlation_id), a claim (status=claimed)
    or a note to another agent (to_agent). Events are immutable: to change a status, append a
    new event. Invalid input is an error naming the field; nothing is written.
    """,
    **_event_params(),
    idempotency_key=(IdemKey, None),
)


class Reading(Params):
    """The filters, cursor and shape of a read (event_list, event_wait)."""

    stream: Filter = None
    room: Filter = None
    topic: Filter = None
    type: Filter = None
    to_agent: Annotated[
        str | list[str] | None,
        described("Inbox: events addressed to this agent (or to '*')."),
    ] = None
    writer: Annotated[str | list[str] | None, described("Filter by author agent id.")] = None
    exclude_writer: Annotated[
        str | list[str] | None, described("Leave out events by these authors (e.g. you).")
    ] = None
    correlation_id: Filter = None
    status: Filter = None
    from_agent: Annotated[str | None, described("Your identity; NOT a filter (use writer).")] = None
    since_event_id: Annotated[
        str | None,
        described(
            "Only events strictly after this event id (the `cursor` of your last read); "
            "'tip' means only events that arrive from now on."
        ),
    ] = None


class EventList(Reading):
    """Read events now, without waiting: {events, count, cursor, has_more[, note]}.

    Newest first without a cursor; oldest first after since_event_id. Pass the returned `cursor`
    as since_event_id next time to get only newer events (it also skips rows your filters
    rejected). To block until something arrives, use mempalace_event_wait instead.
    """

    before_event_id: Annotated[str | None, described("Only events before this id.")] = None
    since_created_at: Annotated[
        str | None, described("Time window start: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ.")
    ] = None
    limit: Limit = None
    order: Annotated[
        str | None, described("'asc' or 'desc'; default asc with a cursor, else desc.")
    ] = None
    preview: Annotated[bool | None, described("Cut bodies to 200 characters (body_truncated).")] = (
        None
    )
    slim: Annotated[bool | None, described("Drop replication fields and empty values.")] = None


class EventWait(Reading):
    """Block until a matching event exists after since_event_id, then return it.

    Returns {timed_out, events, count, cursor, has_more}. Returns at once if matches already
    exist after the cursor (or at all, without one; use since_event_id='tip' for only new ones).
    A timeout is a normal answer (timed_out=true, events=[]): call again with the same cursor.
    Wake-up is push-based (milliseconds), and a long wait does not block other calls.
    """

    since_created_at: Annotated[
        str | None, described("Time window start: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ.")
    ] = None
    limit: Limit = None
    preview: Annotated[bool | None, described("Cut bodies to 200 characters (body_truncated).")] = (
        None
    )
    slim: Annotated[bool | None, described("Drop replication fields and empty values.")] = None
    timeout_ms: Annotated[
        int | None,
        described(f"How long to block, 0-{v.MAX_WAIT_MS} ms (default {v.DEFAULT_WAIT_MS})."),
    ] = None


class EventGet(Params):
    """Fetch one event by id: {event}. Errors if the id is unknown on this log."""

    event_id: Annotated[str, described("The event id.")]


class EventAck(Params):
    """Acknowledge an event: appends an `event.ack` addressed to its author on the same thread.

    Returns {event}. The acknowledged event never changes. Use status=claimed to claim a task,
    status=applied after applying a patch.
    """

    event_id: Annotated[str, described("The event you acknowledge.")]
    from_agent: Agent
    status: Annotated[str | None, described("e.g. claimed, applied, blocked, failed.")] = None
    body: Body = ""
    topic: Annotated[str | None, described("Topic of the ack (default: the event's).")] = None
    metadata: Metadata = None
    idempotency_key: IdemKey = None


class EventRedact(Params):
    """Redact a leaked secret: the body (and/or artifact bytes) become a tombstone on every
    replica; the SHA-256, the signature and who/when/why stay. Returns {event, target, parts}.
    """

    event_id: Annotated[str, described("The event whose content is removed.")]
    reason: Annotated[str, described("Why (kept with the tombstone).")]
    from_agent: Annotated[
        str | None, described("Who redacts: the admin or the event's own writer.")
    ] = None
    artifact_ids: Annotated[
        list[str] | None,
        described("Artifacts of the event to redact too (only ones you created)."),
    ] = None
    keep_body: Annotated[bool | None, described("Remove only the artifacts, keep the body.")] = None
    body_sha256: Annotated[str | None, described("Refuse unless the body held hashes to this.")] = (
        None
    )


class ArtifactPut(Params):
    """Store content byte-exact (max 4 MiB) and return {artifact} with its id and sha256.

    Reference the id from an event (artifact_ids) so others can fetch it with
    mempalace_artifact_get. For a patch meant for review, mempalace_patch_submit does both steps.
    """

    kind: Annotated[str, described(f"One of {', '.join(v.ARTIFACT_KINDS)}.")]
    content: Annotated[
        str, described("Exact content (UTF-8 text, or base64 with encoding=base64).")
    ]
    created_by: Agent
    metadata: Metadata = None
    encoding: Encoding = None


class ArtifactGet(Params):
    """Fetch an artifact with its exact content: {artifact: {id, kind, sha256, content, ...}}.

    Binary content comes base64-encoded (encoding=base64). Check `sha256` against the bytes.
    """

    artifact_id: Annotated[str, described("The artifact id.")]


class PatchSubmit(Params):
    """Deliver a patch: stores it as an artifact and appends `patch.ready`, in one transaction.

    Returns {artifact, event[, warnings]}. Warnings (e.g. no trailing newline) are advice;
    the content is stored exactly as sent.
    """

    content: Annotated[str, described("The unified diff, exact (max 4 MiB).")]
    from_agent: Agent
    stream: Annotated[str, described("Stream, e.g. the task's 'project/<slug>'.")]
    room: Annotated[str, described("Room within the stream.")] = "patches"
    topic: Topic = None
    to_agent: Annotated[str | None, described("Who should review/apply it.")] = None
    correlation_id: Annotated[str | None, described("The task's correlation_id.")] = None
    branch: Branch = None
    base_commit: BaseCommit = None
    body: Body = ""
    metadata: Metadata = None
    encoding: Encoding = None
    idempotency_key: IdemKey = None


class TaskCreate(Params):
    """Delegate work: appends a `task.request` (state open); returns {task_id, task, handoff}.

    `task_id` (the request's correlation_id) names the task in the other task tools: the
    thread for claims, progress and the result; `task` is the request event.
    Give `handoff` (one line) to the worker so it can find the task. Follow it with
    mempalace_task_status; the worker moves it with mempalace_task_update.
    """

    project: Annotated[str, described("Project name; the stream is project/<slug>.")]
    from_agent: Agent
    to_agent: Annotated[str, described("The agent that should do the work.")]
    goal: Annotated[str, described("What to do, in plain words.")]
    branch: Annotated[str, described("Branch to work on.")]
    base_commit: Annotated[str, described("Commit hash (7-64 hex), not a branch name.")]
    done: Annotated[str, described("Definition of done: how to tell it is finished.")]
    parent_task_id: Annotated[
        str | None,
        described("The task this one is delegated from (chains: depth <= 3 by default)."),
    ] = None
    parent_correlation_id: Annotated[
        str | None, described("The reference's name for parent_task_id.")
    ] = None
    lease_ms: Annotated[
        int | None,
        described("How long a claim holds the task without progress (ms; default 15 min)."),
    ] = None
    claim_timeout_ms: Annotated[
        int | None,
        described("Remind the assignee when unclaimed this long (ms; default 10 min; 0 off)."),
    ] = None
    max_reminders: Annotated[
        int | None, described("Reminders before task.stalled goes to you (default 3).")
    ] = None
    thread_budget: Annotated[
        int | None,
        described("Agent-written events allowed on the thread between persons (default 60)."),
    ] = None
    idempotency_key: IdemKey = None


class TaskUpdate(Params):
    """Move a task through its lifecycle; returns {event, task} with the task's new state.

    States: open -> claimed -> working -> ready -> completed, plus blocked, failed, declined,
    cancelled. The worker (the addressee; anyone for to_agent '*') claims, then reports
    progress in percent, 0-100 (renews its lease), blocks with a question, completes with a
    result, or fails.
    The requester answers a block (unblock), accepts or rejects a result, cancels, or reopens
    a failed/declined task. A refused move writes nothing and says why: the task's state
    ("task x is cancelled; claim refused"), who may act, a lost lease or a lost race.
    """

    task_id: TaskId
    action: Annotated[
        str,
        described(
            "claim | progress | block | complete | fail | decline (the worker); "
            "unblock | accept | reject | cancel | reopen (the requester).",
            enum=list(tasks.ACTIONS),
        ),
    ]
    from_agent: Agent
    body: Annotated[
        str,
        described(
            "Words for the other side: the question (block), the answer (unblock), what to "
            "rework (reject), the reason (fail, decline, cancel)."
        ),
    ] = ""
    progress: Annotated[
        float | None,
        described(
            "progress: percent done, 0-100, above the last value you reported.",
            minimum=0,
            maximum=100,
        ),
    ] = None
    lease_ms: Annotated[
        int | None, described("claim: how long you hold it without progress (ms).")
    ] = None
    retryable: Annotated[bool | None, described("fail: may another attempt work?")] = None
    result: Annotated[
        dict[str, Any] | None,
        described(
            "complete: {disposition: completed|partial|blocked|failed|no_artifact, "
            "verification: [{name, status: passed|failed|not_run}]}; completed needs "
            "artifact_ids."
        ),
    ] = None
    artifact_ids: Annotated[
        list[str] | None, described("complete: the artifacts of your result.")
    ] = None
    idempotency_key: IdemKey = None


class TaskStatus(Params):
    """Where a task stands: {task: {state, a2a_state, requester, assignee, attempt,
    lease_expires_at, progress (percent), goal, done, question (while blocked), result,
    parent_task_id, children, conflicts, anomalies, lost, events, artifacts}}. A lease that
    passed shows the task open again (lost)."""

    task_id: TaskId


class TaskList(Params):
    """Tasks, most recently moved first: {tasks, count, cursor, has_more}. E.g. your open
    work: state=open, to_agent=<you>; what you delegated that is ready: state=ready,
    from_agent=<you>."""

    state: Annotated[str | None, described(f"One of {', '.join(tasks.STATES)}.")] = None
    to_agent: Annotated[str | None, described("Tasks addressed to this agent.")] = None
    from_agent: Annotated[str | None, described("Tasks this agent requested.")] = None
    stream: Annotated[str | None, described("Tasks of this stream ('project/<slug>').")] = None
    parent_task_id: Annotated[str | None, described("Children of this task.")] = None
    limit: Limit = None
    cursor: Annotated[
        str | None, described("The cursor of the previous page, for the next one.")
    ] = None


class VersionVector(Params):
    """This log's replica id and version vector: {replica_id, version_vector}.

    The vector maps each origin replica to the highest origin_seq held here; compare two hubs'
    vectors to see whether they are in sync.
    """


class Stats(Params):
    """Overview of the log: event counts per stream, type and writer, artifact totals and the
    database size. Cheap; use it to find which streams are active before listing."""


class PresenceAnnounce(Params):
    """Tell the hub you are home: {presence}. Kept by the hub (shared by every hub of a
    PostgreSQL log), never in the log; it vanishes after ttl_s unless announced again. Needs a
    hub (the /mcp endpoint, or --hub)."""

    agent: Agent
    state: Annotated[str, described("watching, working or idle.")]
    task_id: Annotated[str | None, described("The task you are on.")] = None
    note: Annotated[str | None, described("A short note, max 500 chars.")] = None
    ttl_s: Annotated[
        int | None, described("Seconds until you vanish unless you announce again (60).")
    ] = None
    path: Annotated[
        str | None,
        described(
            "The delivery path this announcement keeps live, for as long as ttl_s: watch, "
            "channel (MCP channel push), codex (Codex queue), monitor, sse, or hook (hooks "
            "only: nothing pushes to you)."
        ),
    ] = None


class DeliveryStatus(Params):
    """Who an event reached, from this hub's delivery ledger: {event_id, recipients:
    [{recipient, pushed_at, pushed_path, seen_at, acked_at}], count}. pushed_at: a delivery
    path (watch, channel, codex, monitor, sse) pushed it; seen_at: the recipient first read it;
    acked_at: it acked it. Hub-local: another replica knows its own deliveries."""

    event_id: Annotated[str, described("The event id.")]


class PresenceLeave(Params):
    """Leave presence at once, when you stop working for the session: {left}. Others then
    stop counting on you; announcing again brings you back."""

    agent: Agent


class PresenceList(Params):
    """Who is home now: {agents: [{agent, state, task_id, note, expires_at, paths, wakeable,
    last_push_at, last_push_path, last_life_at}], count}. wakeable: yes (a live push path and
    it reacted to a push lately), unverified (a live push path, no reaction seen yet), no
    (hooks only: it sees messages at its next prompt); unreachable: the agents whose delivery
    paths all lapsed (a reaped watcher), wakeable no. Use it
    to pick a free worker before delegating, or to see whether the agent you wait on is up."""
