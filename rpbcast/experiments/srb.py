"""FIFO-SRB (Pereira, Rodrigues, Oliveira, *Semantically Reliable Broadcast*,
§3.2, Fig. 4) in the simulator: a slow member against reliable FIFO and
FIFO-SRB, sustained output against offered input, and latency.

    rpbcast experiment srb-fig4a --out results/     # bottleneck receiver
    rpbcast experiment srb-fig4b --out results/     # bottleneck link
    rpbcast experiment srb-latency --out results/   # latency at fast and slow receivers

Set-up (the paper's where it gives one, docs/reproduction/fifo-srb.md):
5 processes, one producer (node 1) publishing the stock-trading workload
(875 items, 25/100/750 taking 50/40/10 % of the updates; one label per
item), consumers at the 4 other nodes, f = 1, sender window w = 512.  Hosts
hang off one router (a star: 1 ms, 100 Mb/s links; host uplinks never drop,
as a sender's socket blocks instead), so "the aggregate bandwidth of network
links to a node" is its access link.  The bottleneck is X = 1000 msgs/s:

* fig4a, a slow receiver: node 5's application reads at most X msgs/s and
  its delivery queue holds B = 32 messages; while it is full the host takes
  no datagrams from the network (they wait, in order: the paper's "when its
  delivery queue fills up, it ceases to accept further messages").  B = 16
  and 64 show how the knee moves with the buffer.
* fig4b, a slow link: the router -> node 5 link carries X data messages/s
  (1108 bytes on the wire each) with a drop-tail queue of 50 packets; node
  5's application is fast.

"Reliable FIFO" is the same engine and window with unlabelled messages:
nothing is ever obsolete, so the window moves only with stability, as in
the paper's reliable protocol.  The producer offers Poisson arrivals at
`load` x X; what the window refuses waits in a FIFO backlog at the producer
(offered vs accepted input).  Output = how fast the fast receivers' state
advances through the stream (messages delivered or superseded by a
delivered newer value per second), measured after a warm-up.  Latency =
from publication (acceptance by the window) to the application's read.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np

from rpbcast.experiments.results import Experiment, Table, pyplot

NS = 1_000_000_000
X = 1000.0                     # bottleneck: msgs/s
SENDER, SLOW, ROUTER = 1, 5, 6
FAST = (2, 3, 4)
W = 512                        # sender window
B = 32                         # slow receiver's delivery queue (fig4a)
B_SENS = (16, 64)              # other buffers for fig4a
LINK_QUEUE = 50                # drop-tail queue of the slow link (fig4b)
SIZE = 1024
WIRE = 1108                    # bytes of a 1 KB DATA datagram on a link (+ 28 header bytes)
LOADS = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
LOADS_QUICK = (0.75, 1.3, 2.5)


def star(slow_link_bps=None, latency=0.001, bandwidth=100e6):
    from rpbcast.sim.topology import Topology
    edges = [(v, ROUTER, latency, slow_link_bps if (v == SLOW and slow_link_bps) else bandwidth)
             for v in range(1, ROUTER)]
    return Topology.from_edges(ROUTER, edges, name="srb-star", hosts=list(range(1, ROUTER)))


def timing(quick):
    """(seconds of offered input, warm-up before measuring)."""
    return (5.0, 2.0) if quick else (12.0, 4.0)


def params(protocol, load, scenario, buffer=B, quick=False, seed=1, window=W):
    """Simulation parameters of one point.  protocol: "reliable" or "srb";
    scenario: "receiver" (fig4a) or "link" (fig4b)."""
    dur, _ = timing(quick)
    slow_rate = X if scenario == "receiver" else 0.0
    p = dict(
        topology=star(X * WIRE * 8 if scenario == "link" else None),
        logger=None, senders=[SENDER], total_rate=load * X, duration=dur, size=SIZE,
        delivery="fifo", srb_window=window, srb_f=1, srb_report_interval=0.01,
        labels="stock" if protocol == "srb" else None, producer="backlog",
        consumers={**{v: 0.0 for v in FAST}, SLOW: slow_rate}, consume_interval=0.001,
        consumer_queue=buffer if scenario == "receiver" else None,
        # repairs: pull gossip every 0.1 s, a pull is repeated after >= 0.2 s
        # (longer than the slow link's full queue; shorter settings flood it
        # with repeated repairs), no serving limit, no logger (the paper has none)
        gossip_interval=0.1, nack_retry=0.2, gc_limit=100, repair_rate=0.0,
        queue_limit=None, queue_limits={(ROUTER, SLOW): LINK_QUEUE},
        end="linger", linger=2.0, stagger=0.2, start_delay=0.1, seed=seed)
    return p


def _rate_through_stream(seq, read, t0, t1):
    """Messages per second by which the application's position in the
    stream (highest seq read) advanced between t0 and t1."""
    def pos(t):
        m = read < t
        return int(seq[m].max()) + 1 if m.any() else 0
    return (pos(t1) - pos(t0)) / ((t1 - t0) / NS)


def run_point(args):
    """One simulation; a dict of measurements."""
    from rpbcast.sim.run import Simulation
    protocol, load, scenario, buffer, quick, seed = args
    t_wall = time.time()
    sim = Simulation(params(protocol, load, scenario, buffer, quick, seed))
    res = sim.run()
    dur, warm = timing(quick)
    t0 = sim.t_start + int(warm * NS)
    t1 = sim.t_start + int(dur * NS)
    span = (t1 - t0) / NS
    pub = sim.pub
    sent = np.asarray(pub.send_times[SENDER], np.int64)
    offer = np.asarray(pub.offer_times[SENDER], np.int64)
    arrivals = sum(k for off, k in pub.plan[SENDER] if t0 <= pub.t0 + off < t1)
    in_win = (sent >= t0) & (sent < t1)
    row = {"scenario": scenario, "protocol": "FIFO-SRB" if protocol == "srb" else "reliable",
           "buffer": buffer if scenario == "receiver" else None, "load": load,
           "offered": arrivals / span / X, "accepted": int(in_win.sum()) / span / X}
    lat = {}
    for group, nodes in (("fast", FAST), ("slow", (SLOW,))):
        rates, dl, ls = [], [], []
        for v in nodes:
            d = sim.deliveries(v)
            seq, read = d["seq"], d["read"]
            rates.append(_rate_through_stream(seq, read, t0, t1))
            m = (read >= t0) & (read < t1)
            dl.append(int(m.sum()) / span)
            ls.append(read[m] - sent[seq[m]])
        row[f"{group}_output"] = float(np.mean(rates)) / X
        row[f"{group}_delivered"] = float(np.mean(dl)) / X
        lat[group] = np.concatenate(ls) / NS if ls else np.zeros(0)
    for group in ("fast", "slow"):
        a = lat[group]
        row[f"lat_{group}_mean"] = float(a.mean()) if len(a) else None
        row[f"lat_{group}_p99"] = float(np.percentile(a, 99)) if len(a) else None
    w = (sent - offer)[in_win] / NS
    row["producer_wait"] = float(w.mean()) if len(w) else None
    # the slow receiver: FIFO order, and its final state = the sender's (latest value per item)
    d = sim.deliveries(SLOW)
    seq = d["seq"]
    row["fifo_ok"] = bool(np.all(np.diff(seq) > 0))
    if protocol == "srb":
        labels = np.asarray(pub.labels[SENDER], np.int64)
        n = len(sent)
        last_sent = {}
        for i, lab in enumerate(labels[:n].tolist()):
            last_sent[lab] = i
        last_got = {}
        for s in seq.tolist():
            last_got[int(labels[s])] = s
        row["converged"] = bool(last_got == last_sent and res.get("backlog_left", 0) == 0)
    else:
        row["converged"] = bool(len(seq) == len(sent) and res.get("backlog_left", 0) == 0)
    c = sim.engines[SLOW].counters()
    row["purged_slow"] = int(c.get("purged", 0))
    row["purged_sender"] = int(sim.engines[SENDER].counters().get("purged_buffer", 0))
    row["held_max"] = int(res.get("consumer_held_max", 0))
    row["repairs"] = int(res["repair_msgs"])
    row["link_drops"] = int(res["queue_drops"])
    row["blocked"] = int(res["publish_blocked"])
    row["wall_s"] = round(time.time() - t_wall, 1)
    return row


def run_points(points, jobs):
    jobs = max(1, min(int(jobs or 1), len(points)))
    if jobs == 1:
        return [run_point(p) for p in points]
    ctx = mp.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=4) as pool:
        return pool.map(run_point, points, chunksize=1)


COLUMNS = ["scenario", "protocol", "buffer", "load", "offered", "accepted", "fast_output", "fast_delivered",
           "slow_output", "slow_delivered", "lat_fast_mean", "lat_fast_p99", "lat_slow_mean", "lat_slow_p99",
           "producer_wait", "fifo_ok", "converged", "purged_slow", "purged_sender", "held_max", "repairs",
           "link_drops", "blocked", "wall_s"]


def _table(rows, title, notes):
    out = []
    for r in rows:
        out.append([round(r[c], 4) if isinstance(r[c], float) else r[c] for c in COLUMNS])
    return Table(COLUMNS, out, title=title, notes=notes)


def _series(rows, **eq):
    sel = sorted((r for r in rows if all(r[k] == v for k, v in eq.items())), key=lambda r: r["load"])
    return sel


def _throughput_plot(rows, out, title, buffers):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=90)
    top = max(r["load"] for r in rows) * 100
    ax.plot([0, top], [0, top], ":", color="0.6", lw=1, label="output = input")
    ax.axhline(100, color="0.8", lw=0.8)
    rel = _series(rows, protocol="reliable")
    ax.plot([100 * r["load"] for r in rel], [100 * r["fast_output"] for r in rel], "s-", color="tab:red",
            label="reliable FIFO: fast receivers")
    styles = {B: ("o-", "tab:blue"), 16: ("v--", "tab:cyan"), 64: ("^--", "tab:purple")}
    for b in buffers:
        srb = _series(rows, protocol="FIFO-SRB", buffer=b)
        mk, col = styles.get(b, ("o-", "tab:blue"))
        lab = "FIFO-SRB: fast receivers" + (f" (B = {b})" if len(buffers) > 1 else "")
        ax.plot([100 * r["load"] for r in srb], [100 * r["fast_output"] for r in srb], mk, color=col, label=lab)
    srb = _series(rows, protocol="FIFO-SRB", buffer=buffers[0])
    ax.plot([100 * r["load"] for r in srb], [100 * r["slow_delivered"] for r in srb], "x:", color="tab:blue",
            alpha=0.6, label="FIFO-SRB: slow receiver, delivered")
    ax.set_xlabel("offered input (% of the bottleneck)")
    ax.set_ylabel("sustained output (% of the bottleneck)")
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0, top * 1.02)
    ax.set_ylim(0, top * 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(Path(out) / "plot.png")
    plt.close(fig)


def run_fig4a(out, quick, seed, jobs):
    loads = LOADS_QUICK if quick else LOADS
    buffers = (B,) if quick else (B,) + B_SENS
    pts = [("reliable", l, "receiver", B, quick, seed) for l in loads]
    pts += [("srb", l, "receiver", b, quick, seed) for b in buffers for l in loads]
    rows = run_points(pts, jobs)
    _throughput_plot(rows, out, f"Bottleneck receiver (reads {X:.0f} msgs/s, queue of B msgs), w = {W}", buffers)
    return _table(rows, "srb-fig4a: sustained output vs offered input, bottleneck receiver",
                  "load, offered, accepted, *_output, *_delivered: fractions of the bottleneck (1000 msgs/s); "
                  "latencies and producer_wait in seconds.")


def run_fig4b(out, quick, seed, jobs):
    loads = LOADS_QUICK if quick else LOADS
    pts = [(p, l, "link", B, quick, seed) for p in ("reliable", "srb") for l in loads]
    rows = run_points(pts, jobs)
    _throughput_plot(rows, out, f"Bottleneck link ({X:.0f} msgs/s, drop-tail {LINK_QUEUE}), w = {W}", (B,))
    return _table(rows, "srb-fig4b: sustained output vs offered input, bottleneck link",
                  "As srb-fig4a; the slow receiver's application is fast, its access link is the bottleneck.")


def run_latency(out, quick, seed, jobs):
    loads = LOADS_QUICK if quick else LOADS
    pts = [(p, l, sc, B, quick, seed) for sc in ("receiver", "link") for p in ("reliable", "srb") for l in loads]
    rows = run_points(pts, jobs)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0), dpi=90, sharey=True)
    for ax, sc, name in zip(axes, ("receiver", "link"), ("bottleneck receiver", "bottleneck link")):
        for proto, col in (("reliable", "tab:red"), ("FIFO-SRB", "tab:blue")):
            s = _series(rows, scenario=sc, protocol=proto)
            x = [100 * r["load"] for r in s]
            ax.plot(x, [1e3 * r["lat_fast_mean"] for r in s], "o-", color=col, label=f"{proto}: fast receivers")
            ax.plot(x, [1e3 * r["lat_slow_mean"] for r in s], "s--", color=col, label=f"{proto}: slow receiver")
        ax.set_yscale("log")
        ax.set_xlabel("offered input (% of the bottleneck)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("mean latency, publish to read (ms)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(Path(out) / "plot.png")
    plt.close(fig)
    return _table(rows, "srb-latency: delivery latency at the fast receivers and the slow one",
                  "Latency from publication (the window accepted it) to the application's read, seconds; "
                  "producer_wait = offered -> accepted at the producer.")


EXPERIMENTS = {
    "srb-fig4a": Experiment(run_fig4a, "FIFO-SRB Fig. 4: output vs input, bottleneck receiver (reliable vs SRB)"),
    "srb-fig4b": Experiment(run_fig4b, "FIFO-SRB Fig. 4: output vs input, bottleneck link (reliable vs SRB)"),
    "srb-latency": Experiment(run_latency, "FIFO-SRB Fig. 4(b): latency at fast and slow receivers vs load"),
}
