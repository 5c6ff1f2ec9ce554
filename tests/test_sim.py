"""The network simulator (rpbcast/sim, docs/simulator.md): determinism, the
network model checked against hand computations, loss models against their
parameters, topology generators, and whole-protocol runs."""
import json
import math

import numpy as np
import pytest

from rpbcast.sim import run_one, Simulation
from rpbcast.sim import protocols as sim_protocols
from rpbcast.sim.loss import GilbertElliott, Uniform
from rpbcast.sim.network import DEST_MCAST, HostCost, Network
from rpbcast.sim.topology import NS, Topology, balanced_tree, choose_members, transit_stub

# Protocols every whole-run test is repeated for: rpbcast and the baselines
# whose modules define SIM_PROTOCOL (rpbcast/baselines/<name>.py).  Not what
# experiments register for themselves (rpbcast.experiments): those engines
# take the experiment's own parameters, and which of them are registered
# would depend on which tests ran first.
PROTOCOLS = ["rpbcast"]
for _name in ("pbcast", "lbrm", "srm"):
    try:
        sim_protocols.get(_name)
    except (ValueError, ImportError):
        continue
    PROTOCOLS.append(_name)

SMALL = {"duration": 1.5, "rate": 20.0}        # the thesis topology, 18 senders, 1.5 s


# ---------------------------------------------------------------------- helpers
class Probe:
    """A minimal sans-IO engine: records what reaches it, sends what it is told."""

    def __init__(self):
        self.got = []            # (time, src, data)
        self.out = []
        self.timer = 1 << 62

    def receive_datagram(self, data, addr, now):
        self.got.append((now, addr, bytes(data)))

    def datagrams_to_send(self):
        o, self.out = self.out, []
        return o

    def get_timer(self):
        return self.timer

    def handle_timer(self, now):
        pass


def probe_net(topo, members=None, **kw):
    net = Network(topo, **kw)
    probes = {}
    for v in (members if members is not None else topo.hosts):
        probes[v] = net.add_host(v, Probe())
    net.start()
    return net, probes


def send_at(net, probes, t, src, dest, data):
    net.at(t, lambda: probes[src].out.append((dest, data)), node=src)


def dgram(tag, size):
    """An opaque datagram (not rpbcast wire format: classed as control)."""
    b = tag.to_bytes(4, "little")
    return b + bytes(size - 4)


def brute_paths(topo, src):
    """Shortest (latency, hops) distances by exhaustive relaxation (Bellman-Ford)."""
    INF = (math.inf, math.inf)
    d = {v: INF for v in range(1, topo.n + 1)}
    d[src] = (0, 0)
    for _ in range(topo.n):
        for l in topo.links:
            lat = int(round(l.latency * NS))
            for a, b in ((l.a, l.b), (l.b, l.a)):
                if d[a] != INF:
                    c = (d[a][0] + lat, d[a][1] + 1)
                    if c < d[b]:
                        d[b] = c
    return d


# ---------------------------------------------------------------------- determinism
def test_a_run_is_reproducible_bit_for_bit_from_its_seed():
    p = dict(SMALL, loss=0.03, loss_where="link", loss_model="gilbert", seed=11)
    a, b = run_one(p), run_one(p)
    assert a["delivery_hash"] == b["delivery_hash"]
    assert a["state_hash"] == b["state_hash"]
    def virtual(r):
        return {k: v for k, v in r.items() if not (k.startswith("t_") or k.endswith("_s"))}

    assert virtual(a) == virtual(b)
    assert len(virtual(a)) > 60
    assert a["repairs_peer"] > 0          # the run exercised loss and repair, not just the multicast
    c = run_one(dict(p, seed=12))
    assert c["delivery_hash"] != a["delivery_hash"]
    assert c["state_hash"] != a["state_hash"]


