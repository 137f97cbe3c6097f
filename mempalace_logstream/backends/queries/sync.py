"""The replication's statements: a peer's page (held events, positions and artifacts), the
wire pages (`/sync/ops`, `/sync/ops_rows`), the refusal bookkeeping (`sync_conflicts`,
`sync_rejections`, `sync_clock_anomalies`), origin positions and their fingerprints, the peer
estate (`sync_peers`) and the signature reports' reads.

Event reads take the store's `event_select` (the Event read columns, the artifact links
column built by the backend) so that an event is read by one column list everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from mempalace_logstream.backends.base import Executor, QueryExecutor, binds, in_lists
from mempalace_logstream.models import ROW_FIELDS
from mempalace_logstream.schema import (
    artifact_blobs,
    artifacts,
    events,
    sync_clock_anomalies,
    sync_conflicts,
    sync_peers,
    sync_rejections,
)

# The store's `event_select(*where)`: the Event read columns of the rows matching `where`.
EventSelect = Callable[..., sa.Select[Any]]
Row = Sequence[Any]
# The artifact links column of an event row (`store.links_column` with the store's backend).
Links = Callable[[], sa.ColumnElement[Any]]


def _in_rows(
    ex: Executor, key: str, build: Callable[[int], Any], values: Sequence[Any], **bound: Any
) -> list[Row]:
    """The rows of `build(n)` for each IN list of `values` (n binds, `in_lists`), cached under
    (key, n); `bound` adds the statement's other parameters."""
    out: list[Row] = []
    for n, params in in_lists(values):
        out += ex.rows((key, n), functools.partial(build, n), {**params, **bound})
    return out


# --------------------------------------------------------------------------- a peer's page


def held_events(ex: Executor, event_select: EventSelect, ids: Sequence[str]) -> list[Row]:
    """The Event rows of the held events among `ids`: a cheap id probe first, then only those
    read back."""
    distinct = list(dict.fromkeys(ids))
    held = ex.held_ids(distinct)
    build = lambda n: event_select(events.c.id.in_(binds(n)))  # noqa: E731
    return _in_rows(ex, "sync.held-events", build, [i for i in distinct if i in held])


def held_positions(ex: Executor, origin: str, seqs: Sequence[int]) -> list[tuple[int, str]]:
    """(origin_seq, id) of the held events of `origin` at `seqs`: one range read when the
    positions are dense (a page), IN lists when they are sparse."""
    lo, hi = min(seqs), max(seqs)
    c = events.c
    if hi - lo < 2 * len(seqs) + 16:

        def build() -> sa.Executable:
            return sa.select(c.origin_seq, c.id).where(
                c.origin_replica == sa.bindparam("origin"),
                c.origin_seq >= sa.bindparam("lo"),
                c.origin_seq <= sa.bindparam("hi"),
            )

        found = ex.rows("sync.held-range", build, {"origin": origin, "lo": lo, "hi": hi})
        return [(int(s), i) for s, i in found]

    def build_in(n: int) -> sa.Executable:
        return sa.select(c.origin_seq, c.id).where(
            c.origin_replica == sa.bindparam("origin"), c.origin_seq.in_(binds(n))
        )

    found = _in_rows(ex, "sync.held-pos", build_in, sorted(set(seqs)), origin=origin)
    return [(int(s), i) for s, i in found]


def held_artifact_shas(ex: Executor, ids: Sequence[str]) -> dict[str, str]:
    """{id: sha256} of the held artifacts among `ids`."""
    build = lambda n: sa.select(artifacts.c.id, artifacts.c.sha256).where(  # noqa: E731
        artifacts.c.id.in_(binds(n))
    )
    return {i: s for i, s in _in_rows(ex, "sync.held-arts", build, list(dict.fromkeys(ids)))}


