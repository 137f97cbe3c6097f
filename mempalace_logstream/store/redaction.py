"""Redaction (RFC 0008 "Redaction"): an `event.redact` event removes a leaked secret from a
body or an artifact blob on every replica that applies it, keeping the SHA-256 the signature
covers, the signature, and who / when / why.

One function applies a redaction, whether it was just written here (`event_redact`) or came
from a peer (`on_applied_events`, called by replication's apply): it checks the authority (the
admin, or the target's verified writer; for an artifact, the writer who created it) and the
SHA-256 of every part against what is held, writes the `redactions` rows, then replaces the
body with its tombstone and redacts each artifact (`blobs.py`: a blob another writer's
unredacted artifact shares keeps its bytes); the database's triggers (migrations 0006, 0007)
let through exactly that change. A redaction whose target is not held yet keeps its rows and
is applied when the target arrives.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from mempalace_logstream import errors
from mempalace_logstream import validation as v
from mempalace_logstream.backends.queries import redactions as sql
from mempalace_logstream.identity.actor import ADMIN_NAME, Actor
from mempalace_logstream.identity.keyring import Keyring
from mempalace_logstream.models import Event
from mempalace_logstream.payload import body_digest, parse_tombstone, tombstone
from mempalace_logstream.store import blobs
from mempalace_logstream.store import tasks as task_rows
from mempalace_logstream.store.blobs import BODY, EMPTY_SHA256
from mempalace_logstream.store.projections import Refusal
from mempalace_logstream.store.redaction_projection import REDACT_TYPE, RedactionProjection

if TYPE_CHECKING:
    from mempalace_logstream.store.core import LogStore
    from mempalace_logstream.store.writes import Transaction

MAX_REASON_BYTES = 4096
__all__ = [
    "BODY",
    "EMPTY_SHA256",
    "REDACT_TYPE",
    "RedactionProjection",
    "Refused",
    "apply",
    "event_redact",
    "on_events",
    "spec_of",
]


class Refused(Exception):
    """A redaction that must not take effect: `code` is forbidden, sha_mismatch or malformed;
    `field` names the parameter a local caller gave wrong."""

    def __init__(self, code: str, message: str, field: str = "from_agent") -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


class Part(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    part: str  # "body" or an artifact id
    sha256: str


class Spec(NamedTuple):  # not a dataclass: nothing generated at import (issue 25)
    """What an `event.redact` names: its target, the parts and their SHA-256, the reason."""

    target_id: str
    parts: tuple[Part, ...]
    reason: str


def spec_of(event: Event) -> Spec:
    """The redaction an `event.redact` event states; Refused("malformed") if unreadable."""
    meta = event.metadata
    target, parts, reason = meta.get("redacts"), meta.get("parts"), meta.get("reason")
    if not isinstance(target, str) or not isinstance(reason, str) or not isinstance(parts, list):
        raise Refused("malformed", f"{event.id}: metadata needs redacts, parts and reason")
    out: list[Part] = []
    for item in parts:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("part"), str)
            and isinstance(item.get("sha256"), str)
            and len(item["sha256"]) == 64
        ):
            raise Refused("malformed", f"{event.id}: each part needs part and sha256")
        out.append(Part(item["part"], item["sha256"]))
    if not out:
        raise Refused("malformed", f"{event.id}: names no part to redact")
    return Spec(target, tuple(out), reason)


# ----------------------------------------------------------------------------- authority


def writer_of(event: Event, ring: Keyring) -> str:
    """The verified writer: the agent (or admin) whose key signed, else the claimed name."""
    if event.key_id is not None:
        record = ring.key(event.key_id)
        if record is not None:
            return record.agent
    return event.from_agent


def authority(redaction: Event, target: Event, ring: Keyring) -> tuple[str, bool]:
    """Who redacts (the name the tombstone records) and whether as the admin;
    Refused("forbidden") unless it is the admin or the target's verified writer. A signed
    target needs a signed redaction."""
    writer = writer_of(target, ring)
    if redaction.key_id is not None:
        record = ring.key(redaction.key_id)
        if record is None:
            raise Refused("forbidden", f"{redaction.id} is signed by an unknown key")
        if record.role == "admin" or record.agent == writer:
            return record.agent, record.role == "admin"
        raise Refused(
            "forbidden",
            f"{record.agent} may not redact {target.id}: only the admin or its writer "
            f"{writer!r} may",
        )
    if target.sig is not None:
        raise Refused("forbidden", f"{target.id} is signed: only a signed redaction may redact it")
    if redaction.from_agent in (writer, ADMIN_NAME):
        return redaction.from_agent, redaction.from_agent == ADMIN_NAME
    raise Refused(
        "forbidden",
        f"{redaction.from_agent} may not redact {target.id}: only the admin or its writer "
        f"{writer!r} may",
    )


# ----------------------------------------------------------------------------- applying


def apply(tx: "Transaction", redaction: Event, ring: Keyring) -> list[str]:
    """Apply one `event.redact` (local or from a peer): the `redactions` rows, then the
    target's body and blobs if the target is held. Returns the parts changed now. Raises
    Refused (nothing written by this function) when it must not take effect."""
    spec = spec_of(redaction)
    target = _held(tx, spec.target_id)
    by = writer_of(redaction, ring)  # the same name on every replica, target held or not
    if target is not None:
        who, admin = authority(redaction, target, ring)
        _check_parts(tx, spec, target, None if admin else who)
    tomb = tombstone(
        body_sha256=next((p.sha256 for p in spec.parts if p.part == BODY), ""),
        event_id=redaction.id,
        by=by,
        at=redaction.created_at,
        reason=spec.reason,
    )
    rows = [
        {
            "redaction_id": redaction.id,
            "part": p.part,
            "target_id": spec.target_id,
            "sha256": p.sha256,
            "tombstone": tomb if p.part == BODY else None,
            "redacted_by": by,
            "redacted_at": redaction.created_at,
            "reason": spec.reason,
        }
        for p in spec.parts
    ]
    if not sql.is_held(tx.ex, redaction.id):
        sql.insert(tx.ex, rows)
    if target is None:
        return []  # applied when the target arrives (`on_applied_events`)
    return _execute(tx, target, rows)


def _execute(tx: "Transaction", target: Event, rows: list[dict[str, Any]]) -> list[str]:
    done: list[str] = []
    pragma = tx.store.backend.before_redaction()
    if pragma is not None:  # e.g. SQLite zeroes freed pages: no removed bytes linger
        sql.before(tx.ex, pragma)
    for row in rows:
        if row["part"] == BODY:
            if parse_tombstone(target.body) is None:
                sql.set_body(tx.ex, target.id, row["tombstone"])
                done.append(BODY)
            continue
        # The artifact reads redacted from now on; its blob is emptied only when no other
        # artifact that is not redacted shares it (another writer's copy keeps its bytes).
        if blobs.tombstone(tx.ex, row["part"], row["redaction_id"], row["sha256"]):
            done.append(row["part"])
        blobs.empty_if_unnamed(tx.ex, row["sha256"])
    if BODY in done and target.correlation_id:
        _refold_task(tx, target.correlation_id)
    return done


def _check_parts(tx: "Transaction", spec: Spec, target: Event, writer: str | None) -> None:
    """Every part is the target's and holds the SHA-256 named; an artifact may be redacted
    only by the writer who created it (`writer`; None: the admin, who may redact any)."""
    for part in spec.parts:
        if part.part == BODY:
            held = body_digest(target.body)
            what = f"the body of {target.id}"
        elif part.part in target.artifact_ids:
            held, creator = sql.artifact_sha(tx.ex, part.part) or ("", "")
            what = f"artifact {part.part}"
            if writer is not None and creator != writer:
                raise Refused(
                    "forbidden",
                    f"{writer} may not redact artifact {part.part}: it was created by "
                    f"{creator!r}; only its creator or the admin may (its content is shared "
                    "with every artifact that has the same bytes)",
                    field="artifact_ids",
                )
        else:
            raise Refused("malformed", f"{target.id} does not reference artifact {part.part}")
        if held != part.sha256:
            raise Refused(
                "sha_mismatch",
                f"the redaction names SHA-256 {part.sha256[:16]}… but {what} hashes to "
                f"{held[:16]}…: a redaction removes only the content it names",
            )


def _refold_task(tx: "Transaction", task_id: str) -> None:
    """A task's projection copies bodies: fold it again from the (now redacted) thread."""
    if task_rows.load(tx, task_id) is None:
        return
    task, seq = task_rows.refold(tx, task_id)
    if task is not None:
        task_rows.save(tx, task, seq, existed=True)


