"""Where a pull or a push of one origin starts, checked against what the peer can show us:
forged far-ahead positions, holes below equal tops (found by bisecting on range fingerprints
with `/sync/count` probes), and `find_holes` over every origin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from mempalace_logstream import replication
from mempalace_logstream.store import LogStore
from mempalace_logstream.sync.limits import check_deadline
from mempalace_logstream.sync.protocol import Peer, capabilities_of
from mempalace_logstream.sync.vector import Fingerprints, parse_vector


def pull_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    held_top: int,
    fp: replication.Fingerprint,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Where to pull `origin` from the peer whose vector entry is `top`, or None.

    Our own vector entry is only trusted up to what the peer holds: when we hold events of
    `origin` above `top` (an event with a forged, far-ahead origin_seq, or a peer behind us),
    the pull resumes after the highest position we hold at or below `top`. When that is `top`
    itself and the peer sends the fingerprint of the positions it accounts for up to `top`
    (`origin_fingerprints`, our hubs), a different fingerprint on our side means a hole: the
    first position it holds that we lack is searched with `/sync/count` probes and the pull
    resumes just before it. So a jump never moves where pulls resume past what the peer can
    show us, and every such case is reported.
    """
    if held_top < top:  # the usual case: the peer is ahead
        return behind_start(store, peer, origin, top, held_top, fp, rfps, anomalies)
    held = held_top if held_top == top else replication.highest_held(store, origin, top)
    if held < top:
        anomalies.append(_anomaly(origin, "peer_top_not_held", peer, top, held_top, held))
        return held
    ours = fp if held_top == top else None
    return hole_start(store, peer, origin, top, held_top, ours, rfps, anomalies)


def behind_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    held_top: int,
    fp: replication.Fingerprint,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int:
    """Where to pull `origin` from a peer ahead of us (`held_top` < its `top`): after
    `held_top`, unless the peer accounts for a position at or below it that we lack. Such a
    hole is one the vector cannot show: an event refused here as a forgery (a hostile relay
    altered it) whose genuine copy only this peer holds, while later events of the origin
    reached us. Without this, a later event that needs the missing one (a revocation of the
    key it added) is held for ever. The peer's fingerprint up to `top` is checked against ours,
    the positions we hold back for a later round, and every position above `held_top`; only a
    mismatch costs probes."""
    theirs = None if rfps is None else rfps.get(origin)
    if theirs is None or held_top == 0:
        return held_top
    expected = replication.fp_sum(fp, replication.fp_span(held_top + 1, top))
    if expected == theirs:  # the usual case: no query
        return held_top
    held_back = replication.held_fingerprint(store, origin, held_top)
    if replication.fp_sum(expected, held_back) == theirs:
        return held_top
    ours = replication.fingerprint_upto(store, origin, top)
    first = first_gap(store, peer, origin, top, "peer", (ours, theirs))
    if first is None or first > held_top:
        return held_top
    anomalies.append(_anomaly(origin, "hole", peer, top, held_top, first - 1, ours, theirs))
    return first - 1


