"""GSGC's simulation figures (Guo et al., CS-TR-97-1656, §4 and §5) in the
discrete-event simulator: queue sizes (Figs. 5 and 7) and time per round
(TPR) against the step interval (Figs. 6 and 8; sparse groups, Fig. 9),
against the group size with global gossip (Fig. 12) and with local gossip
(Fig. 13: the two-layer implementation in one concurrent run, zones by
proximity), and the adaptive search for the window of good step intervals
(§4.3, Figs. 10-11).

    rpbcast experiment gsgc-fig6 --out results/ [--quick] [--jobs 2]

Set-up (docs/reproduction/gsgc.md): the paper's network model (§4) --
balanced degree-4 trees, 30 kbit/s per link direction, 5 ms links, 1 ms per
router, host send cost 338 + 47u/400 us and 1.1x that to receive, 32-byte
headers -- with only GSGC's session messages on it.  Every member runs the
real engine (``rpbcast.protocol.engine.Engine``) with the real GSGC extension
(``rpbcast.protocol.gsgc``); the engine's own periodic traffic (gossip repair, pings,
logger reports) is switched off by setting its intervals beyond the run, so
the links carry GSGC gossip alone, as in the paper's 30 kbit/s allocation.

A run: ``DATA_SENDERS`` members publish one message each; once it is
everywhere (3 s), every member starts GSGC at a random offset inside the
first step (the paper scatters the start points).  TPR is the time from that
start until the first member holds a stability array covering those messages
(§4.1: "the first member constructs S"); the run stops there.

Message size.  The paper's gossip is 32 + 4m + n/8 + 4 = 236 + n/8 bytes for
m = 50 senders (M with 4-byte entries, W as a bitmap, the round number).  Our
STABILITY section names each stream (24 bytes per stream for M plus 8 for
S), so 50 real streams would make a 1.5 KB datagram.  The experiments
therefore run ``DATA_SENDERS`` = 2 real streams and pad every GSGC gossip
with an ignored section to exactly 236 + n/8 - 32 bytes, so that with the
simulator's 32 header bytes per packet each gossip costs on every link and
host what the paper's does.  The failure detector's LIVE array (n bytes) is
not sent: the paper simulates stability detection alone (§3.3, §4).
"""
from __future__ import annotations

import collections
import math
import multiprocessing
import os
import random
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from rpbcast.core import wire
from rpbcast.experiments.results import Experiment, Table, pyplot
from rpbcast.protocol.gsgc import GsgcExtension, find_window, zones_by_proximity

NS = 1_000_000_000
PROTOCOL = "gsgc-paper"
DATA_SENDERS = 2            # real streams in M and S (the rest of the paper's m = 50 is padding)
START = 3.0                 # s after the network start: GSGC starts (data is everywhere by then)
PAD_KIND = 0x50             # a gossip section kind nobody handles: receivers skip it
FAR = 1e6                   # s: "never" for the engine's own timers

# §4: the network model
NETWORK = {
    "topology": "tree", "degree": 4, "bandwidth": 30e3, "latency": 0.005, "proc_delay": 0.001,
    "host_cost": True, "header_bytes": 32,
}


def paper_size(n: int) -> int:
    """§4.1: the gossip message for a group of n, header included:
    32 + 4m + n/8 + 4 = 236 + n/8 bytes (m = 50), rounded up (243..299 for
    n = 50..500, as the paper says)."""
    return math.ceil(236 + n / 8)


# --------------------------------------------------------------------------
# the engine: rpbcast with GSGC only

class PaperGsgc(GsgcExtension):
    """GsgcExtension as the paper simulates it: starts at ``start_at``
    (absolute ns; the first step at a random offset inside the first step
    interval), pads every gossip to ``pad_to`` datagram bytes (an int, or
    {layer kind: bytes} for local gossip, whose two layers have their own
    W sizes), and calls ``on_stable(now)`` the first time its stability
    array covers ``target`` messages of ``streams`` streams."""

    def __init__(self, start_at: int, pad_to=None, streams: int = 0, target: int = 1, **kw):
        super().__init__(**kw)
        self.start_at = int(start_at)
        self.pad_to = pad_to
        self.want_streams = streams
        self.target = target
        self.on_stable = None
        self.stable_at = None
        self.sizes = set()

    def attach(self, engine):
        super().attach(engine)
        if self.step_ns is not None:
            self.next_step = self.start_at + self.rng.randrange(max(self.step_ns, 1))
        if self.step2_ns is not None:
            self.next_step2 = self.start_at + self.rng.randrange(max(self.step2_ns, 1))

    def _sections(self, layer, now):
        secs = super()._sections(layer, now)
        pad_to = self.pad_to.get(layer.kind) if isinstance(self.pad_to, dict) else self.pad_to
        if pad_to:
            have = wire.DG_HDR + wire.MSG_HDR + wire.GOSSIP_FIXED + sum(len(s) for s in secs)
            need = pad_to - have
            if need >= 4:
                secs.append(wire.section(PAD_KIND, bytes(need - 4)))
            self.sizes.add(have + (need if need >= 4 else 0))
        return secs

    def _release(self, now):
        super()._release(now)
        if self.stable_at is None and len(self.streams) >= self.want_streams:
            S = self.stable_array()
            if len(S) and int(S.min()) >= self.target:
                self.stable_at = now
                if self.on_stable is not None:
                    self.on_stable(now)


def _factory(config, now, rng, log=None, **kw):
    from rpbcast.protocol.engine import Engine
    e = Engine(config, now, rng, log=log)
    e.add_extension(PaperGsgc(**kw))
    return e


def _register():
    from rpbcast.sim import protocols
    if PROTOCOL not in protocols.REGISTRY:
        protocols.register(PROTOCOL, _factory, uses_logger=False)


_register()


