"""GSGC's qualitative simulation results (rpbcast/experiments/gsgc.py,
docs/reproduction/gsgc.md) on small configurations of the paper's network
model: 30 kbit/s links, 5 ms, 1 ms routers, host costs, 32-byte headers,
gossip of 236 + n/8 bytes.  Every number asserted is measured here."""
import pytest

from rpbcast.experiments import gsgc as G

N = 100             # dense group (a 100-node tree): half the paper's 200, same shapes, cheaper


@pytest.fixture(scope="module")
def sweep():
    """TPR at n = 100 for b = 1 and 3 over step intervals 0.5..12 s (sim. I)."""
    steps = [0.5, 2, 4, 8, 12]
    res = G.run_many([dict(n=N, b=b, step=float(s), seed=1) for b in (1, 3) for s in steps], jobs=2)
    return {(r["b"], r["step"]): r for r in res}


def test_gossip_is_padded_to_the_papers_message_size(sweep):
    r = sweep[(3, 4.0)]
    assert r["gossip_bytes"] == G.paper_size(N) == 249          # 236 + 100/8, rounded up
    assert r["done"] and r["queue_drops"] == 0 and r["send_drops"] == 0
    assert all(x["data_ready"] == 1.0 for x in sweep.values())    # data everywhere before GSGC starts


def test_tpr_is_u_shaped_in_the_step_interval(sweep):
    """Too short a step congests the 30 kbit/s links (many steps), too long
    a step wastes time (TPR ~ steps x step with the steps flat)."""
    tpr = {s: sweep[(3, s)]["tpr"] for b, s in sweep if b == 3}
    best = min(tpr.values())
    s_best = min(tpr, key=tpr.get)
    assert 1 < s_best < 12
    assert tpr[0.5] > 1.3 * best, tpr
    assert tpr[12.0] > 1.3 * best, tpr
    # before the critical point the number of steps explodes and the queues grow
    assert sweep[(3, 0.5)]["steps"] > 4 * sweep[(3, 8.0)]["steps"]
    assert sweep[(3, 0.5)]["max_queue"] > 10 * sweep[(3, 12.0)]["max_queue"]
    # after it the number of steps is about constant: TPR grows with the step
    assert sweep[(3, 12.0)]["steps"] == pytest.approx(sweep[(3, 8.0)]["steps"], rel=0.35)


def test_subgroup_size_cuts_both_ways(sweep):
    """Long steps: a larger b needs fewer steps, so a lower TPR.  Short
    steps: a larger b sends more, congests more, and needs more steps."""
    for s in (8.0, 12.0):
        assert sweep[(3, s)]["tpr"] < 0.8 * sweep[(1, s)]["tpr"], s
        assert sweep[(3, s)]["steps"] < 0.7 * sweep[(1, s)]["steps"], s
    assert sweep[(3, 0.5)]["steps"] > 1.2 * sweep[(1, 0.5)]["steps"]


def test_buffer_limit_and_drops_beat_infinite_buffers_at_short_steps(sweep):
    """§4.2.2: with 64-message buffers the congested gossips are dropped
    instead of delaying the useful ones: a better TPR below the critical
    point; above it the two simulations agree."""
    short = G.run_tpr(N, 3, 0.5, seed=1, buffers=64, drops_per_step=2)
    long = G.run_tpr(N, 3, 8.0, seed=1, buffers=64, drops_per_step=2)
    assert short["queue_drops"] > 100 and short["send_drops"] >= 2
    assert short["tpr"] < 0.8 * sweep[(3, 0.5)]["tpr"]
    assert long["tpr"] == pytest.approx(sweep[(3, 8.0)]["tpr"], rel=0.15)