def held_artifact_ids(ex: Executor, ids: Sequence[str]) -> set[str]:
    """The held artifact ids among `ids` (distinct ids)."""
    build = lambda n: sa.select(artifacts.c.id).where(artifacts.c.id.in_(binds(n)))  # noqa: E731
    return {r[0] for r in _in_rows(ex, "sync.have-arts", build, ids)}


# --------------------------------------------------------------------------- the wire pages


def _after() -> list[sa.ColumnElement[bool]]:
    c = events.c
    return [c.origin_replica == sa.bindparam("origin"), c.origin_seq > sa.bindparam("after")]


def ops_events(
    ex: Executor, event_select: EventSelect, origin: str, after: int, limit: int
) -> list[Row]:
    """The Event rows of `origin` with origin_seq > after, in origin_seq order, at most
    `limit`."""

    def build() -> sa.Executable:
        q = event_select(*_after())
        return q.order_by(events.c.origin_seq).limit(sa.bindparam("lim"))

    params = {"origin": origin, "after": after, "lim": limit}
    return list(ex.rows("sync.list-ops", build, params))


def ops_rows(ex: Executor, links: Links, origin: str, after: int, limit: int) -> list[Row]:
    """Rows of the compact page's columns (`ROW_FIELDS`; the artifact links column from
    `links()`, the metadata as its stored text) for `origin` after `after`, ≤ `limit`."""

    def build() -> sa.Executable:
        named = {"artifact_ids": links(), "metadata": events.c.metadata_json}
        cols = [named[c] if c in named else events.c[c] for c in ROW_FIELDS]
        q = sa.select(*cols).where(*_after())
        return q.order_by(events.c.origin_seq).limit(sa.bindparam("lim"))

    params = {"origin": origin, "after": after, "lim": limit}
    return list(ex.rows("sync.ops-rows", build, params))


def ops_rows_json(ex: QueryExecutor, sql: str, origin: str, after: int, limit: int) -> Row:
    """One chunk of the compact page as the backend's own SQL (`Backend.rows_json_sql`) writes
    it on a read snapshot: (rows as JSON, count, last origin_seq, chars)."""
    return ex.query(sql, {"origin": origin, "after": after, "lim": limit})[0]


def artifacts_with_content(
    conn: sa.Connection, columns: Sequence[sa.ColumnElement[Any]], ids: Sequence[str]
) -> list[Row]:
    """Rows of `columns` of the artifacts `ids`, then their blob's content."""
    q = (
        sa.select(*columns, artifact_blobs.c.content)
        .join(artifact_blobs, artifact_blobs.c.sha256 == artifacts.c.sha256)
        .where(artifacts.c.id.in_(ids))
    )
    return list(conn.execute(q))


# --------------------------------------------------------------------------- refusals


def record_clock_anomaly(ex: Executor, row: Mapping[str, Any]) -> None:
    """Insert `row` into sync_clock_anomalies unless its event is recorded already."""

    def build() -> sa.Executable:
        col = sync_clock_anomalies.c.event_id
        return sa.select(col).where(col == sa.bindparam("event_id"))

    if not ex.rows("sync.anomaly-held", build, {"event_id": row["event_id"]}):
        ex.insert("sync.ins-anomaly", "sync_clock_anomalies", [dict(row)])


def record_conflict(ex: Executor, row: Mapping[str, Any]) -> None:
    """Insert `row` into sync_conflicts unless the same remote version is recorded already
    (same event id and remote_sha256)."""

    def build() -> sa.Executable:
        c = sync_conflicts.c
        return sa.select(c.event_id).where(
            c.event_id == sa.bindparam("event_id"), c.remote_sha256 == sa.bindparam("sha")
        )

    params = {"event_id": row["event_id"], "sha": row["remote_sha256"]}
    if not ex.rows("sync.conflict-held", build, params):
        ex.insert("sync.ins-conflict", "sync_conflicts", [dict(row)])


def _rejection_key(prefix: str) -> list[sa.ColumnElement[bool]]:
    # An UPDATE reserves the column names as bind names: the key binds are prefixed.
    c = sync_rejections.c
    return [c.kind == sa.bindparam(f"{prefix}kind"), c.ident == sa.bindparam(f"{prefix}ident")]