def on_events(tx: "Transaction", events: Sequence[Event], origin: str) -> list[Refusal]:
    """`RedactionProjection.apply` (store/redaction_projection.py) once it has work here: a
    local `event.redact` applied or refused by raising `Refused`; a peer's or an imported
    batch applied, what must not take effect returned."""
    if origin == "local":
        for event in events:
            if event.type == REDACT_TYPE:
                apply(tx, event, tx.store.identity.keyring(tx.ex, tx.store.event_select))
        return []
    return [
        Refusal(event, exc.code, exc.field, exc.message)
        for event, exc in on_applied_events(tx, events)
    ]


def on_applied_events(tx: "Transaction", applied: Sequence[Event]) -> list[tuple[Event, Refused]]:
    """Apply the redactions among events a peer (or an import) brought, and those held here
    whose target just arrived. A refused one takes no effect (the event stays: `doctor` lists
    it); the refusals are returned for the round to record."""
    if not applied:
        return []
    redacts = [e for e in applied if e.type == REDACT_TYPE]
    waiting = _pending_for(tx, [e.id for e in applied])
    if not redacts and not waiting:
        return []
    ring = tx.store.identity.keyring(tx.ex, tx.store.event_select)
    by_id = {e.id: e for e in applied}
    held = (_held(tx, rid) for rid in waiting if rid not in by_id)
    refused: list[tuple[Event, Refused]] = []
    for event in [*redacts, *(e for e in held if e is not None)]:
        try:
            apply(tx, event, ring)
        except Refused as exc:
            refused.append((event, exc))
    return refused


