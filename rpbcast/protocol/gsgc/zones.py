"""Zones for local gossip (§5): which members gossip stability among
themselves (phase 1) before their controllers do among zones (phase 2).
A zone map is given (GsgcConfig.zones): "subnet" (the IPv4 subnet of a
member's address), a {node_id: zone} dict, or a callable(Member); or built
from RTTs with zones_by_rtt.
"""
from __future__ import annotations

from typing import Callable, Dict

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


def zone_of(zones, subnet_prefix: int, m):
    """The zone of member m under the zone map ``zones``."""
    if zones == "subnet":
        ip, _ = addr_to_wire(m.addr)
        return ip >> (32 - subnet_prefix)
    if callable(zones):
        return zones(m)
    return zones.get(m.node_id)
