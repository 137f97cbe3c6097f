"""Identity in the store (RFC 0008): the private keys this process holds, the keyring read
from the log's key events, the pinned admin keys, and `seal`, which signs a local event and
judges it before it is written (nothing forged or unsigned-when-it-must-sign is stored).

The rules are the pure core's (`identity/`); this module only feeds them rows.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mempalace_logstream import errors, lazy, names
from mempalace_logstream.backends.queries import identity as queries
from mempalace_logstream.identity.actor import ADMIN_NAME, Actor
from mempalace_logstream.identity.keyring import KEY_EVENT_TYPES, KEY_REVOKE, Keyring, SignedEvent
from mempalace_logstream.identity.verdict import (
    UNSIGNED,
    Verdict,
    own_verdict,
    unsigned_verdict,
    verdict,
)
from mempalace_logstream.models import Event
from mempalace_logstream.store.marks import PIN_PREFIX, pins_of
from mempalace_logstream.store.rows import events_from_rows

if TYPE_CHECKING:
    from pathlib import Path

    from mempalace_logstream.backends import Executor
    from mempalace_logstream.backends.base import Compile
    from mempalace_logstream.identity import keys, signing
else:  # on first use: an unsigned write to a log without keys never loads them (issue 25)
    keys = lazy.module("mempalace_logstream.identity.keys")
    signing = lazy.module("mempalace_logstream.identity.signing")

KEYS_DIRNAME = "keys"
KEY_SUFFIX = ".key"
KEY_TYPE_PREFIX = "identity."  # every type under it is reserved for key events
# An agent name that can be a key file's name (the agent commands refuse others).
KEY_NAME_RE = names.UNICODE_AGENT_NAME_RE


def keys_dir_for(url: str, palace: str | Path | None = None) -> Path | None:
    """Where a log's private keys live by default: `keys/` beside a SQLite file, else
    `<palace>/keys` (None when neither is known). `keys_path_for` as a Path."""
    from pathlib import Path  # here: the lean writer opens a log without pathlib

    where = keys_path_for(url, palace)
    return None if where is None else Path(where)


def keys_path_for(url: str, palace: str | Path | None = None) -> str | None:
    """`keys_dir_for` as a str, the one rule: computed with `os.path` (what `Path.resolve`
    and `expanduser` call), so the lean writer's process never imports pathlib (~6 ms of
    CPU per process, issue 25) unless a keys directory exists."""
    if url.startswith("sqlite:///"):
        url = url[len("sqlite:///") :]
    elif "://" in url:
        if not palace:
            return None
        return os.path.join(os.path.expanduser(os.fspath(palace)), KEYS_DIRNAME)
    return os.path.join(os.path.dirname(os.path.realpath(os.path.expanduser(url))), KEYS_DIRNAME)


class Identity:
    """The keys a store holds and the keyring it judges events with (one per store)."""

    def __init__(self, keys_dir: Path | str | None, aggregate: Any) -> None:
        self._keys_dir: Path | None = None
        self._keys_path: str | None = None  # keys_dir as a str (a stat per signed write)
        self._set_keys_dir(keys_dir)
        self._aggregate = aggregate  # the backend's string aggregate (`queries.marks`)
        self._lock = threading.Lock()
        self._pairs: dict[str, keys.KeyPair] | None = None
        self._pairs_stamp: int | None = None  # the keys directory's mtime when loaded
        self._pairs_loaded_ns = 0  # wall time of that load
        self._ring: Keyring | None = None
        # The marks row the cached keyring was built at: (newest key event, joined pin keys).
        self._ring_at: tuple[Any, Any] | None = None
        # The keyring of the write transactions (serialized by the pipeline), with the number
        # of the transaction that read it and the generation it was read at (`write_keyring`).
        self._write_ring: tuple[Keyring, int, int] | None = None
        self._transactions = 0  # write transactions begun by this store
        self._generation = 0  # moved whenever a write may have changed the keyring
        # `plain_writes`: the keyring it holds for, and the (writer, type) pairs of it.
        self._plain: tuple[Keyring | None, set[tuple[str, str]]] = (None, set())

    @property
    def keys_dir(self) -> Path | None:
        """Where this store's private key files are (`<agent>.key`), if anywhere. Made a
        Path on first use when given as a str (the lean writer's: no pathlib until then)."""
        if self._keys_dir is None and self._keys_path is not None:
            from pathlib import Path

            self._keys_dir = Path(self._keys_path)
        return self._keys_dir

    @keys_dir.setter
    def keys_dir(self, path: Path | None) -> None:
        self._set_keys_dir(path)

    def _set_keys_dir(self, path: Path | str | None) -> None:
        self._keys_dir = None if path is None or isinstance(path, str) else path
        self._keys_path = None if path is None else os.fspath(path)
        self._pairs = None

    # ------------------------------------------------------------------ private keys
    def reload_keys(self) -> None:
        """Forget the loaded key files (after `agent add`/`rotate` wrote one)."""
        with self._lock:
            self._pairs = None

    def pairs(self) -> dict[str, keys.KeyPair]:
        """agent name -> its private key, from `<keys_dir>/<agent>.key`; loaded again when
        the directory changed (`agent add` or `rotate` run by another process: a running hub
        signs with the new key at once)."""
        stamp = _dir_stamp(self._keys_path)
        with self._lock:
            # A directory changed less than a second before the load may change again within
            # the same mtime tick (file systems keep coarse times): reload until it settles.
            settled = stamp is None or self._pairs_loaded_ns - stamp > _SETTLE_NS
            if self._pairs is None or stamp != self._pairs_stamp or not settled:
                self._pairs_loaded_ns = time.time_ns()
                self._pairs = _load_pairs(self._keys_path)
                self._pairs_stamp = stamp
            return self._pairs

    # ------------------------------------------------------------------ keyring
    def keyring(self, ex: Executor, select: Any, marks: tuple[Any, Any] | None = None) -> Keyring:
        """The keyring of the log as `ex` sees it, rebuilt only when a key event or a pin
        changed since the last build. `select(*where)` gives the event read statement;
        `marks` (the newest key event's id, the joined pins), when the caller read them in
        this transaction already (the write transaction's starting state), are not read
        again."""
        if marks is None:
            marks = queries.marks(ex, KEY_EVENT_TYPES, PIN_PREFIX, self._aggregate)
        top, joined = marks
        with self._lock:  # the same marks row: the same key events and pins
            if self._ring is not None and self._ring_at == (top, joined):
                return self._ring
        pins = pins_of(joined)
        rows = queries.key_events(ex, KEY_EVENT_TYPES, select)
        ring = Keyring.build((signed(e) for e in events_from_rows(rows)), pins)
        with self._lock:
            self._ring, self._ring_at = ring, (top, joined)
        return ring

    def marks_statement(self, compile: Compile) -> tuple[str, Mapping[str, Any]]:
        """The SQL text and parameters of the keyring's marks probe (a log fact:
        `remember_log_facts`)."""
        return queries.marks_statement(compile, KEY_EVENT_TYPES, PIN_PREFIX, self._aggregate)

    def any_key_event(self, ex: Executor) -> bool:
        """Whether the log holds any key event (identity is in use here)."""
        return queries.any_key_event(ex, KEY_EVENT_TYPES)

    def begin_transaction(self) -> tuple[int, int]:
        """The number of a write transaction this store begins (the pipeline calls it), and
        the generation it begins at (marks read at its start hold while it stays). Called
        under the pipeline's commit lock only, one transaction at a time: no lock of its own
        (an int read is atomic; a `moved` racing with it is the same as one just after)."""
        self._transactions += 1
        return self._transactions, self._generation

    def moved(self) -> None:
        """A write may have changed the keyring: key events were appended (by any origin:
        `store/append.py`) or an item that may have read or written one was rolled back. The
        write transactions read the keyring again, with the marks query. Called in write
        transactions only (under the pipeline's commit lock), as `write_keyring`: no lock of
        its own."""
        self._generation += 1
        self._write_ring = None

    def write_keyring(
        self,
        ex: Executor,
        select: Any,
        number: int,
        unchanged: bool,
        marks: tuple[Any, Any] | None = None,
        marks_generation: int = -1,
    ) -> Keyring:
        """The keyring as write transaction `number` sees it: the one it read already, or the
        previous transaction's while nobody else committed since (`unchanged`: the marks query
        is skipped), unless the generation moved; else read with `keyring`, with the `marks`
        the transaction read at its start if the generation is still `marks_generation`.
        Called in write transactions only, one at a time (under the pipeline's commit lock):
        no lock of its own, as `begin_transaction` and `moved`."""
        held, generation = self._write_ring, self._generation
        if held is not None:
            ring, at, held_generation = held
            if held_generation == generation and (at == number or (unchanged and at == number - 1)):
                if at != number:
                    self._write_ring = (ring, number, generation)
                return ring
        ring = self.keyring(ex, select, marks if marks_generation == generation else None)
        if self._generation == generation:
            self._write_ring = (ring, number, generation)
        return ring

    # ------------------------------------------------------------------ sealing

    def plain_writes(self, ring: Keyring) -> set[tuple[str, str]] | None:
        """The (writer, event type) pairs that `seal` found plain under `ring`: a local
        process's event (no actor) with its clock's minted stamp, asked for no key, so left
        unsigned, and judged `UNSIGNED`; its names checked against nobody. None for a keyring
        with any agent's key (there, must-sign and the key files depend on the stamp and the
        keys directory). Kept per keyring object: a key event or a pin builds a new one
        (`keyring`), so a key added or revoked empties it. Called in write transactions only
        (under the pipeline's commit lock), as `seal`: no lock of its own."""
        held, plain = self._plain
        if held is not ring:
            if registered_names(ring):
                return None
            plain = set()
            self._plain = (ring, plain)
        return plain

    def seal(
        self,
        ex: Executor,
        select: Any,
        event: Event,
        actor: Actor | None,
        ring: Keyring | None = None,
        minted: bool = False,
    ) -> tuple[Event, Verdict]:
        """Sign `event` with the key its writer holds here and judge it. Returns the event
        with `sig`/`key_id` and its verdict; raises ForbiddenError when it must not be
        written (another agent's name, or unsigned from an agent that signs). `minted`: its
        HLC is the one the store's clock just minted, well formed (`HybridClock.minted`)."""
        if actor is not None:  # (a local process writes for anyone)
            check_writer(actor, "from_agent", event.from_agent)
        ring = ring if ring is not None else self.keyring(ex, select)
        pair: keys.KeyPair | None = None
        asked = True  # whether a key was looked for
        if is_key_type(event.type):
            pair = self._key_event_signer(event, actor)
        elif (
            registered_names(ring)
            or event.from_agent == ADMIN_NAME
            or (actor is not None and actor.admin)
        ):  # else a log without key events, written not as the admin: unsigned (`_signer`)
            pair = self._signer(ring, event, actor)
        else:
            asked = False
        if pair is not None:
            shas = artifact_sha256s(ex, event.artifact_ids)
            try:
                sig = signing.sign_event(pair, event, shas)
            except signing.SigningError as exc:
                raise errors.ValidationError(
                    f"metadata cannot be signed: {exc}", field="metadata"
                ) from exc
            event = _with_signature(event, sig, pair.key_id)
        if event.type in KEY_EVENT_TYPES:
            ring = _with_key_event(ring, event)
        if pair is not None:  # our own signature: only the key's authority needs checking
            judged = own_verdict(event, pair.key_id, ring, minted)
        elif minted:
            judged = unsigned_verdict(event, ring)
        else:
            judged = verdict(event, None, None, ring)
        if judged.verified is False:
            raise errors.ForbiddenError(_refusal(judged, event, self.keys_dir), field="from_agent")
        if not asked and minted and actor is None and judged is UNSIGNED:
            held, plain = self._plain
            if held is ring and len(plain) < _PLAIN_KEPT:  # (writers' names: bounded)
                plain.add((event.from_agent, event.type))
        return event, judged

    def _signer(self, ring: Keyring, event: Event, actor: Actor | None) -> keys.KeyPair | None:
        """The key that signs an ordinary event: the admin key for the admin token; for an
        agent actor its own key (valid in the keyring at a time this event is stamped) or
        none, never the admin's; for a local process (no actor) the writer's own key, else
        the admin key when it writes as the admin or for an agent that must sign. An
        anonymous request is never signed with a key held here.
        A log without key events (no agent has a key: nobody's key is valid, nobody must sign)
        signs only as the admin: `seal` asks this only of an event written as the admin or to
        a log with key events, so an append of anyone else needs no key file, and the keys
        directory is not even looked at (its stat was ~2 µs of every append, issue 25). A key
        another process adds is seen at once still: a key that signs needs its key event,
        which the keyring reads from the log."""
        if actor is not None and actor.anonymous:
            return None
        held = self.pairs()
        admin = held.get(ADMIN_NAME)
        if actor is not None and actor.admin:
            return admin
        own = held.get(event.from_agent)
        if own is not None and own.key_id in ring.valid_keys(event.from_agent, event.hlc):
            return own
        if actor is not None:  # an agent: its own key or nothing
            return None
        if event.from_agent == ADMIN_NAME and admin is not None:
            return admin
        if admin is not None and ring.must_sign(event.from_agent, event.hlc):
            return admin
        return None

    def _key_event_signer(self, event: Event, actor: Actor | None) -> keys.KeyPair:
        """The key that signs a key event (RFC 0008 "Who writes key events"): the admin key,
        for the admin token or a local process holding it; an agent's own key for the
        revocation of that very key (`identity.key_revoke`, written as itself). Anything else
        is a ForbiddenError naming `type`, before anything is written."""
        held = self.pairs()
        admin = held.get(ADMIN_NAME)
        if actor is None or actor.admin:
            if admin is not None:
                return admin
            own = _own_revocation_key(held, event, event.from_agent) if actor is None else None
            if own is not None:
                return own
            where = self.keys_dir / f"{ADMIN_NAME}{KEY_SUFFIX}" if self.keys_dir else "admin.key"
            raise errors.ForbiddenError(
                f"type {event.type!r} is a key event: only the admin writes key events, signed "
                f"with the admin key, and no admin key is held here ({where})",
                field="type",
            )
        own = _own_revocation_key(held, event, actor.agent) if actor.agent else None
        if own is not None:
            return own
        raise errors.ForbiddenError(
            f"type {event.type!r} is a key event: only the admin writes key events; an agent "
            f"may only revoke its own key ({KEY_REVOKE} as itself, metadata.agent its name, "
            "metadata.key_id its key held on this hub)",
            field="type",
        )


def is_key_type(event_type: str) -> bool:
    """Whether `event_type` is reserved for key events (every `identity.*` type; the keyring
    folds `identity.key_add` and `identity.key_revoke`)."""
    return event_type in KEY_EVENT_TYPES or event_type.startswith(KEY_TYPE_PREFIX)


def _own_revocation_key(
    held: dict[str, keys.KeyPair], event: Event, agent: str
) -> keys.KeyPair | None:
    """`agent`'s key when `event` is that agent revoking that very key, as itself."""
    pair = held.get(agent)
    if pair is None or event.type != KEY_REVOKE or event.from_agent != agent:
        return None
    meta = event.metadata
    if meta.get("agent") != agent or meta.get("key_id") != pair.key_id:
        return None
    return pair


@functools.lru_cache(maxsize=8)
def registered_names(ring: Keyring) -> frozenset[str]:
    """The names of the agents with a key in `ring` (revoked ones too: a name stays taken)."""
    return frozenset(r.agent for r in ring.records())


def check_names(ring: Keyring, **written: str | None) -> None:
    """No name written (`from_agent=…`, `to_agent=…`, `created_by=…`) is a look-alike of an
    agent with a key (issue 18 item 13); ValidationError naming the field otherwise."""
    registered = registered_names(ring)
    if registered:
        for field, name in written.items():
            if name is not None:
                names.check_lookalike(field, name, registered)


def check_writer(actor: Actor | None, field: str, name: str) -> None:
    """An agent actor writes under its own name only (`from_agent`, `created_by`): another
    name is a ForbiddenError naming `field`. The admin, a local process and an anonymous
    request (a hub with no tokens and no keys: as before identity) write for anyone."""
    if actor is not None and actor.agent is not None and name != actor.agent:
        raise errors.ForbiddenError(
            f"{field} {name!r} is not {actor.agent!r}, the agent this call is authenticated "
            "as; an agent writes as itself only",
            field=field,
        )


def signed(event: Event) -> SignedEvent:
    return SignedEvent(event=event, sig=event.sig, key_id=event.key_id)


def artifact_sha256s(ex: Executor, ids: Sequence[str]) -> dict[str, str]:
    """The content SHA-256 of each artifact id held here (what a signature covers)."""
    unique = sorted(set(ids))
    if not unique:
        return {}
    return queries.artifact_sha256s(ex, unique)


def _with_signature(event: Event, sig: str, key_id: str) -> Event:
    out = object.__new__(Event)
    out.__dict__.update(event.__dict__, sig=sig, key_id=key_id)
    return out


def _with_key_event(ring: Keyring, event: Event) -> Keyring:
    """The keyring with this key event folded in; ForbiddenError if the keyring refuses it."""
    grown = ring.extended([signed(event)])
    for refusal in grown.refused:
        if refusal.event_id == event.id:
            raise errors.ForbiddenError(
                f"{event.type} refused ({refusal.code}): {refusal.message}", field="metadata"
            )
    return grown


def _refusal(judged: Verdict, event: Event, keys_dir: Path | None) -> str:
    if judged.code == "unsigned_required":
        where = keys_dir / f"{event.from_agent}{KEY_SUFFIX}" if keys_dir else "a key file"
        return (
            f"from_agent {event.from_agent!r} signs every event since it got a key, and no valid "
            f"key of {event.from_agent!r} is held here ({where}); write from where its key is, "
            "or with the admin key"
        )
    return f"refused ({judged.code}): {judged.reason}"


_SETTLE_NS = 1_000_000_000
_PLAIN_KEPT = 4096  # (writer, type) pairs `plain_writes` holds at most


def _dir_stamp(keys_dir: str | None) -> int | None:
    """The keys directory's mtime (ns): adding, renaming or removing a key file changes it.
    Asked of the file system on every call (a key file may appear at any time). A missing
    directory (a hub whose admin token writes, with no key made yet) is told by `access`,
    which answers False instead of raising: the `stat` alone raised and caught an OSError
    on every admin write (~0.6 µs of the ~0.9, issue 25)."""
    if keys_dir is None or not os.access(keys_dir, os.F_OK):
        return None
    try:
        return os.stat(keys_dir).st_mtime_ns  # once per signed write: no pathlib layer
    except OSError:  # removed since the `access`
        return None


def _load_pairs(keys_dir: str | None) -> dict[str, keys.KeyPair]:
    if keys_dir is None or not os.path.isdir(keys_dir):
        return {}  # no keys here: pathlib not imported (the lean writer's plain append)
    from pathlib import Path

    out: dict[str, keys.KeyPair] = {}
    for path in sorted(Path(keys_dir).glob(f"*{KEY_SUFFIX}")):
        name = path.name[: -len(KEY_SUFFIX)]
        if KEY_NAME_RE.match(name):
            out[name] = keys.load_private_key(path)
    return out
