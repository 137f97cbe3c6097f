"""Agent conventions built on the store's public API: acknowledgements, patch submission and
task delegation. They are not storage: each is a draft plus one `store.transaction`.
The operation table (`operations.py`) calls them; so may any Python caller, with a store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, tasks
from mempalace_logstream import validation as v
from mempalace_logstream.models import Artifact, Event, EventDraft
from mempalace_logstream.store.ids import json_str, slug
from mempalace_logstream.store.writes import same_as_prior
from mempalace_logstream.tasks import guards, moves
from mempalace_logstream.tasks.model import MAX_PROGRESS

if TYPE_CHECKING:
    from mempalace_logstream.store import LogStore, Transaction


def event_ack(
    store: LogStore,
    *,
    event_id: Any,
    from_agent: Any,
    status: Any = None,
    body: Any = "",
    topic: Any = None,
    metadata: Any = None,
    idempotency_key: Any = None,
) -> Event:
    """Acknowledge an event by appending `event.ack` (S-1.3); the target never changes."""
    target_id = v.required_routing("event_id", event_id)
    extra = v.metadata(metadata)
    base = store.draft_event(
        type="event.ack",
        stream="-",
        room="-",
        from_agent=from_agent,
        status=status,
        body=body,
        topic=topic,
        idempotency_key=idempotency_key,
    )

    def write(tx: Transaction) -> Event:
        target = tx.find_event(target_id, field="event_id")
        return tx.insert_event(ack_draft(base, extra, target))

    return store.transaction(write)


def ack_draft(base: EventDraft, extra: str, target: Event) -> EventDraft:
    """The `event.ack` of `target`: routed like it, addressed to its writer, in its
    conversation, with `ack_of` first in the metadata (then the caller's `extra` object)."""
    meta_json = '{"ack_of":' + json_str(target.id)
    meta_json += ("," + extra[1:]) if extra != "{}" else "}"
    return base.replace(
        stream=target.stream,
        room=target.room,
        topic=base["topic"] if base["topic"] is not None else target.topic,
        to_agent=target.from_agent,
        correlation_id=target.correlation_id or target.id,
        metadata_json=meta_json,
    )


def patch_submit(
    store: LogStore,
    *,
    content: Any,
    from_agent: Any,
    stream: Any,
    room: Any = "patches",
    topic: Any = None,
    to_agent: Any = None,
    correlation_id: Any = None,
    branch: Any = None,
    base_commit: Any = None,
    body: Any = "",
    metadata: Any = None,
    encoding: Any = None,
    idempotency_key: Any = None,
) -> dict[str, Any]:
    """Store a patch artifact and append `patch.ready` in ONE transaction (S-1.4).

    Every field is validated before anything is written. Returns {artifact, event,
    warnings}; warnings are advisories, the content is never rewritten.
    """
    art_draft = store.draft_artifact(
        kind="patch",
        content=content,
        created_by=from_agent,
        metadata=metadata,
        encoding=encoding,
    )
    ev_draft = store.draft_event(
        type="patch.ready",
        stream=stream,
        room=room,
        from_agent=from_agent,
        topic=topic,
        to_agent=to_agent,
        correlation_id=correlation_id,
        branch=branch,
        base_commit=base_commit,
        status="ready",
        body=body,
        metadata=metadata,
        idempotency_key=idempotency_key,
    )

    def write(tx: Transaction) -> tuple[Artifact, Event]:
        prior = _prior_patch(tx, ev_draft, art_draft.content)
        if prior is not None:
            return prior
        art = tx.insert_artifact(art_draft)
        draft = ev_draft.replace(artifact_ids=(art.id,))
        return art, tx.insert_event(draft)

    art, event = store.transaction(write)
    return {
        "artifact": art,
        "event": event,
        "warnings": list(art_draft.warnings),
    }


def _prior_patch(
    tx: Transaction, draft: EventDraft, content: bytes
) -> tuple[Artifact, Event] | None:
    """The earlier submission under the draft's idempotency key, if any; the same key with
    other patch bytes is a different submission (ConflictError)."""
    if draft.idempotency_key is None:
        return None
    prior = _find_idempotent_patch(tx, draft)
    import hashlib  # here: an ack does not load it (issue 25: ~4 ms of CPU per process)

    if prior is not None and prior[0].sha256 != hashlib.sha256(content).hexdigest():
        raise errors.ConflictError(
            f"idempotency_key {draft.idempotency_key!r} was already used for "
            f"a different patch ({prior[1].id}); use a new key",
            field="idempotency_key",
            ident=prior[1].id,
        )
    return prior


def _find_idempotent_patch(tx: Transaction, draft: EventDraft) -> tuple[Artifact, Event] | None:
    prior = tx.find_idempotent(draft)
    if prior is None:
        return None
    if not prior.artifact_ids:
        raise errors.ConflictError(
            f"idempotency_key {draft.idempotency_key!r} was used for a non-patch event",
            field="idempotency_key",
            ident=prior.id,
        )
    full = draft.replace(artifact_ids=prior.artifact_ids)
    same_as_prior(prior, full)
    return tx.artifact_meta(prior.artifact_ids[0]), prior


def task_create(
    store: LogStore,
    *,
    project: Any,
    from_agent: Any,
    to_agent: Any,
    goal: Any,
    branch: Any,
    base_commit: Any,
    done: Any,
    parent_task_id: Any = None,
    parent_correlation_id: Any = None,
    lease_ms: Any = None,
    claim_timeout_ms: Any = None,
    max_reminders: Any = None,
    thread_budget: Any = None,
    idempotency_key: Any = None,
) -> dict[str, Any]:
    """Append a `task.request` (S-3.1, RFC 0007) and return {task_id, task, handoff}: the
    task's id (its correlation id), the request event and a line to hand the worker.

    `parent_task_id` (the reference's name: `parent_correlation_id`) records the delegation
    chain; the store refuses a chain deeper than its limit or a parent with too many open
    children. `lease_ms` is how long a claim holds the task without progress;
    `claim_timeout_ms`, `max_reminders` and `thread_budget` override the hub's reminders and
    loop guard for this task (issue 20, tasks/guards.py)."""
    clean_project = v.required_routing("project", project)
    clean_goal = v.non_blank_text("goal", goal)
    clean_done = v.non_blank_text("done", done)
    to = v.required_routing("to_agent", to_agent)
    v.required_routing("branch", branch)
    commit = v.base_commit_hex(base_commit)
    parent = _parent(parent_task_id, parent_correlation_id)
    options = guards.task_options(claim_timeout_ms, max_reminders, thread_budget)
    import secrets  # here: an ack does not load it (nor hashlib, hmac, random with it)

    correlation = f"task_{slug(clean_goal, 'work')}_{secrets.token_hex(4)}"
    body = (
        f"Goal:\n{clean_goal}\n\nDefinition of done:\n{clean_done}\n\nDelivery:\n"
        "Claim this task (mempalace_task_update action=claim, or an event with status=claimed "
        "on this correlation_id), then submit a patch with mempalace_patch_submit, or report "
        "blocked or failed with the evidence."
    )
    meta: dict[str, Any] = {}
    if parent:
        meta["parent_task_id"] = parent
    if lease_ms is not None:
        meta["lease_ms"] = lease_ms  # checked by the lifecycle (tasks.moves.lease_ms)
    meta.update(options)
    task = store.event_append(
        type="task.request",
        stream=f"project/{slug(clean_project, 'project')}",
        room="delegation",
        from_agent=from_agent,
        to_agent=to,
        correlation_id=correlation,
        branch=branch,
        base_commit=commit,
        status="open",
        body=body,
        metadata=meta or None,
        idempotency_key=idempotency_key,
    )
    handoff = (
        f"Open MemPalace task {task.correlation_id} as {to}. Claim it, follow its exact "
        "definition of done, and deliver through the logstream."
    )
    return {"task_id": task.correlation_id, "task": task, "handoff": handoff}


def _parent(parent_task_id: Any, parent_correlation_id: Any) -> str | None:
    new = v.routing("parent_task_id", parent_task_id)
    old = v.routing("parent_correlation_id", parent_correlation_id)
    if new and old and new != old:
        raise v.fail("parent_task_id", "and parent_correlation_id name the same thing: give one")
    return new or old


# The counterparty a move is addressed to: the requester hears from the assignee, and the
# assignee (or the addressee, before a claim) from the requester.
_TO_REQUESTER = frozenset({"claim", "decline", "progress", "block", "complete", "fail"})


def task_update(
    store: LogStore,
    *,
    task_id: Any,
    action: Any,
    from_agent: Any,
    body: Any = "",
    progress: Any = None,
    lease_ms: Any = None,
    retryable: Any = None,
    result: Any = None,
    artifact_ids: Any = None,
    idempotency_key: Any = None,
) -> dict[str, Any]:
    """One lifecycle move (RFC 0007): appends `task.<action>` on the task's thread and returns
    {event, task}, the task's state after the move (`task_status` adds the thread). The store
    checks the move in the write transaction and refuses an illegal one (wrong state, wrong
    agent, lost lease or race) before anything is written."""
    ident = v.required_routing("task_id", task_id)
    if action not in tasks.ACTIONS:
        raise v.fail("action", f"{action!r} is not one of {', '.join(tasks.ACTIONS)}")
    if progress is not None:
        _check_progress(progress)
    current = store.task_brief(ident)
    if action == "claim" and lease_ms is None:
        # The lease this claim gets, written into it: every replica folds the same lease,
        # whatever its own default.
        lease_ms = current["lease_ms"] or store.task_settings.lease_ms
    meta = {
        "progress": progress,
        "lease_ms": lease_ms,
        "retryable": retryable,
        "result": result,
    }
    event_type, _starts, target = tasks.ACTIONS[action]
    if action in _TO_REQUESTER:
        to = current["requester"]
    else:
        to = current["assignee"] or current["to_agent"]
    event = store.event_append(
        type=event_type,
        stream=current["stream"],
        room="delegation",
        from_agent=from_agent,
        to_agent=to,
        correlation_id=ident,
        status=target,
        body=body,
        metadata={k: val for k, val in meta.items() if val is not None} or None,
        artifact_ids=artifact_ids,
        idempotency_key=idempotency_key,
    )
    return {"event": event, "task": store.task_brief(ident)}


def _check_progress(value: Any) -> None:
    """The scale (0-100) before anything is read: the lifecycle checks the rest."""
    try:
        moves.progress(value)
    except moves.PayloadError as exc:
        raise errors.ValidationError(str(exc), field=exc.field, limit=MAX_PROGRESS) from None