def _pending_for(tx: "Transaction", target_ids: list[str]) -> list[str]:
    """The redaction ids held here that name one of `target_ids`."""
    return list(dict.fromkeys(sql.pending_for(tx.ex, list(dict.fromkeys(target_ids)))))


def _held(tx: "Transaction", ident: str) -> Event | None:
    try:
        return tx.find_event(ident, field="event_id")
    except errors.NotFoundError:
        return None


# ----------------------------------------------------------------------------- the local write


def event_redact(
    store: "LogStore",
    *,
    event_id: Any,
    reason: Any,
    from_agent: Any = None,
    artifact_ids: Any = None,
    keep_body: Any = None,
    body_sha256: Any = None,
) -> dict[str, Any]:
    """Redact an event's body (and/or the blobs of some of its artifacts) by appending a
    signed `event.redact` and applying it, in one transaction. Allowed for the admin (a local
    process with the files acts as admin) or the event's verified writer: ForbiddenError
    otherwise; NotFoundError for an unknown event; ConflictError when `body_sha256` does not
    match the body held (or the body is already redacted). Returns {event, target, parts}."""
    ident = v.required_routing("event_id", event_id)
    why = _reason(reason)
    arts = v.artifact_ids(artifact_ids)
    keep = v.boolean("keep_body", keep_body)
    expect = None if body_sha256 is None else _sha("body_sha256", body_sha256)
    if keep and not arts:
        raise v.fail("artifact_ids", "is empty and keep_body is set: nothing to redact")

    def work(tx: "Transaction") -> dict[str, Any]:
        target = tx.find_event(ident, field="event_id")
        writer = _local_writer(tx.actor, from_agent)
        ring = tx.store.identity.keyring(tx.ex, tx.store.event_select)
        parts = _local_parts(tx, target, keep, arts, expect)
        if tx.actor is not None and not tx.actor.admin and writer_of(target, ring) != writer:
            raise errors.ForbiddenError(
                f"{writer} may not redact {target.id}: only the admin or its writer "
                f"{writer_of(target, ring)!r} may",
                field="from_agent",
            )
        draft = tx.store.draft_event(
            type=REDACT_TYPE,
            stream=target.stream,
            room=target.room,
            topic=target.topic,
            from_agent=writer,
            to_agent=target.from_agent,
            body=f"redacted {target.id}: {why}",
            metadata={
                "redacts": target.id,
                "parts": [{"part": p.part, "sha256": p.sha256} for p in parts],
                "reason": why,
            },
        )
        # The parts this redaction changes: a body not redacted yet (`_local_parts` refuses
        # one that is), the artifacts no redaction took effect on yet.
        done = [p.part for p in parts if p.part == BODY or not blobs.is_redacted(tx.ex, p.part)]
        try:  # applied by the redaction projection as the event is appended
            redaction = tx.insert_event(draft)
        except Refused as exc:
            if exc.code == "forbidden":
                raise errors.ForbiddenError(exc.message, field=exc.field) from exc
            raise errors.ConflictError(exc.message, field="body_sha256") from exc
        return {"event": redaction, "target": target.id, "parts": done}

    result: dict[str, Any] = store.transaction(work)
    return result


def _local_writer(actor: Actor | None, from_agent: Any) -> str:
    if from_agent is not None:
        return v.required_routing("from_agent", from_agent)
    if actor is not None and not actor.admin and actor.agent:
        return actor.agent
    return ADMIN_NAME


def _local_parts(
    tx: "Transaction", target: Event, keep: bool, arts: tuple[str, ...], expect: str | None
) -> list[Part]:
    parts: list[Part] = []
    if not keep:
        if parse_tombstone(target.body) is not None:
            raise errors.ConflictError(
                f"the body of {target.id} is already redacted", field="event_id", ident=target.id
            )
        import hashlib  # here: hashlib is not loaded by a plain append (issue 25)

        held = hashlib.sha256(target.body.encode("utf-8")).hexdigest()
        if expect is not None and expect != held:
            raise errors.ConflictError(
                f"body_sha256 {expect[:16]}… does not match the body of {target.id} "
                f"({held[:16]}…): nothing redacted",
                field="body_sha256",
                ident=target.id,
            )
        parts.append(Part(BODY, held))
    for aid in arts:
        if aid not in target.artifact_ids:
            raise v.fail("artifact_ids", f"{aid!r} is not an artifact of {target.id}")
        found = sql.artifact_sha(tx.ex, aid)
        if found is None:  # the target's links name it: held, unless the log is damaged
            raise errors.NotFoundError(f"artifact {aid!r} not found", field="artifact_ids")
        parts.append(Part(aid, found[0]))
    return parts


def _reason(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise v.fail("reason", "is required: say why the content is removed")
    return v.body(value, MAX_REASON_BYTES, field="reason")


def _sha(field: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise v.fail(field, "must be 64 lowercase hex characters")
    return value
