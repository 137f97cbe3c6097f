"""`<palace>/peers.json` and rounds with every peer in it: `load_peers`, `http_round` (one
HTTP peer), `sync_all` (all at once, each within its deadline) and `estate`, the
`/sync/peers` payload.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mempalace_logstream import errors, replication
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.http_peer import HttpPeer
from mempalace_logstream.sync.limits import (
    ABANDON_GRACE_S,
    DEFAULT_DEADLINE_S,
    MAX_RESPONSE_BYTES,
    Progress,
    redact_url,
)
from mempalace_logstream.sync.protocol import Peer
from mempalace_logstream.sync.rounds import sync_one


def peers_file(palace: str | Path) -> Path:
    return Path(palace).expanduser() / "peers.json"


def load_peers(palace: str | Path) -> list[dict[str, Any]]:
    """`<palace>/peers.json` → [{name, url, token}]; a missing file means no peers. `url` keeps
    any credentials (for the requests); a default `name` is the URL without them.

    Raises ValidationError for a malformed file or a peer without a url.
    """
    path = peers_file(palace)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise errors.ValidationError(f"{path}: not valid JSON ({exc})", field="peers") from exc
    items = raw.get("peers") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise errors.ValidationError(f'{path}: expected {{"peers": [...]}}', field="peers")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item["url"]:
            raise errors.ValidationError(f"{path}: peers[{i}] has no url", field="peers")
        token = item.get("token")
        name = str(item.get("name") or redact_url(item["url"].rstrip("/")))
        token = token if isinstance(token, str) and token else None
        out.append({"name": name, "url": item["url"], "token": token})
    return out


def http_round(
    store: LogStore,
    spec: Mapping[str, Any],
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    started: Callable[[Peer], Any] | None = None,
) -> dict[str, Any]:
    """`sync_one` with the HttpPeer of a peers.json entry {name, url, token}; `started` is
    given the peer once it exists (so a stopping hub can cancel its deadline)."""
    peer = HttpPeer(
        spec["url"], spec.get("token"), name=spec.get("name"), max_response_bytes=max_response_bytes
    )
    try:
        if started is not None:
            started(peer)
        return sync_one(store, peer, push, progress, repair, deadline_s)
    finally:
        peer.close()


def sync_all(
    store: LogStore,
    palace: str | Path,
    push: bool = False,
    progress: Progress | None = None,
    repair: bool = False,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
) -> list[dict[str, Any]]:
    """One round with every peer of `<palace>/peers.json` (read now, so edits take effect on
    the next round), all peers at once, each in its own thread within its own deadline: a
    slow peer delays only itself. Per-peer errors are reported in the list (in peers.json
    order), never raised."""
    specs = load_peers(palace)
    results: list[dict[str, Any] | None] = [None] * len(specs)
    peers: list[Peer | None] = [None] * len(specs)

    def run(i: int) -> None:
        def started(peer: Peer) -> None:
            peers[i] = peer

        results[i] = http_round(
            store, specs[i], push, progress, repair, deadline_s, max_response_bytes, started
        )

    threads = [
        threading.Thread(target=run, args=(i,), name=f"logstream-sync-{i}", daemon=True)
        for i in range(len(specs))
    ]
    for t in threads:
        t.start()
    end = None if deadline_s is None else time.monotonic() + deadline_s + ABANDON_GRACE_S
    for i, t in enumerate(threads):
        t.join(None if end is None else max(0.0, end - time.monotonic()))
        if results[i] is None:  # still running past its deadline: report it and leave it
            deadline = getattr(peers[i], "deadline", None)
            if deadline is not None:
                deadline.cancel()
            results[i] = {
                "peer_name": specs[i]["name"],
                "peer_url": redact_url(specs[i]["url"]),
                "error": f"the round did not end within {deadline_s:g} s + "
                f"{ABANDON_GRACE_S:g} s; abandoned",
            }
    return [r for r in results if r is not None]


def estate(
    store: LogStore, palace: str | Path | None = None, interval_s: float | None = None
) -> dict[str, Any]:
    """The `/sync/peers` payload: self, configured peers with their last round, origins known
    only through others (`unnamed_origins`), and outstanding conflicts/rejections/sequence
    anomalies. No tokens, and URLs without their credentials."""
    rows = {r["name"]: r for r in replication.estate_rows(store)}
    configured: list[dict[str, Any]] = []
    config_error = None
    if palace is not None:
        try:
            configured = load_peers(palace)
        except errors.ValidationError as exc:
            config_error = exc.message
    peers = []
    names = [p["name"] for p in configured] or list(rows)
    for name in names:
        row = rows.get(name, {})
        url = next((p["url"] for p in configured if p["name"] == name), row.get("url"))
        peers.append(_peer_entry(name, url, row))
    vv = store.version_vector()
    named = {store.replica_id} | {p["replica_id"] for p in peers if p["replica_id"]}
    out: dict[str, Any] = {
        "self": {"replica_id": store.replica_id, "name": None, "version_vector": vv},
        "peers": peers,
        "unnamed_origins": sorted(o for o in vv if o not in named),
        "sync_interval_s": interval_s,
        "sync": replication.counts(store),
        "estate_source": {"in_process": False, "published_at": None, "writer_alive": None},
    }
    if config_error:
        out["config_error"] = config_error
    return out


_ESTATE_KEYS = ("replica_id", "reachable", "last_success_at", "last_error", "last_error_at")
_ESTATE_COUNTS = (
    "last_pulled_events",
    "last_pulled_artifacts",
    "last_pushed_events",
    "total_pulled_events",
    "rounds",
)


def _peer_entry(name: str, url: str | None, row: Mapping[str, Any]) -> dict[str, Any]:
    """One peer of the `/sync/peers` payload: its last round as recorded (none: zeros)."""
    return {
        "name": name,
        "url": None if url is None else redact_url(url),
        **{key: row.get(key) for key in _ESTATE_KEYS},
        **{key: row.get(key, 0) for key in _ESTATE_COUNTS},
        "remote_version_vector": row.get("remote_version_vector", {}),
    }