def test_reproducible_across_processes_and_hash_seeds():
    """Nothing depends on the interpreter's string-hash seed or on state left
    by earlier runs: fresh processes give the in-process result."""
    import os
    import subprocess
    import sys
    p = dict(SMALL, duration=1.0, loss=0.02, seed=21)
    code = ("import json, sys; from rpbcast.sim import run_one; "
            "r = run_one(json.loads(sys.argv[1])); print(r['delivery_hash'], r['state_hash'])")
    here = run_one(p)
    for hs in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hs)
        out = subprocess.run([sys.executable, "-c", code, json.dumps(p)], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        assert out == [here["delivery_hash"], here["state_hash"]]


@pytest.mark.parametrize("extra", [{"srb_window": 8, "delivery": "fifo"}, {"fsync": "always"}], ids=["fifo-srb", "fsync-always"])
def test_fast_receive_path_is_equivalent_with_extensions_and_a_syncing_logger(extra):
    """The driver contract, not class identity, decides the fast path: an
    engine with an extension (FIFO-SRB) or a logger that syncs after every
    batch (every_rx) runs the C path and still matches receive_datagram."""
    p = dict(SMALL, loss=0.05, seed=7, **extra)
    fast, slow = Simulation(dict(p, fast_rx=True)), Simulation(dict(p, fast_rx=False))
    assert all(fast.net.core.is_fast(v) for v in fast.members)
    if "fsync" in extra:
        assert any(e.driver_needs.every_rx for e in fast.engines.values())
    rf, rs = fast.run(), slow.run()
    assert rf["fast_rx"] > 0 and rs["fast_rx"] == 0
    assert rf["delivery_hash"] == rs["delivery_hash"]
    assert fast.per_counters == slow.per_counters


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fast_receive_path_is_equivalent_to_receive_datagram(protocol):
    """The C data-plane path (as the UDP transport drives engines) gives the
    same run as calling receive_datagram for every datagram."""
    p = dict(SMALL, loss=0.05, seed=5, protocol=protocol)
    fast, slow = Simulation(dict(p, fast_rx=True)), Simulation(dict(p, fast_rx=False))
    if not any(fast.net.core.is_fast(v) for v in fast.members):
        assert protocol != "rpbcast"
        pytest.skip(f"{protocol} engines receive through receive_datagram (driver_needs)")
    rf, rs = fast.run(), slow.run()
    assert rf["fast_rx"] > 0 and rf["slow_rx"] < rf["fast_rx"]
    assert rs["fast_rx"] == 0 and rs["slow_rx"] > 0
    assert rf["delivery_hash"] == rs["delivery_hash"]
    assert fast.per_counters == slow.per_counters
    lf, ls = fast.net.link_stats(), slow.net.link_stats()
    for k in ("pkts", "bytes", "drops", "lost"):
        assert np.array_equal(lf[k], ls[k]), k


# ---------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_lossless_run_delivers_everything_with_zero_repairs(protocol):
    sim = Simulation(dict(SMALL, protocol=protocol, seed=3))
    r = sim.run()
    assert r["published"] > 400
    assert r["exactly_once"] and r["complete"]
    assert r["missing"] == 0 and r["duplicates"] == 0 and r["extras"] == 0 and r["corrupt"] == 0
    recv = set(sim.receivers)
    owed = sum(n * (len(recv) - (s in recv)) for s, n in sim.pub.published.items())
    assert r["delivered"] == r["expected"] == owed
    assert r["repairs_peer"] == 0 and r["repairs_logger"] == 0
    assert r["repair_msgs"] == 0 and r["link_repair_pkts"] == 0 and r["served_total"] == 0
    assert r["gaps"] == 0 and r["queue_drops"] == 0
    # every member got every other sender's DATA once, as one multicast copy
    ns = sim.net.node_stats()
    for v in sim.members:
        others = sum(n for s, n in sim.pub.published.items() if s != v)
        assert ns["rx_data"][v] == others, v


def test_lossy_run_repairs_everything_mostly_from_peers():
    r = run_one(dict(SMALL, duration=3.0, loss=0.02, seed=4))
    assert r["exactly_once"]
    assert r["rx_lost"] > 0
    assert r["repairs_peer"] > 4 * r["repairs_logger"]


def test_deliveries_of_unsent_ids_and_wrong_payloads_are_caught():
    """The accounting is not vacuous: a message published behind the
    workload's back is an extra at every receiver, and its payload (whose
    header names another id) is counted as corrupt."""
    from rpbcast.sim.workload import payload
    sim = Simulation(dict(SMALL, duration=0.5, senders=[6], seed=2))
    rogue = 7
    e = sim.engines[rogue]
    sim.net.at(sim.t_start + 100_000_000, lambda: e.publish(payload(rogue, 1, 12345, 0, 1024), now=sim.net.now),
               node=rogue)
    r = sim.run()
    n = r["receivers"] - 1
    assert r["extras"] == n and r["corrupt"] == n
    assert r["missing"] == 0 and not r["exactly_once"]


def test_repair_service_limit_reaches_the_engines():
    """§7.1: a node serves at most repair_rate repairs/s (the C data plane
    enforces it); a tight limit under heavy loss must bite."""
    r = run_one(dict(SMALL, duration=1.0, loss=0.2, seed=6, repair_rate=20.0, repair_burst=2.0))
    assert r["serve_limited"] > 0
    r0 = run_one(dict(SMALL, duration=1.0, loss=0.2, seed=6, repair_rate=0.0))
    assert r0["serve_limited"] == 0


def test_data_packets_per_link_match_the_multicast_trees():
    """Lossless: each link carries one copy of each DATA multicast whose
    source tree contains it, and nothing else of class data."""
    sim = Simulation(dict(SMALL, seed=8))
    sim.run()
    topo = sim.topo
    want = np.zeros(2 * len(topo.links), np.int64)
    for s, n in sim.pub.published.items():
        _, links = topo.mcast_tree(s, sim.members)
        want[links] += n
    assert np.array_equal(sim.net.link_stats()["data_pkts"], want)


def test_cli_runs_one_configuration(capsys):
    from rpbcast.tools.cli import main
    rc = main(["sim", "--duration", "0.5", "--seed", "2", "--json", "--set", "gossip_interval=0.1"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["exactly_once"] and out["seed"] == 2 and out["published"] > 0
    rc = main(["sim", "--duration", "0.3", "--loss", "0.05"])
    text = capsys.readouterr().out
    assert rc == 0 and "exactly once: yes" in text


def test_run_dir_holds_run_json_counters_links_and_traces(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    d = tmp_path / "run"
    r = run_one(dict(SMALL, duration=0.5, loss=0.05, run_dir=str(d), trace=True))
    meta = json.loads((d / "run.json").read_text())
    assert meta["kind"] == "sim" and meta["clock"] == "virtual"
    assert {n["id"] for n in meta["nodes"]} == set(transit_stub().hosts)
    assert len(list((d / "counters").iterdir())) == r["members"]
    links = json.loads((d / "links.json").read_text())
    assert sum(l["pkts"] for l in links) == r["link_pkts"]
    parts = list((d / "traces").rglob("*.parquet"))
    assert parts
    tab = pq.ParquetDataset(str(d / "traces")).read()
    ev = tab.column("event").to_pylist()
    cnt = tab.column("count").to_pylist()            # a row stands for `count` consecutive ids
    n = lambda name: sum(c for e, c in zip(ev, cnt) if e == name)   # noqa: E731
    assert n("send") == r["published"]
    assert n("deliver") == r["delivered"]


# ---------------------------------------------------------------------- network model
def test_serialisation_and_latency_on_two_nodes_by_hand():
    """1 ms link at 8 Mb/s, 1000-byte datagrams, no headers: 1 ms on the wire
    each.  Three sent at once arrive 2, 3 and 4 ms later; one sent 10 ms
    later finds an idle link again."""
    topo = Topology.from_edges(2, [(1, 2, 0.001, 8e6)])
    net, pr = probe_net(topo, header_bytes=0)
    t0 = net.now
    for k in range(3):
        send_at(net, pr, t0, 1, 2, dgram(k, 1000))
    send_at(net, pr, t0 + 10_000_000, 1, 2, dgram(3, 1000))
    net.run(1.0)
    assert [g[0] - t0 for g in pr[2].got] == [2_000_000, 3_000_000, 4_000_000, 12_000_000]
    assert [g[1] for g in pr[2].got] == [1, 1, 1, 1]
    ls = net.link_stats()
    i = topo.link_index(1, 2)
    assert ls["pkts"][i] == 4 and ls["bytes"][i] == 4000 and ls["busy_ns"][i] == 4_000_000
    assert ls["max_queue"][i] == 2                 # two waited behind the first
    assert ls["pkts"][topo.link_index(2, 1)] == 0


def test_headers_router_processing_and_host_costs_by_hand():
    """Line 1-2-3, 2 ms links at 1 Mb/s, 28-byte headers, 1 ms router
    processing, GSGC host costs: t_s(u) = 338 + 47u/400 us, t_r = 1.1 t_s."""
    topo = Topology.from_edges(3, [(1, 2, 0.002, 1e6), (2, 3, 0.002, 1e6)], hosts=[1, 3])
    net, pr = probe_net(topo, header_bytes=28, proc_delay=0.001, host_cost=HostCost.gsgc())
    t0 = net.now
    send_at(net, pr, t0, 1, 3, dgram(1, 472))
    net.run(1.0)
    ts = round((338 + 47 * 472 / 400) * 1000)         # 393,460 ns
    tr = round(1.1 * (338 + 47 * 472 / 400) * 1000)
    ser = 500 * 8 * 1000                               # 500 bytes at 1 Mb/s: 4 ms
    want = ts + ser + 2_000_000 + 1_000_000 + ser + 2_000_000 + tr
    assert len(pr[3].got) == 1
    assert pr[3].got[0][0] - t0 == want


def test_queue_limit_drops_what_finds_the_buffer_full():
    topo = Topology.from_edges(2, [(1, 2, 0.001, 1e6)])
    net, pr = probe_net(topo, header_bytes=0, queue_limit=3)
    t0 = net.now
    for k in range(10):
        send_at(net, pr, t0, 1, 2, dgram(k, 125))      # 1 ms each on the wire
    send_at(net, pr, t0 + 2_500_000, 1, 2, dgram(10, 125))   # two left the queue by then
    net.run(1.0)
    tags = [int.from_bytes(g[2][:4], "little") for g in pr[2].got]
    assert tags == [0, 1, 2, 3, 10]                    # one on the wire + 3 waiting; 4..9 dropped
    ls = net.link_stats()
    i = topo.link_index(1, 2)
    assert ls["drops"][i] == 6 and ls["max_queue"][i] == 3 and ls["pkts"][i] == 5
    # time-averaged queue: 3 waiting for 1 ms, 2 for 1 ms, 1 for 0.5 ms, 2 (one more) for 0.5 ms, ...
    assert ls["avg_queue"][i] > 0


def test_unlimited_queue_keeps_everything():
    topo = Topology.from_edges(2, [(1, 2, 0.001, 1e6)])
    net, pr = probe_net(topo, header_bytes=0, queue_limit=None)
    for k in range(100):
        send_at(net, pr, net.now, 1, 2, dgram(k, 125))
    net.run(1.0)
    assert len(pr[2].got) == 100 and net.link_stats()["max_queue"][0] == 99


def test_multicast_reaches_each_member_once_along_the_shortest_path_tree():
    # a graph with cycles, equal-cost paths and router-only nodes (2, 5, 8)
    edges = [(1, 2, .002), (2, 3, .001), (2, 4, .003), (3, 4, .001), (4, 5, .002), (5, 6, .001),
             (3, 6, .004), (6, 7, .001), (5, 8, .001), (8, 7, .001), (1, 8, .009), (4, 9, .002), (9, 7, .003)]
    members = [1, 3, 4, 6, 7, 9]
    topo = Topology.from_edges(9, edges, hosts=members, bandwidth=0)     # no serialisation delay
    net, pr = probe_net(topo, header_bytes=0)
    send_at(net, pr, net.now, 4, DEST_MCAST, dgram(7, 100))
    net.run(1.0)
    for v in members:
        assert len(pr[v].got) == (0 if v == 4 else 1), v
    # each member's copy arrives after exactly its shortest-path latency
    d = brute_paths(topo, 4)
    for v in members:
        if v != 4:
            assert pr[v].got[0][0] - (net.t0) == d[v][0], v
    # packets per link: one on each tree edge, none elsewhere
    tree = set(topo.tree_edges(4, members))
    ls = net.link_stats()
    for k, (a, b, _, _) in enumerate(topo.directed()):
        assert ls["pkts"][k] == (1 if (a, b) in tree else 0), (a, b)
    # the tree is minimal: every leaf is a member
    parents = {a for a, b in tree}
    assert all(b in members for a, b in tree if b not in parents)
    assert len(tree) <= topo.n - 1


def test_unicast_follows_the_route_and_ties_break_to_the_lowest_id():
    # a square with equal latencies: 1 -> 4 has two shortest paths, via 2 and via 3
    topo = Topology.from_edges(4, [(1, 2), (1, 3), (2, 4), (3, 4)], latency=0.001)
    assert topo.path(1, 4) == [1, 2, 4]
    assert topo.path(4, 1) == [4, 2, 1]
    net, pr = probe_net(topo, header_bytes=0)
    send_at(net, pr, net.now, 1, 4, dgram(1, 64))
    net.run(1.0)
    assert len(pr[4].got) == 1 and not pr[2].got and not pr[3].got
    ls = net.link_stats()
    used = {(a, b) for k, (a, b, _, _) in enumerate(topo.directed()) if ls["pkts"][k]}
    assert used == {(1, 2), (2, 4)}


def test_shortest_paths_agree_with_exhaustive_relaxation():
    topo = transit_stub(seed=3)
    for src in (1, topo.logger, topo.hosts[0]):
        parent, dist, hops = topo.spt(src)
        d = brute_paths(topo, src)
        for v in range(1, topo.n + 1):
            assert (int(dist[v]), int(hops[v])) == d[v]


# ---------------------------------------------------------------------- loss models
def run_probe_stream(model, n, where="receiver", seed=1):
    """n datagrams over one link to one receiver; returns the lost indices."""
    topo = Topology.from_edges(2, [(1, 2, 0.0001, 0)])
    kw = {"rx_loss": model} if where == "receiver" else {"link_loss": model}
    net, pr = probe_net(topo, header_bytes=0, seed=seed, **kw)
    t0 = net.now

    def burst():
        pr[1].out.extend((2, i.to_bytes(4, "little")) for i in range(n))

    net.at(t0, burst, node=1)
    net.run(1.0)
    got = np.zeros(n, bool)
    got[[int.from_bytes(g[2], "little") for g in pr[2].got]] = True
    return np.flatnonzero(~got)


def bursts(lost):
    if not len(lost):
        return []
    breaks = np.flatnonzero(np.diff(lost) != 1)
    return np.diff(np.concatenate(([-1], breaks, [len(lost) - 1])))


@pytest.mark.parametrize("where", ["receiver", "link"])
def test_gilbert_elliott_long_run_rate_and_burst_length(where):
    m = GilbertElliott.from_rate(0.05, 5.0)
    assert m.rate() == pytest.approx(0.05) and m.mean_burst() == pytest.approx(5.0)
    n = 200_000
    lost = run_probe_stream(m, n, where)
    b = bursts(lost)
    assert len(lost) / n == pytest.approx(0.05, rel=0.12)
    assert np.mean(b) == pytest.approx(5.0, rel=0.12)
    # geometric bursts: P(burst > 10) = (1 - p_bg)**10
    assert np.mean(np.asarray(b) > 10) == pytest.approx(0.8 ** 10, abs=0.03)


def test_gilbert_elliott_with_partial_loss_in_each_state():
    m = GilbertElliott(0.02, 0.1, loss_good=0.01, loss_bad=0.5)
    want = (1 - m.pi_bad()) * 0.01 + m.pi_bad() * 0.5
    assert m.rate() == pytest.approx(want)
    lost = run_probe_stream(m, 200_000, seed=3)
    assert len(lost) / 200_000 == pytest.approx(want, rel=0.12)


def test_uniform_loss_is_not_bursty():
    lost = run_probe_stream(Uniform(0.05), 100_000)
    assert len(lost) / 100_000 == pytest.approx(0.05, rel=0.08)
    assert np.mean(bursts(lost)) == pytest.approx(1 / 0.95, rel=0.05)


def test_loss_streams_depend_only_on_the_seed():
    m = GilbertElliott.from_rate(0.1, 3.0)
    a, b = run_probe_stream(m, 5000, seed=9), run_probe_stream(m, 5000, seed=9)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, run_probe_stream(m, 5000, seed=10))


# ---------------------------------------------------------------------- topologies
def test_transit_stub_is_the_thesis_setup():
    t = transit_stub()
    assert t.n == 30 and t.is_connected()
    assert len(t.hosts) == 18 and all(t.kinds[h] == "fringe" for h in t.hosts)
    assert t.kinds.count("transit") == 4 and t.kinds.count("stub") == 8
    assert t.logger in t.hosts
    assert all(l.bandwidth == 100e6 for l in t.links)
    # fixed default seed: the same graph every time; another seed, another graph
    assert transit_stub().to_dict() == t.to_dict()
    other = transit_stub(seed=8)
    assert other.n == 30 and len(other.hosts) == 18 and other.is_connected()
    assert other.to_dict()["links"] != t.to_dict()["links"]
    # the logger is the fringe host farthest from the centre
    c = t.meta["center"]
    far = max(int(t.spt(c)[1][h]) for h in t.hosts)
    assert int(t.spt(c)[1][t.logger]) == far


@pytest.mark.parametrize("n", [1, 5, 17, 200, 1000])
def test_balanced_degree_four_tree(n):
    t = balanced_tree(n, degree=4)
    assert t.n == n and len(t.links) == n - 1 and t.is_connected()
    assert max((t.degree(v) for v in range(1, n + 1)), default=0) <= 4
    if n >= 5:
        assert t.degree(1) == 4
    hops = t.spt(1)[2][1:]
    leaves = [v for v in range(2, n + 1) if t.degree(v) == 1]
    depths = {int(hops[v - 1]) for v in leaves}
    assert not depths or max(depths) - min(depths) <= 1      # balanced
    # as shallow as a degree-4 tree of n nodes can be
    cap, depth, level = 1, 0, 4
    while cap < n:
        cap += level
        level *= 3
        depth += 1
    assert int(hops.max()) == depth


def test_sparse_members_are_seeded():
    t = balanced_tree(1000)
    a = choose_members(t, 200, seed=1)
    assert len(a) == len(set(a)) == 200 and a == choose_members(t, 200, seed=1)
    assert a != choose_members(t, 200, seed=2)


# ---------------------------------------------------------------------- slow consumers, producers, per-link queues
def test_per_link_queue_limits_override_the_default():
    topo = Topology.from_edges(2, [(1, 2, 0.001, 1e6)])
    net, pr = probe_net(topo, header_bytes=0, queue_limit=None, queue_limits={(1, 2): 3})
    for k in range(10):
        send_at(net, pr, net.now, 1, 2, dgram(k, 125))
        send_at(net, pr, net.now, 2, 1, dgram(k, 125))
    net.run(1.0)
    assert len(pr[2].got) == 4 and len(pr[1].got) == 10     # only 1 -> 2 is limited


def _star(n=4, bw=100e6):
    return Topology.from_edges(n + 1, [(v, n + 1, 0.001, bw) for v in range(1, n + 1)],
                               hosts=list(range(1, n + 1)))


SLOW_CONSUMER = dict(topology=_star(), logger=None, senders=[1], total_rate=600.0, duration=1.0,
                     delivery="fifo", srb_window=64, producer="backlog", consumers={2: 0, 3: 0, 4: 200},
                     consumer_queue=10, end="linger", linger=4.0, stagger=0.1, queue_limit=None,
                     gossip_interval=0.05)


def test_bounded_delivery_queue_holds_datagrams_and_the_slow_reader_throttles_the_window():
    """A consumer reading 200 msgs/s with a 10-message delivery queue: its
    host stops taking datagrams while 10 wait, so its frontier lags, the
    reliable (unlabelled) window closes and the producer is held to ~200/s;
    everything still arrives, in order, at the consumer's pace."""
    sim = Simulation(SLOW_CONSUMER)
    peak = []

    def sample():
        peak.append(sim.net.core.rx_queue(4)[0])
        if sim.net.now < sim.t_start + 2 * NS:
            sim.net.at(sim.net.now + 5_000_000, sample)
    sim.net.at(sim.t_start, sample)
    r = sim.run()
    assert r["complete"] and r["exactly_once"] and r["backlog_left"] == 0
    assert r["consumer_held_max"] > 10 and r["publish_blocked"] > 0
    assert max(peak) <= 10 + 2                    # a datagram may carry what tips it over
    d = sim.deliveries(4)
    assert np.all(np.diff(d["seq"]) == 1)         # FIFO, nothing skipped (no labels)
    read = d["read"]
    for t in range(sim.t_start, sim.t_start + 2 * NS, NS // 10):   # at most 200/s in any 0.1 s
        assert ((read >= t) & (read < t + NS // 10)).sum() <= 21
    # the producer was held back: its accepted rate is about the reader's
    sent = np.asarray(sim.pub.send_times[1])
    first_s = ((sent >= sim.t_start + NS // 2) & (sent < sim.t_start + NS)).sum()
    assert 70 <= first_s <= 140, first_s
    fast = sim.deliveries(2)
    assert len(fast["seq"]) == len(sent) and len(fast["read"]) == len(sent)


def test_backlog_producer_publishes_in_arrival_order_and_labels_are_seeded():
    p = dict(SLOW_CONSUMER, labels="stock")
    a, b = Simulation(p), Simulation(p)
    ra = a.run()
    b.run()
    assert a.pub.labels[1] == b.pub.labels[1]
    labs = a.pub.labels[1]
    assert 0 <= min(labs) and max(labs) < 875
    sent, offer = np.asarray(a.pub.send_times[1]), np.asarray(a.pub.offer_times[1])
    assert len(sent) == len(offer) == ra["published"]
    assert np.all(np.diff(offer) >= 0) and np.all(sent >= offer)
    assert ra["backlog_left"] == 0
    # with labels FIFO-SRB purges: the slow reader gets fewer values, ending at the latest of each
    d = a.deliveries(4)
    assert len(d["seq"]) < ra["published"]
    want = {}
    for i, lab in enumerate(labs[:len(sent)]):
        want[lab] = i
    got = {}
    for s in d["seq"].tolist():
        got[labs[s]] = s
    assert got == want


def test_consumer_queue_on_an_unordered_engine_counts_the_data_plane_pending():
    p = dict(SLOW_CONSUMER, delivery="unordered", srb_window=0)
    r = run_one(p)
    assert r["complete"] and r["consumer_held_max"] > 10


# ---------------------------------------------------------------------- the simulator's own structure
# The simulator's modules, lower first: the C core's pieces (rpbcast/sim/_core.pyx),
# then the Python above it.  A module may use only modules before it.
SIM_LAYERS = ["wallclock", "nodes", "events", "packets", "channel", "links", "routes", "hosts", "inputq",
              "forwarding", "driver", "deliveries", "spt", "_core",
              "topology", "loss", "network", "stock", "workload", "protocols", "params", "build", "tracking",
              "consumers", "results", "rundir", "run", "api", "__init__", "cli", "scale"]


def _sim_imports(path):
    """The rpbcast.sim modules a simulator source file imports or cimports."""
    import ast
    import re
    mods = set(SIM_LAYERS)
    if path.suffix == ".py":
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rpbcast.sim"):
                if node.module == "rpbcast.sim":
                    found |= {a.name for a in node.names if a.name in mods} or {"__init__"}
                else:
                    found.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("rpbcast.sim.")}
        return found
    found = set()
    for m in re.finditer(r"^\s*from rpbcast\.sim(?:\.(\w+))? c?import ([\w, ]+)", path.read_text(), re.M):
        found |= {m.group(1)} if m.group(1) else {x.strip() for x in m.group(2).split(",") if x.strip() in mods}
    return found


def test_simulator_modules_only_use_lower_ones():
    """No back arrows: each piece of the simulator (C core and Python) uses
    only the pieces below it, so each can be read, tested and replaced on
    its own."""
    import pathlib
    import rpbcast.sim
    here = pathlib.Path(rpbcast.sim.__file__).parent
    files = [p for p in sorted(here.iterdir()) if p.suffix in (".py", ".pyx", ".pxd")]
    assert {p.stem for p in files} == set(SIM_LAYERS)
    for p in files:
        for m in _sim_imports(p):
            assert SIM_LAYERS.index(m) < SIM_LAYERS.index(p.stem), f"{p.name} uses {m}"


def test_core_pieces_are_reachable_for_set_up_and_statistics():
    """The C core's pieces behind a Network: what a set-up call on one of
    them changes is what the event loop then does."""
    topo = Topology.from_edges(3, [(1, 2, 0.001, 8e6), (2, 3, 0.001, 8e6)], hosts=[1, 3])
    net, pr = probe_net(topo, header_bytes=0)
    core = net.core
    assert core.links.n == 4 and core.hosts.n == core.routes.n == 3
    core.forwarder.set_proc(2, 500_000)                 # router 2: 0.5 ms per packet
    from rpbcast.sim.channel import KIND_NONE, KIND_UNIFORM
    core.links.set_loss(topo.link_index(2, 3), KIND_UNIFORM, 1.0)   # the first datagram is lost on 2 -> 3
    send_at(net, pr, net.now, 1, 3, dgram(1, 1000))
    send_at(net, pr, net.now + 50_000_000, 1, 3, dgram(2, 1000))
    core.at(net.now + 40_000_000, lambda: core.links.set_loss(topo.link_index(2, 3), KIND_NONE, 0.0))
    t0 = net.now
    net.run(1.0)
    # 1 ms on each wire (1000 bytes at 8 Mb/s), 1 ms on each link, 0.5 ms at router 2
    assert [(g[0] - t0, g[2][:1]) for g in pr[3].got] == [(50_000_000 + 4_500_000, b"\x02")]
    assert core.links.loss_state(topo.link_index(2, 3))[:2] == (1, 1)
    assert core.packets.in_flight == 0 and core.events.pending == len(pr)     # only the engines' timers
    assert core.counters()["arrivals"] == 3                 # the lost copy never arrived at 3