def rejection_attempts(ex: Executor, kind: str, ident: str) -> int | None:
    """How many times the rejection (kind, ident) was recorded, None if it is not."""
    build = lambda: sa.select(sync_rejections.c.attempts).where(*_rejection_key(""))  # noqa: E731
    prior = ex.rows("sync.rejection-prior", build, {"kind": kind, "ident": ident})
    return int(prior[0][0]) if prior else None


def insert_rejection(ex: Executor, row: Mapping[str, Any]) -> None:
    ex.insert("sync.ins-rejection", "sync_rejections", [dict(row)])


_REJECTION_UPDATES = (
    *("attempts", "last_seen_at", "message", "reason", "peer", "retryable", "origin_seq"),
)


def update_rejection(ex: Executor, kind: str, ident: str, values: Mapping[str, Any]) -> None:
    """Set `values` (attempts, last_seen_at, message, reason, peer, retryable, origin_seq) on
    the rejection (kind, ident)."""

    def build() -> sa.Executable:
        return (
            sa.update(sync_rejections)
            .where(*_rejection_key("key_"))
            .values({n: sa.bindparam(f"new_{n}") for n in _REJECTION_UPDATES})
        )

    params = {"key_kind": kind, "key_ident": ident}
    params.update({f"new_{n}": values[n] for n in _REJECTION_UPDATES})
    ex.run("sync.rejection-update", build, params)


def resolve_rejections(ex: Executor, kind: str, ids: Sequence[str]) -> None:
    """Delete the rejections of `kind` for `ids` (one probe first: usually there are none)."""
    c = sync_rejections.c
    build_any = lambda: sa.select(c.ident).where(c.kind == sa.bindparam("kind")).limit(1)  # noqa: E731
    if not ex.rows("sync.rejection-any", build_any, {"kind": kind}):
        return
    for n, params in in_lists(ids):

        def build(n: int = n) -> sa.Executable:
            return sa.delete(sync_rejections).where(
                c.kind == sa.bindparam("kind"), c.ident.in_(binds(n))
            )

        ex.run(("sync.resolve", n), build, {**params, "kind": kind})


