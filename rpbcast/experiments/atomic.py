"""Atomic delivery (paper 004) in the simulator: what atomicity costs as the
group grows, and what aggregated votes buy back.

    rpbcast experiment atomic-flat --out results/     # the paper's finding: flat votes, SRM and rpbcast
    rpbcast experiment atomic-tree --out results/     # past the paper: tree votes beside flat

Set-up (docs/atomic.md, "Figures"): GSGC's balanced degree-4 trees of n
nodes (5 ms links, 100 Mb/s, 50-packet queues), every node a member; the
host CPU costs of GSGC §4 (receiving a datagram costs ~0.4 ms, so a sender
that takes n votes per proposal spends n x 0.4 ms on them: the paper's ACK
implosion, where it hurts); uniform loss at every receiving host on every
packet.  One sender (seeded), `proposals` atomic messages of 64 bytes at
`rate` per second, timeout 1 s (paper 004: the atomic period; here in
seconds), a YES repeated after 150 ms (doubling) until the decision (flat)
or the aggregator's HAVE (tree); rpbcast runs with one logger (the tree's
root), SRM with none (its distances are the topology's path latencies).

Measured per point: abort rate; commit latency (publication to the
sender's decision); acknowledgment bytes -- ATOMIC messages (votes,
aggregators' voter lists, questions and answers; message header and body)
-- per member per proposal, and arriving at the sender per proposal; and
that every committed proposal reached every member of its snapshot.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

from rpbcast.experiments.results import Experiment, Table, pyplot

NS = 1_000_000_000
SIZES = (10, 30, 100, 300, 1000)
SIZES_QUICK = (10, 30, 100)
LOSSES = (0.0, 0.01, 0.02, 0.05)
LOSSES_QUICK = (0.0, 0.05)
TIMEOUT = 1.0
PAYLOAD = 64
FANOUT = 16

BASE = {
    "topology": "tree", "degree": 4, "bandwidth": 100e6, "queue_limit": 50, "host_cost": True,
    "stagger": 1.0, "gossip_interval": 0.25, "repair_rate": 1000.0,
}


def _factory(base, journal_dir, options):
    """The simulator's engine factory: the protocol's engine with the atomic
    layer on every member (loggers serve its records as data)."""
    from rpbcast.protocol.atomic import AtomicDelivery

    def make(config, now, rng=None, log=None):
        e = base(config, now, rng, log)
        if config.role != "logger":
            e.add_extension(AtomicDelivery(os.path.join(journal_dir, f"n{config.node_id}"), **options))
        return e
    return make


def _protocol(name, topo, journal_dir, options):
    from rpbcast.sim.protocols import Protocol, get
    base = get(name)
    factory = base.factory
    if name == "srm":
        # SRM's timers scale with the distance to the source / requester
        from rpbcast.baselines import factory as baseline_factory
        cache = {}

        def distance(a, b):
            k = (a, b) if a < b else (b, a)
            if k not in cache:
                cache[k] = topo.latency_ns(a, b) / NS
            return cache[k]
        factory = baseline_factory("srm", distance=distance)
    return Protocol(f"{name}+atomic", _factory(factory, journal_dir, options), base.uses_logger, dict(base.config))


def run_point(spec) -> dict:
    """One simulated group: spec = dict(protocol, votes, n, loss, seed,
    proposals, rate, timeout)."""
    from rpbcast.sim import build
    from rpbcast.sim.params import resolve
    t_wall = time.perf_counter()
    s = dict(spec)
    n, seed = int(s["n"]), int(s["seed"])
    p = resolve({**BASE, "protocol": s["protocol"], "nodes": n, "loss": float(s["loss"]), "seed": seed,
                 "logger": "auto" if s["protocol"] == "rpbcast" else None})
    tmp = tempfile.mkdtemp(prefix="rpbcast-atomic-sim-")
    try:
        topo = build.make_topology(p)
        members = build.choose_members(p, topo)
        options = dict(votes=s["votes"], fanout=FANOUT, timeout=s["timeout"], boot_after=2 * s["timeout"],
                       fsync=False, vote_retry=0.15, aggregate_delay=0.02)
        proto = _protocol(s["protocol"], topo, tmp, options)
        loggers = build.choose_loggers(p, proto.uses_logger, topo, members)
        net = build.make_network(p, topo, seed)
        engines = build.make_engines(p, proto, net, members, loggers, 1, seed, random.Random(f"sim/{seed}"), tmp)
        sender = build.choose_senders({"senders": 1}, seed, members, loggers)[0]
        net.start()
        x = {v: next(ext for ext in e.extensions if type(ext).__name__ == "AtomicDelivery")
             for v, e in engines.items() if v not in loggers}
        props = []
        t0 = net.now + int((float(p["stagger"]) + 1.0) * NS)
        gap = int(NS / float(s["rate"]))
        rng = random.Random(f"atomic/{seed}")
        for k in range(int(s["proposals"])):
            at = t0 + k * gap + rng.randrange(gap // 2)

            def go(k=k):
                props.append(x[sender].propose(bytes([k % 256]) * PAYLOAD, net.now))
            net.at(at, go, node=sender)
        end = t0 + int(s["proposals"]) * gap + int((float(s["timeout"]) + 2.0) * NS)
        got: Dict[int, set] = {v: set() for v in x}
        while net.now < end:
            net.run_until(min(end, net.now + NS // 5))
            for v, ext in x.items():
                for m in ext.take():
                    got[v].add(m.seq)
        return _measure(s, props, x, engines, got, sender, loggers, members, time.perf_counter() - t_wall)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(s, props, x, engines, got, sender, loggers, members, wall) -> dict:
    decided = [p for p in props if p is not None and p.outcome is not None]
    commits = [p for p in decided if p.outcome == 1]
    lat = np.array([(p.decided_at - p.t0) / NS for p in commits]) if commits else np.zeros(0)
    voters = [v for v in members if v not in loggers]
    ack_out = sum(engines[v].traffic().get("atomic", (0, 0, 0, 0))[3] for v in engines)
    at_sender = engines[sender].traffic().get("atomic", (0, 0, 0, 0))[1]
    busiest = max(engines[v].traffic().get("atomic", (0, 0, 0, 0))[1] for v in engines)
    complete = all(all(p.seq in got[v] for v in p.snapshot) for p in commits)
    k = max(len(props), 1)
    return {
        "protocol": s["protocol"], "votes": s["votes"], "n": int(s["n"]), "loss": float(s["loss"]),
        "seed": int(s["seed"]), "proposals": len(props), "decided": len(decided), "commits": len(commits),
        "abort_rate": 1 - len(commits) / k,
        "latency_p50": float(np.percentile(lat, 50)) if len(lat) else None,
        "latency_p99": float(np.percentile(lat, 99)) if len(lat) else None,
        "ack_bytes_per_member": ack_out / max(len(voters), 1) / k,
        "ack_bytes_at_sender": at_sender / k,
        "ack_bytes_busiest": busiest / k,
        "aborts_timeout": int(x[sender].stats.get("aborts_timeout", 0)),
        "delivered_everywhere": bool(complete),
        "wall_s": round(wall, 1),
    }


def run_all(specs, jobs: int) -> List[dict]:
    specs = sorted(specs, key=lambda s: s["n"] * s["proposals"], reverse=True)
    if jobs <= 1 or len(specs) <= 1:
        return [run_point(s) for s in specs]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(min(jobs, len(specs)), maxtasksperchild=4) as pool:
        return list(pool.imap_unordered(run_point, specs, chunksize=1))


RATE = 4.0


def _proposals(n, quick, scheme="flat"):
    """Enough proposals for the abort rate to mean something, fewer for the
    largest groups (a run at n = 1000 costs minutes); the tree's n = 1000
    point carries the goal (<= 1 % aborts), so it gets the most."""
    if quick:
        return 12
    if n >= 1000:
        return 300 if scheme == "tree" else 120
    return 200


def _table(rows, title, notes) -> Table:
    cols = ["protocol", "votes", "n", "loss", "proposals", "commits", "abort_rate", "latency_p50", "latency_p99",
            "ack_bytes_per_member", "ack_bytes_at_sender", "ack_bytes_busiest", "delivered_everywhere", "wall_s"]
    rows = sorted(rows, key=lambda r: (r["protocol"], r["votes"], r["loss"], r["n"]))
    return Table(cols, [[r[c] for c in cols] for r in rows], title=title, notes=notes)


def flat(out, quick, seed, jobs) -> Table:
    """The paper's finding: the flat scheme over SRM and over rpbcast."""
    sizes = SIZES_QUICK if quick else SIZES
    losses = LOSSES_QUICK if quick else LOSSES
    specs = [dict(protocol=proto, votes="flat", n=n, loss=loss, seed=seed, proposals=_proposals(n, quick),
                  rate=RATE, timeout=TIMEOUT)
             for proto in ("srm", "rpbcast") for n in sizes for loss in losses]
    rows = run_all(specs, jobs)
    _plot_flat(rows, Path(out), sizes, losses)
    return _table(rows, "Flat votes (paper 004): abort rate, commit latency and acknowledgment bytes",
                  "ack bytes: ATOMIC messages (header + body) per member per proposal, and arriving at the "
                  "sender / at the busiest node per proposal; latency in seconds, publication to decision.")