def _finish(plt, fig, ax, out, xlabel, ylabel, title, legend_size=8):
    """Label a one-panel figure and write it as OUT/plot.png."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(Path(out) / "plot.png")
    plt.close(fig)


# --------------------------------------------------------------------------
# one run

def run_tpr(n: int, b: int, step: float, seed: int = 1, buffers: Optional[int] = None,
            drops_per_step: int = 0, nodes: Optional[int] = None, topo_seed: Optional[int] = None,
            zones: Optional[dict] = None, zone_size: int = 0, controllers: int = 5, b2: Optional[int] = None,
            zones_by: str = "random", step2: Optional[float] = None, limit: float = 600.0) -> dict:
    """One stability round from a cold start (see the module doc).

    n members; ``nodes`` > n: a sparse group of n among that many tree nodes
    (chosen by ``topo_seed``).  ``buffers``: the queue limit per link
    direction (None: infinite, simulation I; 64: simulation II).
    ``drops_per_step``: that many random gossip messages per step interval
    are dropped at their senders (simulation II: 2).  ``zone_size`` > 0:
    local gossip (§5), every member running both layers concurrently, with
    zones made by :func:`zone_map` (``zones_by``: "random" as the paper's
    simulation, "proximity" from the members' RTTs, or "dfs"),
    ``controllers`` stability controllers per zone, ``b2`` targets among
    the controllers and ``step2`` their step interval (None: ``step``).
    ``limit``: seconds before giving up (the paper: 10 min)."""
    from rpbcast.sim.run import Simulation
    _register()
    t_wall = time.perf_counter()
    nodes = nodes or n
    start_abs = NS + int(START * NS)          # the network starts at 1 s virtual
    params = dict(NETWORK)
    params.update({
        "nodes": nodes, "members": None if nodes == n else n, "queue_limit": buffers,
        "topo_seed": 1 if topo_seed is None else topo_seed, "seed": seed,
        "protocol": PROTOCOL, "logger": None,
        "senders": DATA_SENDERS, "messages": DATA_SENDERS, "rate": 100.0, "size": 32,
        "end": "linger", "linger": limit + START,
        # the engine's own periodic traffic off: only GSGC on the links
        "gossip_interval": FAR, "ping_interval": FAR, "logger_report_interval": FAR,
        "logger_rtx_interval": FAR, "member_timeout": FAR,
    })
    proto = {"start_at": start_abs, "pad_to": paper_size(n) - NETWORK["header_bytes"],
             "streams": DATA_SENDERS, "target": 1, "b": b, "step": step,
             "failure_detection": False,    # stability detection alone, no LIVE arrays (§4)
             "multicast": True, "age_limit": 0}
    nzones = 0
    if zone_size:
        from rpbcast.sim import topology as T
        topo = T.balanced_tree(nodes)
        ids = list(range(1, nodes + 1)) if params["members"] is None else \
            T.choose_members(topo, n, seed=params["topo_seed"])
        zones = zone_map(topo, ids, zone_size, zones_by, seed)
    if zones:
        from rpbcast.protocol.gsgc import CTRL, LOCAL
        nzones = len(set(zones.values()))
        largest = max(collections.Counter(zones.values()).values())
        # each layer's gossip as the paper's for its own group: W of the
        # zone's members locally, of the controllers (G per zone) above
        proto.update(zones=zones, controllers=controllers, b2=b2 or b, step2=step2,
                     pad_to={LOCAL: paper_size(largest) - NETWORK["header_bytes"],
                             CTRL: paper_size(controllers * nzones) - NETWORK["header_bytes"]})
    params["protocol_params"] = proto
    sim = Simulation(params)
    net = sim.net
    if net.t0 != NS:
        raise RuntimeError("the simulator's network no longer starts at 1 s: adjust start_abs")
    exts = [e.extensions[-1] for e in sim.engines.values()]
    first = {}
    ready = []

    def data_check():
        """At the start: how many members have every data message (they
        must all have, or TPR would include the data's own dissemination)."""
        k = 0
        for v, e in sim.engines.items():
            node = e.node
            got = [node.peer_contiguous(slot) for slot, _, _ in node.peer_ids()]
            if node.next_seq:
                got.append(node.next_seq)
            k += len(got) >= DATA_SENDERS and min(got) >= 1
        ready.append(k / len(sim.engines))
    net.at(start_abs, data_check)

    def stable(now):
        if "t" not in first:
            first["t"] = now
            net.stop()
    for x in exts:
        x.on_stable = stable
    dropped = [0]
    if drops_per_step:
        per = n * b                                # gossips sent per step interval
        rng = random.Random(f"drops/{seed}")
        win = {"k": -1, "count": 0, "pick": set()}
        step_ns = int(step * NS)
        mcast = (1 << 64) - 1

        def filt(src, dest, data):
            if dest == mcast:
                return False
            now = net.now
            if now < start_abs:
                return False
            k = (now - start_abs) // step_ns
            if k != win["k"]:
                win["k"], win["count"] = k, 0
                win["pick"] = set(rng.sample(range(per), min(drops_per_step, per)))
            i = win["count"]
            win["count"] += 1
            if i in win["pick"]:
                dropped[0] += 1
                return True
            return False
        net.set_send_filter(filt)
    net.run_until(start_abs + int(limit * NS))
    t = first.get("t")
    ls = net.link_stats()
    cc = net.counters()
    sizes = set().union(*(x.sizes for x in exts))
    busy = ls["busy_ns"]
    res = {
        "n": n, "nodes": nodes, "b": b, "step": step, "seed": seed, "buffers": buffers,
        "drops_per_step": drops_per_step, "zone_size": zone_size, "zones_by": zones_by if zone_size else None,
        "zones": nzones, "step2": step2,
        "tpr": None if t is None else (t - start_abs) / NS,
        "steps": None if t is None else (t - start_abs) / NS / step,
        "done": t is not None,
        "data_ready": ready[0] if ready else None,
        "gossip_bytes": max(sizes) + NETWORK["header_bytes"] if sizes else None,
        "queue_drops": int(ls["drops"].sum()), "send_drops": dropped[0],
        "max_queue": int(ls["max_queue"].max()),
        # Figs. 5 and 7: the paper records each node's queue whenever it
        # sends or receives; we take the time-averaged number of gossips
        # waiting while a link direction is sending, over all directions
        # (weighted by their sending time, i.e. by packets: the queue a
        # sent gossip sees on average)
        "avg_queue": float((ls["avg_queue"] * max(net.now - net.t0, 1)).sum() / max(int(busy.sum()), 1)),
        "util_max": float(busy.max() / max(net.now - start_abs, 1)),
        "sent": int(sum(x.stats["sent_standalone"] + x.stats["sent_piggyback"] for x in exts)),
        "events": int(cc["events"]),
        "wall_s": round(time.perf_counter() - t_wall, 3),
    }
    return res


def zone_map(topo, ids, size: int, how: str, seed: int = 1) -> Dict[int, int]:
    """Members ``ids`` of the tree ``topo`` in zones for local gossip.

    "random": n/size zones of ``size`` at random (the paper's simulation,
    §5: "randomly divided into n/50 local groups of size 50");
    "proximity": by location, from the members' round-trip times on the idle
    network (``zones_by_proximity``: zones of at most ``size`` that follow
    the tree, what §5 says the hierarchy should be and leaves to future
    work); "dfs": ``size`` consecutive members of a depth-first walk."""
    if how == "proximity":
        return zones_by_proximity(ids, lambda a, b_: 2 * topo.latency_ns(a, b_) / NS, size)
    if how == "dfs":
        member = set(ids)
        order = [v for v in _dfs_order(topo.n) if v in member]
    elif how == "random":
        order = list(ids)
        random.Random(f"zones/{seed}").shuffle(order)
    else:
        raise ValueError(f"zones_by must be random, proximity or dfs, not {how!r}")
    return {v: i // size for i, v in enumerate(order)}


def _dfs_order(nodes: int, degree: int = 4) -> List[int]:
    """Nodes of balanced_tree(nodes, degree) in depth-first preorder."""
    from rpbcast.sim import topology as T
    t = T.balanced_tree(nodes, degree=degree)
    adj: Dict[int, list] = {}
    for a, b_, *_ in t.directed():
        adj.setdefault(a, []).append(b_)
    out, stack, seen = [], [1], {1}
    while stack:
        v = stack.pop()
        out.append(v)
        for w in sorted(adj.get(v, []), reverse=True):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return out


def _run_kw(kw):
    return run_tpr(**kw)


_DONE: Dict[tuple, dict] = {}      # runs already made in this process (figures that share runs)


def _memo_key(c):
    try:
        k = tuple(sorted(c.items()))
        hash(k)
        return k
    except TypeError:                   # a zone map: not shared
        return None


def run_many(configs: List[dict], jobs: int) -> List[dict]:
    """run_tpr over configs, in ``jobs`` worker processes (order kept).
    Runs are deterministic in their configuration, so one already made in
    this process (Figs. 5 and 6 are the same runs, so are 7 and 8) is
    reused."""
    keys = [_memo_key(c) for c in configs]
    todo = [i for i, k in enumerate(keys) if k is None or k not in _DONE]
    jobs = max(1, min(jobs, len(todo) or 1))
    if jobs == 1:
        fresh = [run_tpr(**configs[i]) for i in todo]
    else:
        # biggest first, so the tail is short
        order = sorted(todo, key=lambda i: -_cost(configs[i]))
        ctx = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with ctx.Pool(jobs, maxtasksperchild=20) as pool:
            out = pool.map(_run_kw, [configs[i] for i in order], chunksize=1)
        got = dict(zip(order, out))
        fresh = [got[i] for i in todo]
    got = dict(zip(todo, fresh))
    for i, r in got.items():
        if keys[i] is not None:
            _DONE[keys[i]] = r
    return [got[i] if i in got else _DONE[keys[i]] for i in range(len(configs))]


def _cost(c):
    """Rough relative cost of a run: gossips per second, more on a bigger tree."""
    return c["n"] * c["b"] / c["step"] * (1 + (c.get("nodes") or c["n"]) / 500)


# --------------------------------------------------------------------------
# aggregation and plots

def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def _std(xs):
    xs = [x for x in xs if x is not None]
    return float(np.std(xs)) if len(xs) > 1 else (0.0 if xs else None)


def aggregate(results: List[dict], keys: tuple) -> Dict[tuple, dict]:
    """Mean over runs per configuration; runs that did not finish within
    the limit are counted and left out of the means (as the paper's 17 of
    12,000)."""
    groups: Dict[tuple, list] = {}
    for r in results:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = {}
    for k, rs in sorted(groups.items()):
        ok = [r for r in rs if r["done"]]
        out[k] = {
            "runs": len(rs), "done": len(ok),
            "tpr": _mean([r["tpr"] for r in ok]), "tpr_std": _std([r["tpr"] for r in ok]),
            "steps": _mean([r["steps"] for r in ok]),
            "queue_drops": _mean([r["queue_drops"] for r in rs]),
            "send_drops": _mean([r["send_drops"] for r in rs]),
            "max_queue": _mean([r["max_queue"] for r in rs]),
            "avg_queue": _mean([r["avg_queue"] for r in rs]),
            "tprs": [r["tpr"] for r in ok],
        }
    return out


def good_window(curve: Dict[float, float], e: float = 0.10):
    """The measured window of good step intervals on a TPR curve {step: TPR}:
    the step with the least TPR and the contiguous run of steps around it
    whose TPR is within e of that minimum (§4.3's definition)."""
    pts = sorted((s, t) for s, t in curve.items() if t is not None)
    if not pts:
        return None
    i = min(range(len(pts)), key=lambda k: pts[k][1])
    best = pts[i][1]
    lo = hi = i
    while lo > 0 and abs(pts[lo - 1][1] - best) < e * best:
        lo -= 1
    while hi + 1 < len(pts) and abs(pts[hi + 1][1] - best) < e * best:
        hi += 1
    return {"s": pts[i][0], "tpr": best, "s1": pts[lo][0], "s2": pts[hi][0]}


def _configs_step_sweep(bs, steps, seeds, n, buffers, drops, nodes=None):
    """Dense (nodes None: an n-node tree) or sparse (n of ``nodes``, a new
    random group per seed) groups over b x steps x seeds."""
    return [dict(n=n, b=b, step=float(s), seed=sd, buffers=buffers, drops_per_step=drops,
                 **({"nodes": nodes, "topo_seed": sd} if nodes else {}))
            for b in bs for s in steps for sd in seeds]


def _sweep_table(agg, title, notes, queues=False):
    cols = ["b", "step", "runs", "done", "tpr_mean", "tpr_std", "steps_mean", "queue_drops_mean",
            "send_drops_mean", "max_queue_mean"] + (["avg_queue_mean"] if queues else [])
    rows = []
    for (b, step), a in agg.items():
        rows.append([b, step, a["runs"], a["done"], _r(a["tpr"]), _r(a["tpr_std"]), _r(a["steps"]),
                     _r(a["queue_drops"], 1), _r(a["send_drops"], 1), _r(a["max_queue"], 1)]
                    + ([_r(a["avg_queue"], 3)] if queues else []))
    return Table(cols, rows, title, notes)


def _r(x, d=2):
    return None if x is None else round(float(x), d)


def _plot_sweep(path, agg, title):
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    bs = sorted({b for b, _ in agg})
    for b in bs:
        pts = sorted((s, a) for (bb, s), a in agg.items() if bb == b and a["tpr"] is not None)
        xs = [s for s, _ in pts]
        ax1.plot(xs, [a["steps"] for _, a in pts], marker="o", ms=3, label=f"b = {b}")
        ax2.plot(xs, [a["tpr"] for _, a in pts], marker="o", ms=3, label=f"b = {b}")
    ax1.set_xlabel("step interval (s)")
    ax1.set_ylabel("number of steps in a round")
    ax1.set_title("(A) steps per round")
    ax2.set_xlabel("step interval (s)")
    ax2.set_ylabel("time per round (s)")
    ax2.set_title("(B) time per round")
    ax1.set_yscale("log")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------
# Figs. 6 and 8: TPR against the step interval, n = 200 dense, b = 1..5

FULL_STEPS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20]
QUICK_STEPS = [1, 2, 4, 8, 16]


SIM_NAME = {False: "I (infinite buffers, no loss)", True: "II (64-message buffers, 2 gossips dropped per step)"}


def _step_sweep(quick, seed, jobs, sim2, nodes=None, runs=None):
    """The n = 200 sweep over b and the step interval (Figs. 5-9): dense,
    or sparse in a tree of ``nodes``.  Returns (aggregate by (b, step),
    results, bs, seeds)."""
    bs = [1, 3] if quick else [1, 2, 3, 4, 5]
    steps = QUICK_STEPS if quick else FULL_STEPS
    seeds = [seed] if quick else list(range(seed, seed + (runs or 4)))
    buffers, drops = (64, 2) if sim2 else (None, 0)
    res = run_many(_configs_step_sweep(bs, steps, seeds, 200, buffers, drops, nodes), jobs)
    return aggregate(res, ("b", "step")), res, bs, seeds


def _windows(agg, bs):
    out = []
    for b in bs:
        w = good_window({s: a["tpr"] for (bb, s), a in agg.items() if bb == b})
        if w:
            out.append(f"b = {b}: least TPR {w['tpr']:.1f} s at {w['s']:g} s; within 10 %: {w['s1']:g}-{w['s2']:g} s")
    return out


def _fig_sweep(out, quick, seed, jobs, sim2):
    t0 = time.time()
    agg, res, bs, seeds = _step_sweep(quick, seed, jobs, sim2)
    name = SIM_NAME[sim2]
    notes = (f"Simulation {name}; dense group n = 200 (200-node degree-4 tree), paper network model, "
             f"gossip {paper_size(200)} bytes; {len(seeds)} run(s) per point (seeds {seeds[0]}..{seeds[-1]}); "
             f"{sum(1 for r in res if not r['done'])} of {len(res)} runs did not finish within 600 s "
             f"(left out).  Windows: " + "; ".join(_windows(agg, bs)) + f".  Wall {time.time() - t0:.0f} s.")
    fig = "6" if not sim2 else "8"
    _plot_sweep(Path(out) / "plot.png", agg, f"GSGC Fig. {fig} reproduction: simulation {name}, n = 200")
    return _sweep_table(agg, f"GSGC Fig. {fig}: time per round vs step interval (simulation {'II' if sim2 else 'I'})",
                        notes)


def fig6(out, quick=False, seed=1, jobs=2):
    return _fig_sweep(out, quick, seed, jobs, sim2=False)


def fig8(out, quick=False, seed=1, jobs=2):
    return _fig_sweep(out, quick, seed, jobs, sim2=True)


# --------------------------------------------------------------------------
# Figs. 5 and 7: queue sizes against the step interval, n = 200 dense, b = 1..5

def _queue_trends(agg, bs):
    """The paper's two claims, measured: the average queue falls with the
    step to a floor; at a fixed step it grows with b."""
    steps = sorted({s for _, s in agg})
    out = []
    for b in bs:
        q = [agg[(b, s)]["avg_queue"] for s in steps]
        out.append(f"b = {b}: avg queue {q[0]:.1f} at {steps[0]:g} s -> {min(q):.2f} (floor) at "
                   f"{steps[q.index(min(q))]:g} s")
    mono = []
    for s in steps:
        q = [agg[(b, s)]["avg_queue"] for b in bs]
        mono.append(all(x <= y * 1.05 + 0.05 for x, y in zip(q, q[1:])))
    out.append(f"avg queue non-decreasing in b (5 % slack) at {sum(mono)} of {len(steps)} steps")
    return out


def _queue_fig(out, quick, seed, jobs, sim2):
    t0 = time.time()
    agg, res, bs, seeds = _step_sweep(quick, seed, jobs, sim2)
    name = SIM_NAME[sim2]
    fig = "7" if sim2 else "5"
    notes = (f"Simulation {name}; dense group n = 200, the runs of Fig. {'8' if sim2 else '6'} ({len(seeds)} per "
             f"point).  avg_queue: gossips waiting on a link direction, time-averaged while it is sending, over "
             f"all directions (the queue a sent gossip sees on average; the paper records each node's queue at "
             f"each send and receive); max_queue: the longest queue on any link direction"
             f"{' (the 64-message buffer caps it)' if sim2 else ''}.  " + "; ".join(_queue_trends(agg, bs))
             + f".  Wall {time.time() - t0:.0f} s.")
    plt = pyplot()
    fig_, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for b in bs:
        pts = sorted((st, a) for (bb, st), a in agg.items() if bb == b)
        xs = [st for st, _ in pts]
        ax1.plot(xs, [a["avg_queue"] for _, a in pts], marker="o", ms=3, label=f"b = {b}")
        ax2.plot(xs, [a["max_queue"] for _, a in pts], marker="o", ms=3, label=f"b = {b}")
    for ax, lab, t in ((ax1, "average queue size (gossips)", "(A) average queue size"),
                       (ax2, "maximum queue size (gossips)", "(B) maximum queue size")):
        ax.set_xlabel("step interval (s)")
        ax.set_ylabel(lab)
        ax.set_title(t)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig_.suptitle(f"GSGC Fig. {fig} reproduction: simulation {name}, n = 200", fontsize=10)
    fig_.tight_layout()
    fig_.savefig(Path(out) / "plot.png")
    plt.close(fig_)
    return _sweep_table(agg, f"GSGC Fig. {fig}: queue sizes vs step interval (simulation {'II' if sim2 else 'I'})",
                        notes, queues=True)


def fig5(out, quick=False, seed=1, jobs=2):
    return _queue_fig(out, quick, seed, jobs, sim2=False)


def fig7(out, quick=False, seed=1, jobs=2):
    return _queue_fig(out, quick, seed, jobs, sim2=True)


# --------------------------------------------------------------------------
# Fig. 9: sparse groups of 200 in a 1000-node tree, simulations I and II

SPARSE_RUNS = 3


def fig9(out, quick=False, seed=1, jobs=2):
    """TPR against the step interval for sparse groups (a new random 200 of
    the 1000-node tree per run), simulations I and II, beside the dense
    groups of Figs. 6 and 8 (same seeds): §4.2.3 says they do not differ."""
    t0 = time.time()
    runs = 1 if quick else SPARSE_RUNS
    sims = {}
    for sim2 in (False, True):
        sp = _step_sweep(quick, seed, jobs, sim2, nodes=1000, runs=runs)
        de = _step_sweep(quick, seed, jobs, sim2, runs=runs)
        sims[sim2] = (sp[0], de[0], sp[2])
    rows, notes = [], []
    for sim2, (sp, de, bs) in sims.items():
        ratios = []
        for (b, st), a in sp.items():
            d = de[(b, st)]
            r = a["tpr"] / d["tpr"] if a["tpr"] and d["tpr"] else None
            ratios.append(r)
            rows.append(["II" if sim2 else "I", b, st, a["runs"], a["done"], _r(a["tpr"]), _r(a["tpr_std"]),
                         _r(a["steps"]), _r(d["tpr"]), _r(r, 3), _r(a["queue_drops"], 1)])
        rs = [r for r in ratios if r is not None]
        notes.append(f"simulation {'II' if sim2 else 'I'}: sparse/dense TPR median {np.median(rs):.2f}, "
                     f"{sum(abs(r - 1) <= 0.15 for r in rs)} of {len(rs)} points within 15 %; sparse windows: "
                     + "; ".join(_windows(sp, bs)) + "; dense: " + "; ".join(_windows(de, bs)))
    note = (f"Sparse groups: n = 200 of a 1000-node degree-4 tree, a new random group per run (topo seed = seed); "
            f"dense: the 200-node tree, same seeds.  {runs} run(s) per point (seeds {seed}..{seed + runs - 1}).  "
            + ".  ".join(notes) + f".  Wall {time.time() - t0:.0f} s.")
    plt = pyplot()
    fig_, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=80, sharey=True)
    for ax, sim2 in zip(axes, (False, True)):
        sp, de, bs = sims[sim2]
        for b in bs:
            pts = sorted((st, a["tpr"]) for (bb, st), a in sp.items() if bb == b and a["tpr"] is not None)
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"b = {b} sparse")
            pts = sorted((st, a["tpr"]) for (bb, st), a in de.items() if bb == b and a["tpr"] is not None)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=":", color=line.get_color(), lw=1)
        ax.set_xlabel("step interval (s)")
        ax.set_title(f"simulation {'II' if sim2 else 'I'} (dotted: dense, Fig. {'8' if sim2 else '6'})", fontsize=9)
        ax.set_ylim(0, 150)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("time per round (s)")
    fig_.suptitle("GSGC Fig. 9 reproduction: sparse groups of 200 in a 1000-node tree", fontsize=10)
    fig_.tight_layout()
    fig_.savefig(Path(out) / "plot.png")
    plt.close(fig_)
    return Table(["simulation", "b", "step", "runs", "done", "tpr_mean", "tpr_std", "steps_mean", "dense_tpr_mean",
                  "sparse_over_dense", "queue_drops_mean"], rows,
                 "GSGC Fig. 9: TPR vs step interval, sparse groups of 200 (simulations I and II)", note)


