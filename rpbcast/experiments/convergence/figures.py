"""Fig. 4-2 and its checks regenerated into one folder: the CSV tables, the
PNGs and a JSON summary (docs/reproduction/convergence.md)."""
from __future__ import annotations

import csv
import json
import os
import time
from typing import Dict, List, Optional

from rpbcast.experiments.convergence.chain import EPS_THESIS, N_THESIS
from rpbcast.experiments.convergence.checks import engine_check, figure_4_2_table, initial_sizes, mc_check
from rpbcast.experiments.convergence.plots import plot_engine, plot_figure_4_2, plot_mc_check
from rpbcast.experiments.convergence.topology import geometric_rtts, topology_rounds, tree_rtts


def _write_csv(path: str, rows: List[Dict]):
    """Rows of dicts as CSV, floats to 6 significant digits; nothing for no rows."""
    if not rows:
        return
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def reproduce(out: str, n: int = N_THESIS, eps: float = EPS_THESIS, mc_trials: int = 100_000,
              biased_trials: int = 20_000, engine_trials: int = 200, subsets: int = 20,
              engine: bool = True, driver: Optional[str] = None, log=print) -> Dict:
    """Everything in docs/reproduction/convergence.md: fig4_2.{png,csv},
    topology_{tree,geometric}.csv, mc_check.{png,csv}, mc_means.csv, engine.{png,csv},
    engine_dist.csv, summary.json in `out`."""
    os.makedirs(out, exist_ok=True)
    t_all = time.perf_counter()
    summary = {"n": n, "eps": eps}
    rows = figure_4_2_table(n, eps)
    _write_csv(os.path.join(out, "fig4_2.csv"), rows)
    tree = tree_rtts(n)
    n0s = initial_sizes(n, (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99))
    topo = topology_rounds(tree, n0s, eps, subsets)
    _write_csv(os.path.join(out, "topology_tree.csv"), topo)
    geo = topology_rounds(geometric_rtts(n), n0s, eps, subsets)
    _write_csv(os.path.join(out, "topology_geometric.csv"), geo)
    plot_figure_4_2(rows, topo, os.path.join(out, "fig4_2.png"), n, eps, "a degree-4 tree")
    log(f"fig4_2: {time.perf_counter() - t_all:.1f} s")
    summary["fig4_2"] = {str(r["n0"]): {k: r[k] for k in ("pull_markov", "pull_recurrence", "push_markov",
                                                          "push_recurrence", "crude_bound")}
                         for r in rows if r["n0"] in n0s}
    t = time.perf_counter()
    chk = mc_check(n, mc_trials, biased_trials, rtts=tree)
    _write_csv(os.path.join(out, "mc_check.csv"), chk["curves"])
    _write_csv(os.path.join(out, "mc_means.csv"), chk["means"])
    plot_mc_check(chk, os.path.join(out, "mc_check.png"))
    zs = [abs(r["z"]) for r in chk["curves"] if r["selection"] == "uniform" and r["markov"] > 0 and r["markov"] < 1]
    summary["mc_check"] = {"trials": mc_trials, "max_abs_z_curve": max(zs) if zs else None,
                           "means": chk["means"], "wall_s": time.perf_counter() - t}
    log(f"mc_check: {time.perf_counter() - t:.1f} s, max |z| {summary['mc_check']['max_abs_z_curve']:.2f}")
    if engine:
        t = time.perf_counter()
        e = engine_check(n, trials=engine_trials, driver=driver)
        _write_csv(os.path.join(out, "engine.csv"), e["table"])
        _write_csv(os.path.join(out, "engine_dist.csv"), e["dist"])
        plot_engine(e, os.path.join(out, "engine.png"))
        summary["engine"] = {k: v for k, v in e.items() if k != "dist"}
        summary["engine"]["wall_s"] = time.perf_counter() - t
        log(f"engine ({e['driver']}): {time.perf_counter() - t:.1f} s")
    summary["wall_s"] = time.perf_counter() - t_all
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
    return summary
