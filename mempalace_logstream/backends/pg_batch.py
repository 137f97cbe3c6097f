"""The items of a PostgreSQL group commit (issue 25): how each runs in the writer's one
transaction (`PostgresBackend.savepoint`), so that a failing item fails alone.

A batch first runs its items without savepoints (`deferred_item`): their writes and checks
wait in the queue (pg_writer.py) for the next read or the COMMIT, so a batch of plain appends
is one message: BEGIN, the lock, the check, every item's INSERT and guard check, the NOTIFY
and the COMMIT. A statement failing on the server fails that whole message, which cannot say
whose it was: `ItemFailed` (a `StateMoved`), nothing of the transaction is written, and the
pipeline runs the batch once more, each item in a savepoint of its own (`queued_savepoint`),
where the failing item is rolled back alone. A batch costs one round trip, and a failing
item one failed message more; savepoints cost a round trip per item (their errors are the
item's) and a subtransaction on the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg

from mempalace_logstream.backends import base

if TYPE_CHECKING:
    from mempalace_logstream.backends.pg_writer import WriteQueue
    from mempalace_logstream.backends.postgres import PostgresBackend


class ItemFailed(base.StateMoved):
    """A statement of a group commit whose items ran without savepoints failed on the server
    (`WriteQueue.batch`): nothing of the transaction is written; the pipeline runs the batch
    again, each item in its savepoint, so that the failing item fails alone."""


def failed_on_server(exc: BaseException) -> bool:
    """The server answered with an error (a constraint, a bad value …), the connection and
    its transaction still there to roll back: not a lost connection, a cancelled statement
    or a lock timeout (`psycopg.OperationalError`, which ends the transaction as before)."""
    return isinstance(exc, psycopg.DatabaseError) and not isinstance(exc, psycopg.OperationalError)


@contextmanager
def deferred_item(db: psycopg.Connection[Any], queue: WriteQueue) -> Iterator[None]:
    """A group commit's item without a savepoint: its writes wait in the queue. An item
    refused in Python before anything of it was sent is forgotten (its queued statements
    dropped; a read of it may have sent the items' before it); one whose statements reached
    the server (a read of it sent them), or that the server failed, cannot be undone alone:
    `ItemFailed`."""
    queue.deferred = True
    index, added = len(queue.items), queue.added
    try:
        yield
    except Exception as exc:
        aborted = db.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        if failed_on_server(exc) or aborted or queue.sent > added:
            del queue.items[:]
            raise ItemFailed from exc
        del queue.items[index:]
        raise


@contextmanager
def queued_savepoint(
    backend: PostgresBackend, db: psycopg.Connection[Any], queue: WriteQueue
) -> Iterator[None]:
    """SAVEPOINT … RELEASE, queued with the item's writes and sent with them; an item that
    fails before anything of it was sent costs no round trip to undo. The item's end is sent
    at once only when writes of it are still queued (their errors are the item's); when they
    went to the server already (before a read of the item), the RELEASE, which cannot fail,
    waits for the next message (the next item's writes, or the COMMIT)."""
    mark = queue.add(SAVEPOINT, None)
    try:
        yield
        queue.add(RELEASE, None)
        if not queue.only_savepoints():
            queue.flush(db)  # this item's errors surface here, in its savepoint
    except Exception:
        if queue.sent_since(mark):
            del queue.items[:]
            backend.rollback_item(db)
        else:  # nothing of the item reached the server: forget it
            del queue.items[mark.index :]
        raise


SAVEPOINT, RELEASE = "SAVEPOINT logstream_item", "RELEASE SAVEPOINT logstream_item"
ROLLBACK_ITEM = f"ROLLBACK TO SAVEPOINT logstream_item; {RELEASE}"
