"""The tables behind the figures: Fig. 4-2's rounds from every model, the
chain against the recurrence, the abstract Monte-Carlo against both, and the
real engine against the asynchronous model."""
from __future__ import annotations

import math
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from rpbcast.experiments.convergence.chain import (EPS_THESIS, N_THESIS, absorption_times, below,
                                                   chain_rounds, failure_curve, pull_chain, push_chain)
from rpbcast.experiments.convergence.engine_trials import engine_driver, engine_monte_carlo
from rpbcast.experiments.convergence.montecarlo import (empirical_failure, monte_carlo, monte_carlo_async,
                                                        wilson)
from rpbcast.experiments.convergence.recurrences import (crude_bound, initial, recurrence, recurrence_failure,
                                                         recurrence_rounds, uniform_contact)
from rpbcast.experiments.convergence.topology import KINDS, initial_sets, topology_contact, tree_rtts


def initial_sizes(n: int, fractions: Sequence[float]) -> List[int]:
    """Initial set sizes for these fractions of n members (1..n-1)."""
    return sorted({min(max(1, round(f * n)), n - 1) for f in fractions})


def _first_below(curve, eps) -> Optional[int]:
    """First k with curve[k] < eps (None if it never gets there)."""
    k = np.flatnonzero(below(curve, eps))
    return int(k[0]) if len(k) else None


def figure_4_2_table(n: int = N_THESIS, eps: float = EPS_THESIS) -> List[Dict]:
    """Fig. 4-2's data, n0 = 1..n-1: uniform selection in the thesis's model
    (self-contact allowed) and in the engine's (others only)."""
    rows = []
    Pp, Ph = pull_chain(n), push_chain(n)
    Pp2, Ph2 = pull_chain(n, self_contact=False), push_chain(n, self_contact=False)
    pull, push = chain_rounds(Pp, eps), chain_rounds(Ph, eps)
    pull2, push2 = chain_rounds(Pp2, eps), chain_rounds(Ph2, eps)
    tp, th = absorption_times(Pp), absorption_times(Ph)
    C, C2 = uniform_contact(n), uniform_contact(n, False)
    for n0 in range(1, n):
        p0 = initial(n, n0)
        rows.append({
            "n0": n0, "fraction": n0 / n,
            "pull_markov": int(pull[n0]), "pull_recurrence": recurrence_rounds(C, p0, eps, "pull"),
            "push_markov": int(push[n0]), "push_recurrence": recurrence_rounds(C, p0, eps, "push"),
            "crude_bound": crude_bound(n, n0, eps),
            "pull_mean_rounds": float(tp[n0]), "push_mean_rounds": float(th[n0]),
            "pull_markov_others": int(pull2[n0]), "pull_recurrence_others": recurrence_rounds(C2, p0, eps, "pull"),
            "push_markov_others": int(push2[n0]), "push_recurrence_others": recurrence_rounds(C2, p0, eps, "push"),
        })
    return rows


def compare_uniform_pull(n: int = N_THESIS, eps: float = EPS_THESIS, self_contact: bool = True) -> List[Dict]:
    """Per n0: rounds from the exact chain and from the recurrence (uniform
    pull), and both failure probabilities at the chain's answer minus one."""
    P = pull_chain(n, self_contact=self_contact)
    need = chain_rounds(P, eps)
    C = uniform_contact(n, self_contact)
    F = failure_curve(P, int(need[1:].max()) + 2)
    rows = []
    for n0 in range(1, n + 1):
        M = recurrence(C, initial(n, n0), F.shape[0] - 1)
        fr = recurrence_failure(M)
        k = max(int(need[n0]) - 1, 0)
        rows.append({"n0": n0, "chain": int(need[n0]), "recurrence": recurrence_rounds(C, initial(n, n0), eps),
                     "k": k, "chain_fail_k": float(F[k, n0]), "recurrence_fail_k": float(fr[k])})
    return rows


def mc_check(n: int = N_THESIS, trials: int = 100_000, biased_trials: int = 20_000, seed: int = 7,
             n0s: Optional[Sequence[int]] = None, rtts: Optional[np.ndarray] = None) -> Dict:
    """The abstract Monte-Carlo against the chain and the recurrence: per
    setting and round k, P(not converged by k) from each, the Monte-Carlo's
    Wilson 95 % interval and its deviation from the chain in standard errors
    of the chain's own probability; mean rounds (chain absorption time vs
    Monte-Carlo mean +- SE).  Biased selection (no exact chain): the
    recurrence vs Monte-Carlo."""
    curves, means = _mc_against_chains(n, trials, seed, n0s or initial_sizes(n, (0.01, 0.1, 0.5, 0.9)))
    if rtts is not None and biased_trials:
        c, m = _mc_against_recurrence(n, rtts, biased_trials, seed)
        curves += c
        means += m
    return {"curves": curves, "means": means}