def tree(out, quick, seed, jobs) -> Table:
    """Past the paper: tree votes beside flat, over rpbcast, 1 % loss."""
    sizes = SIZES_QUICK if quick else SIZES
    loss = 0.01
    specs = [dict(protocol="rpbcast", votes=v, n=n, loss=loss, seed=seed, proposals=_proposals(n, quick, v),
                  rate=RATE, timeout=TIMEOUT)
             for v in ("flat", "tree") for n in sizes]
    rows = run_all(specs, jobs)
    _plot_tree(rows, Path(out), sizes)
    return _table(rows, f"Tree votes (fanout {FANOUT}) beside flat, rpbcast, 1 % loss",
                  "the goal: at n = 1000 and 1 % loss, abort rate <= 1 % with acknowledgment bytes per member "
                  "independent of n.")


def _plot_flat(rows, out, sizes, losses):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for proto, ls in (("srm", "--"), ("rpbcast", "-")):
        for loss in losses:
            rs = sorted((r for r in rows if r["protocol"] == proto and r["loss"] == loss), key=lambda r: r["n"])
            if not rs:
                continue
            ns = [r["n"] for r in rs]
            lab = f"{proto}, {loss:.0%} loss"
            axes[0].plot(ns, [100 * r["abort_rate"] for r in rs], ls, marker="o", label=lab)
            axes[1].plot(ns, [r["latency_p50"] or float("nan") for r in rs], ls, marker="o", label=lab)
            axes[2].plot(ns, [r["ack_bytes_at_sender"] for r in rs], ls, marker="o", label=lab)
    for ax, t in zip(axes, ("abort rate (%)", "commit latency p50 (s)", "ack bytes at the sender per proposal")):
        ax.set_xscale("log")
        ax.set_xlabel("group size n")
        ax.set_title(t)
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "plot.png", dpi=110)
    plt.close(fig)