def conflicts(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """The sync_conflicts rows, newest first."""
    t = sync_conflicts
    q = sa.select(t).order_by(t.c.first_seen_at.desc()).limit(limit)
    return [dict(r) for r in conn.execute(q).mappings()]


def rejections(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """The sync_rejections rows, newest first."""
    t = sync_rejections
    q = sa.select(t).order_by(t.c.last_seen_at.desc()).limit(limit)
    return [dict(r) for r in conn.execute(q).mappings()]


def clock_anomalies(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """The sync_clock_anomalies rows, at most `limit`."""
    return [dict(r) for r in conn.execute(sa.select(sync_clock_anomalies).limit(limit)).mappings()]


def rejection_idents(conn: sa.Connection, reasons: Collection[str]) -> list[str]:
    """The ids of the events rejected for one of `reasons`, oldest first."""
    r = sync_rejections.c
    q = (
        sa.select(r.ident)
        .where(r.kind == "event", r.reason.in_(sorted(reasons)))
        .order_by(r.first_seen_at, r.ident)
    )
    return [str(row[0]) for row in conn.execute(q)]


def refusal_counts(
    conn: sa.Connection,
    held: Collection[str],
    suspect: Collection[str],
    signature: Collection[str],
) -> dict[str, int]:
    """The counts `replication.counts` reports; `held`, `suspect` and `signature` are the
    rejection reasons held for a key, held as backdating suspects and refused by a verdict."""

    def n(*where: Any, table: sa.Table = sync_rejections) -> int:
        q = sa.select(sa.func.count()).select_from(table).where(*where)
        return int(conn.execute(q).scalar() or 0)

    r = sync_rejections.c
    anomaly = r.kind == "sequence"
    return {
        "held_for_key": n(r.reason.in_(sorted(held)), r.retryable),
        "held_backdated": n(r.reason.in_(sorted(suspect)), r.retryable),
        "refused_signatures": n(r.reason.in_(sorted(signature)), r.kind == "event"),
        "conflicts": n(table=sync_conflicts),
        "rejections": n(~anomaly),
        "sequence_anomalies": n(anomaly),
        "deferred": n(r.retryable.is_(True)),
        "clock_anomalies": n(table=sync_clock_anomalies),
    }


# --------------------------------------------------------------------------- the peer estate


def _peer() -> sa.Select[Any]:
    return sa.select(sync_peers).where(sync_peers.c.name == sa.bindparam("name"))


def peer(ex: Executor, name: str) -> dict[str, Any] | None:
    """The sync_peers row of `name`, or None."""
    rows = ex.rows("sync.peer", _peer, {"name": name})
    return None if not rows else dict(zip(sync_peers.c.keys(), rows[0], strict=True))


def _update_peer() -> sa.Update:
    sets: dict[str, Any] = {
        c.name: sa.bindparam(f"set_{c.name}") for c in sync_peers.c if c.name != "name"
    }
    return sa.update(sync_peers).where(sync_peers.c.name == sa.bindparam("name")).values(sets)


def put_peer(ex: Executor, row: Mapping[str, Any], *, exists: bool) -> None:
    """Write the sync_peers row `row`, every column (update it when `exists`, else insert)."""
    if not exists:
        ex.insert("sync.peer-insert", "sync_peers", [dict(row)])
        return
    params = {f"set_{k}": v for k, v in row.items() if k != "name"}
    ex.run("sync.peer-update", _update_peer, {**params, "name": row["name"]})


def peers(conn: sa.Connection) -> list[dict[str, Any]]:
    """The sync_peers rows by name."""
    q = sa.select(sync_peers).order_by(sync_peers.c.name)
    return [dict(r) for r in conn.execute(q).mappings().all()]


# --------------------------------------------------------------------------- signatures


def events_signed_by(ex: Executor, event_select: EventSelect, key_ids: Sequence[str]) -> list[Row]:
    """The Event rows signed by one of `key_ids`, in seq order per IN list."""
    build = lambda n: event_select(events.c.key_id.in_(binds(n))).order_by(events.c.seq)  # noqa: E731
    return _in_rows(ex, "sync.late-revoked", build, key_ids)


def unsigned_events_of(ex: Executor, event_select: EventSelect, names: Sequence[str]) -> list[Row]:
    """The Event rows of the unsigned events of `names`."""
    c = events.c
    build = lambda n: event_select(c.from_agent.in_(binds(n)), c.sig.is_(None))  # noqa: E731
    return _in_rows(ex, "sync.late-unsigned", build, names)


# --------------------------------------------------------------------------- origin positions


def _event_at(origin_col: Any, seq_col: Any) -> sa.Exists:
    """A held event at the origin position (`origin_col`, `seq_col`)."""
    return sa.exists().where(events.c.origin_replica == origin_col, events.c.origin_seq == seq_col)


def oldest_retried(conn: sa.Connection, origin: str) -> int | None:
    """The lowest position of `origin` whose event is rejected but still retried, with no
    event held at it (a deferred event pins the pull position below it), or None."""
    r = sync_rejections.c
    q = sa.select(sa.func.min(r.origin_seq)).where(
        r.kind == "event",
        r.origin_replica == origin,
        r.retryable.is_(True),
        ~_event_at(r.origin_replica, r.origin_seq),
    )
    floor = conn.execute(q).scalar()
    return None if floor is None else int(floor)


def retried_positions(conn: sa.Connection, origin: str, upto: int) -> set[int]:
    """The positions of `origin` <= upto of events rejected but still retried, with no event
    held at them."""
    r = sync_rejections.c
    q = sa.select(r.origin_seq).where(
        r.kind == "event",
        r.origin_replica == origin,
        r.retryable.is_(True),
        r.origin_seq.is_not(None),
        r.origin_seq <= upto,
        ~_event_at(r.origin_replica, r.origin_seq),
    )
    return {int(row[0]) for row in conn.execute(q)}


def highest_held(conn: sa.Connection, origin: str, upto: int | None = None) -> int:
    """The highest origin_seq of `origin` (<= upto when given) held here, 0 if none."""
    c = events.c
    where = [c.origin_replica == origin]
    if upto is not None:
        where.append(c.origin_seq <= upto)
    top = conn.execute(sa.select(sa.func.max(c.origin_seq)).where(*where)).scalar()
    return int(top or 0)


def held_above(conn: sa.Connection, origin: str, above: int, limit: int) -> list[tuple[str, int]]:
    """(id, origin_seq) of the first `limit` events of `origin` held above `above`."""
    c = events.c
    q = (
        sa.select(c.id, c.origin_seq)
        .where(c.origin_replica == origin, c.origin_seq > above)
        .order_by(c.origin_seq)
        .limit(limit)
    )
    return [(r[0], int(r[1])) for r in conn.execute(q)]


def origin_counts(conn: sa.Connection) -> list[tuple[str, int, int]]:
    """(origin, highest origin_seq, events held) per origin held here."""
    c = events.c
    q = sa.select(c.origin_replica, sa.func.max(c.origin_seq), sa.func.count())
    return [(r[0], int(r[1]), int(r[2])) for r in conn.execute(q.group_by(c.origin_replica))]


def _fp_sums(col: Any, p1: int, p2: int) -> list[Any]:
    """count, sum of col mod p1, sum of col² mod p2 (the fingerprint's aggregates)."""
    return [
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(col % p1), 0),
        sa.func.coalesce(sa.func.sum((col % p2) * (col % p2) % p2), 0),
    ]


def position_sums(conn: sa.Connection, origin: str, upto: int, p1: int, p2: int) -> Row:
    """(count, Σ seq mod p1, Σ (seq mod p2)² mod p2) over the held positions of `origin` <=
    upto, unreduced: an index-only range scan."""
    c = events.c
    q = sa.select(*_fp_sums(c.origin_seq, p1, p2)).where(
        c.origin_replica == origin, c.origin_seq <= upto
    )
    return tuple(conn.execute(q).one())


def origin_position_sums(conn: sa.Connection, p1: int, p2: int) -> list[Row]:
    """(origin, highest origin_seq, then `position_sums`' three values) per origin held here:
    one scan."""
    c = events.c
    q = sa.select(c.origin_replica, sa.func.max(c.origin_seq), *_fp_sums(c.origin_seq, p1, p2))
    return [tuple(r) for r in conn.execute(q.group_by(c.origin_replica)).all()]


def _refused_union() -> sa.Subquery:
    r, c = sync_rejections.c, sync_conflicts.c
    return sa.union(
        sa.select(r.origin_replica, r.origin_seq).where(
            r.kind == "event", r.retryable.is_(False), r.origin_seq.is_not(None)
        ),
        sa.select(c.origin_replica, c.origin_seq).where(c.origin_seq.is_not(None)),
    ).subquery()


def refused_positions(conn: sa.Connection, origin: str, upto: int) -> list[int]:
    """Distinct positions of `origin` <= upto refused for good (rejections that are no longer
    retried, conflicts) at which no event is held. Both tables are empty on a healthy log."""
    u = _refused_union()
    q = sa.select(u.c.origin_seq).where(
        u.c.origin_replica == origin,
        u.c.origin_seq <= upto,
        ~_event_at(u.c.origin_replica, u.c.origin_seq),
    )
    return [int(r[0]) for r in conn.execute(q)]


def refused_origins(conn: sa.Connection) -> list[str]:
    """The origins with a position refused for good (see `refused_positions`)."""
    u = _refused_union()
    return [r[0] for r in conn.execute(sa.select(u.c.origin_replica).distinct())]