def _mc_against_chains(n: int, trials: int, seed: int, n0s: Sequence[int]):
    """mc_check's rows for uniform selection, where the chain is exact."""
    curves, means = [], []
    chains = {"pull": pull_chain(n), "push": push_chain(n)}
    C = uniform_contact(n)
    for mode in ("pull", "push"):
        P = chains[mode]
        t = absorption_times(P)
        for i, n0 in enumerate(n0s):
            r = monte_carlo(n, n0, mode, trials, seed=seed + 17 * i + (0 if mode == "pull" else 1000))
            kmax = int(min(r.max(), 80))
            F = failure_curve(P, kmax)[:, n0]
            fr = recurrence_failure(recurrence(C, initial(n, n0), kmax, mode))
            emp = empirical_failure(r, kmax)
            lo, hi = wilson(emp * trials, trials)
            se = np.sqrt(np.maximum(F * (1 - F), 1e-300) / trials)
            for k in range(kmax + 1):
                curves.append({"selection": "uniform", "mode": mode, "n0": n0, "k": k, "trials": trials,
                               "markov": float(F[k]), "recurrence": float(fr[k]), "mc": float(emp[k]),
                               "mc_lo": float(lo[k]), "mc_hi": float(hi[k]),
                               "z": float((emp[k] - F[k]) / se[k]) if F[k] * (1 - F[k]) > 0 else 0.0})
            means.append({"selection": "uniform", "mode": mode, "n0": n0, "trials": trials,
                          "markov_mean": float(t[n0]), "mc_mean": float(r.mean()),
                          "mc_se": float(r.std(ddof=1) / math.sqrt(trials)),
                          "z": float((r.mean() - t[n0]) / (r.std(ddof=1) / math.sqrt(trials))),
                          "markov_rounds_1e-3": _first_below(F, 1e-3), "recurrence_rounds_1e-3": _first_below(fr, 1e-3),
                          "mc_rounds_1e-3": _first_below(emp, 1e-3)})
    return curves, means


def _mc_against_recurrence(n: int, rtts: np.ndarray, trials: int, seed: int):
    """mc_check's rows for biased selection on a topology (no exact chain):
    a clustered initial set, the recurrence against the Monte-Carlo."""
    curves, means = [], []
    for kind in KINDS[1:]:
        Cb = topology_contact(rtts, kind)
        for mode in ("pull", "push"):
            for n0 in initial_sizes(n, (0.1, 0.5)):
                h = initial_sets(rtts, n0, "clustered", 1, seed)[0]
                r = monte_carlo(n, h, mode, trials, C=Cb, seed=seed + n0 + len(kind))
                kmax = int(min(r.max(), 120))
                fr = recurrence_failure(recurrence(Cb, initial(n, h), kmax, mode))
                emp = empirical_failure(r, kmax)
                lo, hi = wilson(emp * trials, trials)
                for k in range(kmax + 1):
                    curves.append({"selection": kind, "mode": mode, "n0": n0, "k": k, "trials": trials,
                                   "markov": float("nan"), "recurrence": float(fr[k]), "mc": float(emp[k]),
                                   "mc_lo": float(lo[k]), "mc_hi": float(hi[k]), "z": float("nan")})
                means.append({"selection": kind, "mode": mode, "n0": n0, "trials": trials,
                              "markov_mean": float("nan"), "mc_mean": float(r.mean()),
                              "mc_se": float(r.std(ddof=1) / math.sqrt(trials)), "z": float("nan"),
                              "markov_rounds_1e-3": None, "recurrence_rounds_1e-3": _first_below(fr, 1e-3),
                              "mc_rounds_1e-3": _first_below(emp, 1e-3)})
    return curves, means


