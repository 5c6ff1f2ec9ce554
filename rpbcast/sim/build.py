"""Building a simulated run from its resolved parameters (params.py): the
topology, the members and their roles, the network, the engines and the
workload.  Simulation (run.py) calls these in this order; each random
choice has its own seeded stream, so the order is part of a run's
identity.
"""
from __future__ import annotations

import os
import random
from typing import Dict, List, Optional

from rpbcast.config import Config, MemberSpec
from rpbcast.sim import topology
from rpbcast.sim.loss import make as make_loss
from rpbcast.sim.network import HostCost, Network
from rpbcast.sim.params import engine_config
from rpbcast.sim.topology import NS
from rpbcast.sim.workload import Poisson


# ---------------------------------------------------------------------- topology and roles
def make_topology(p: dict) -> topology.Topology:
    if p["topology"] in ("transit-stub", "thesis"):
        t = topology.transit_stub(seed=p["topo_seed"], bandwidth=p["bandwidth"])
    elif p["topology"] == "tree":
        t = topology.balanced_tree(int(p["nodes"]), degree=int(p["degree"]),
                                   latency=0.005 if p["latency"] is None else p["latency"],
                                   bandwidth=p["bandwidth"])
    elif isinstance(p["topology"], topology.Topology):
        t = p["topology"]
    else:
        raise ValueError(f"topology must be 'transit-stub' or 'tree', got {p['topology']!r}")
    if p["latency"] is not None and p["topology"] != "tree":
        t = t.with_links(latency=p["latency"])
    return t


def choose_members(p: dict, topo: topology.Topology) -> List[int]:
    m = p["members"]
    if m is None:
        return sorted(topo.hosts)
    if isinstance(m, int):
        return topology.choose_members(topo, m, seed=p["topo_seed"])
    return sorted(int(x) for x in m)


def choose_loggers(p: dict, uses_logger: bool, topo: topology.Topology, members: List[int]) -> List[int]:
    lg = p["logger"]
    if not uses_logger or lg is None or lg == "none":
        return []
    if lg == "auto":
        lg = topo.logger if topo.logger in members else members[0]
    out = [int(x) for x in (lg if isinstance(lg, (list, tuple)) else [lg])]
    for x in out:
        if x not in members:
            raise ValueError(f"logger {x} is not a member")
    return out


def choose_senders(p: dict, seed: int, members: List[int], loggers: List[int]) -> List[int]:
    """"all": every member (the thesis's 18 senders include the logger's
    node); an int k: the first k of a fixed seeded order of the non-logger
    members followed by the loggers (so the sets are nested and k below
    the number of non-loggers never includes a logger); or a list."""
    s = p["senders"]
    if s == "all":
        return list(members)
    if isinstance(s, int):
        order = [v for v in members if v not in loggers]
        random.Random(f"senders/{seed}").shuffle(order)
        order += list(loggers)
        if not 0 < s <= len(order):
            raise ValueError(f"senders must be 1..{len(order)} (the members), got {s}")
        return sorted(order[:s])
    out = sorted(int(x) for x in s)
    for x in out:
        if x not in members:
            raise ValueError(f"sender {x} is not a member")
    return out


# ---------------------------------------------------------------------- network
def make_network(p: dict, topo: topology.Topology, seed: int) -> Network:
    model = make_loss(p["loss_model"], float(p["loss"]), p["loss_burst"])
    return Network(topo, seed=seed,
                   queue_limit=None if p["queue_limit"] in (None, 0, "none") else int(p["queue_limit"]),
                   proc_delay=float(p["proc_delay"]),
                   host_cost=_host_cost(p["host_cost"]),
                   header_bytes=int(p["header_bytes"]),
                   link_loss=model if p["loss_where"] == "link" else None,
                   rx_loss=model if p["loss_where"] == "receiver" else None,
                   loss_applies=p["loss_applies"], fast_rx=bool(p["fast_rx"]),
                   queue_limits=_queue_limits(p["queue_limits"]))


def _queue_limits(ql):
    """{(a, b): limit}; also accepts "a-b" keys (JSON); 0/"none" = unlimited."""
    if not ql:
        return None
    out = {}
    for k, q in dict(ql).items():
        a, b = (k.split("-") if isinstance(k, str) else k)
        out[(int(a), int(b))] = None if q in (None, 0, "none") else int(q)
    return out


def _host_cost(hc):
    if hc is True:
        return HostCost.gsgc()
    if isinstance(hc, dict):
        return HostCost(**hc)
    return hc or None


