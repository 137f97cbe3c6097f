"""The statements of the write path (store/append.py, writes.py, pipeline.py): the write
transaction's starting state, an event by id or by idempotency key, the artifact and link
rows an append writes, the artifact read with its content, and the hub-local rows beside the
log (agent token hashes; the pinned admin keys are `meta` rows: meta.py).

Event rows are read with the store's read columns (`log.EventSelect`: the backend aggregates
the artifact links), so the functions that return them take the store's `event_select`; the
artifact columns are the store's too (`store.rows.ARTIFACT_COLS`, passed in).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import lazy
from mempalace_logstream.backends.base import Compile, Executor
from mempalace_logstream.backends.queries.identity import KeyTypes, marks_columns

if TYPE_CHECKING:
    import sqlalchemy as sa

    from mempalace_logstream import schema
    from mempalace_logstream.backends.queries.log import EventSelect
else:
    sa = lazy.module("sqlalchemy")
    schema = lazy.module("mempalace_logstream.schema")


# The newest seq, artifact seq and HLC stamp, our own newest stamp and the keyring's marks,
# read at the start of every write transaction whose counters are not known: one prebuilt
# statement (it runs once per (group) commit; on PostgreSQL it travels with BEGIN and the
# append lock, one round trip for all: backends/postgres.py).
def _tx_state(key_types: KeyTypes, pin_prefix: str, agg: Any) -> sa.Select[Any]:
    return sa.select(
        sa.select(sa.func.max(schema.events.c.seq)).scalar_subquery(),
        sa.select(sa.func.max(schema.artifacts.c.seq)).scalar_subquery(),
        sa.select(sa.func.max(schema.events.c.hlc)).scalar_subquery(),
        # Our own newest stamp (the origin index finds it): adopted even when it is more than
        # 60 s ahead of the wall clock, so the HLC never goes backwards across restarts.
        sa.select(schema.events.c.hlc)
        .where(schema.events.c.origin_replica == sa.bindparam("own_replica"))
        .order_by(schema.events.c.origin_seq.desc())
        .limit(1)
        .scalar_subquery(),
        # What the keyring is cached on (queries/identity.py `marks`): no second statement.
        *marks_columns(key_types, pin_prefix, agg),
    )


def tx_state_statement(
    compile: Compile, own_replica: str, key_types: KeyTypes, pin_prefix: str, agg: Any
) -> tuple[str, Mapping[str, Any]]:
    """(SQL text, parameters) of the write transaction's starting state: one row of (max seq,
    max artifact seq, max hlc, our own newest hlc, the newest key event's id, the joined pin
    keys), None where the log holds nothing. The backend runs it in its `transaction`."""
    build = functools.partial(_tx_state, key_types, pin_prefix, agg)
    return compile("appends.tx-state", build, {"own_replica": own_replica})


def select_events(cols: Sequence[sa.ColumnElement[Any]], *where: Any) -> sa.Select[Any]:
    """The columns `cols` (the store's read columns) of the events matching `where`."""
    return sa.select(*cols).where(*where)


def event_by_id(ex: Executor, select: EventSelect, ident: str) -> Sequence[Any]:
    """The read row of the event `ident` ([] if not held)."""

    def build() -> sa.Select[Any]:
        return select(schema.events.c.id == sa.bindparam("id"))

    return ex.rows("appends.event-by-id", build, {"id": ident})


def idempotent(
    ex: Executor, select: EventSelect, from_agent: str, idempotency_key: str | None
) -> Sequence[Any]:
    """The read row of the event stored under (from_agent, idempotency_key), if any."""

    def build() -> sa.Select[Any]:
        return select(
            schema.events.c.from_agent == sa.bindparam("from_agent"),
            schema.events.c.idempotency_key == sa.bindparam("idempotency_key"),
        )

    params = {"from_agent": from_agent, "idempotency_key": idempotency_key}
    return ex.rows("appends.idempotent", build, params)


def insert_links(ex: Executor, links: list[dict[str, Any]]) -> None:
    """event_artifacts rows (event_id, artifact_id, position)."""
    ex.insert("appends.insert-link", "event_artifacts", links)


def artifact_exists(ex: Executor, ident: str) -> bool:
    return bool(ex.rows("appends.artifact-exists", _artifact_exists, {"id": ident}))


def _artifact_exists() -> sa.Select[Any]:
    return sa.select(schema.artifacts.c.id).where(schema.artifacts.c.id == sa.bindparam("id"))


def insert_artifact(ex: Executor, row: dict[str, Any]) -> None:
    """One artifacts row (every column)."""
    ex.insert("appends.insert-artifact", "artifacts", [row])


def artifact_meta(ex: Executor, cols: Sequence[Any], ident: str) -> Sequence[Any]:
    """The `cols` (the store's artifact columns, always the same) of the artifact `ident`
    ([] if unknown)."""

    def build() -> sa.Select[Any]:
        return sa.select(*cols).where(schema.artifacts.c.id == sa.bindparam("id"))

    return ex.rows("appends.artifact-meta", build, {"id": ident})


def artifact_with_content(conn: sa.Connection, cols: Sequence[Any], ident: str) -> Any:
    """The `cols` of the artifact `ident` with its blob's content last, or None."""
    return conn.execute(
        sa.select(*cols, schema.artifact_blobs.c.content)
        .join(schema.artifact_blobs, schema.artifact_blobs.c.sha256 == schema.artifacts.c.sha256)
        .where(schema.artifacts.c.id == ident)
    ).first()


# ----------------------------------------------------------------------------- hub-local rows


def set_agent_token(ex: Executor, agent: str, token_hash: str | None, created_at: str) -> None:
    """Replace (or, with None, drop) the stored hash of `agent`'s token."""
    ex.run("appends.agent-token-drop", _drop_token, {"agent": agent})
    if token_hash is not None:
        row = {"agent": agent, "token_hash": token_hash, "created_at": created_at}
        ex.insert("appends.agent-token-insert", "agent_tokens", [row])


def _drop_token() -> sa.Delete:
    return sa.delete(schema.agent_tokens).where(
        schema.agent_tokens.c.agent == sa.bindparam("agent")
    )


def agent_token_hashes(conn: sa.Connection) -> dict[str, str]:
    """agent -> the stored hash of its token."""
    rows = conn.execute(
        sa.select(schema.agent_tokens.c.agent, schema.agent_tokens.c.token_hash)
    ).all()
    return {str(r[0]): str(r[1]) for r in rows}