def hole_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    held_top: int,
    ours: replication.Fingerprint | None,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Just before the first position of `origin` up to the peer's `top` that the peer
    accounts for and we do not, or None (`ours`: our fingerprint up to `top`, if known)."""
    theirs = None if rfps is None else rfps.get(origin)
    if theirs is None:
        return None
    if ours is None:
        ours = replication.fingerprint_upto(store, origin, top)
    if ours == theirs:
        return None
    # Positions held back for a key not known yet: pulled again anyway (`pull_after`).
    if replication.fp_sum(ours, replication.held_fingerprint(store, origin, top)) == theirs:
        return None
    first = first_gap(store, peer, origin, top, "peer", (ours, theirs))
    if first is None:
        return None
    anomalies.append(_anomaly(origin, "hole", peer, top, held_top, first - 1, ours, theirs))
    return first - 1


def _anomaly(
    origin: str,
    reason: str,
    peer: Peer,
    peer_top: int,
    local_top: int,
    resume_after: int,
    ours: replication.Fingerprint | None = None,
    theirs: replication.Fingerprint | None = None,
) -> dict[str, Any]:
    if reason == "hole":
        what = (
            f"our positions of {origin} up to {peer_top} differ from the peer's (we account "
            f"for {ours[0] if ours else 0}, it for {theirs[0] if theirs else 0}): the first it "
            f"holds that we lack is {resume_after + 1}"
        )
    else:
        what = (
            f"we hold events of {origin} up to origin_seq {local_top} but not the peer's "
            f"top {peer_top}"
        )
    return {
        "origin": origin,
        "reason": reason,
        "peer": peer.name,
        "peer_top": peer_top,
        "local_top": local_top,
        "resume_after": resume_after,
        "message": f"{what}; pulling {origin} from {peer.name} resumes after {resume_after}",
    }


def author_check(
    store: LogStore, peer: Peer, origin: str, top: int, held_top: int
) -> list[dict[str, Any]]:
    """The peer IS `origin` and says its own tip is `top`, yet we held events of it above `top`
    before we asked (so they are not events it wrote since): they claim positions their author
    never wrote. They stay (the log is append-only); each is recorded as a `sequence` anomaly
    (sync_rejections, counted in `stats`/`peers`) and reported in the round."""
    reports = []
    for ident, seq in replication.held_above(store, origin, top):
        if seq > held_top:
            break
        message = (
            f"event {ident} claims origin {origin} at origin_seq {seq}, but {origin} itself "
            f"(peer {peer.name}) says its last origin_seq is {top}: a forged or mistaken "
            "position; the event is kept, and pulls of it resume at what its peers hold"
        )
        reports.append(
            {
                "kind": "sequence",
                "ident": ident,
                "origin_replica": origin,
                "origin_seq": seq,
                "peer": peer.name,
                "reason": "beyond_author_tip",
                "retryable": False,
                "message": message,
            }
        )
    replication.record_sequence_anomalies(store, reports)
    return [
        {
            "origin": origin,
            "reason": "beyond_author_tip",
            "peer": peer.name,
            "peer_top": top,
            "local_top": held_top,
            "event_id": r["ident"],
            "origin_seq": r["origin_seq"],
            "message": r["message"],
        }
        for r in reports
    ]


MAX_GAP_STEPS = 64  # positions only the other side holds, passed over in one search


class _Prefixes:
    """Prefix fingerprints of one origin on both sides, fetched as needed and cached for one
    search (ours from the store, theirs with `peer.fingerprint` probes)."""

    def __init__(self, store: LogStore, peer: Peer, origin: str) -> None:
        self.store, self.peer, self.origin = store, peer, origin
        self.ours: dict[int, replication.Fingerprint] = {0: replication.NO_POSITIONS}
        self.theirs: dict[int, replication.Fingerprint] = {0: replication.NO_POSITIONS}

    def at(self, u: int) -> tuple[replication.Fingerprint, replication.Fingerprint]:
        if u not in self.theirs:
            check_deadline(self.peer, f"probing {self.origin} for holes")
            self.ours[u] = replication.fingerprint_upto(self.store, self.origin, u)
            self.theirs[u] = peer_fingerprint(self.peer, self.origin, u)
        return self.ours[u], self.theirs[u]

    def between(self, a: int, b: int) -> tuple[replication.Fingerprint, replication.Fingerprint]:
        """Both sides' fingerprints of the positions in (a, b]."""
        (oa, ta), (ob, tb) = self.at(a), self.at(b)
        return replication.fp_between(oa, ob), replication.fp_between(ta, tb)


def peer_fingerprint(peer: Peer, origin: str, upto: int) -> replication.Fingerprint:
    if not capabilities_of(peer).fingerprints:  # it can only count: a weak fingerprint
        return peer.count(origin, upto), 0, 0
    fp: replication.Fingerprint = cast(Any, peer).fingerprint(origin, upto)
    return fp


