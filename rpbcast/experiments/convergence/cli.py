"""``python -m rpbcast.experiments.convergence --out DIR``: the command line
of ``figures.reproduce``."""
from __future__ import annotations

import argparse

from rpbcast.experiments.convergence.chain import EPS_THESIS, N_THESIS
from rpbcast.experiments.convergence.figures import reproduce


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rpbcast.experiments.convergence",
                                 description="Regenerate thesis Fig. 4-2 and check the convergence models "
                                             "against Monte-Carlo runs (docs/reproduction/convergence.md).")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--members", type=int, default=N_THESIS)
    ap.add_argument("--eps", type=float, default=EPS_THESIS)
    ap.add_argument("--mc-trials", type=int, default=100_000, help="abstract Monte-Carlo trials per setting")
    ap.add_argument("--biased-trials", type=int, default=20_000)
    ap.add_argument("--engine-trials", type=int, default=200, help="real-engine runs per initial set size")
    ap.add_argument("--subsets", type=int, default=20, help="initial sets averaged on a topology")
    ap.add_argument("--no-engine", action="store_true", help="skip the real-engine runs")
    ap.add_argument("--driver", choices=("sim", "memnet"), default=None,
                    help="engine driver (default: rpbcast.sim if it works here, else memnet)")
    a = ap.parse_args(argv)
    s = reproduce(a.out, a.members, a.eps, a.mc_trials, a.biased_trials, a.engine_trials, a.subsets,
                  not a.no_engine, a.driver)
    print(f"wrote {a.out} in {s['wall_s']:.0f} s")
