"""The PNGs: Fig. 4-2, the Monte-Carlo check and the engine check, each
from the rows its table in ``checks`` returns."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from rpbcast.experiments.convergence.topology import KINDS


def _plt():
    """pyplot on the file backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_figure_4_2(rows: List[Dict], topo_rows: List[Dict], path: str, n: int, eps: float, topo_name: str):
    plt = _plt()
    fig, ax = plt.subplots(1, 3, figsize=(18, 5.2))
    x = [r["fraction"] for r in rows]
    a = ax[0]
    a.step(x, [r["pull_markov"] for r in rows], where="mid", color="C0", lw=2, label="pull, Markov chain (exact)")
    a.step(x, [r["pull_recurrence"] for r in rows], where="mid", color="C0", ls="--", label="pull, recurrence")
    a.step(x, [r["push_markov"] for r in rows], where="mid", color="C3", lw=2, label="push, Markov chain (exact)")
    a.step(x, [r["push_recurrence"] for r in rows], where="mid", color="C3", ls="--", label="push, recurrence")
    a.plot(x, [r["crude_bound"] for r in rows], color="gray", ls=":", label="§4.2.2 crude bound")
    a.set_title(f"(a) Fig. 4-2: uniform selection, {n} members, error < {eps:g}", fontsize=10)
    for i, mode in ((1, "pull"), (2, "push")):
        b = ax[i]
        for k, c in zip(KINDS, ("C0", "C1", "C2")):
            for how, ls in (("random", "-"), ("clustered", "--")):
                rr = [r for r in topo_rows if r["how"] == how]
                b.plot([r["fraction"] for r in rr], [r[f"{mode}_{k}_mean"] for r in rr], color=c, ls=ls, marker=".",
                       label=f"{k}, {how} initial set")
        b.set_title(f"({'bc'[i - 1]}) {mode} (recurrence), engine's selection on {topo_name}"
                    + ("\n(optimistic for clustered sets: see mc_check.png)" if mode == "pull" else ""), fontsize=10)
    for a in ax:
        a.set_xlabel("fraction of members the initial multicast reached")
        a.set_ylabel("rounds to converge")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_mc_check(chk: Dict, path: str):
    plt = _plt()
    sels = [k for k in KINDS if any(r["selection"] == k for r in chk["curves"])]
    fig, axs = plt.subplots(2, len(sels), figsize=(5 * len(sels), 8), squeeze=False)
    for col, sel in enumerate(sels):
        for row, mode in enumerate(("pull", "push")):
            a = axs[row][col]
            rows = [r for r in chk["curves"] if r["selection"] == sel and r["mode"] == mode]
            if not rows:
                a.set_visible(False)
                continue
            for i, n0 in enumerate(sorted({r["n0"] for r in rows})):
                rr = [r for r in rows if r["n0"] == n0]
                k = np.array([r["k"] for r in rr])
                c = f"C{i}"
                if sel == "uniform":
                    a.semilogy(k, [r["markov"] for r in rr], color=c, lw=1.5, label=f"n0={n0} chain")
                a.semilogy(k, [r["recurrence"] for r in rr], color=c, ls="--", lw=1, label=f"n0={n0} recurrence")
                mc = np.array([r["mc"] for r in rr])
                lo = np.array([r["mc_lo"] for r in rr])
                hi = np.array([r["mc_hi"] for r in rr])
                m = mc > 0
                a.errorbar(k[m], mc[m], yerr=[mc[m] - lo[m], hi[m] - mc[m]], fmt="o", ms=3, color=c, capsize=2)
            a.set_ylim(1e-6, 1.5)
            what = "" if sel == "uniform" else ", clustered initial set on the tree"
            a.set_title(f"{mode}, {sel} selection{what}\n(dots: Monte-Carlo, {rows[0]['trials']} trials, 95 % CI)",
                        fontsize=9)
            a.set_xlabel("round k")
            a.set_ylabel("P(not converged by k)")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_engine(chk: Dict, path: str):
    plt = _plt()
    n0s = sorted({r["n0"] for r in chk["dist"]})
    fig, axs = plt.subplots(1, len(n0s), figsize=(4 * len(n0s), 3.8), squeeze=False)
    for a, n0 in zip(axs[0], n0s):
        rr = [r for r in chk["dist"] if r["n0"] == n0]
        k = np.array([r["k"] for r in rr])
        cdf = lambda key: 1 - np.array([r[key] for r in rr])
        a.step(k, cdf("sync_chain_fail"), where="post", color="C0", label="lock-step chain (§4.2.1)")
        a.step(k, cdf("async_fail"), where="post", color="C1", label="asynchronous Monte-Carlo")
        e = cdf("engine_fail")
        lo = 1 - np.array([r["engine_hi"] for r in rr])
        hi = 1 - np.array([r["engine_lo"] for r in rr])
        a.errorbar(k, e, yerr=[e - lo, hi - e], fmt="o", color="k", ms=3, capsize=2, label=f"engine ({chk['driver']})")
        a.set_title(f"n0 = {n0} of {chk['n']} hold it after the multicast", fontsize=9)
        a.set_xlabel("gossip rounds until every member has it")
        a.set_ylabel("P(converged)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