def engine_check(n: int = N_THESIS, n0s: Optional[Sequence[int]] = None, trials: int = 200,
                 gc_limit: int = 60, gossip_interval: float = 0.25, latency: float = 0.0005,
                 model_trials: int = 20_000, seed: int = 11, driver: Optional[str] = None,
                 gc_limits: Sequence[int] = (10, 4), gc_trials: int = 100) -> Dict:
    """The real engine against the models (uniform pull, others only, n
    members of which n0 -- the sender and n0 - 1 receivers -- got the
    initial multicast).  Per n0: the engine's distribution of rounds, the
    lock-step chain's and the asynchronous Monte-Carlo's; mean rounds with
    standard errors.  Then, at the smallest n0, the GC limits in gc_limits
    (the thesis's 10, and a short one): a member that pulls from a peer that
    already collected the message gets a GcNOTE and, without loggers, gives
    up (a 'lost' event), so the run may never complete."""
    driver = driver or engine_driver()
    n0s = n0s or sorted({max(2, x) for x in initial_sizes(n, (0.02, 0.1, 0.5, 0.9))})
    P = pull_chain(n, self_contact=False)
    # a repair lands one round trip after its request: on the simulator's
    # tree that is 2 x hops x latency, in memnet 2 x latency
    rtt = float(tree_rtts(n, 4, latency)[np.triu_indices(n, 1)].mean()) if driver == "sim" else 2 * latency
    delay = rtt / gossip_interval
    tabs, dists = [], []
    t_eng = 0.0
    for i, n0 in enumerate(n0s):
        t0 = time.perf_counter()
        eng = engine_monte_carlo(n, n0, trials, gossip_interval, gc_limit, latency, driver, seed + i)
        t_eng += time.perf_counter() - t0
        er = eng["rounds"]
        ar = monte_carlo_async(n, n0, model_trials, seed=seed + 100 + i, delay=delay)
        kmax = int(max(er.max(), ar.max(), 1))
        F = failure_curve(P, kmax)[:, n0]
        t = absorption_times(P)[n0]
        ef, af = empirical_failure(er, kmax), empirical_failure(ar, kmax)
        lo, hi = wilson(ef * trials, trials)
        for k in range(kmax + 1):
            dists.append({"n0": n0, "k": k, "engine_fail": float(ef[k]), "engine_lo": float(lo[k]),
                          "engine_hi": float(hi[k]), "async_fail": float(af[k]), "sync_chain_fail": float(F[k])})
        se_e = float(er.std(ddof=1) / math.sqrt(trials))
        se_a = float(ar.std(ddof=1) / math.sqrt(model_trials))
        tabs.append({"n0": n0, "trials": trials, "complete": eng["complete"], "gc_limit": gc_limit,
                     "engine_mean": float(er.mean()), "engine_se": se_e,
                     "async_mean": float(ar.mean()), "async_se": se_a,
                     "sync_chain_mean": float(t),
                     "engine_minus_async": float(er.mean() - ar.mean()),
                     "z_engine_async": float((er.mean() - ar.mean()) / math.hypot(se_e, se_a)),
                     "engine_max": int(er.max()), "async_p999": float(np.quantile(ar, 0.999)),
                     "sync_chain_rounds_1e-2": int(chain_rounds(P, 1e-2)[n0])})
    gc = _engine_past_gc_limits(n, min(n0s), gc_limits, gc_trials, gossip_interval, latency, driver,
                                model_trials, seed, delay)
    return {"driver": driver, "n": n, "gossip_interval": gossip_interval, "latency": latency,
            "repair_delay_rounds": delay, "table": tabs, "dist": dists, "gc": gc, "engine_wall_s": t_eng}


def _engine_past_gc_limits(n, n0, gc_limits, trials, gossip_interval, latency, driver, model_trials, seed,
                           delay) -> List[Dict]:
    """engine_check's GC-limit rows: how often a run never completes (its
    message collected before a member pulled it) against how often the
    asynchronous model needs more rounds than the limit."""
    gc = []
    for gl in gc_limits:
        eng = engine_monte_carlo(n, n0, trials, gossip_interval, gl, latency, driver, seed + 99 + gl)
        er = eng["rounds"]
        ar = monte_carlo_async(n, n0, model_trials, seed=seed + 200 + gl, delay=delay)
        ok = er[er <= 60]
        gc.append({"n0": n0, "gc_limit": gl, "trials": trials, "complete": eng["complete"],
                   "incomplete_fraction": 1 - eng["complete"] / trials,
                   "async_p_beyond_gc_limit": float((ar > gl).mean()),
                   "mean_rounds_complete": float(ok.mean()) if len(ok) else None})
    return gc
