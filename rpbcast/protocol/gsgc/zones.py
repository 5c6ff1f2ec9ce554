"""Zones for local gossip (§5): which members gossip stability among
themselves (phase 1) before their controllers do among zones (phase 2).
A zone map is given (GsgcConfig.zones): "subnet" (the IPv4 subnet of a
member's address), a {node_id: zone} dict, or a callable(Member); or built
from RTTs with zones_by_rtt (a distance threshold) or zones_by_proximity
(zones of a given size that follow the network's locality, §5: "local
groups ... according to their location on the network").
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np

from rpbcast.protocol.membership import addr_to_wire


def zones_by_rtt(ids, rtt: Callable[[int, int], float], threshold: float) -> Dict[int, int]:
    """A zone map from RTTs (seconds): in id order, each member not yet
    placed opens a zone (named by its id) holding every unplaced member
    within ``threshold`` of it.  Deterministic for a given RTT matrix, so
    it can be computed once (or by a coordinator) and configured on every
    member as ``zones=``."""
    ids = sorted(ids)
    zone = {}
    for a in ids:
        if a in zone:
            continue
        zone[a] = a
        for b in ids:
            if b not in zone and rtt(a, b) <= threshold:
                zone[b] = a
    return zone


def zones_by_proximity(ids, rtt: Callable[[int, int], float], size: int,
                       min_size: Optional[int] = None) -> Dict[int, int]:
    """Zones of at most ``size`` members that follow the network's
    locality: average-linkage clustering on the RTT matrix, merging the two
    closest zones whose union still fits in ``size``, until no two fit.

    On a tree (the paper's network) close members share their paths, so
    the zones come out as subtrees and their local gossip stays below the
    subtree's root instead of crossing the backbone, which random zones
    load as much as global gossip does.  When no two zones fit together,
    at most one holds ``size / 2`` members or fewer; if it holds fewer than
    ``min_size`` (default ``size // 4``) it joins its closest zone.  Zones
    are named by their lowest id.  Deterministic for a given RTT matrix:
    compute it once and configure it everywhere, like any zone map."""
    ids = sorted(ids)
    n = len(ids)
    if size < 1:
        raise ValueError("zone size must be at least 1")
    if n == 0:
        return {}
    d = np.array([[0.0 if a == b else float(rtt(a, b)) for b in ids] for a in ids])
    d = (d + d.T) / 2                               # a measured matrix may be a little asymmetric
    members = [[i] for i in range(n)]
    count = np.ones(n)
    alive = np.ones(n, bool)
    np.fill_diagonal(d, np.inf)

    def merge(i, j):
        """Zone j into zone i (Lance-Williams update for average linkage)."""
        row = (count[i] * d[i] + count[j] * d[j]) / (count[i] + count[j])
        d[i, :] = row
        d[:, i] = row
        d[j, :] = np.inf
        d[:, j] = np.inf
        d[i, i] = np.inf
        count[i] += count[j]
        count[j] = 0
        alive[j] = False
        members[i] += members[j]
        members[j] = []

    while True:
        fits = (count[:, None] + count[None, :]) <= size
        cand = np.where(fits & alive[:, None] & alive[None, :], d, np.inf)
        k = int(np.argmin(cand))                    # lowest index pair on ties
        i, j = divmod(k, n)
        if not np.isfinite(cand[i, j]):
            break
        merge(min(i, j), max(i, j))
    floor = size // 4 if min_size is None else min_size
    small = [i for i in range(n) if alive[i] and count[i] < floor]
    for i in sorted(small, key=lambda i: count[i]):
        if not alive[i] or alive.sum() < 2:
            continue
        row = np.where(alive, d[i], np.inf)
        j = int(np.argmin(row))
        merge(min(i, j), max(i, j))
    zone = {}
    for i in range(n):
        if alive[i]:
            name = ids[min(members[i])]
            for k in members[i]:
                zone[ids[k]] = name
    return zone


def zone_of(zones, subnet_prefix: int, m):
    """The zone of member m under the zone map ``zones``."""
    if zones == "subnet":
        ip, _ = addr_to_wire(m.addr)
        return ip >> (32 - subnet_prefix)
    if callable(zones):
        return zones(m)
    return zones.get(m.node_id)
