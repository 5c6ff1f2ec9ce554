"""The parameters of a simulated run: their defaults (``DEFAULTS``) and
``resolve``, which checks a dict of them and fills in the rest.  Any
``rpbcast.config.Config`` field (``gossip_interval``, ``repair_rate``, ...)
is a parameter too, passed to every engine (docs/simulator.md).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from rpbcast.config import Config
from rpbcast.sim import topology

DEFAULTS = {
    # what runs
    "protocol": "rpbcast",
    "protocol_params": None,         # keyword arguments for the protocol's engine factory
    "seed": 1,
    # topology
    "topology": "transit-stub",      # or "tree"
    "topo_seed": topology.THESIS_SEED,
    "nodes": 200,                    # tree size
    "degree": 4,                     # tree: most neighbours per node
    "members": None,                 # None: the topology's hosts (fringe / every tree node); int: that many, seeded
    "latency": None,                 # seconds: override every link's latency (tree default 0.005)
    "bandwidth": 100e6,              # bits/s per link direction (§7.1: 100 Mb/s)
    "queue_limit": 50,               # packets waiting per link direction (§7.1: 50); None = unlimited
    "queue_limits": None,            # {(a, b): limit or None}: per link direction a -> b, overriding queue_limit
    "proc_delay": 0.0,               # seconds of router processing per hop (GSGC: 0.001)
    "host_cost": False,              # True: GSGC host send/receive costs; or {"send_base", "send_per_byte", "recv_factor"}
    "header_bytes": 28,              # IP + UDP header per packet on a link
    # roles
    "logger": "auto",                # "auto" (the topology's), a node, a list of nodes, or None
    "senders": "all",                # "all" members, an int k (first k of a fixed seeded order, loggers last), or a list
    # workload (§7.1: Poisson 1 KB packets for 10 s)
    "rate": 20.0,                    # messages/s per sender
    "total_rate": None,              # messages/s over all senders (overrides rate)
    "messages": None,                # total messages (then duration only bounds it if given explicitly)
    "duration": 10.0,                # seconds of sending
    "size": 1024,                    # payload bytes
    "burst": 1,                      # messages per Poisson arrival
    "stagger": 1.0,                  # members boot at uniformly random times in the first this-many seconds
    "start_delay": 0.1,              # seconds after the last boot before the first arrival
    "labels": None,                  # "stock": label messages with the stock-trading items (FIFO-SRB §3.2)
    "producer": "retry",             # "backlog": refused arrivals wait in a FIFO backlog at the sender
    # applications (default: every receiver's application takes everything at each drain)
    "consumers": None,               # {node: msgs/s (0 = unlimited)}: these applications read at most that
    "consume_interval": 0.001,       # seconds between a consumer application's reads
    "consumer_queue": None,          # B: a consumer's host stops taking datagrams while B messages wait
    # loss
    "loss": 0.0,
    "loss_model": "uniform",         # or "gilbert"
    "loss_burst": 4.0,               # Gilbert-Elliott mean burst length (packets)
    "loss_where": "receiver",        # or "link"
    "loss_applies": "all",           # "all", "data", "data+repair"
    # ending
    "linger": 10.0,                  # at most this long after the last arrival
    "end": "complete",               # "complete": stop once everything is delivered; "linger": run it out
    "drain_interval": 0.2,           # seconds between delivery drains / completion checks
    # engine (thesis Table 7.1 and §7.1)
    "gossip_interval": 0.25,
    "gc_limit": 10,
    "selection": "linear",
    "logger_rtx_interval": 0.25,
    "repair_rate": 1000.0,
    "repair_burst": 0.0,
    "store_bytes": "auto",
    "store_entries": "auto",
    # driver
    "fast_rx": True,                 # C data-plane receive path where it is exactly equivalent
    "warm_start": True,              # members start knowing each other's table entries (no bootstrap storm)
    "check_payload": True,
    "run_dir": None,
    "trace": False,
    "trace_capacity": 1 << 16,
}

CONFIG_FIELDS = {f.name for f in dataclasses.fields(Config)}
# Config fields the simulator sets itself (per node), not passed through;
# "protocol" and "protocol_params" pick and parameterise the simulator's
# engine factory (sim.protocols, which also knows registered protocols)
DRIVER_ONLY = {"store_bytes", "store_entries", "members", "node_id", "addr", "role", "log_dir",
               "protocol", "protocol_params"}


def resolve(params: Optional[dict]) -> dict:
    """DEFAULTS updated with params; a ValueError names unknown keys."""
    p = dict(DEFAULTS)
    unknown = sorted(k for k in (params or {})
                     if (k not in DEFAULTS and k not in CONFIG_FIELDS) or (k in DRIVER_ONLY and k not in DEFAULTS))
    if unknown:
        raise ValueError(f"unknown simulation parameters: {', '.join(unknown)}")
    p.update(params or {})
    return p


def engine_config(p: dict) -> dict:
    """The Config fields among resolved parameters p that go to every engine."""
    return {k: v for k, v in p.items() if k in CONFIG_FIELDS and k not in DRIVER_ONLY}