def _plot_tree(rows, out, sizes):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for v, ls in (("flat", "--"), ("tree", "-")):
        rs = sorted((r for r in rows if r["votes"] == v), key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        axes[0].plot(ns, [100 * r["abort_rate"] for r in rs], ls, marker="o", label=v)
        axes[1].plot(ns, [r["ack_bytes_per_member"] for r in rs], ls, marker="o", label=f"{v}: per member")
        axes[1].plot(ns, [r["ack_bytes_busiest"] for r in rs], ls, marker="s", label=f"{v}: busiest node")
        axes[2].plot(ns, [r["latency_p50"] or float("nan") for r in rs], ls, marker="o", label=f"{v} p50")
        axes[2].plot(ns, [r["latency_p99"] or float("nan") for r in rs], ls, marker="v", label=f"{v} p99")
    for ax, t in zip(axes, ("abort rate (%)", "ack bytes per proposal", "commit latency (s)")):
        ax.set_xscale("log")
        ax.set_xlabel("group size n")
        ax.set_title(t)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    fig.tight_layout()
    fig.savefig(out / "plot.png", dpi=110)
    plt.close(fig)


EXPERIMENTS = {
    "atomic-flat": Experiment(flat, "paper 004: abort rate, latency, ack bytes vs n and loss, flat votes, SRM and rpbcast"),
    "atomic-tree": Experiment(tree, "atomic delivery past the paper: tree (aggregated) votes beside flat, n = 10..1000"),
}
