"""Anti-entropy rounds between replicas (S-7.4, S-7.5) over a `Peer` Protocol.

`LocalPeer` wraps a `LogStore` (two local files); `HttpPeer` speaks the hub's `/sync/*` routes
(ours: compact 5,000-event pages, batched artifacts and push; the reference's: 500-event pages,
one artifact per request, pull only). What a peer can do is declared in its `Capabilities`:
a peer with `rows_limit > 0` serves compact pages (`replication.ROW_COLUMNS`); our hub
advertises them in its version vector's `profile` (`sync_rows`), and anything else gets the
reference shapes. Each page is validated, its missing artifacts fetched, then artifacts and
events are applied in one transaction. Progress is only what is applied plus idempotent apply,
so a round may crash anywhere and the next one resumes.

A peer is not trusted with our memory or our time: every HTTP response is streamed and refused
past `max_response_bytes` (and past a matching number of JSON values), a page longer than the
limit asked is refused, and a round with one peer has a total deadline that also bounds every
socket read. Peers run concurrently (`sync_all`, the hub's `SyncLoop`), so a slow one delays
only itself. Where a pull resumes is checked against what the peer holds (`holes.pull_start`),
so an event with a forged, far-ahead origin position cannot stop later pulls. Peer URLs are
shown, logged and stored without their credentials (`redact_url`). Must not import fastapi,
typer or mcp.

Modules, bottom up:

    limits      sizes, caps and the round's Deadline; JSON value bound, URL redaction
    protocol    the Peer Protocol, its Capabilities, RowsRefused / PushRefused
    sockets     socket-level deadlines under httpx
    vector      a peer's version vector and fingerprints, validated
    local       LocalPeer and apply_push (the receiving side of a push)
    http_peer   HttpPeer (ours or the reference hub)
    holes       where a pull or push starts; hole search by fingerprints
    pipeline    pages of one origin: fetch, validate, fetch artifacts, apply
    rounds      one round with one peer (sync_with_peer, sync_one, repair_holes)
    peers       peers.json, http_round, sync_all, estate
    loop        the hub's SyncLoop
"""

from __future__ import annotations

from mempalace_logstream.sync.holes import find_holes
from mempalace_logstream.sync.http_peer import HttpPeer, rows_offer
from mempalace_logstream.sync.limits import (
    ABANDON_GRACE_S,
    APPLY_ARTIFACT_BYTES,
    ARTIFACT_BATCH,
    BATCH,
    BYTES_PER_JSON_VALUE,
    DEFAULT_DEADLINE_S,
    DEFAULT_INTERVAL_S,
    HTTP_TIMEOUT_S,
    MAX_RESPONSE_BYTES,
    MIN_RESPONSE_BYTES,
    PUSH_MAX_BYTES,
    ROWS_BATCH,
    Deadline,
    DeadlineExceededError,
    Progress,
    ResponseTooLargeError,
    check_deadline,
    json_values_bound,
    redact_url,
)
from mempalace_logstream.sync.local import LocalPeer, apply_push
from mempalace_logstream.sync.loop import INTERVAL_ENV, SyncLoop, interval_from_env
from mempalace_logstream.sync.peers import estate, http_round, load_peers, peers_file, sync_all
from mempalace_logstream.sync.protocol import (
    Capabilities,
    Peer,
    PushRefused,
    RowsRefused,
    capabilities_of,
)
from mempalace_logstream.sync.rounds import repair_holes, sync_one, sync_with_peer
from mempalace_logstream.sync.vector import Fingerprints, fingerprint, parse_vector

_parse_vector = parse_vector  # its name before sync.py became a package (tests use it)

__all__ = [
    "ABANDON_GRACE_S",
    "APPLY_ARTIFACT_BYTES",
    "ARTIFACT_BATCH",
    "BATCH",
    "BYTES_PER_JSON_VALUE",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_INTERVAL_S",
    "HTTP_TIMEOUT_S",
    "INTERVAL_ENV",
    "MAX_RESPONSE_BYTES",
    "MIN_RESPONSE_BYTES",
    "PUSH_MAX_BYTES",
    "ROWS_BATCH",
    "Capabilities",
    "Deadline",
    "DeadlineExceededError",
    "Fingerprints",
    "HttpPeer",
    "LocalPeer",
    "Peer",
    "Progress",
    "PushRefused",
    "ResponseTooLargeError",
    "RowsRefused",
    "SyncLoop",
    "apply_push",
    "capabilities_of",
    "check_deadline",
    "estate",
    "find_holes",
    "fingerprint",
    "http_round",
    "interval_from_env",
    "json_values_bound",
    "load_peers",
    "parse_vector",
    "peers_file",
    "redact_url",
    "repair_holes",
    "rows_offer",
    "sync_all",
    "sync_one",
    "sync_with_peer",
]