def first_gap(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    holder: str,
    known: tuple[Any, Any] | None = None,
) -> int | None:
    """The lowest position of `origin` up to `top` that `holder` ("peer" or "ours") accounts
    for and the other side does not, or None. Bisects on range fingerprints (O(log top)
    probes); a differing position held by the other side only is passed over and the search
    goes on above it (at most MAX_GAP_STEPS times)."""
    caps = capabilities_of(peer)
    if not caps.fingerprints and not caps.counts:
        return None  # a peer that cannot be probed
    fps = _Prefixes(store, peer, origin)
    if known is not None:
        fps.ours[top], fps.theirs[top] = known
    lo = 0
    for _ in range(MAX_GAP_STEPS):
        ours, theirs = fps.between(lo, top)
        if ours == theirs:
            return None
        a, b = lo, top  # (lo, a] agree, (lo, b] differ: position b is held by one side only
        while b - a > 1:
            mid = (a + b) // 2
            ours, theirs = fps.between(lo, mid)
            if ours == theirs:
                a = mid
            else:
                b = mid
        ours, theirs = fps.between(b - 1, b)
        if (theirs if holder == "peer" else ours)[0] > (ours if holder == "peer" else theirs)[0]:
            return b
        lo = b
    return None


def push_start(
    store: LogStore,
    peer: Peer,
    origin: str,
    top: int,
    fp: replication.Fingerprint,
    peer_top: int,
    rfps: Fingerprints | None,
    anomalies: list[dict[str, Any]],
) -> int | None:
    """Where to push `origin` from (the mirror of `pull_start`), or None: after the peer's
    entry when it is behind us, or before the first position we hold and it lacks when the
    fingerprints up to the lower of the two tops differ. A peer at or past our top is probed
    at our top, so a forged far-ahead event on the peer never stops our pushes."""
    theirs = None if rfps is None else rfps.get(origin)
    if peer_top < top:
        if theirs is None or theirs == replication.fingerprint_upto(store, origin, peer_top):
            return peer_top
        first = first_gap(store, peer, origin, peer_top, "ours")
        return peer_top if first is None else first - 1
    if origin == store.replica_id and peer_top > top:
        anomalies.append(
            {
                "origin": origin,
                "reason": "peer_beyond_our_tip",
                "peer": peer.name,
                "peer_top": peer_top,
                "local_top": top,
                "message": f"{peer.name} holds events of ours ({origin}) up to origin_seq "
                f"{peer_top}, past our own last origin_seq {top}: forged or mistaken positions; "
                "our pushes to it are probed below them",
            }
        )
    if rfps is None:
        return None  # a peer without fingerprints (the reference) cannot be probed
    at_top = theirs if peer_top == top else peer_fingerprint(peer, origin, top)
    if at_top == fp:
        return None
    first = first_gap(store, peer, origin, top, "ours", (fp, at_top))
    return None if first is None else first - 1


def find_holes(
    store: LogStore, peer: Peer, rvv: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """Holes the version vector cannot see: for each origin both sides know, compare the
    fingerprints of the positions each accounts for up to the lower top; where they differ,
    search (O(log n) probes) the first position the peer holds and we lack (side "local") and
    the first we hold and the peer lacks (side "peer"). A round already does the first where
    the tops are equal; this probes every origin."""
    if rvv is None:
        rvv = parse_vector(peer.version_vector(), peer)[1]
    local = store.version_vector()
    holes = []
    for origin in sorted(set(local) & set(rvv)):
        top = min(local[origin], rvv[origin])
        fps = (
            replication.fingerprint_upto(store, origin, top),
            peer_fingerprint(peer, origin, top),
        )
        if fps[0] == fps[1]:
            continue
        for side, holder in (("local", "peer"), ("peer", "ours")):
            first = first_gap(store, peer, origin, top, holder, fps)
            if first is not None:
                holes.append(
                    {
                        "origin": origin,
                        "first_missing_origin_seq": first,
                        "upto": top,
                        "local_count": fps[0][0],
                        "peer_count": fps[1][0],
                        "side": side,
                    }
                )
    return holes
