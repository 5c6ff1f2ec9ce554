"""GSGC: gossip-style stability detection and failure detection (Guo et al.,
CS-TR-97-1656) on rpbcast, as an engine extension (docs/gsgc.md).

    from rpbcast.protocol.gsgc import GsgcExtension
    ext = engine.add_extension(GsgcExtension(b=1))
    ext.state()        # round, S per stream, failed members, time-to-stable

The package, by concept:

    extension   GsgcExtension: steps, failure detection, rounds, releasing S
    views       each layer's participants from the member table, admission (§3.3)
    exchange    the sections it gossips and merges, the S multicast (§3.1)
    layers      one stability computation over its participants (the C arrays)
    sections    GSGC's own control section on the wire
    search      the adaptive step search (§4.3)
    zones       zone maps for local gossip (§5)
    config      GsgcConfig
"""
from rpbcast.protocol.gsgc.config import ADMISSIONS, GsgcConfig
from rpbcast.protocol.gsgc.extension import GsgcExtension
from rpbcast.protocol.gsgc.layers import (CTRL, FLAT, L_MAX, L_UNKNOWN, LAYER_NAMES, LOCAL, Layer,
                                          diffusion_steps, k_threshold, view_hash)
from rpbcast.protocol.gsgc.search import OnlineSearch, Window, find_window, window_search
from rpbcast.protocol.gsgc.sections import CTL_GLOBAL_S, SEC_GSGC
from rpbcast.protocol.gsgc.zones import zone_of, zones_by_proximity, zones_by_rtt

__all__ = ["ADMISSIONS", "CTL_GLOBAL_S", "CTRL", "FLAT", "GsgcConfig", "GsgcExtension", "LAYER_NAMES",
           "LOCAL", "L_MAX", "L_UNKNOWN", "Layer", "OnlineSearch", "SEC_GSGC", "Window", "diffusion_steps",
           "find_window", "k_threshold", "view_hash", "window_search", "zone_of", "zones_by_proximity", "zones_by_rtt"]