def test_queues_shrink_with_the_step_and_grow_with_b(sweep):
    """Figs. 5 and 7: bursts (the average queue a gossip meets, and the
    longest queue) fall as the step grows, and grow with b at a fixed step."""
    for b in (1, 3):
        assert sweep[(b, 0.5)]["avg_queue"] > 10 * sweep[(b, 8.0)]["avg_queue"]
        assert sweep[(b, 0.5)]["max_queue"] > 5 * sweep[(b, 8.0)]["max_queue"]
    for s in (0.5, 2.0, 4.0, 8.0, 12.0):
        assert sweep[(3, s)]["avg_queue"] > sweep[(1, s)]["avg_queue"], s
        assert sweep[(3, s)]["max_queue"] >= sweep[(1, s)]["max_queue"], s
    # the 64-message buffers of simulation II cap the longest queue
    r = G.run_tpr(N, 3, 0.5, seed=1, buffers=64, drops_per_step=2)
    assert r["max_queue"] == 64 < sweep[(3, 0.5)]["max_queue"]


def test_sparse_groups_behave_like_dense_ones(sweep):
    """Fig. 9 / §4.2.3: the same group size sparse in a larger tree shows no
    major difference (bandwidth and the step dominate, not location)."""
    res = G.run_many([dict(n=N, nodes=500, topo_seed=1, b=b, step=s, seed=1) for b, s in ((3, 0.5), (3, 8.0), (1, 8.0))],
                     jobs=2)
    for r in res:
        dense = sweep[(r["b"], r["step"])]["tpr"]
        assert r["done"] and r["tpr"] == pytest.approx(dense, rel=0.3), (r["b"], r["step"], r["tpr"], dense)


def test_local_gossip_in_one_concurrent_run_grows_much_slower_with_n_than_global():
    """Fig. 13 with the real two-layer implementation, every member and both
    layers at once: zones by proximity, controllers entering phase 2 once
    their zone has its S, the paper's steps.  Random zones load the links
    near the root like global gossip (the reason zones must follow the
    network)."""
    d = G.local_vs_global([100, 300], runs=1, seed=1, jobs=2, random_ns=[100], phases=False)
    g100, g300 = d[100]["global"], d[300]["global"]
    l100, l300 = d[100]["local"], d[300]["local"]
    assert g300 > 2 * g100                       # global: about linear in n
    assert l300 < g300 / 3 and l100 < g100
    assert (l300 - l100) < 0.2 * (g300 - g100)
    assert d[100]["random"] > 1.5 * l100 and d[100]["random_queue_drops"] > 100 * max(d[100]["local_queue_drops"], 1)


def test_adaptive_search_lands_in_the_measured_good_window():
    """Figs. 10-11 driven by simulated TPRs (n = 100, b = 3) against the
    curve measured at every whole second of 1..10 s."""
    w, mw, f = G.adaptive_search(N, 3, runs=1, seed=1, jobs=2, grid_steps=list(range(1, 11)),
                                 search={"b0": 10.0, "g": 1.0})
    assert mw["s1"] <= w.s <= mw["s2"], (w, mw)
    assert w.f_s < 1.1 * mw["tpr"]
    assert w.s1 <= w.s <= w.s2 and w.s2 - w.s1 >= 1
    assert w.iterations1 >= 3


def test_queue_and_sparse_figures_have_a_command(tmp_path, monkeypatch):
    """Figs. 5, 7 and 9 are experiments of their own (one command each);
    Fig. 5 writes the queue sizes of the Fig. 6 runs, without rerunning them."""
    import argparse
    import csv
    from rpbcast.experiments import cli
    pytest.importorskip("matplotlib")
    assert {"gsgc-fig5", "gsgc-fig7", "gsgc-fig9"} <= set(cli.registry())
    monkeypatch.setattr(G, "QUICK_STEPS", [10, 16])
    args = argparse.Namespace(names=["gsgc-fig5", "gsgc-fig6"], list=False, out=str(tmp_path), quick=True,
                              seed=1, jobs=2)
    assert cli.main(args) == 0
    with open(tmp_path / "gsgc-fig5" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(float(r["avg_queue_mean"]) >= 0 for r in rows)
    assert (tmp_path / "gsgc-fig5" / "plot.png").read_bytes()[:4] == b"\x89PNG"
    with open(tmp_path / "gsgc-fig6" / "results.csv") as f:
        assert [r["tpr_mean"] for r in csv.DictReader(f)] == [r["tpr_mean"] for r in rows]