# --------------------------------------------------------------------------
# Fig. 12: global gossip, TPR against the group size (sparse, simulation II)

def _global_configs(ns, factors, runs, seed):
    """b = 1, sparse groups of n in the 1000-node tree, simulation II; step
    intervals proportional to n (the load is n b / step), a new random group
    per run."""
    out = []
    for n in ns:
        for f in factors:
            for k in range(runs):
                out.append(dict(n=n, nodes=1000, b=1, step=round(f * n / 100, 3), seed=seed + k,
                                topo_seed=seed + k, buffers=64, drops_per_step=2))
    return out


def _best(agg, n):
    """(step, aggregate) with the least mean TPR for group size n."""
    pts = [(s, a) for (nn, s), a in agg.items() if nn == n and a["tpr"] is not None]
    return min(pts, key=lambda p: p[1]["tpr"]) if pts else (None, None)


def _linfit(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(xs) < 2:
        return None, None, None
    k, c = np.polyfit(xs, ys, 1)
    pred = k * xs + c
    ss = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1 - float(((ys - pred) ** 2).sum()) / ss if ss else 1.0
    return float(k), float(c), r2


GROUP_SIZES = [50, 100, 200, 300, 400, 500]


def fig12(out, quick=False, seed=1, jobs=2):
    ns = [50, 100, 200] if quick else GROUP_SIZES
    factors = [1.0, 2.0] if quick else [0.5, 1.0, 1.5, 2.0]
    runs = 1 if quick else 4
    t0 = time.time()
    res = run_many(_global_configs(ns, factors, runs, seed), jobs)
    agg = aggregate(res, ("n", "step"))
    rows = []
    best = {}
    for (n, step), a in agg.items():
        bs, _ = _best(agg, n)
        rows.append([n, step, step == bs, a["runs"], a["done"], _r(a["tpr"]), _r(a["tpr_std"]), _r(a["steps"]),
                     _r(a["queue_drops"], 1)])
        if step == bs:
            best[n] = a
    k, c, r2 = _linfit(list(best), [a["tpr"] for a in best.values()])
    notes = (f"Global gossip, b = 1, sparse groups of n in a 1000-node degree-4 tree (a new random group per run), "
             f"simulation II (64-message buffers, 2 gossips dropped per step), gossip 236 + n/8 bytes; step intervals "
             f"{factors} x n/100 s, {runs} run(s) each; 'best' = the step with the least mean TPR (the near-minimum TPR "
             f"of Fig. 12).  Linear fit of the best means: TPR = {k:.3f} n {c:+.1f} s (R^2 = {r2:.3f}).  "
             f"Paper: linear in n, 71 s at n = 500.  Wall {time.time() - t0:.0f} s.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    for n, a in best.items():
        ax.plot([n] * len(a["tprs"]), a["tprs"], "k.", ms=4)
    ax.plot(list(best), [a["tpr"] for a in best.values()], "b-o", ms=4, label="mean (best step)")
    if k is not None:
        xs = np.array([min(best), max(best)])
        ax.plot(xs, k * xs + c, "r--", lw=1, label=f"fit {k:.3f} n {c:+.1f} s")
    ax.plot([500], [71], "g^", label="paper: 71 s at n = 500")
    _finish(plt, fig, ax, out, "group size n", "near-minimum time per round (s)",
            "GSGC Fig. 12 reproduction: global gossip, b = 1, sparse, sim. II")
    return Table(["n", "step", "best", "runs", "done", "tpr_mean", "tpr_std", "steps_mean", "queue_drops_mean"],
                 rows, "GSGC Fig. 12: near-minimum TPR vs group size, global gossip", notes)


# --------------------------------------------------------------------------
# Fig. 13: local gossip (§5)

LOCAL_SIZE = 50             # members per local group
CONTROLLERS = 5             # stability controllers per local group
LOCAL_STEP = 0.7            # §5: the local groups' step interval
SC_STEP = {10: 0.2, 20: 0.3, 30: 0.5, 40: 0.6, 50: 0.7}   # §5: the SC group's step, by its size


def _sc_step(k):
    """§5's step for an SC group of k (interpolated between its sizes,
    0.7 s from 50 on)."""
    if k in SC_STEP:
        return SC_STEP[k]
    if k >= 50:
        return 0.7
    lo = max([x for x in SC_STEP if x < k], default=None)
    hi = min(x for x in SC_STEP if x > k)
    if lo is None:
        return SC_STEP[hi]
    return round(SC_STEP[lo] + (SC_STEP[hi] - SC_STEP[lo]) * (k - lo) / (hi - lo), 3)


def _zone_count(n, zones_by, topo_seed, seed=1):
    from rpbcast.sim import topology as T
    topo = T.balanced_tree(1000)
    return len(set(zone_map(topo, T.choose_members(topo, n, seed=topo_seed), LOCAL_SIZE, zones_by, seed).values()))


def _local_configs(ns, runs, seed, zones_by):
    """The two-layer implementation in one run, every member and layer
    concurrently: zones of 50 (random or by proximity), 5 controllers each,
    b = b2 = 1, the paper's steps (local 0.7 s; the SC group's step for its
    size), sparse groups in the 1000-node tree, simulation II."""
    out = []
    for n in ns:
        for k in range(runs):
            sc = CONTROLLERS * _zone_count(n, zones_by, seed + k, seed + k)
            out.append(dict(n=n, nodes=1000, b=1, step=LOCAL_STEP, step2=_sc_step(sc), seed=seed + k,
                            topo_seed=seed + k, buffers=64, drops_per_step=2, zone_size=LOCAL_SIZE,
                            controllers=CONTROLLERS, b2=1, zones_by=zones_by))
    return out


def _phase_configs(ns, runs, seed):
    """Reference: the two phases measured one after the other as the paper's
    step choices suggest, each a flat GSGC group alone on the 1000-node
    tree (simulation II): one local group of 50 at 0.7 s, and the n/10
    controllers at the paper's step for that size."""
    out = [dict(n=LOCAL_SIZE, nodes=1000, b=1, step=LOCAL_STEP, seed=seed + k, topo_seed=seed + 100 + k,
                buffers=64, drops_per_step=2) for k in range(runs)]
    for n in ns:
        sc = CONTROLLERS * n // LOCAL_SIZE
        if sc == LOCAL_SIZE:
            continue                                        # the same configuration as phase 1
        out += [dict(n=sc, nodes=1000, b=1, step=_sc_step(sc), seed=seed + k, topo_seed=seed + 200 + k,
                     buffers=64, drops_per_step=2) for k in range(runs)]
    return out


def local_vs_global(ns, runs, seed, jobs, random_ns=(), global_factors=(1.0, 2.0), random_runs=None,
                    phases=True):
    """Rows per n: the global near-minimum TPR (best of the steps
    global_factors x n/100 s), the concurrent two-layer run with zones by
    proximity, optionally with random zones (for n in random_ns), and the
    phase-by-phase reference."""
    cfg = {"global": _global_configs(ns, list(global_factors), runs, seed),
           "proximity": _local_configs(ns, runs, seed, "proximity"),
           "random": _local_configs(list(random_ns), random_runs or runs, seed, "random"),
           "phases": _phase_configs(ns, runs, seed) if phases else []}
    res = run_many([c for v in cfg.values() for c in v], jobs)
    parts, i = {}, 0
    for k, v in cfg.items():
        parts[k] = res[i:i + len(v)]
        i += len(v)
    ag = aggregate(parts["global"], ("n", "step"))
    ax = aggregate(parts["proximity"], ("n",))
    ar = aggregate(parts["random"], ("n",))
    ap = aggregate(parts["phases"], ("n",))
    p1 = ap.get((LOCAL_SIZE,))
    out = {}
    for n in ns:
        gstep, g = _best(ag, n)
        x = ax[(n,)]
        rx = [r for r in parts["proximity"] if r["n"] == n]
        r = ar.get((n,))
        rr = [q for q in parts["random"] if q["n"] == n]
        p2 = ap.get((CONTROLLERS * n // LOCAL_SIZE,))
        out[n] = {
            "global": g["tpr"] if g else None, "global_step": gstep, "global_tprs": g["tprs"] if g else [],
            "local": x["tpr"], "local_std": x["tpr_std"], "local_tprs": x["tprs"],
            "zones": _mean([q["zones"] for q in rx]), "local_step": LOCAL_STEP,
            "sc_step": _mean([q["step2"] for q in rx]), "local_queue_drops": x["queue_drops"],
            "local_steps": x["steps"],
            "random": r["tpr"] if r else None, "random_zones": _mean([q["zones"] for q in rr]) if rr else None,
            "random_queue_drops": r["queue_drops"] if r else None,
            "phase1": p1["tpr"] if p1 else None, "phase2": p2["tpr"] if p2 else None,
            "phases": (p1["tpr"] + p2["tpr"]) if (p1 and p2 and p1["tpr"] and p2["tpr"]) else None,
            "not_done": sum(1 for q in res if not q["done"]),
        }
    return out


def fig13(out, quick=False, seed=1, jobs=2):
    ns = [100, 200, 300] if quick else [100, 200, 300, 400, 500]
    runs = 1 if quick else 3
    rnd = [100] if quick else [100, 300, 500]
    t0 = time.time()
    d = local_vs_global(ns, runs, seed, jobs, random_ns=rnd, random_runs=1 if quick else 2)
    rows = [[n, _r(x["global"]), x["global_step"], _r(x["local"]), _r(x["local_std"]), x["zones"],
             x["local_step"], x["sc_step"], _r(x["local_queue_drops"], 1), _r(x["random"]),
             _r(x["random_queue_drops"], 1), _r(x["phases"])] for n, x in d.items()]
    ns_ = list(d)
    kg, cg, _ = _linfit(ns_, [d[n]["global"] for n in ns_])
    kl, cl, _ = _linfit(ns_, [d[n]["local"] for n in ns_])
    last = ns_[-1]
    notes = (f"Sparse groups in the 1000-node tree, simulation II (64-message buffers, 2 gossips dropped per "
             f"step interval), b = b2 = 1.  global: near-minimum TPR of the flat scheme (best of steps {{1, 2}} x "
             f"n/100 s).  local: the two-layer implementation (rpbcast.protocol.gsgc with zones, {CONTROLLERS} "
             f"controllers per zone) in one run, every member and both layers concurrently, zones of at most "
             f"{LOCAL_SIZE} by proximity (zones_by_proximity on the members' RTTs), the paper's steps: local "
             f"{LOCAL_STEP} s, controllers the SC group's step for its size (§5).  random: the same with the "
             f"paper's random zones of {LOCAL_SIZE}.  phases (reference): phase 1 (one group of 50 at 0.7 s) + "
             f"phase 2 (the n/10 SCs at the paper's step), each simulated alone.  {runs} run(s) per point "
             f"(random: {1 if quick else 2}).  Slopes: global {kg:.3f} s/member, local {kl:.4f} s/member; at "
             f"n = {last}: local {d[last]['local']:.1f} s vs global {d[last]['global']:.1f} s.  "
             f"Wall {time.time() - t0:.0f} s.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    ax.plot(ns_, [d[n]["global"] for n in ns_], "b-o", ms=4, label="global gossip (Fig. 12)")
    for n in ns_:
        ax.plot([n] * len(d[n]["local_tprs"]), d[n]["local_tprs"], "g.", ms=3)
    ax.plot(ns_, [d[n]["local"] for n in ns_], "g-s", ms=4, label="local gossip, zones by proximity (one run)")
    xs = [n for n in ns_ if d[n]["random"] is not None]
    ax.plot(xs, [d[n]["random"] for n in xs], "r--^", ms=4, label="local gossip, random zones (one run)")
    xs = [n for n in ns_ if d[n]["phases"] is not None]
    ax.plot(xs, [d[n]["phases"] for n in xs], ":", color="0.5", label="phase 1 + phase 2 alone (reference)")
    ax.set_ylim(bottom=0)
    _finish(plt, fig, ax, out, "group size n", "near-minimum time per round (s)",
            "GSGC Fig. 13 reproduction: local vs global gossip (sparse, sim. II)")
    return Table(["n", "global_tpr", "global_step", "local_tpr", "local_std", "zones", "local_step", "sc_step",
                  "local_queue_drops", "random_zones_tpr", "random_zones_queue_drops", "phases_tpr"], rows,
                 "GSGC Fig. 13: near-minimum TPR, local gossip (concurrent two-layer run) vs global gossip", notes)


# --------------------------------------------------------------------------
# §4.3: the adaptive search for the window of good step intervals

PAPER_SEARCH = {"a0": 0.0, "b0": 20.0, "g": 2.0, "e": 0.10, "p": 1.0}   # §4.3's inputs for n = 200, sim. I
PAPER_WINDOWS = {3: (9, 28.6, 4, 10), 1: (None, None, 2, 4)}          # b: (s, f(s), s1, s2)


class MeasuredTPR:
    """f(step): mean TPR over ``runs`` runs (simulation I, dense n), each
    step simulated once and remembered, runs of a step in parallel."""

    def __init__(self, n, b, runs, seed, jobs):
        self.n, self.b, self.runs, self.seed, self.jobs = n, b, runs, seed, jobs
        self.cache: Dict[float, float] = {}
        self.order: List[float] = []

    def prefetch(self, steps):
        todo = [float(s) for s in steps if float(s) not in self.cache]
        cfg = [dict(n=self.n, b=self.b, step=s, seed=self.seed + k) for s in todo for k in range(self.runs)]
        if cfg:
            agg = aggregate(run_many(cfg, self.jobs), ("step",))
            for (s,), a in agg.items():
                self.cache[s] = a["tpr"] if a["tpr"] is not None else 600.0

    def __call__(self, x):
        x = float(x)
        if x not in self.cache:
            self.prefetch([x])
        self.order.append(x)
        return self.cache[x]


def adaptive_search(n, b, runs, seed, jobs, grid_steps=None, search=None):
    """find_window (Figs. 10-11) on measured TPRs; with grid_steps, also
    the whole curve at those steps for the measured window."""
    f = MeasuredTPR(n, b, runs, seed, jobs)
    if grid_steps:
        f.prefetch(grid_steps)
    kw = dict(PAPER_SEARCH, **(search or {}))
    w = find_window(f, grid=1.0, **kw)
    curve = dict(f.cache) if not grid_steps else {s: f.cache[s] for s in map(float, grid_steps)}
    return w, good_window(curve, kw["e"]), f


def adaptive(out, quick=False, seed=1, jobs=2):
    bs = [3] if quick else [3, 1]
    runs = 1 if quick else 4
    grid = None if quick else list(range(1, 21))
    t0 = time.time()
    rows = []
    curves = {}
    for b in bs:
        w, mw, f = adaptive_search(200, b, runs, seed, jobs, grid_steps=grid)
        ps, pf, p1, p2 = PAPER_WINDOWS[b]
        inside = mw is not None and mw["s1"] <= w.s <= mw["s2"]
        rows.append([b, w.s, _r(w.f_s), w.s1, w.s2, w.iterations1, w.iterations2, len(w.evaluations),
                     mw["s"] if mw else None, _r(mw["tpr"]) if mw else None, mw["s1"] if mw else None,
                     mw["s2"] if mw else None, inside, ps, pf, p1, p2])
        curves[b] = (dict(f.cache), w, mw)
    notes = (f"Dense n = 200, simulation I; f(x) = mean TPR of {runs} run(s) at step x (seeds {seed}..{seed + runs - 1}); "
             f"search inputs as in §4.3: a0 = 0, b0 = 20 s, g = 2 s, e = 10 %, p = 1 s; evaluated points rounded to "
             f"whole seconds (the paper's curves were measured at 1-s steps).  measured_*: the least-TPR step of "
             f"the curve" + (" at 1..20 s" if grid else " at the points the search evaluated") +
             f" and the contiguous steps within 10 % of it.  paper_*: §4.3.  Wall {time.time() - t0:.0f} s.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    for b, (cache, w, mw) in curves.items():
        xs = sorted(cache)
        line, = ax.plot(xs, [cache[x] for x in xs], "-o", ms=3, label=f"b = {b}: measured TPR")
        ax.axvspan(w.s1, w.s2, color=line.get_color(), alpha=0.15)
        ax.plot([w.s], [w.f_s], "*", color=line.get_color(), ms=12, label=f"b = {b}: search: s = {w.s:g}, "
                f"window {w.s1:g}-{w.s2:g} s")
    _finish(plt, fig, ax, out, "step interval (s)", "time per round (s)",
            "GSGC §4.3 adaptive search (n = 200, sim. I)", legend_size=7)
    return Table(["b", "s", "f_s", "s1", "s2", "iter_part1", "iter_part2", "evaluations", "measured_s",
                  "measured_tpr", "measured_s1", "measured_s2", "s_in_measured_window", "paper_s", "paper_f_s",
                  "paper_s1", "paper_s2"], rows, "GSGC §4.3: adaptive search for the window of good step intervals",
                 notes)


EXPERIMENTS = {
    "gsgc-fig5": Experiment(fig5, "GSGC Fig. 5: average and maximum queue size vs step interval, n = 200, simulation I"),
    "gsgc-fig7": Experiment(fig7, "GSGC Fig. 7: average and maximum queue size vs step interval, n = 200, simulation II"),
    "gsgc-fig9": Experiment(fig9, "GSGC Fig. 9: TPR vs step interval, sparse groups of 200 (simulations I and II)"),
    "gsgc-fig6": Experiment(fig6, "GSGC Fig. 6: TPR vs step interval, b = 1..5, n = 200, simulation I (no loss)"),
    "gsgc-fig8": Experiment(fig8, "GSGC Fig. 8: TPR vs step interval, b = 1..5, n = 200, simulation II (64 buffers, drops)"),
    "gsgc-fig12": Experiment(fig12, "GSGC Fig. 12: near-minimum TPR grows linearly with n (global gossip, sparse)"),
    "gsgc-fig13": Experiment(fig13, "GSGC Fig. 13: local gossip vs global gossip, TPR vs n (sparse)"),
    "gsgc-adaptive": Experiment(adaptive, "GSGC §4.3: golden-ratio search for the window of good step intervals"),
}