# ---------------------------------------------------------------------- engines
def sender_rate(p: dict, n_senders: int) -> float:
    """Messages/s per sender."""
    if p["total_rate"]:
        return float(p["total_rate"]) / n_senders
    return float(p["rate"])


def store_size(p: dict, n_senders: int):
    """(bytes, entries) of a member's message store: the gossip buffer
    (GC-limit rounds of the group's traffic) plus what waits for the next
    drain, with a 25 % margin.  The arena is touched as it fills, so with
    1 KB payloads this is most of a large run's memory.  When it is too
    small the store evicts the oldest gossip-buffer entries (peers then
    cannot serve them; loggers can)."""
    rate = sender_rate(p, n_senders) * n_senders
    per = int(p["size"]) + 64
    secs = int(p["gc_limit"]) * float(p["gossip_interval"]) + 2 * float(p["drain_interval"])
    need = int(1.25 * rate * per * secs) + (256 << 10)
    sb = p["store_bytes"]
    se = p["store_entries"]
    store_bytes = min(max(need, 1 << 20), 64 << 20) if sb == "auto" else int(sb)
    need_e = 1 << max(10, int(2 * rate * secs + 64).bit_length())
    store_entries = min(need_e, 1 << 20) if se == "auto" else int(se)
    return store_bytes, store_entries


def make_engines(p: dict, proto, net: Network, members: List[int], loggers: List[int], n_senders: int,
                 seed: int, rng: random.Random, log_base: Optional[str]) -> Dict[int, object]:
    """One engine per member, attached to net; each boots at a seeded
    random time in the first `stagger` seconds.  Loggers log under log_base."""
    specs = [MemberSpec(v, v, "logger" if v in loggers else "member") for v in members]
    cfg = {"incarnation": 1}
    cfg.update(proto.config)
    cfg.update(engine_config(p))
    sb, se = store_size(p, n_senders)
    engines = {}
    t0 = net.now
    stagger = int(float(p["stagger"]) * NS)
    boot = random.Random(f"boot/{seed}")
    for v in members:
        now = t0 + (int(boot.random() * stagger) if stagger > 0 else 0)
        kw = dict(cfg)
        if v in loggers:
            log_dir = os.path.join(log_base, "logs", f"node={v}")
            os.makedirs(log_dir, exist_ok=True)
            kw.update(role="logger", log_dir=log_dir)
            kw.setdefault("fsync", "never")
        else:
            kw.update(store_bytes=sb, store_entries=se)
        c = Config(node_id=v, addr=v, members=specs, **kw)
        e = proto.factory(c, now, random.Random(rng.getrandbits(64)), log=None, **(p["protocol_params"] or {}))
        if p["trace"]:
            e.node.enable_trace(int(p["trace_capacity"]))
        net.add_host(v, e, up_at=now)
        engines[v] = e
    if p["warm_start"]:
        warm_start(engines)
    return engines


def warm_start(engines: Dict[int, object]):
    """Give every engine every other member's own table entry, as if the
    group had been running: identical membership signatures from the
    start.  Static MemberSpecs enter the tables at incarnation 0 and
    freshness 0 while each node announces (inc, 1) for itself, so a cold
    group first gossips its way to agreement (MEMBERS exchanges that grow
    with n**2; docs/simulator.md)."""
    entries = {v: e.self_entry() for v, e in engines.items()
               if hasattr(e, "self_entry") and hasattr(e, "members")}
    for v, e in engines.items():
        if v not in entries:
            continue
        upsert = e.members.upsert
        for w, m in entries.items():
            if w != v:
                c = object.__new__(type(m))          # a copy per table: entries hold local state
                c.__dict__.update(m.__dict__)
                upsert(c)


# ---------------------------------------------------------------------- workload
def make_workload(p: dict, senders: List[int], duration_given: bool) -> Poisson:
    """The senders' Poisson arrivals; with `messages`, `duration` bounds
    them only if it was given explicitly."""
    rate = sender_rate(p, len(senders))
    kw = dict(size=int(p["size"]), burst=int(p["burst"]))
    if p["labels"] is not None:
        kw["labels"] = p["labels"]
    if p["producer"] not in ("retry", "backlog"):
        raise ValueError(f"producer must be 'retry' or 'backlog', got {p['producer']!r}")
    if p["producer"] == "backlog":
        kw["backlog"] = True
    if p["messages"]:
        stop = float(p["duration"]) if duration_given else None
        return Poisson.split(senders, int(p["messages"]), rate, stop=stop, **kw)
    return Poisson(senders, rate, stop=float(p["duration"]), **kw)
