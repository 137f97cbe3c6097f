"""The parameters of every operation (SPEC §3), one pydantic model each: the names, the types
agents read, what each parameter means (its description) and which are required. Each model's
docstring is the operation's description. `operations.OPERATIONS` pairs each model with its
handler; the MCP tools, the HTTP request models and the CLI's checks are derived from these.

Describes only: the values are checked once, by the core (`validation`, the store), so every
surface refuses bad input with the same text. Pure: pydantic and the core's constants.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from mempalace_logstream import tasks
from mempalace_logstream import validation as v
from mempalace_logstream.models import DRAFT_SPEC, EVENT_SPEC


class Params(BaseModel):
    """The parameters of one operation (the docstring of a subclass describes the operation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def tool_schema(cls) -> dict[str, Any]:
        """The JSON schema of these parameters as an agent reads it (an MCP tool's input
        schema): names, types, descriptions, bounds and the required ones, nothing else."""
        return _tool_schema(cls)


class ToolSchema(GenerateJsonSchema):
    """The schema agents pay for in context, every session: no titles (the names say it), an
    optional parameter is its type (None means "not given", never a value to send), no
    defaults that mean "not given" (None, ""), no model docstring (it is the tool's
    description already), and no `additionalProperties` (the core refuses an unknown name
    with a message naming it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if "default" in out and out["default"] in (None, ""):
            del out["default"]
        return out

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        out = super().dict_schema(schema)
        if out.get("additionalProperties") is True:  # any values: JSON Schema's default
            del out["additionalProperties"]
        return out

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        out = super().model_schema(schema)
        for key in ("title", "description", "additionalProperties"):
            out.pop(key, None)
        return out


@functools.cache
def _tool_schema(params: type[Params]) -> dict[str, Any]:
    return params.model_json_schema(schema_generator=ToolSchema)


def described(text: str, **schema: Any) -> Any:
    """A field's description (and any JSON-schema extras, such as bounds)."""
    return Field(description=text, json_schema_extra=schema or None)


def _param(name: str) -> str:
    """What a writer reads of the event field `name` (`models.FieldSpec.param`)."""
    return dict(EVENT_SPEC)[name].param


# Types shared by several operations (an event field's text is the event spec's).
Agent = Annotated[str, described(_param("from_agent"))]
Filter = Annotated[str | list[str] | None, described("Filter.")]
Metadata = Annotated[dict[str, Any] | str | None, described(_param("metadata_json"))]
IdemKey = Annotated[str | None, described("Retry-safe: same key, same result.")]
Limit = Annotated[int | None, described(f"1-{v.MAX_LIST_LIMIT} (default 50).")]
Topic = Annotated[str | None, described(_param("topic"))]
Branch = Annotated[str | None, described(_param("branch"))]
BaseCommit = Annotated[str | None, described(_param("base_commit"))]
Body = Annotated[str, described(_param("body"))]
Encoding = Annotated[str | None, described("utf-8 (default) or base64.")]
TaskId = Annotated[str, described("The task (its correlation_id).")]
Since = Annotated[str | None, described("Time window start: YYYY-MM-DD[THH:MM:SSZ].")]
Preview = Annotated[bool | None, described("Cut bodies to 200 chars.")]
Slim = Annotated[bool | None, described("Drop empty and replication fields.")]


# The type and default of an event field a writer gives, by its rule (`models.FieldSpec.check`).
_BY_RULE: dict[str, tuple[Any, Any]] = {
    "type": (str, ...),
    "required": (str, ...),
    "writer": (str, ...),
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
        text = _param(name) + _NOTES.get(rule, "")
        out[wire] = (kind, Field(default, description=text))
    return out


EventAppend: type[Params] = create_model(
    "EventAppend",
    __base__=Params,
    __module__=__name__,
    __doc__="""Append an event; returns {event} with its id. Post a status, a reply on a
    thread (correlation_id), a claim (status=claimed) or a note to an agent (to_agent).
    Events are immutable: to change a status, append a new one.""",
    **_event_params(),
    idempotency_key=(IdemKey, None),
)


class Reading(Params):
    """The filters, cursor and shape of a read (event_list, event_wait)."""

    stream: Filter = None
    room: Filter = None
    topic: Filter = None
    type: Filter = None
    to_agent: Annotated[str | list[str] | None, described("Inbox: events to this agent or *.")] = (
        None
    )
    writer: Annotated[str | list[str] | None, described("Filter by author.")] = None
    exclude_writer: Annotated[
        str | list[str] | None, described("Not by these authors (e.g. you).")
    ] = None
    correlation_id: Filter = None
    status: Filter = None
    from_agent: Annotated[str | None, described("Your id; NOT a filter (use writer).")] = None
    since_event_id: Annotated[
        str | None,
        described("Only events after this id (your last `cursor`); tip: only new ones."),
    ] = None


class EventList(Reading):
    """Read events now: {events, count, cursor, has_more}. Newest first without a cursor,
    oldest first after since_event_id. Pass the returned `cursor` as since_event_id next time
    to get only newer events. To block until something arrives, use mempalace_event_wait.
    A filter takes a value or a list (any of them); filters AND together."""

    before_event_id: Annotated[str | None, described("Only events before this id.")] = None
    since_created_at: Since = None
    limit: Limit = None
    order: Annotated[str | None, described("asc or desc.")] = None
    preview: Preview = None
    slim: Slim = None


class EventWait(Reading):
    """Block until an event matches after since_event_id: {timed_out, events, count, cursor,
    has_more}. Returns at once if matches exist. A timeout is normal (timed_out=true): call
    again with the returned cursor. Filters as in event_list."""

    since_created_at: Since = None
    limit: Limit = None
    preview: Preview = None
    slim: Slim = None
    timeout_ms: Annotated[
        int | None, described(f"0-{v.MAX_WAIT_MS} (default {v.DEFAULT_WAIT_MS}).")
    ] = None


class EventGet(Params):
    """Fetch one event by id: {event}. An unknown id is an error that says so."""

    event_id: Annotated[str, described("The event id.")]


class EventAck(Params):
    """Acknowledge an event: appends an event.ack to its author on its thread; returns
    {event}. status=claimed claims a task, status=applied after applying a patch."""

    event_id: Annotated[str, described("The event you acknowledge.")]
    from_agent: Agent
    status: Annotated[str | None, described("e.g. claimed, applied, blocked.")] = None
    body: Body = ""
    topic: Annotated[str | None, described("Default: the event's.")] = None
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
        list[str] | None, described("Its artifacts to redact too (only ones you created).")
    ] = None
    keep_body: Annotated[bool | None, described("Remove only the artifacts, keep the body.")] = None
    body_sha256: Annotated[str | None, described("Refuse unless the body hashes to this.")] = None


class ArtifactPut(Params):
    """Store exact content (max 4 MiB): {artifact} with id and sha256. Put the id in an
    event's artifact_ids; others read it with mempalace_artifact_get. A patch for review:
    mempalace_patch_submit does both."""

    kind: Annotated[str, described(", ".join(v.ARTIFACT_KINDS))]
    content: Annotated[str, described("Exact text, or base64.")]
    created_by: Agent
    metadata: Metadata = None
    encoding: Encoding = None


class ArtifactGet(Params):
    """Fetch an artifact: {artifact} with its exact content (binary: base64) and sha256."""

    artifact_id: Annotated[str, described("Its id.")]


class PatchSubmit(Params):
    """Hand over a patch: stores it as an artifact and appends patch.ready, at once. Returns
    {artifact, event[, warnings]}; warnings are advice, the content is kept as sent."""

    content: Annotated[str, described("The unified diff, exact.")]
    from_agent: Agent
    stream: Annotated[str, described("e.g. project/<slug>.")]
    room: Annotated[str, described("Room.")] = "patches"
    topic: Topic = None
    to_agent: Annotated[str | None, described("Who reviews/applies it.")] = None
    correlation_id: Annotated[str | None, described("The task's id.")] = None
    branch: Branch = None
    base_commit: BaseCommit = None
    body: Body = ""
    metadata: Metadata = None
    encoding: Encoding = None
    idempotency_key: IdemKey = None


class TaskCreate(Params):
    """Delegate work: appends a task.request; returns {task_id, task, handoff}. Give the
    one-line handoff to the worker; follow with mempalace_task_status; the worker moves it
    with mempalace_task_update."""

    project: Annotated[str, described("Stream: project/<slug>.")]
    from_agent: Agent
    to_agent: Annotated[str, described("The worker.")]
    goal: Annotated[str, described("What to do.")]
    branch: Annotated[str, described("Branch to work on.")]
    base_commit: Annotated[str, described("Commit hash, not a branch.")]
    done: Annotated[str, described("How to tell it is done.")]
    parent_task_id: Annotated[str | None, described("The task this is delegated from.")] = None
    parent_correlation_id: Annotated[str | None, described("Alias of parent_task_id.")] = None
    lease_ms: Annotated[int | None, described("Claim lease (default 15 min).")] = None
    claim_timeout_ms: Annotated[
        int | None, described("Remind when unclaimed this long (10 min; 0 off).")
    ] = None
    max_reminders: Annotated[int | None, described("Then task.stalled (3).")] = None
    thread_budget: Annotated[int | None, described("Agent events per thread (60).")] = None
    idempotency_key: IdemKey = None


class TaskUpdate(Params):
    """Move a task; returns {event, task}. States: open -> claimed -> working -> ready ->
    completed, or blocked, failed, declined, cancelled. Progress renews the worker's lease;
    block asks the requester (body: the question). A refused move writes nothing and says
    why."""

    task_id: TaskId
    action: Annotated[
        str,
        described(
            "Worker: claim, progress, block, complete, fail, decline. Requester: unblock, "
            "accept, reject, cancel, reopen.",
            enum=list(tasks.ACTIONS),
        ),
    ]
    from_agent: Agent
    body: Annotated[str, described("The question, answer or reason.")] = ""
    progress: Annotated[
        float | None,
        described("progress: percent, 0-100, above the last.", minimum=0, maximum=100),
    ] = None
    lease_ms: Annotated[int | None, described("claim: lease length.")] = None
    retryable: Annotated[bool | None, described("fail: may a retry work?")] = None
    result: Annotated[
        dict[str, Any] | None,
        described(
            "complete: {disposition: completed|partial|blocked|failed|no_artifact, "
            "verification: [{name, status: passed|failed|not_run}]}; completed needs "
            "artifact_ids."
        ),
    ] = None
    artifact_ids: Annotated[list[str] | None, described("complete: your artifacts.")] = None
    idempotency_key: IdemKey = None


class TaskStatus(Params):
    """Where a task stands: {task: {state, requester, assignee, progress, goal, done,
    question, result, children, events, artifacts, delivery, ...}}. A lapsed lease shows the
    task open again (lost)."""

    task_id: TaskId


class TaskList(Params):
    """Tasks, most recently moved first: {tasks, count, cursor, has_more}. Your open work:
    state=open, to_agent=<you>; your delegated work that is ready: state=ready,
    from_agent=<you>."""

    state: Annotated[str | None, described(f"One of {', '.join(tasks.STATES)}.")] = None
    to_agent: Annotated[str | None, described("Addressed to this agent.")] = None
    from_agent: Annotated[str | None, described("Requested by this agent.")] = None
    stream: Annotated[str | None, described("project/<slug>.")] = None
    parent_task_id: Annotated[str | None, described("Children of this task.")] = None
    limit: Limit = None
    cursor: Annotated[str | None, described("The previous page's cursor.")] = None


class VersionVector(Params):
    """This log's replica id and version vector: {replica_id, version_vector}.

    The vector maps each origin replica to the highest origin_seq held here; compare two hubs'
    vectors to see whether they are in sync.
    """


class Stats(Params):
    """Overview of the log: event counts per stream, type and writer, artifact totals and the
    database size. Cheap; use it to find which streams are active before listing."""


class PresenceAnnounce(Params):
    """Tell the hub you are home: {presence}. Kept by the hub, never in the log; it vanishes
    after ttl_s unless announced again. Needs a hub (its /mcp, or --hub)."""

    agent: Agent
    state: Annotated[str, described("watching, working or idle.")]
    task_id: Annotated[str | None, described("The task you are on.")] = None
    note: Annotated[str | None, described("Max 500 chars.")] = None
    ttl_s: Annotated[int | None, described("Seconds until you vanish (60).")] = None
    path: Annotated[
        str | None,
        described(
            "The delivery path it keeps live: watch, channel, codex, monitor, sse, or hook "
            "(nothing pushes to you)."
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
    """Who is home now: {agents: [{agent, state, task_id, note, expires_at, paths, wakeable, leases,
    ...}], count, unreachable}. wakeable: yes (it reacted to a push lately), unverified (a push
    path, no reaction yet), no (hooks only: it reads at its next prompt). Use it to pick a free
    worker before delegating, or to see whether the agent you wait on is up."""
